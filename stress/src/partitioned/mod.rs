//! The partitioned scenario: N ackers as N partitions of a fleet, in one process, with a
//! lossy network between them and one partition killed mid-run (`docs/scaling.md`).
//!
//! ## Shape
//!
//! This file runs the phases and reports; the node and origin threads are in [`threads`].
//!
//! * **Nodes**: partition `p` is an `Acker<Tag>` (its own reaper thread, the real clock,
//!   `--timeout-ms`) owned by one node thread, which drains a bounded inbound queue and
//!   applies each message (init, ack, fail) when it is due. Its `on_complete` sends the
//!   completion back to the origin spout named in the payload, tagged with `p`.
//! * **Routing**: every message of a root goes to `mix64(root) % N`, the root's owner.
//! * **Network** (the sending side of each message): lost with probability
//!   `--loss-rate`; otherwise held back for a random 0..=`--delay-ms` with probability
//!   [`DELAY_RATE`], so that messages overtake each other (acks may come before their init:
//!   the owner holds them as orphans). Completions travel back reliably.
//! * **Origins**: spout threads start trees (random roots and edges from
//!   `ackwheel::edge_id()`, 1..=3 root tuples with 0..=2 children each, so about 4 acks; with
//!   probability `--fail-rate` a fail replaces the last ack), at most `--in-flight` across
//!   spouts. Each keeps its own deadline per attempt (the acker's timeout plus
//!   [`ORIGIN_MARGIN_MS`]); an attempt that completes Failed or TimedOut, or whose origin
//!   deadline passes first, is replayed as a new attempt under a new root (Storm's
//!   at-least-once), up to [`MAX_ATTEMPTS`] attempts in all.
//! * **The kill** (main phase only): at 40 % of the traffic one partition's node calls
//!   `shutdown()` on its acker (every tree handed back is lost with it), throws away its
//!   queue and everything that arrives for `--down-ms`, then restarts with a new, empty
//!   acker (the next incarnation).
//!
//! ## What the oracle checks ([`oracle`], per attempt)
//!
//! At most one completion, from the partition that owns the root, carrying the attempt's
//! own payload, from the incarnation that got its init; `Acked` only if every message of
//! the attempt was applied by that incarnation and no fail was sent; `Failed` only if its
//! fail was applied; `TimedOut` not if every message was applied within the timeout of the
//! first; an initialized attempt either completes or is handed back by its partition's
//! shutdown (never both); no message is applied by a partition that does not own its
//! root; no event for a root never started. At the end of each phase: every origin's trees
//! ended Acked or with their attempts exhausted (started = acked + exhausted), no attempt
//! is left open, and every acker's `pending()` returns to 0 (the orphans expire) with
//! nothing for `shutdown()` to hand back.
//!
//! ## Throughput against N
//!
//! Before the main phase (configured N, with the kill), short phases at N = 1, 2 and 4
//! (those below the configured N) measure trees/s against N with the same traffic and no
//! kill. Every phase is checked. On a machine with fewer cores than nodes plus spouts,
//! more partitions do not add throughput: the figures say what the cores allow.

mod oracle;
mod threads;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use crossbeam_utils::CachePadded;
use serde::Serialize;

use crate::common::report;
use crate::common::split_seed;
use oracle::{Judged, Oracle};
use threads::{node, spout, Back, Msg, SpoutReport};

/// How many attempts a message gets in all.
const MAX_ATTEMPTS: u8 = 3;
/// Probability that a message is held back (for 0..=`--delay-ms`).
const DELAY_RATE: f64 = 0.3;
/// The origin's deadline per attempt: the acker's timeout plus this.
const ORIGIN_MARGIN_MS: u64 = 300;
/// Capacity of each node's inbound queue (messages).
const QUEUE: usize = 4096;

/// The scenario's knobs (from the command line).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Config {
    pub(crate) partitions: usize,
    pub(crate) spouts: usize,
    pub(crate) duration_s: f64,
    pub(crate) timeout_ms: u64,
    pub(crate) in_flight: usize,
    pub(crate) fail_rate: f64,
    pub(crate) loss_rate: f64,
    pub(crate) delay_ms: u64,
    pub(crate) down_ms: u64,
    pub(crate) seed: u64,
    #[serde(skip)]
    pub(crate) plant_bug: bool,
}

/// One phase's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Phase {
    pub(crate) partitions: usize,
    pub(crate) kill: bool,
    pub(crate) traffic_seconds: f64,
    pub(crate) drain_seconds: f64,
    pub(crate) trees_started: u64,
    pub(crate) trees_acked: u64,
    pub(crate) trees_exhausted: u64,
    pub(crate) replays: u64,
    /// Trees completed by the ackers (any outcome) per second of traffic.
    pub(crate) trees_per_s: f64,
    /// The main phase: trees/s from the start to the kill (the throughput at this N without
    /// the replays and the down time the kill causes); the whole phase's otherwise.
    pub(crate) trees_per_s_before_kill: f64,
    pub(crate) per_partition_trees_per_s: Vec<f64>,
    pub(crate) messages_sent: u64,
    pub(crate) messages_lost: u64,
    pub(crate) messages_delayed: u64,
    pub(crate) messages_discarded_by_kill: u64,
    pub(crate) killed_partition: Option<usize>,
    pub(crate) handed_back_by_kill: u64,
    pub(crate) judged: Judged,
    pub(crate) violations: u64,
}

/// What `--json` writes for this scenario.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) config: Option<Config>,
    pub(crate) phases: Vec<Phase>,
    /// (N, trees/s) of every phase, the main one last.
    pub(crate) throughput_against_n: Vec<(usize, f64)>,
    pub(crate) violations: u64,
    pub(crate) violation_reports: Vec<String>,
    pub(crate) seconds: f64,
}

/// The owner of a root: a SplitMix64 finalizer of the root, modulo N.
pub(crate) fn owner(root: u64, n: usize) -> usize {
    let mut z = root;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % n as u64) as usize
}

/// Shared by every thread of a phase.
struct Shared {
    cfg: Config,
    n: usize,
    oracle: Oracle,
    running: AtomicBool,
    completed: Vec<CachePadded<AtomicU64>>,
    sent: AtomicU64,
    lost: AtomicU64,
    delayed: AtomicU64,
    discarded: AtomicU64,
    handed_back: AtomicU64,
    kill: Vec<AtomicBool>,
}

/// Runs the scenario: the scaling phases, then the main one with the kill.
pub(crate) fn run(cfg: &Config) -> Summary {
    let start = Instant::now();
    let mut summary = Summary {
        config: Some(cfg.clone()),
        ..Summary::default()
    };
    let smaller: Vec<usize> = [1, 2, 4]
        .into_iter()
        .filter(|&n| n < cfg.partitions)
        .collect();
    // The main phase gets 60 % of the budget; the scaling phases share the rest.
    let (main_s, each_s) = if smaller.is_empty() {
        (cfg.duration_s, 0.0)
    } else {
        (
            cfg.duration_s * 0.6,
            cfg.duration_s * 0.4 / smaller.len() as f64,
        )
    };
    let mut plan: Vec<(usize, f64, bool)> = smaller.iter().map(|&n| (n, each_s, false)).collect();
    plan.push((cfg.partitions, main_s, true));
    for (index, (n, seconds, kill)) in plan.into_iter().enumerate() {
        let (phase, reports) = run_phase(
            cfg,
            n,
            seconds,
            kill,
            split_seed(cfg.seed, 100 + index as u64),
        );
        print_phase(&phase);
        summary.violations += phase.violations;
        summary
            .throughput_against_n
            .push((n, phase.trees_per_s_before_kill));
        summary.violation_reports.extend(reports);
        summary.phases.push(phase);
    }
    summary.seconds = start.elapsed().as_secs_f64();
    summary
}

fn run_phase(cfg: &Config, n: usize, seconds: f64, kill: bool, seed: u64) -> (Phase, Vec<String>) {
    let timeout_us = cfg.timeout_ms * 1000;
    let shared = Arc::new(Shared {
        cfg: cfg.clone(),
        n,
        oracle: Oracle::new(timeout_us, 5_000_000),
        running: AtomicBool::new(true),
        completed: (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
        sent: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        delayed: AtomicU64::new(0),
        discarded: AtomicU64::new(0),
        handed_back: AtomicU64::new(0),
        kill: (0..n).map(|_| AtomicBool::new(false)).collect(),
    });
    let spouts = cfg.spouts;
    let (back_tx, back_rx): (Vec<Sender<Back>>, Vec<Receiver<Back>>) =
        (0..spouts).map(|_| unbounded()).unzip();
    let (node_tx, node_rx): (Vec<Sender<Msg>>, Vec<Receiver<Msg>>) =
        (0..n).map(|_| bounded(QUEUE)).unzip();

    let nodes: Vec<_> = node_rx
        .into_iter()
        .enumerate()
        .map(|(p, rx)| {
            let shared = Arc::clone(&shared);
            let back = back_tx.clone();
            thread::Builder::new()
                .name(format!("node-{p}"))
                .spawn(move || node(&shared, p, &rx, &back))
                .expect("spawn a node thread")
        })
        .collect();
    drop(back_tx);
    let spout_threads: Vec<_> = back_rx
        .into_iter()
        .enumerate()
        .map(|(s, rx)| {
            let shared = Arc::clone(&shared);
            let tx = node_tx.clone();
            let seed = split_seed(seed, s as u64);
            thread::Builder::new()
                .name(format!("origin-{s}"))
                .spawn(move || spout(&shared, s, seed, &tx, &rx))
                .expect("spawn a spout thread")
        })
        .collect();
    drop(node_tx);

    let started = Instant::now();
    let traffic = Duration::from_secs_f64(seconds);
    let killed = kill.then(|| (seed % n as u64) as usize);
    let mut before_kill = None;
    let total = |shared: &Shared| {
        shared
            .completed
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    while started.elapsed() < traffic {
        if let Some(p) = killed {
            if before_kill.is_none() && started.elapsed() >= traffic.mul_f64(0.4) {
                before_kill = Some(total(&shared) as f64 / started.elapsed().as_secs_f64());
                shared.kill[p].store(true, Ordering::Relaxed);
            }
        }
        shared.oracle.sweep(false);
        thread::sleep(Duration::from_millis(100).min(traffic.saturating_sub(started.elapsed())));
    }
    shared.running.store(false, Ordering::Relaxed);
    let traffic_seconds = started.elapsed().as_secs_f64();
    let drain_start = Instant::now();
    let mut reports = Vec::new();
    let mut origin = SpoutReport::default();
    for (s, h) in spout_threads.into_iter().enumerate() {
        match h.join() {
            Ok(r) => {
                origin.started += r.started;
                origin.acked += r.acked;
                origin.exhausted += r.exhausted;
                origin.replays += r.replays;
            }
            Err(_) => reports.push(format!("VIOLATION: spout {s} panicked")),
        }
    }
    let ackers: Vec<_> = nodes
        .into_iter()
        .enumerate()
        .filter_map(|(p, h)| match h.join() {
            Ok(a) => Some((p, a)),
            Err(_) => {
                reports.push(format!("VIOLATION: node {p} panicked"));
                None
            }
        })
        .collect();
    // Every attempt settles within its deadline plus the reaper's lateness; the oracle's
    // grace (5 s) bounds the wait.
    let settle_by = Instant::now() + Duration::from_millis(cfg.timeout_ms) + Duration::from_secs(6);
    while shared.oracle.sweep(false) > 0 && Instant::now() < settle_by {
        thread::sleep(Duration::from_millis(50));
    }
    shared.oracle.sweep(true);
    // The orphans (acks of trees lost with the kill, late acks) expire within a timeout.
    let empty_by = Instant::now() + Duration::from_millis(cfg.timeout_ms) + Duration::from_secs(2);
    for (p, acker) in &ackers {
        while acker.pending() > 0 && Instant::now() < empty_by {
            thread::sleep(Duration::from_millis(20));
        }
        let left = acker.pending();
        let handed = acker.shutdown();
        if left > 0 || !handed.is_empty() {
            reports.push(format!(
                "VIOLATION: partition {p}: {left} entries still pending after the drain, {} trees handed back by its final shutdown",
                handed.len()
            ));
        }
    }
    if origin.started != origin.acked + origin.exhausted {
        reports.push(format!(
            "VIOLATION: the origins started {} trees, but {} were acked and {} exhausted their attempts: {} lost",
            origin.started,
            origin.acked,
            origin.exhausted,
            origin.started as i64 - (origin.acked + origin.exhausted) as i64
        ));
    }
    let (judged, oracle_reports, oracle_violations) = shared.oracle.results();
    let mut violations = oracle_violations + reports.len() as u64;
    reports.splice(0..0, oracle_reports);
    if judged.attempts != origin.started + origin.replays {
        violations += 1;
        reports.push(format!(
            "VIOLATION: the oracle judged {} attempts, the origins started {}",
            judged.attempts,
            origin.started + origin.replays
        ));
    }
    let completed: Vec<u64> = shared
        .completed
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let phase = Phase {
        partitions: n,
        kill,
        traffic_seconds,
        drain_seconds: drain_start.elapsed().as_secs_f64(),
        trees_started: origin.started,
        trees_acked: origin.acked,
        trees_exhausted: origin.exhausted,
        replays: origin.replays,
        trees_per_s: completed.iter().sum::<u64>() as f64 / traffic_seconds.max(1e-9),
        trees_per_s_before_kill: before_kill
            .unwrap_or(completed.iter().sum::<u64>() as f64 / traffic_seconds.max(1e-9)),
        per_partition_trees_per_s: completed
            .iter()
            .map(|&c| c as f64 / traffic_seconds.max(1e-9))
            .collect(),
        messages_sent: shared.sent.load(Ordering::Relaxed),
        messages_lost: shared.lost.load(Ordering::Relaxed),
        messages_delayed: shared.delayed.load(Ordering::Relaxed),
        messages_discarded_by_kill: shared.discarded.load(Ordering::Relaxed),
        killed_partition: killed,
        handed_back_by_kill: shared.handed_back.load(Ordering::Relaxed),
        judged,
        violations,
    };
    (phase, reports)
}

fn print_phase(ph: &Phase) {
    println!(
        "partitioned: N = {}, {:.1} s of traffic{}",
        ph.partitions,
        ph.traffic_seconds,
        if ph.kill {
            " (main phase, one partition killed)"
        } else {
            " (scaling phase)"
        }
    );
    println!(
        "  trees        {} started, {} acked, {} exhausted their {} attempts, {} replays; {} trees/s completed by the ackers{}",
        ph.trees_started,
        ph.trees_acked,
        ph.trees_exhausted,
        MAX_ATTEMPTS,
        ph.replays,
        report::si(ph.trees_per_s),
        if ph.kill {
            format!(" ({} before the kill)", report::si(ph.trees_per_s_before_kill))
        } else {
            String::new()
        }
    );
    let per: Vec<String> = ph
        .per_partition_trees_per_s
        .iter()
        .map(|&r| report::si(r))
        .collect();
    println!("  per node     {} trees/s", per.join(" | "));
    println!(
        "  network      {} messages: {} lost, {} delayed (0..=delay), {} acks applied before their init",
        report::si(ph.messages_sent as f64 + ph.messages_lost as f64),
        ph.messages_lost,
        report::si(ph.messages_delayed as f64),
        ph.judged.acks_before_init
    );
    let j = &ph.judged;
    println!(
        "  attempts     {} judged: {} Acked, {} Failed, {} TimedOut, {} never initialized, {} late completions (after the origin's deadline)",
        report::si(j.attempts as f64),
        report::si(j.acked as f64),
        j.failed,
        j.timed_out,
        j.never_initialized,
        j.late_completions
    );
    if let Some(p) = ph.killed_partition {
        println!(
            "  kill         partition {p}: {} trees handed back by its shutdown, {} messages thrown away, {} attempts hit; all replayed by their origins or exhausted",
            ph.handed_back_by_kill, ph.messages_discarded_by_kill, j.hit_by_kill
        );
    }
    println!("  drain        {:.2} s", ph.drain_seconds);
    println!("  violations   {}", ph.violations);
}

/// Prints the summary's last lines: throughput against N and the violations.
pub(crate) fn print(s: &Summary) {
    let line: Vec<String> = s
        .throughput_against_n
        .iter()
        .map(|&(n, r)| format!("N={n}: {} trees/s", report::si(r)))
        .collect();
    println!(
        "partitioned: throughput against N  {}  ({} cores; the last figure is the main phase's before its kill)",
        line.join(", "),
        thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    );
    println!("  violations   {}", s.violations);
    for r in &s.violation_reports {
        println!("{r}");
    }
}
