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
//! between them, one partition killed and restarted). This file is the entry point: it
//! picks the seed, splits the `all` budget, runs the scenarios and sets the exit code. The
//! options are in [`cli`], what `--json` and `--plot` write in [`output`], and what the
//! scenarios share (report, RSS, SVG, seeds) in [`common`].

mod acker;
mod cli;
mod common;
mod expiry_queue;
mod output;
mod partitioned;
mod wheel;

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::thread;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};

use cli::{Cli, Scenario};
use output::{plot, Output};

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
    if let Err(e) = cli.validate() {
        eprintln!("stress: {e}");
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
            resolution_us: cli.resolution_us,
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
            deadline_roots: cli.deadline_roots,
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
