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
//!
//! This file holds the node's shared state and starts its loops: the origin's in
//! `origin.rs` (items pulled, silent ones asked for again) and `completion.rs` (completions
//! recorded or asked for again), the worker's in `worker.rs`, the owner's in `owner.rs`,
//! the outbox's flush in `outbox.rs`, the reports in `stats.rs`; the `/proc` readings are
//! in `procfs.rs`.

mod completion;
mod origin;
mod outbox;
mod owner;
mod procfs;
mod records;
mod stats;
mod tracker;
mod worker;

use crate::wire::Completed;
use crate::{connect, Credentials, TrackerKind};
use async_nats::jetstream::{self, message::Acker as JsAcker};
use completion::{completion_loop, record_loop};
use origin::{origin_loop, silence_loop};
use outbox::{flush_loop, Outbox};
use owner::owner_loop;
use stats::stats_loop;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracker::{AckerTracker, DashMapTracker, Tracker};
use worker::worker_loop;

pub use origin::SILENCE_BUDGET;
pub use procfs::{cpu_ms_of, rss_of};
pub use stats::NodeStats;

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
