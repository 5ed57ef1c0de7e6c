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
//!
//! This file holds the options and runs the rounds and each phase's steps: the streams are
//! made in `streams.rs`, the node processes started and stopped in `nodes.rs`, the load
//! published and drained in `load.rs`, the kills and the bad input in `faults.rs`, and the
//! figures beside the audit (the nodes' reports, the completion timeline, CPU time) are
//! kept in `figures.rs`.

mod faults;
mod figures;
mod load;
mod nodes;
mod streams;

use crate::audit;
use crate::cluster::Cluster;
use crate::node::{NodeStats, SILENCE_BUDGET};
use crate::report::{print_summary, Report};
use crate::{connect, Credentials, TrackerKind};
use async_nats::jetstream;
use faults::{inject_bad_input, spawn_kills, Kills};
use figures::{collect_stats, CpuMark, Timeline};
use load::{drain, publish, watch_backlog};
use nodes::{start_nodes, stop_nodes, wait_for_reports, NodeLauncher};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use streams::Streams;

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

/// One phase: one tracker in one round, on fresh streams of the same cluster.
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
    let streams = Streams::create(args, &js, &run, &work_subject).await?;

    // Node reports and the completion timeline (core subscriptions: figures, not the audit).
    let stats = collect_stats(client, &run).await?;
    let timeline = Timeline::follow(client, &run, args).await?;

    let launcher = NodeLauncher {
        args: args.clone(),
        run: run.clone(),
        tracker,
        urls: urls.to_vec(),
        credentials: credentials.clone(),
    };
    let nodes = start_nodes(&launcher)?;
    wait_for_reports(&stats, args.nodes).await?;
    let injected = inject_bad_input(client, &js, &run, args.nodes).await?;
    let cpu = CpuMark::now(cluster.as_ref());
    let start = Instant::now();
    let load = Duration::from_secs(args.duration);

    let kills: Kills = Arc::default();
    let faults = (!args.no_kills).then(|| {
        spawn_kills(
            launcher,
            nodes.clone(),
            cluster.clone(),
            kills.clone(),
            start,
            load,
        )
    });
    let (backlog, watcher) = watch_backlog(streams.consumer.clone());
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

    drain(streams.consumer, args.drain_limit).await;
    let drained = start.elapsed();
    let (server_cpu_ms, run_cpu_ms) = cpu.since(cluster.as_ref());
    watcher.abort();
    let final_rss = stop_nodes(&nodes).await;
    let max_rss = final_rss.iter().flatten().copied().max().unwrap_or(0);

    // Audit: read the whole completed record and judge it.
    let records = audit::read_record(streams.done).await?;
    let _ = js.delete_stream(format!("WORK_{run}")).await;
    let _ = js.delete_stream(format!("DONE_{run}")).await;
    let victim = (!args.no_kills).then_some(args.nodes as u32 - 1);
    let judged = audit::judge(&records, &confirmed, victim);
    let kills = audit::recoveries(
        &timeline.buckets,
        timeline.start,
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
