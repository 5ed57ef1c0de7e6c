//! The run: servers, streams, node processes, load, kills and drain, once per tracker and
//! round (the trackers alternate: acker, dashmap, acker, dashmap, ...), each phase on fresh
//! streams of the same cluster; then the audit (`audit.rs`) and the report (`report.rs`,
//! whose summary gives the medians of the rounds).
//!
//! **Load.** The run publishes numbered items into `WORK_<run>` (3 replicas) as fast as the
//! nodes take them (the consumer's backlog is kept under `--backlog`); each publish carries
//! a `Nats-Msg-Id`, so a publish retried after a lost confirmation is stored once. An item
//! counts as published once JetStream confirmed it.
//!
//! **Faults.** At 30 % of the load a node is killed with SIGKILL and restarted a second
//! later, empty; at 60 % one NATS server is killed with SIGKILL and restarted three seconds
//! later. The sub-tasks' failed, dropped and duplicated acks run all along (`node/`).
//!
//! **Audit** (`audit.rs`). When the load stops, the run waits until the consumer has
//! nothing pending and nothing unacknowledged, then reads the whole completed stream.

use crate::audit;
use crate::cluster::Cluster;
use crate::node::{cpu_ms_of, rss_of, NodeStats, SILENCE_BUDGET};
use crate::report::{print_summary, Report};
use crate::wire::{self, Completed};
use crate::{connect, Credentials, TrackerKind};
use async_nats::jetstream::{self, consumer, stream};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rand::Rng;
use std::collections::{HashMap, HashSet, VecDeque};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Node processes (partitions).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds of load per phase (one tracker in one round).
    #[arg(long, default_value_t = 12)]
    duration: u64,
    /// Rounds: each runs every tracker of --trackers once, in order, so that the trackers
    /// alternate and the summary compares medians of their rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Sub-tasks (edges) per work item.
    #[arg(long, default_value_t = 128)]
    fanout: usize,
    /// The trackers' tree timeout, milliseconds.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// The trackers of a round, in order, each on fresh streams.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "acker,dashmap"
    )]
    trackers: Vec<TrackerKind>,
    /// Probability that a sub-task fails its tree.
    #[arg(long, default_value_t = 0.0002)]
    fail_rate: f64,
    /// Probability that a sub-task's ack is dropped.
    #[arg(long, default_value_t = 0.0002)]
    drop_rate: f64,
    /// Probability that a sub-task's ack is sent twice.
    #[arg(long, default_value_t = 0.0002)]
    dup_rate: f64,
    /// Most items waiting in the consumer before publishing pauses.
    #[arg(long, default_value_t = 20_000)]
    backlog: u64,
    /// No node or server kills.
    #[arg(long)]
    no_kills: bool,
    /// First client port of the three servers the run starts (route ports are 100 above).
    #[arg(long, default_value_t = 14222)]
    base_port: u16,
    /// Use these NATS servers (comma-separated URLs) instead of starting three; no server
    /// is killed then.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Stream replicas.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Seconds the drain may take before the audit is declared failed.
    #[arg(long, default_value_t = 120)]
    drain_limit: u64,
    /// Seconds a node may go without a NATS connection before it gives up.
    #[arg(long, default_value_t = 30)]
    nats_limit: u64,
}

/// The consumer's ack wait: longer than any origin holds an item (timeout plus
/// [`SILENCE_BUDGET`] plus recording), so JetStream redelivers only what a dead origin held.
fn ack_wait(args: &RunArgs) -> Duration {
    Duration::from_millis(args.timeout_ms) + SILENCE_BUDGET + Duration::from_secs(6)
}

pub fn main(args: RunArgs) -> Result<(), String> {
    if args.nodes == 0 || args.fanout == 0 || args.trackers.is_empty() || args.rounds == 0 {
        return Err(
            "need --nodes >= 1, --fanout >= 1, --rounds >= 1 and at least one tracker".into(),
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(run(args))
}

async fn run(args: RunArgs) -> Result<(), String> {
    let mut credentials = Credentials::from_env();
    let cluster = if args.servers.is_empty() {
        if matches!(credentials, Credentials::None) {
            let token: u128 = rand::rng().random();
            credentials = Credentials::Token(format!("{token:032x}"));
        }
        let dir = std::env::temp_dir().join(format!("ackwheel-fleet-{}", std::process::id()));
        let cluster = Cluster::start(&dir, args.base_port, &credentials)?;
        println!(
            "fleet: {} nats-server processes on 127.0.0.1:{}-{} (JetStream, cluster routes), files in {}",
            cluster.len(),
            args.base_port,
            args.base_port + cluster.len() as u16 - 1,
            dir.display()
        );
        Some(Arc::new(Mutex::new(cluster)))
    } else {
        None
    };
    let urls = match &cluster {
        Some(c) => c.lock().expect("cluster").urls(),
        None => args.servers.clone(),
    };
    let client = connect(
        &urls,
        &credentials,
        "fleet-run",
        Duration::from_secs(30),
        None,
    )
    .await?;
    let mut reports = Vec::new();
    for round in 1..=args.rounds {
        for &tracker in &args.trackers {
            let report = phase(
                &args,
                (round, args.rounds),
                tracker,
                &client,
                &urls,
                &credentials,
                cluster.clone(),
            )
            .await?;
            report.print();
            reports.push(report);
        }
    }
    print_summary(&reports);
    if let Some(cluster) = cluster {
        let dir = cluster.lock().expect("cluster").dir().to_path_buf();
        // The last reference: the servers are stopped before their files go.
        drop(cluster);
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.missing.is_empty())
        .map(|r| format!("{}: {} items lost", r.phase(), r.missing.len()))
        .collect();
    failed.extend(reports.iter().filter(|r| r.unconfirmed > 0).map(|r| {
        format!(
            "{}: {} items never confirmed by JetStream, so unchecked",
            r.phase(),
            r.unconfirmed
        )
    }));
    failed.extend(
        reports
            .iter()
            .filter_map(|r| r.wire_mismatch().map(|m| format!("{}: {m}", r.phase()))),
    );
    if failed.is_empty() {
        println!("AUDIT PASS: every published item was completed at least once, in every phase");
        Ok(())
    } else {
        Err(format!("AUDIT FAILED: {}", failed.join("; ")))
    }
}

/// A node process and the pipe whose end tells it to exit.
struct NodeProcess {
    child: Child,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_node(
    args: &RunArgs,
    index: usize,
    run: &str,
    tracker: TrackerKind,
    urls: &[String],
    credentials: &Credentials,
) -> Result<NodeProcess, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .arg("node")
        .args(["--index", &index.to_string()])
        .args(["--nodes", &args.nodes.to_string()])
        .args(["--servers", &urls.join(",")])
        .args(["--run", run])
        .args(["--tracker", &tracker.to_string()])
        .args(["--fanout", &args.fanout.to_string()])
        .args(["--timeout-ms", &args.timeout_ms.to_string()])
        .args(["--fail-rate", &args.fail_rate.to_string()])
        .args(["--drop-rate", &args.drop_rate.to_string()])
        .args(["--dup-rate", &args.dup_rate.to_string()])
        .args(["--nats-limit", &args.nats_limit.to_string()])
        .envs(credentials.env())
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start node {index}: {e}"))?;
    Ok(NodeProcess { child })
}

/// Bad input on the wire, counted by the nodes and checked by the audit: per node a
/// partition frame cut short, one with an unknown record kind, a sub-task frame cut short,
/// a completion with no outcome, and a well-formed ack for a root the node does not own;
/// and one work item that is not a number. Returns the (malformed, misrouted) counts the
/// nodes must report.
async fn inject_bad_input(
    client: &async_nats::Client,
    js: &jetstream::Context,
    run: &str,
    nodes: usize,
) -> Result<(u64, u64), String> {
    let mut misrouted = 0;
    for i in 0..nodes {
        let mut unknown_kind = Vec::new();
        wire::PartMessage::Ack { root: 1, xor: 1 }.encode(&mut unknown_kind);
        unknown_kind[0] = 0xEE;
        let bad = [
            (format!("{run}.part.{i}"), vec![0xAB; 23]),
            (format!("{run}.part.{i}"), unknown_kind),
            (format!("{run}.task.{i}"), vec![0xAB; 17]),
            (format!("{run}.done.{i}"), vec![0; 16]),
        ];
        for (subject, bytes) in bad {
            client
                .publish(subject, bytes.into())
                .await
                .map_err(|e| e.to_string())?;
        }
        if nodes > 1 {
            let root = (1u64..)
                .find(|&r| wire::owner(r, nodes) != i)
                .expect("a root");
            let mut frame = Vec::new();
            wire::PartMessage::Ack { root, xor: 1 }.encode(&mut frame);
            client
                .publish(format!("{run}.part.{i}"), frame.into())
                .await
                .map_err(|e| e.to_string())?;
            misrouted += 1;
        }
    }
    client.flush().await.map_err(|e| e.to_string())?;
    js.publish(format!("{run}.work"), vec![1u8; 7].into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| format!("publish a malformed work item: {e}"))?;
    Ok((4 * nodes as u64 + 1, misrouted))
}

/// The load: numbered items published until `end` while the consumer's `backlog` is under
/// `most`, each until JetStream confirms it, with an id (`Nats-Msg-Id`) so that a publish
/// retried after a lost confirmation is stored once. Returns the confirmed items and how
/// many were still unconfirmed 30 s after `end`.
async fn publish(
    js: &jetstream::Context,
    run: &str,
    work_subject: &str,
    backlog: &AtomicU64,
    most: u64,
    end: Instant,
) -> (HashSet<u64>, u64) {
    let mut confirmed: HashSet<u64> = HashSet::new();
    let mut retries: VecDeque<u64> = VecDeque::new();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut unconfirmed = 0u64;
    let give_up = end + Duration::from_secs(30);
    loop {
        let loading = Instant::now() < end;
        if !loading && retries.is_empty() && in_flight.is_empty() {
            break;
        }
        if Instant::now() > give_up {
            unconfirmed = (retries.len() + in_flight.len()) as u64;
            eprintln!("fleet: {unconfirmed} items never confirmed by JetStream");
            break;
        }
        while in_flight.len() < 256 {
            let item = if let Some(item) = retries.pop_front() {
                item
            } else if loading && backlog.load(Ordering::Relaxed) < most {
                next += 1;
                next - 1
            } else {
                break;
            };
            let (js, subject) = (js.clone(), work_subject.to_string());
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("{run}-{item}").as_str());
            in_flight.push(async move {
                let stored = match js
                    .publish_with_headers(subject, headers, wire::encode_item(item).into())
                    .await
                {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                (item, stored)
            });
        }
        tokio::select! {
            Some((item, stored)) = in_flight.next() => {
                if stored {
                    confirmed.insert(item);
                } else {
                    retries.push_back(item);
                    // A server may be down: no busy loop while it is.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    (confirmed, unconfirmed)
}

async fn retry<T, E: std::fmt::Display, F, Fut>(
    what: &str,
    within: Duration,
    mut f: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() > within => return Err(format!("{what}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn phase(
    args: &RunArgs,
    round: (usize, usize),
    tracker: TrackerKind,
    client: &async_nats::Client,
    urls: &[String],
    credentials: &Credentials,
    cluster: Option<Arc<Mutex<Cluster>>>,
) -> Result<Report, String> {
    let run = format!("f{:08x}{tracker}", rand::rng().random::<u32>());
    let js = jetstream::new(client.clone());
    let work_subject = format!("{run}.work");
    let within = Duration::from_secs(30);
    // The first creation waits for the cluster to elect its JetStream meta leader.
    let work = retry("create the work stream", within, || {
        js.get_or_create_stream(stream::Config {
            name: format!("WORK_{run}"),
            subjects: vec![work_subject.clone()],
            num_replicas: args.replicas,
            ..Default::default()
        })
    })
    .await?;
    let done_stream = retry("create the completed stream", within, || {
        js.get_or_create_stream(stream::Config {
            name: format!("DONE_{run}"),
            subjects: vec![format!("{run}.completed")],
            num_replicas: args.replicas,
            ..Default::default()
        })
    })
    .await?;
    let consumer: consumer::PullConsumer = retry("create the nodes' consumer", within, || {
        work.get_or_create_consumer(
            "nodes",
            consumer::pull::Config {
                durable_name: Some("nodes".into()),
                ack_wait: ack_wait(args),
                max_ack_pending: 2048 * args.nodes as i64,
                ..Default::default()
            },
        )
    })
    .await?;

    // Node reports and the completion timeline (core subscriptions: figures, not the audit).
    let stats: Arc<Mutex<HashMap<u32, NodeStats>>> = Arc::default();
    let mut stats_sub = client
        .subscribe(format!("{run}.stats"))
        .await
        .map_err(|e| e.to_string())?;
    let stats_in = stats.clone();
    tokio::spawn(async move {
        while let Some(m) = stats_sub.next().await {
            if let Ok(s) = serde_json::from_slice::<NodeStats>(&m.payload) {
                stats_in.lock().expect("stats").insert(s.pid, s);
            }
        }
    });
    let timeline_start = Instant::now();
    let buckets: Arc<Vec<AtomicU64>> = Arc::new(
        (0..((args.duration + args.drain_limit + 60) * 10))
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let mut done_sub = client
        .subscribe(format!("{run}.completed"))
        .await
        .map_err(|e| e.to_string())?;
    let timeline = buckets.clone();
    tokio::spawn(async move {
        while let Some(m) = done_sub.next().await {
            let b = (timeline_start.elapsed().as_millis() / 100) as usize;
            if let Some(bucket) = timeline.get(b) {
                // Relaxed: a count read after the run.
                bucket.fetch_add(
                    (m.payload.len() / Completed::SIZE) as u64,
                    Ordering::Relaxed,
                );
            }
        }
    });

    let nodes: Arc<Mutex<Vec<Option<NodeProcess>>>> = Arc::new(Mutex::new(
        (0..args.nodes)
            .map(|i| spawn_node(args, i, &run, tracker, urls, credentials).map(Some))
            .collect::<Result<_, _>>()?,
    ));
    // Every node reports once it is subscribed and pulling.
    let ready = Instant::now();
    loop {
        let n = stats.lock().expect("stats").len();
        if n >= args.nodes {
            break;
        }
        if ready.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "only {n} of {} nodes reported within 30 s",
                args.nodes
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let injected = inject_bad_input(client, &js, &run, args.nodes).await?;
    let server_cpu_before = cluster
        .as_ref()
        .map(|c| c.lock().expect("cluster").cpu_ms());
    let run_cpu_before = cpu_ms_of(std::process::id()).unwrap_or(0);
    let start = Instant::now();
    let load = Duration::from_secs(args.duration);

    // Faults.
    let kills: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let faults = if args.no_kills {
        None
    } else {
        let (kills, nodes, cluster) = (kills.clone(), nodes.clone(), cluster.clone());
        let (args, run, urls, credentials) = (
            args.clone(),
            run.clone(),
            urls.to_vec(),
            credentials.clone(),
        );
        Some(tokio::spawn(async move {
            let victim = args.nodes - 1;
            tokio::time::sleep_until((start + load.mul_f64(0.3)).into()).await;
            nodes.lock().expect("nodes")[victim] = None; // SIGKILL (NodeProcess::drop)
            kills.lock().expect("kills").push((
                format!("kill -9 of node {victim}, restarted 1 s later"),
                Instant::now(),
            ));
            tokio::time::sleep(Duration::from_secs(1)).await;
            match spawn_node(&args, victim, &run, tracker, &urls, &credentials) {
                Ok(p) => nodes.lock().expect("nodes")[victim] = Some(p),
                Err(e) => eprintln!("fleet: restart of node {victim}: {e}"),
            }
            if let Some(cluster) = cluster {
                tokio::time::sleep_until((start + load.mul_f64(0.6)).into()).await;
                let c = cluster.clone();
                let _ =
                    tokio::task::spawn_blocking(move || c.lock().expect("cluster").kill_server(2))
                        .await;
                kills.lock().expect("kills").push((
                    "kill -9 of nats-server 3, restarted 3 s later".into(),
                    Instant::now(),
                ));
                tokio::time::sleep(Duration::from_secs(3)).await;
                let c = cluster.clone();
                if let Ok(Err(e)) =
                    tokio::task::spawn_blocking(move || c.lock().expect("cluster").start_server(2))
                        .await
                {
                    eprintln!("fleet: restart of nats-server 3: {e}");
                }
            }
        }))
    };

    // Backlog, read by the publisher.
    let backlog = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (backlog, mut consumer) = (backlog.clone(), consumer.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(info) = consumer.info().await {
                    // Relaxed: a hint for pacing.
                    backlog.store(info.num_pending, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let (confirmed, unconfirmed) = publish(
        &js,
        &run,
        &work_subject,
        &backlog,
        args.backlog,
        start + load,
    )
    .await;
    let loaded = start.elapsed();
    if let Some(f) = faults {
        let _ = f.await;
    }

    // Drain: nothing pending, nothing unacknowledged.
    let drain_start = Instant::now();
    let mut consumer = consumer;
    loop {
        if let Ok(info) = consumer.info().await {
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                break;
            }
        }
        if drain_start.elapsed() > Duration::from_secs(args.drain_limit) {
            eprintln!(
                "fleet: the pipeline did not drain within {} s",
                args.drain_limit
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = start.elapsed();
    let server_cpu_ms = server_cpu_before.and_then(|before| {
        Some(
            cluster
                .as_ref()?
                .lock()
                .expect("cluster")
                .cpu_ms()
                .saturating_sub(before),
        )
    });
    let run_cpu_ms = cpu_ms_of(std::process::id())
        .unwrap_or(0)
        .saturating_sub(run_cpu_before);
    watcher.abort();
    // One more report from every node, then stop them.
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Each node's RSS at the end, read before it is stopped (node 0 first).
    let final_rss: Vec<Option<u64>> = {
        let nodes = nodes.lock().expect("nodes");
        nodes
            .iter()
            .map(|p| p.as_ref().and_then(|p| rss_of(p.child.id())))
            .collect()
    };
    let max_rss = final_rss.iter().flatten().copied().max().unwrap_or(0);
    nodes.lock().expect("nodes").clear();

    // Audit: read the whole completed record and judge it.
    let records = audit::read_record(done_stream).await?;
    let _ = js.delete_stream(format!("WORK_{run}")).await;
    let _ = js.delete_stream(format!("DONE_{run}")).await;
    let victim = (!args.no_kills).then_some(args.nodes as u32 - 1);
    let judged = audit::judge(&records, &confirmed, victim);
    let kills = audit::recoveries(
        &buckets,
        timeline_start,
        start,
        start + loaded,
        &kills.lock().expect("kills"),
    );
    let nodes: Vec<NodeStats> = stats.lock().expect("stats").values().cloned().collect();
    let max_rss = nodes.iter().map(|n| n.rss).max().unwrap_or(0).max(max_rss);
    Ok(Report {
        tracker,
        round,
        seconds: drained.as_secs_f64(),
        drain_seconds: (drained - loaded).as_secs_f64(),
        published: confirmed.len() as u64,
        records: records.len(),
        missing: judged.missing,
        duplicates: judged.duplicates,
        latencies_us: judged.latencies_us,
        nodes,
        max_rss,
        final_rss,
        kills,
        injected,
        unconfirmed,
        server_cpu_ms,
        run_cpu_ms,
    })
}
