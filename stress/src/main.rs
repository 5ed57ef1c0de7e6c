//! The ackwheel stress harness: long randomized runs on every core, each checked against an
//! oracle or a reference model, ending in `PASS` or a list of violations and exit code 1.
//!
//! ```text
//! cargo run --release -p stress                          # the acker scenario, ~30 s
//! cargo run --release -p stress -- acker --duration 60 --fail-rate 0.01 --replay
//! cargo run --release -p stress -- expiry-queue --threads 4
//! cargo run --release -p stress -- wheel --seed 7 --ops 5000000
//! cargo run --release -p stress -- partitioned --partitions 8 --loss-rate 0.01
//! cargo run --release -p stress -- all --json out.json --plot out.svg
//! ```
//!
//! Each scenario lives in its own module with its own oracle and its module docs say what
//! it checks: [`acker`] (a simulated Storm topology against the `Acker`), [`expiry_queue`]
//! (ZooKeeper-style session expiry), [`wheel`] (single-owner timer wheels against a
//! model) and [`partitioned`] (N ackers as the partitions of a fleet, a lossy network
//! between them, one partition killed and restarted). This file owns the command line, the
//! seed, the `all` budget, the `--json` and `--plot` outputs and the exit code. [`report`],
//! [`svg`] and [`rss`] are shared helpers.

mod acker;
mod common;
mod expiry_queue;
mod partitioned;
mod wheel;

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::thread;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use serde::Serialize;

use common::{report, svg};

/// Randomized multi-core stress runs of ackwheel, checked against oracles and models.
#[derive(Debug, Parser)]
#[command(name = "stress", version, about)]
struct Cli {
    /// Which scenario to run.
    #[arg(value_enum, default_value_t = Scenario::Acker)]
    scenario: Scenario,

    /// Worker threads: bolts (acker), touching threads (expiry-queue), wheel owners
    /// (wheel) [default: available parallelism].
    #[arg(long)]
    threads: Option<NonZeroUsize>,

    /// Spout threads of the acker scenario [default: half of --threads, at least 1] and of
    /// the partitioned one (its origins) [default: half of --threads, at least 2].
    #[arg(long)]
    spouts: Option<NonZeroUsize>,

    /// Acker: stop starting trees after this many [default: no limit; --duration decides].
    #[arg(long)]
    trees: Option<u64>,

    /// Seconds of load: the acker's traffic phase (its memory, drain and idle phases add
    /// about 7 s), the expiry-queue's touching, the wheel's cap, the partitioned traffic
    /// (its phases' drains add about a second each). For `all`, the budget shared by the
    /// four [default: 25 for acker, 28 for expiry-queue, wheel and partitioned, 30 for all].
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,

    /// Acker: most children a tuple gets (the spout emits 1..=F root tuples, bolts 0..=F).
    #[arg(long, default_value_t = 3)]
    fanout: u32,

    /// Acker: depth of the trees (root tuples are at depth 1).
    #[arg(long, default_value_t = 3)]
    depth: u8,

    /// Acker: probability that a bolt fails a tuple instead of processing it. Partitioned:
    /// that an attempt sends a fail in place of its last ack.
    #[arg(long, default_value_t = 0.002)]
    fail_rate: f64,

    /// Acker: probability that an ack message is dropped.
    #[arg(long, default_value_t = 0.001)]
    drop_rate: f64,

    /// Acker: probability that an ack message (of a tuple with children) is sent twice.
    #[arg(long, default_value_t = 0.001)]
    dup_rate: f64,

    /// Tree timeout (acker, partitioned) or session timeout (expiry-queue), milliseconds.
    #[arg(long, default_value_t = 500)]
    timeout_ms: u64,

    /// Acker: replay failed and timed-out trees as new trees (up to 3 attempts per message).
    #[arg(long)]
    replay: bool,

    /// Acker, partitioned: most trees in flight across spouts (Storm's max.spout.pending).
    #[arg(long, default_value_t = 2048)]
    in_flight: usize,

    /// Acker: the spouts start no tree for the last quarter of every period of this many
    /// milliseconds, so that what is pending falls and rises again (the tables shrink and
    /// grow under the load). 0: steady.
    #[arg(long, default_value_t = 0)]
    breathe_ms: u64,

    /// Acker: bolts gather their acks in frames of up to this many and send each frame
    /// with one `Acker::apply` (full, before an order the topology relies on, and before
    /// the bolt waits for a tuple). 0: one `ack` call per ack.
    #[arg(long, default_value_t = 0)]
    ack_frames: usize,

    /// Acker: its `max_pending` in the traffic phase. Small tables make completed trees'
    /// tombstones matter (with more threads than cores the reaper and the grace period
    /// lag); an init refused `Full` well below it is a violation.
    #[arg(long, default_value_t = 16_384)]
    max_pending: usize,

    /// Acker: roots per wave of the memory phase (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    memory_roots: usize,

    /// Acker: trees churned through a 1M-max_pending acker (about 1k in flight) by the
    /// memory phase, for its peak RSS (0 skips the churn; `--memory-roots 0` skips it too).
    #[arg(long, default_value_t = 2_000_000)]
    churn_trees: u64,

    /// Acker: roots the growth phase fills an acker with, timing each operation while its
    /// tables grow and again once they have (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    growth_roots: u64,

    /// Acker: trees the burst phase starts and completes on the plain and the async
    /// paths, each in a fresh process, for the memory per tree in flight and the memory
    /// back after the burst (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    burst_roots: usize,

    /// Partitioned: how many partitions (ackers, each on its own node thread).
    #[arg(long, default_value_t = 4)]
    partitions: usize,

    /// Partitioned: probability that a message (init, ack or fail) is lost on the network.
    #[arg(long, default_value_t = 0.002)]
    loss_rate: f64,

    /// Partitioned: most a message is held back on the network (30 % of them are), in
    /// milliseconds; messages overtake each other within it.
    #[arg(long, default_value_t = 5)]
    delay_ms: u64,

    /// Partitioned: how long the killed partition stays down before it restarts empty.
    #[arg(long, default_value_t = 200)]
    down_ms: u64,

    /// Acker: default ackers the memory phase builds in one process, all alive at once, for
    /// the build cost's second figure.
    #[arg(long, default_value_t = 10)]
    ackers_at_once: usize,

    /// Expiry-queue: live sessions per touching thread.
    #[arg(long, default_value_t = 60_000)]
    sessions: usize,

    /// Wheel: total operations over all threads.
    #[arg(long, default_value_t = 30_000_000)]
    ops: u64,

    /// Seed of every random choice; each thread derives its own from it. Random (and
    /// printed) when absent. Threads interleave freely, so a seed replays the choices,
    /// not the schedule.
    #[arg(long)]
    seed: Option<u64>,

    /// Write every figure of the summary to FILE as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,

    /// Draw throughput over time and the lateness distributions to FILE as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,

    /// Self-test of the oracles, which must catch it (the run must FAIL): the acker scenario
    /// reports every Acked completion as Failed; the partitioned one routes the last ack of
    /// one tree in a hundred to the wrong partition.
    #[arg(long, hide = true)]
    plant_bug: bool,
}

/// The scenarios, each a module of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// A simulated Storm topology (spouts, bolts, aggregation, fails, dropped and
    /// duplicated acks) against one Acker; every tree's outcome checked by an oracle.
    Acker,
    /// Many touching threads and one expirer on an ExpiryQueue; every session must expire
    /// exactly once and never early.
    ExpiryQueue,
    /// Single-owner TimerWheels (one per thread), random schedule / reschedule / cancel /
    /// advance against a model, over several clock origins (0, near 2^63, near u64::MAX).
    Wheel,
    /// N ackers as N partitions of a fleet in one process: messages routed by the root's
    /// hash through a network that delays, reorders and loses them; one partition killed
    /// mid-run and restarted empty; origins replay; every attempt checked by an oracle.
    Partitioned,
    /// acker, expiry-queue, wheel and partitioned in turn, sharing --duration.
    All,
}

/// Everything `--json` writes.
#[derive(Debug, Default, Serialize)]
struct Output {
    scenario: String,
    seed: u64,
    pass: bool,
    violations: u64,
    seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    acker: Option<acker::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expiry_queue: Option<expiry_queue::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wheel: Option<wheel::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partitioned: Option<partitioned::Summary>,
}

fn main() -> ExitCode {
    // The memory phase's child processes (see `acker::memory` and `acker::footprint`).
    if let Ok(spec) = std::env::var(acker::THREADED_ENV) {
        return acker::threaded_child(&spec);
    }
    if let Ok(spec) = std::env::var(acker::FOOTPRINT_ENV) {
        return acker::footprint_child(&spec);
    }
    if let Ok(spec) = std::env::var(acker::BURST_ENV) {
        return acker::burst_child(&spec);
    }
    let cli = Cli::parse();
    let threads = cli
        .threads
        .or_else(|| thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let seed = cli.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
    });
    if let Some(d) = cli.duration {
        if !(d.is_finite() && d >= 0.0) {
            eprintln!("stress: --duration must be a non-negative number of seconds, got {d}");
            return ExitCode::from(2);
        }
    }
    for (name, rate) in [
        ("--fail-rate", cli.fail_rate),
        ("--drop-rate", cli.drop_rate),
        ("--dup-rate", cli.dup_rate),
        ("--loss-rate", cli.loss_rate),
    ] {
        if !(0.0..=1.0).contains(&rate) {
            eprintln!("stress: {name} must be a probability in [0, 1], got {rate}");
            return ExitCode::from(2);
        }
    }
    if cli.in_flight > 1 << 20 {
        // Each tree in flight has a ~0.5 KiB oracle record (its history included).
        eprintln!("stress: --in-flight is at most {}", 1 << 20);
        return ExitCode::from(2);
    }
    if cli.max_pending == 0 || cli.max_pending > 1 << 26 {
        eprintln!("stress: --max-pending must be in 1..={}", 1 << 26);
        return ExitCode::from(2);
    }
    if cli.growth_roots > 1 << 26 {
        eprintln!("stress: --growth-roots is at most {}", 1u64 << 26);
        return ExitCode::from(2);
    }
    if cli.ackers_at_once == 0 || cli.ackers_at_once > 100 {
        eprintln!("stress: --ackers-at-once must be in 1..=100");
        return ExitCode::from(2);
    }
    if cli.partitions == 0 || cli.partitions > 1024 {
        eprintln!("stress: --partitions must be in 1..=1024");
        return ExitCode::from(2);
    }
    if cli.fanout == 0 || cli.depth == 0 || cli.in_flight == 0 || cli.timeout_ms == 0 {
        eprintln!("stress: --fanout, --depth, --in-flight and --timeout-ms must be at least 1");
        return ExitCode::from(2);
    }

    let start = Instant::now();
    let mut out = Output {
        scenario: cli
            .scenario
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string()),
        seed,
        ..Output::default()
    };
    // `all` splits its budget: the acker's fixed phases (drain, idle, memory) come on top of
    // its share, so it gets the smallest traffic share of the time it really takes.
    // The partitioned scenario's phases each drain for about a second on top of its share.
    let (acker_s, queue_s, wheel_s, partitioned_s) = match (cli.scenario, cli.duration) {
        (Scenario::All, d) => {
            let d = d.unwrap_or(30.0);
            (d * 0.3, d * 0.2, d * 0.15, d * 0.15)
        }
        (Scenario::Acker, d) => (d.unwrap_or(25.0), 0.0, 0.0, 0.0),
        (_, d) => {
            let d = d.unwrap_or(28.0);
            (0.0, d, d, d)
        }
    };
    println!(
        "stress: scenario {}, seed {seed}, {threads} threads (replay with --seed {seed})",
        out.scenario
    );
    if matches!(cli.scenario, Scenario::Acker | Scenario::All) {
        let cfg = acker::Config {
            bolts: threads,
            spouts: cli.spouts.map_or((threads / 2).max(1), NonZeroUsize::get),
            trees: cli.trees,
            duration_s: acker_s,
            fanout: cli.fanout,
            depth: cli.depth,
            fail_rate: cli.fail_rate,
            drop_rate: cli.drop_rate,
            dup_rate: cli.dup_rate,
            timeout_ms: cli.timeout_ms,
            seed,
            replay: cli.replay,
            in_flight: cli.in_flight,
            breathe_ms: cli.breathe_ms,
            ack_frames: cli.ack_frames,
            max_pending: cli.max_pending,
            memory_roots: cli.memory_roots,
            churn_trees: cli.churn_trees,
            ackers_at_once: cli.ackers_at_once,
            growth_roots: cli.growth_roots,
            burst_roots: cli.burst_roots,
            plant_bug: cli.plant_bug,
        };
        let summary = acker::run(&cfg);
        acker::print(&summary);
        out.violations += summary.violations;
        out.acker = Some(summary);
    }
    if matches!(cli.scenario, Scenario::ExpiryQueue | Scenario::All) {
        let cfg = expiry_queue::Config {
            threads,
            duration_s: queue_s,
            timeout_ms: cli.timeout_ms,
            sessions_per_thread: cli.sessions,
            seed,
        };
        let summary = expiry_queue::run(&cfg);
        expiry_queue::print(&summary);
        out.violations += summary.violations;
        out.expiry_queue = Some(summary);
    }
    if matches!(cli.scenario, Scenario::Wheel | Scenario::All) {
        let summary = wheel::run(seed, cli.ops, threads, wheel_s);
        out.violations += summary.failures.len() as u64;
        out.wheel = Some(summary);
    }
    if matches!(cli.scenario, Scenario::Partitioned | Scenario::All) {
        let cfg = partitioned::Config {
            partitions: cli.partitions,
            spouts: cli.spouts.map_or((threads / 2).max(2), NonZeroUsize::get),
            duration_s: partitioned_s,
            timeout_ms: cli.timeout_ms,
            in_flight: cli.in_flight,
            fail_rate: cli.fail_rate,
            loss_rate: cli.loss_rate,
            delay_ms: cli.delay_ms,
            down_ms: cli.down_ms,
            seed,
            plant_bug: cli.plant_bug,
        };
        let summary = partitioned::run(&cfg);
        partitioned::print(&summary);
        out.violations += summary.violations;
        out.partitioned = Some(summary);
    }
    out.seconds = start.elapsed().as_secs_f64();
    out.pass = out.violations == 0;

    if let Some(path) = &cli.json {
        match serde_json::to_string_pretty(&out) {
            Ok(text) => {
                if let Err(e) = std::fs::write(path, text + "\n") {
                    eprintln!("stress: cannot write {}: {e}", path.display());
                }
            }
            Err(e) => eprintln!("stress: cannot encode the JSON report: {e}"),
        }
    }
    if let Some(path) = &cli.plot {
        if let Err(e) = std::fs::write(path, plot(&out)) {
            eprintln!("stress: cannot write {}: {e}", path.display());
        }
    }
    if out.pass {
        println!("PASS ({:.1} s)", out.seconds);
        ExitCode::SUCCESS
    } else {
        println!(
            "FAIL: {} violation(s). Replay: cargo run --release -p stress -- {} --seed {seed} --threads {threads}",
            out.violations, out.scenario
        );
        ExitCode::from(1)
    }
}

/// The `--plot` picture: a throughput panel and a lateness panel per scenario that ran.
fn plot(out: &Output) -> String {
    use svg::{Chart, Series};
    let mut charts = Vec::new();
    let nines = report::nines_ticks();
    if let Some(a) = &out.acker {
        for (title, rate) in [
            ("acker: completed trees per second", 0),
            ("acker: acks per second", 1),
        ] {
            charts.push(Chart {
                title: title.into(),
                x_label: "seconds".into(),
                y_label: "per second".into(),
                series: vec![Series {
                    name: ["trees/s", "acks/s"][rate].into(),
                    points: a
                        .throughput
                        .iter()
                        .map(|s| (s.t, if rate == 0 { s.rate } else { s.rate2 }))
                        .collect(),
                }],
                x_ticks: Vec::new(),
            });
        }
        for (title, name, points) in [
            (
                "acker: timeout lateness (Completion.elapsed - timeout of TimedOut trees)",
                "lateness",
                &a.lateness_curve,
            ),
            (
                "acker: completion latency (Completion.elapsed of Acked trees)",
                "latency",
                &a.latency_curve,
            ),
        ] {
            charts.push(Chart {
                title: title.into(),
                x_label: "percentile".into(),
                y_label: "ms".into(),
                series: vec![Series {
                    name: name.into(),
                    points: points.clone(),
                }],
                x_ticks: nines.clone(),
            });
        }
    }
    if let Some(q) = &out.expiry_queue {
        charts.push(Chart {
            title: "expiry-queue: throughput".into(),
            x_label: "seconds".into(),
            y_label: "per second".into(),
            series: vec![
                Series {
                    name: "touches/s".into(),
                    points: q.throughput.iter().map(|s| (s.t, s.rate)).collect(),
                },
                Series {
                    name: "expirations/s".into(),
                    points: q.throughput.iter().map(|s| (s.t, s.rate2)).collect(),
                },
            ],
            x_ticks: Vec::new(),
        });
        charts.push(Chart {
            title: "expiry-queue: expiry lateness (after poll - deadline)".into(),
            x_label: "percentile".into(),
            y_label: "ms".into(),
            series: vec![Series {
                name: "lateness".into(),
                points: q.lateness_curve.clone(),
            }],
            x_ticks: nines,
        });
    }
    if let Some(w) = &out.wheel {
        charts.push(Chart {
            title: "wheel: operations".into(),
            x_label: "thread".into(),
            y_label: "M ops/s".into(),
            series: vec![Series {
                name: "M ops/s per thread".into(),
                points: w
                    .per_thread_mops
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| (i as f64, r))
                    .collect(),
            }],
            x_ticks: Vec::new(),
        });
    }
    svg::render(&charts)
}
