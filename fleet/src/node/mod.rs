//! One node process: an origin of trees, a worker of sub-tasks and the owner of one
//! partition of the fleet's roots.
//!
//! * **Origin.** Pulls work items from the run's durable consumer (shared by every node, so
//!   each item goes to one node at a time). For an item it picks a random root and
//!   `fanout` random edge ids, sends the init (root, XOR of the edges, its own index) to the
//!   root's owner and one sub-task per edge to the other nodes, and keeps the JetStream
//!   message's ack handle under the root. On `Acked` it appends the item to the run's
//!   completed stream and, once JetStream confirmed that, acks the work message; on `Failed`
//!   or `TimedOut` it asks for redelivery at once (a nak); when no completion comes within
//!   the tracker's timeout plus [`SILENCE_BUDGET`] (the owner died, or a frame was lost with
//!   a server) it naks too. The replay is a new tree under a new root, so no late message of
//!   the old one can touch it (`docs/scaling.md`).
//! * **Worker.** Acks each sub-task's edge to the root's owner, or, as injected faults,
//!   fails it, drops the ack or sends it twice.
//! * **Owner.** Applies the frames for its partition to its tracker (`tracker.rs`): inits
//!   one by one, acks and fails with [`ackwheel::Acker::apply`]. A frame that does not
//!   decode, or a record whose root this partition does not own, is counted and dropped.
//!
//! Everything a node sends to another goes through its [`outbox::Outbox`], flushed every
//! millisecond. An acked item's record waits in a bounded queue until JetStream confirms
//! it (`records.rs`: back-pressure when full, never an item acked before it is on record).
//! A restarted node starts empty; what it owned times out at the origins and is replayed,
//! and what it originated is redelivered by JetStream after the consumer's ack wait. A node
//! exits when its standard input closes (the run that started it is gone), and with an
//! error after `--nats-limit` seconds without NATS: with no connection (at start, where it
//! retries with backoff, or later, where the client fails over and reconnects), or with no
//! record confirmed by JetStream (no quorum, the completed stream gone).

mod outbox;
mod records;
mod tracker;

use crate::wire::{self, Completed, Done, PartMessage, Task};
use crate::{connect, Credentials, TrackerKind};
use ackwheel::{Message, Outcome};
use async_nats::jetstream::{self, message::Acker as JsAcker, AckKind};
use futures::StreamExt;
use outbox::Outbox;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracker::{AckerTracker, DashMapTracker, Tracker};

/// How long past the tracker's timeout an origin waits for a completion before it takes the
/// owner for lost and asks for the item again.
pub const SILENCE_BUDGET: Duration = Duration::from_millis(1500);

#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    /// This node's index, 0..nodes: its partition and its subjects.
    #[arg(long)]
    pub index: usize,
    #[arg(long)]
    pub nodes: usize,
    /// NATS URLs, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// The run's subject prefix; also names its streams.
    #[arg(long)]
    pub run: String,
    #[arg(long, value_enum)]
    pub tracker: TrackerKind,
    #[arg(long)]
    pub fanout: usize,
    #[arg(long)]
    pub timeout_ms: u64,
    #[arg(long)]
    pub fail_rate: f64,
    #[arg(long)]
    pub drop_rate: f64,
    #[arg(long)]
    pub dup_rate: f64,
    /// Seconds without a NATS connection (at start or later), or without JetStream
    /// confirming a completion record, before the node gives up with an error.
    #[arg(long, default_value_t = 30)]
    pub nats_limit: u64,
}

/// What a node reports every half second on `<run>.stats` (cumulative since it started).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct NodeStats {
    pub index: usize,
    pub pid: u32,
    /// Items pulled and started as trees.
    pub started: u64,
    /// Inits, acks and fails applied by this node's tracker.
    pub inits_applied: u64,
    pub acks_applied: u64,
    pub fails_applied: u64,
    pub part_frames: u64,
    /// Completions seen by this node as an origin.
    pub acked: u64,
    pub failed: u64,
    pub timed_out: u64,
    /// Items asked for again because no completion came (owner lost).
    pub silent: u64,
    pub recorded: u64,
    pub malformed: u64,
    pub misrouted: u64,
    pub refused_inits: u64,
    pub unknown_completions: u64,
    pub pending: u64,
    pub rss: u64,
    pub nats_disconnects: u64,
    /// CPU time of the owner's thread in the tracker's calls (inits, acks and fails
    /// applied, completions handed to the outbox), nanoseconds.
    pub tracker_ns: u64,
    /// CPU time of the tracker's own thread (the Acker's reaper, the hand-written
    /// tracker's sweeper), nanoseconds.
    pub tracker_thread_ns: u64,
    /// This process's CPU time (user and system), milliseconds.
    pub cpu_ms: u64,
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    inits_applied: AtomicU64,
    acks_applied: AtomicU64,
    fails_applied: AtomicU64,
    part_frames: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    silent: AtomicU64,
    recorded: AtomicU64,
    malformed: AtomicU64,
    misrouted: AtomicU64,
    refused_inits: AtomicU64,
    unknown_completions: AtomicU64,
    nats_disconnects: AtomicU64,
    tracker_ns: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: statistics, read only for reports.
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A work item this node originated, waiting for its tree's completion.
struct Pending {
    item: u64,
    delivery: u32,
    pulled: Instant,
    handle: JsAcker,
}

struct Node {
    args: NodeArgs,
    client: async_nats::Client,
    js: jetstream::Context,
    outbox: Arc<Outbox>,
    tracker: Box<dyn Tracker>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Items acked by their trees, waiting to be recorded and acked to JetStream (bounded:
    /// a full queue makes the completion loop wait; `records.rs`).
    records: tokio::sync::mpsc::Sender<(Completed, JsAcker)>,
    counters: Counters,
}

pub fn main(args: NodeArgs) -> Result<(), String> {
    if args.index >= args.nodes || args.nodes == 0 || args.fanout == 0 {
        return Err(format!(
            "node {} of {} with fanout {}: need index < nodes and fanout >= 1",
            args.index, args.nodes, args.fanout
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(run(args))
}

async fn run(args: NodeArgs) -> Result<(), String> {
    let credentials = Credentials::from_env();
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let name = format!("fleet-node-{}", args.index);
    let nats_limit = Duration::from_secs(args.nats_limit);
    let client = connect(
        &args.servers,
        &credentials,
        &name,
        nats_limit,
        Some(events_tx),
    )
    .await
    .map_err(|e| format!("node {}: {e}", args.index))?;
    let js = jetstream::new(client.clone());
    let outbox = Arc::new(Outbox::new(args.nodes));
    let timeout = Duration::from_millis(args.timeout_ms);
    let tracker: Box<dyn Tracker> = match args.tracker {
        TrackerKind::Acker => Box::new(AckerTracker::new(outbox.clone(), timeout)?),
        TrackerKind::Dashmap => Box::new(DashMapTracker::new(outbox.clone(), timeout)?),
    };
    let (records, to_record) = records::queue(records::CAPACITY);
    let node = Arc::new(Node {
        args,
        client,
        js,
        outbox,
        tracker,
        pending: Mutex::new(HashMap::new()),
        records,
        counters: Counters::default(),
    });
    let run = &node.args.run;
    let index = node.args.index;
    let subscribe = |what: &str| {
        let subject = format!("{run}.{what}.{index}");
        let client = node.client.clone();
        async move {
            client
                .subscribe(subject.clone())
                .await
                .map_err(|e| format!("subscribe {subject}: {e}"))
        }
    };
    let parts = subscribe("part").await?;
    let tasks = subscribe("task").await?;
    let dones = subscribe("done").await?;
    // Subscriptions must reach the server before anyone sends to them.
    node.client
        .flush()
        .await
        .map_err(|e| format!("flush: {e}"))?;
    let consumer: jetstream::consumer::PullConsumer = node
        .js
        .get_stream(format!("WORK_{run}"))
        .await
        .map_err(|e| format!("work stream: {e}"))?
        .get_consumer("nodes")
        .await
        .map_err(|e| format!("work consumer: {e}"))?;

    // Each loop runs for the node's life; one that ends (a subscription closed, JetStream
    // gone for good) or panics ends the node with an error rather than leaving it half
    // working.
    let mut loops: tokio::task::JoinSet<Result<(), String>> = tokio::task::JoinSet::new();
    loops.spawn(for_life("owner loop", owner_loop(node.clone(), parts)));
    loops.spawn(for_life("worker loop", worker_loop(node.clone(), tasks)));
    loops.spawn(completion_loop(node.clone(), dones));
    loops.spawn(for_life("flush loop", flush_loop(node.clone())));
    loops.spawn(record_loop(node.clone(), to_record));
    loops.spawn(for_life("silence loop", silence_loop(node.clone())));
    loops.spawn(for_life("stats loop", stats_loop(node.clone())));
    loops.spawn(for_life("origin loop", origin_loop(node.clone(), consumer)));

    let mut stdin_closed = Box::pin(stdin_closed());
    let mut disconnected_since: Option<Instant> = None;
    let mut check = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = &mut stdin_closed => return Ok(()),
            Some(ended) = loops.join_next() => {
                return Err(match ended {
                    Ok(Err(why)) => format!("node {index}: {why}"),
                    Ok(Ok(())) => format!("node {index}: a loop of the node ended"),
                    Err(e) => format!("node {index}: a loop of the node failed: {e}"),
                });
            }
            Some(event) = events.recv() => match event {
                async_nats::Event::Disconnected => {
                    add(&node.counters.nats_disconnects, 1);
                    disconnected_since.get_or_insert_with(Instant::now);
                }
                async_nats::Event::Connected => disconnected_since = None,
                _ => {}
            },
            _ = check.tick() => {
                if let Some(since) = disconnected_since {
                    if since.elapsed() > nats_limit {
                        return Err(format!(
                            "node {index}: no NATS connection for {:?}, giving up",
                            since.elapsed()
                        ));
                    }
                }
            }
        }
    }
}

/// A loop meant to run for the node's life, whose end is an error.
async fn for_life(what: &str, work: impl std::future::Future<Output = ()>) -> Result<(), String> {
    work.await;
    Err(format!("the {what} ended (its NATS subscription closed)"))
}

/// Resolves when standard input reaches its end: the run that started this node is gone.
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        use std::io::Read;
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

fn random_id(rng: &mut SmallRng) -> u64 {
    // 0 is not a valid edge (it would ack nothing) nor a useful root.
    rng.random_range(1..=u64::MAX)
}

async fn origin_loop(node: Arc<Node>, consumer: jetstream::consumer::PullConsumer) {
    let mut rng = SmallRng::from_os_rng();
    let nodes = node.args.nodes;
    let index = node.args.index;
    loop {
        // Heartbeats and short pulls: a pull request waits on the consumer's leader only,
        // so after a server is killed a node must notice and ask again within seconds.
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(256)
            .heartbeat(Duration::from_secs(1))
            .expires(Duration::from_secs(5))
            .messages()
            .await
        {
            Ok(messages) => messages,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Some(message) = messages.next().await {
            let Ok(message) = message else {
                // Missed heartbeats, a server gone under the pull: a new pull stream, whose
                // requests reach the consumer's leader as it is now.
                break;
            };
            let delivery = message.info().map(|i| i.delivered).unwrap_or(1) as u32;
            let (message, handle) = message.split();
            let item = match wire::decode_item(&message.payload) {
                Ok(item) => item,
                Err(_) => {
                    add(&node.counters.malformed, 1);
                    // Terminated, so that it is not redelivered forever (if this is lost,
                    // it comes back once more and is counted again).
                    let _ = handle.ack_with(AckKind::Term).await;
                    continue;
                }
            };
            let root = random_id(&mut rng);
            let mut xor = 0;
            let fanout = node.args.fanout;
            let tasks: Vec<(usize, Task)> = (0..fanout)
                .map(|_| {
                    let edge = random_id(&mut rng);
                    xor ^= edge;
                    // Sub-tasks go to the other nodes (to itself only when alone).
                    let to = if nodes > 1 {
                        (index + rng.random_range(1..nodes)) % nodes
                    } else {
                        index
                    };
                    (to, Task { root, edge })
                })
                .collect();
            node.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    root,
                    Pending {
                        item,
                        delivery,
                        pulled: Instant::now(),
                        handle,
                    },
                );
            node.outbox.part(
                wire::owner(root, nodes),
                PartMessage::Init {
                    root,
                    xor,
                    origin: index as u32,
                },
            );
            node.outbox.tasks(tasks);
            add(&node.counters.started, 1);
        }
    }
}

async fn owner_loop(node: Arc<Node>, mut frames: async_nats::Subscriber) {
    let (index, nodes) = (node.args.index, node.args.nodes);
    // A frame's acks and fails, and its inits with the number of acks and fails before each:
    // sorted out first, so that the tracker's calls run in one stretch that is timed once.
    let mut batch: Vec<Message> = Vec::new();
    let mut inits: Vec<(usize, u64, u64, u32)> = Vec::new();
    let mut refused: Vec<(u64, u32)> = Vec::new();
    while let Some(frame) = frames.next().await {
        let Ok(records) = PartMessage::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        add(&node.counters.part_frames, 1);
        let (mut acks, mut fails, mut init_count, mut misrouted) = (0, 0, 0, 0);
        for record in records {
            if wire::owner(record.root(), nodes) != index {
                misrouted += 1;
                continue;
            }
            match record {
                PartMessage::Init { root, xor, origin } => {
                    init_count += 1;
                    if (origin as usize) < nodes {
                        inits.push((batch.len(), root, xor, origin));
                    } else {
                        misrouted += 1;
                    }
                }
                PartMessage::Ack { root, xor } => {
                    acks += 1;
                    batch.push(Message::Ack { root, xor });
                }
                PartMessage::Fail { root } => {
                    fails += 1;
                    batch.push(Message::Fail { root });
                }
            }
        }
        let timer = CallTimer::start();
        // In the frame's order: the messages before an init go first.
        let mut applied = 0;
        for &(before, root, xor, origin) in &inits {
            node.tracker.apply(&batch[applied..before]);
            applied = before;
            if !node.tracker.init(root, xor, origin) {
                refused.push((root, origin));
            }
        }
        node.tracker.apply(&batch[applied..]);
        add(&node.counters.tracker_ns, timer.ns());
        for (root, origin) in refused.drain(..) {
            add(&node.counters.refused_inits, 1);
            let outcome = Outcome::Failed;
            node.outbox.done(origin as usize, Done { root, outcome });
        }
        batch.clear();
        inits.clear();
        add(&node.counters.acks_applied, acks);
        add(&node.counters.fails_applied, fails);
        add(&node.counters.inits_applied, init_count);
        add(&node.counters.misrouted, misrouted);
    }
}

/// Times the owner's calls into its tracker by this thread's CPU time
/// (`CLOCK_THREAD_CPUTIME_ID`): what the calls ran, not the time the thread spent preempted
/// on a crowded machine (which the wall clock would add, and more with the servers
/// busier). Falls back to the wall clock where that clock is not available.
struct CallTimer {
    cpu_ns: Option<u64>,
    wall: Instant,
}

impl CallTimer {
    fn start() -> CallTimer {
        CallTimer {
            cpu_ns: thread_cpu_now_ns(),
            wall: Instant::now(),
        }
    }

    /// Nanoseconds since [`CallTimer::start`].
    fn ns(&self) -> u64 {
        match (self.cpu_ns, thread_cpu_now_ns()) {
            (Some(start), Some(now)) => now.saturating_sub(start),
            _ => self.wall.elapsed().as_nanos() as u64,
        }
    }
}

/// The calling thread's CPU time, nanoseconds.
fn thread_cpu_now_ns() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which points to a
    // local that lives across the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (rc == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

async fn worker_loop(node: Arc<Node>, mut frames: async_nats::Subscriber) {
    let mut rng = SmallRng::from_os_rng();
    let nodes = node.args.nodes;
    let (fail, drop, dup) = (node.args.fail_rate, node.args.drop_rate, node.args.dup_rate);
    let mut out = Vec::new();
    while let Some(frame) = frames.next().await {
        let Ok(tasks) = Task::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        for Task { root, edge } in tasks {
            let owner = wire::owner(root, nodes);
            let roll: f64 = rng.random();
            if roll < fail {
                out.push((owner, PartMessage::Fail { root }));
            } else if roll < fail + drop {
                // The ack is lost: the tree times out and its item is replayed.
            } else {
                out.push((owner, PartMessage::Ack { root, xor: edge }));
                if roll < fail + drop + dup {
                    out.push((owner, PartMessage::Ack { root, xor: edge }));
                }
            }
        }
        node.outbox.parts(out.drain(..));
    }
}

async fn completion_loop(
    node: Arc<Node>,
    mut frames: async_nats::Subscriber,
) -> Result<(), String> {
    let index = node.args.index as u32;
    while let Some(frame) = frames.next().await {
        let Ok(dones) = Done::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        let mut naks = Vec::new();
        let mut to_record = Vec::new();
        {
            let mut pending = node.pending.lock().unwrap_or_else(|p| p.into_inner());
            for Done { root, outcome } in dones {
                let Some(p) = pending.remove(&root) else {
                    // Already judged silent and asked for again, or a stranger's root.
                    add(&node.counters.unknown_completions, 1);
                    continue;
                };
                match outcome {
                    Outcome::Acked => {
                        add(&node.counters.acked, 1);
                        let record = Completed {
                            item: p.item,
                            node: index,
                            delivery: p.delivery,
                            latency_us: p.pulled.elapsed().as_micros() as u64,
                        };
                        to_record.push((record, p.handle));
                    }
                    Outcome::Failed => {
                        add(&node.counters.failed, 1);
                        naks.push(p.handle);
                    }
                    _ => {
                        add(&node.counters.timed_out, 1);
                        naks.push(p.handle);
                    }
                }
            }
        }
        for handle in naks {
            let _ = handle.ack_with(AckKind::Nak(None)).await;
        }
        // Waits while the queue is full (back-pressure, `records.rs`): never dropped.
        for record in to_record {
            node.records
                .send(record)
                .await
                .map_err(|_| "the record loop is gone".to_string())?;
        }
    }
    Err("the completion loop ended (its subscription closed)".into())
}

/// Appends acked items to the completed stream, a chunk per JetStream message, and acks
/// their work messages only once JetStream has confirmed the chunk: an item is never acked
/// before it is on record. Gives up with an error when JetStream confirms nothing for
/// `--nats-limit` (`records.rs`).
async fn record_loop(
    node: Arc<Node>,
    mut records: tokio::sync::mpsc::Receiver<(Completed, JsAcker)>,
) -> Result<(), String> {
    let subject = format!("{}.completed", node.args.run);
    let limit = Duration::from_secs(node.args.nats_limit);
    // Each chunk carries an id unique to this process and chunk, so that a publish retried
    // after a lost confirmation is stored once (JetStream's duplicate window).
    let mut chunks = 0u64;
    // Random, not the pid: a restarted node may get its killed predecessor's pid, and a
    // chunk id the dead process used would be taken for a duplicate and not stored.
    let incarnation: u64 = rand::random();
    while let Some(chunk) = records::next_chunk(&mut records, records::CHUNK).await {
        let mut bytes = Vec::with_capacity(chunk.len() * Completed::SIZE);
        for (record, _) in &chunk {
            record.encode(&mut bytes);
        }
        let bytes = bytes::Bytes::from(bytes);
        chunks += 1;
        let mut headers = async_nats::HeaderMap::new();
        let id = format!(
            "{}-{}-{incarnation:x}-{chunks}",
            node.args.run, node.args.index
        );
        headers.insert("Nats-Msg-Id", id.as_str());
        let publish = || async {
            let ack = node
                .js
                .publish_with_headers(subject.clone(), headers.clone(), bytes.clone())
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|_| ()).map_err(|e| e.to_string())
        };
        if let Err(gave_up) = records::until_confirmed(limit, publish).await {
            return Err(format!(
                "JetStream confirmed no completion record on {subject} for {:.1} s \
                 ({} attempts; the last: {}), past --nats-limit {} s: giving up; \
                 items not acked, so JetStream delivers them again after the consumer's \
                 ack wait: {} in that record, {} waiting behind it",
                gave_up.waited.as_secs_f64(),
                gave_up.attempts,
                gave_up.last_error,
                limit.as_secs(),
                chunk.len(),
                records.len(),
            ));
        }
        add(&node.counters.recorded, chunk.len() as u64);
        for (_, handle) in chunk {
            let _ = handle.ack().await;
        }
    }
    Err("the record loop's queue closed".into())
}

/// Asks again for items whose completion never came.
async fn silence_loop(node: Arc<Node>) {
    let limit = Duration::from_millis(node.args.timeout_ms) + SILENCE_BUDGET;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let silent: Vec<Pending> = {
            let mut pending = node.pending.lock().unwrap_or_else(|p| p.into_inner());
            let roots: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.pulled.elapsed() > limit)
                .map(|(&root, _)| root)
                .collect();
            roots.iter().filter_map(|r| pending.remove(r)).collect()
        };
        add(&node.counters.silent, silent.len() as u64);
        for p in silent {
            let _ = p.handle.ack_with(AckKind::Nak(None)).await;
        }
    }
}

async fn flush_loop(node: Arc<Node>) {
    let run = node.args.run.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for frame in node.outbox.take(&run) {
            // Core NATS is at most once: a frame lost with a server is a tree that times
            // out and is replayed.
            let _ = node.client.publish(frame.subject, frame.bytes.into()).await;
        }
    }
}

async fn stats_loop(node: Arc<Node>) {
    let subject = format!("{}.stats", node.args.run);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let c = &node.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stats = NodeStats {
            index: node.args.index,
            pid: std::process::id(),
            started: get(&c.started),
            inits_applied: get(&c.inits_applied),
            acks_applied: get(&c.acks_applied),
            fails_applied: get(&c.fails_applied),
            part_frames: get(&c.part_frames),
            acked: get(&c.acked),
            failed: get(&c.failed),
            timed_out: get(&c.timed_out),
            silent: get(&c.silent),
            recorded: get(&c.recorded),
            malformed: get(&c.malformed),
            misrouted: get(&c.misrouted),
            refused_inits: get(&c.refused_inits),
            unknown_completions: get(&c.unknown_completions),
            pending: node.tracker.pending() as u64,
            rss: rss_of(std::process::id()).unwrap_or(0),
            nats_disconnects: get(&c.nats_disconnects),
            tracker_ns: get(&c.tracker_ns),
            tracker_thread_ns: thread_cpu_ns(node.tracker.thread_name()).unwrap_or(0),
            cpu_ms: cpu_ms_of(std::process::id()).unwrap_or(0),
        };
        if let Ok(json) = serde_json::to_vec(&stats) {
            let _ = node.client.publish(subject.clone(), json.into()).await;
        }
    }
}

/// Resident set size of process `pid`, bytes (Linux `/proc`).
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line["VmRSS:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// CPU time of this process's threads named `name` so far, nanoseconds (Linux `/proc`: the
/// scheduler's run time of each thread, or its user and system ticks where the kernel keeps
/// no scheduler statistics).
fn thread_cpu_ns(name: &str) -> Option<u64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let run_ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .filter(|&ns| ns > 0);
        let ns = match run_ns {
            Some(ns) => Some(ns),
            None => std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|stat| ticks_ms(&stat))
                .map(|ms| ms * 1_000_000),
        };
        if let Some(ns) = ns {
            *total.get_or_insert(0) += ns;
        }
    }
    total
}

/// User and system time from a `/proc/.../stat` line, milliseconds (clock ticks are 1/100 s
/// on every architecture Linux reports them for as USER_HZ).
fn ticks_ms(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces; the fields after it follow its ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

/// CPU time (user and system) of process `pid` so far, milliseconds (Linux `/proc`).
pub fn cpu_ms_of(pid: u32) -> Option<u64> {
    ticks_ms(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}
