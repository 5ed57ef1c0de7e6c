//! The acker scenario: a simulated Storm topology on every core, every tree judged by an
//! oracle that knows its fate.
//!
//! ## Phases
//!
//! 1. **Memory** ([`memory`], `--memory-roots`, first: RSS reads best in a process that has
//!    not yet allocated anything big): bytes per pending root, and no growth with the roots
//!    ever seen; then, in fresh child processes ([`footprint`]), what a default acker costs
//!    to build before its first tree and the peak RSS of a 1M-`max_pending` acker churning
//!    `--churn-trees` trees with 1k in flight (reported beside their targets, not judged).
//!    Then the **growth** phase ([`growth`], `--growth-roots`): each operation's latency
//!    while the tables grow from their smallest size to a million roots pending, beside
//!    the same operations on the grown tables (reported, not judged).
//! 2. **Traffic** (`--duration`): spout and bolt threads ([`topology`]) run against one
//!    `Acker<u32>` with `--timeout-ms`; each completion goes to the [`oracle`], and each
//!    tree, once nothing can touch it any more, to the checker thread, which judges it.
//! 3. **Drain**: spouts stop (sending any init they held back), bolts finish every queued
//!    tuple; then every tree must complete within timeout + 5 s (the timed-out ones on the
//!    reaper), and then `pending()` must return to 0 as the orphans (acks that arrived
//!    after their tree completed, ghost acks) expire.
//! 4. **Cross-checks**: the acker's `stats()` must agree with the oracle's counts, no
//!    callback may have panicked, every ghost ack must have expired as an orphan, and no
//!    init may have been refused `Full` while `pending()` was well below `max_pending`
//!    (`--max-pending`, small by default so that tombstones matter).
//! 5. **Idle**: once every deadline has passed, the reaper's wake-ups over one second (it
//!    should sleep).
//!
//! Every violation is printed with the tree's history and makes the run fail.
//!
//! This file holds the knobs ([`Config`]) and runs the phases; the traffic's rig and
//! threads are in [`traffic`], what the run found and how it is printed in [`summary`].

mod burst;
mod deadline;
mod footprint;
mod growth;
mod memory;

pub(crate) use burst::{burst_child, BURST_ENV};
pub(crate) use footprint::{footprint_child, FOOTPRINT_ENV};
pub(crate) use memory::{threaded_child, THREADED_ENV};
mod oracle;
mod summary;
mod topology;
mod traffic;

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::common::report::{self, Progress};
use crate::common::rss;
use oracle::Tally;
use traffic::{traffic_phase, Rig};

use summary::{fill_from_counters, fill_from_tally};
pub(crate) use summary::{print, Summary};

pub(crate) use memory::Memory;

/// The acker scenario's knobs (from the command line).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Config {
    pub(crate) bolts: usize,
    pub(crate) spouts: usize,
    pub(crate) trees: Option<u64>,
    pub(crate) duration_s: f64,
    pub(crate) fanout: u32,
    pub(crate) depth: u8,
    pub(crate) fail_rate: f64,
    pub(crate) drop_rate: f64,
    pub(crate) dup_rate: f64,
    pub(crate) timeout_ms: u64,
    /// See `--resolution-us`.
    pub(crate) resolution_us: Option<u64>,
    pub(crate) seed: u64,
    pub(crate) replay: bool,
    pub(crate) in_flight: usize,
    /// See `--breathe-ms`.
    pub(crate) breathe_ms: u64,
    /// Acks per frame sent through `Acker::apply` (0: one call each).
    pub(crate) ack_frames: usize,
    pub(crate) max_pending: usize,
    pub(crate) memory_roots: usize,
    pub(crate) churn_trees: u64,
    pub(crate) ackers_at_once: usize,
    pub(crate) growth_roots: u64,
    /// Trees of the burst phase, on each path (0: skipped).
    pub(crate) burst_roots: usize,
    /// Trees of the shared-deadline phase (0: skipped).
    pub(crate) deadline_roots: usize,
    #[serde(skip)]
    pub(crate) plant_bug: bool,
}

/// The smallest memory phase whose second-wave growth is judged.
const MEMORY_CHECK_MIN_ROOTS: usize = 250_000;

/// How many attempts a replayed message gets in all.
const MAX_ATTEMPTS: u8 = 3;

/// Runs the scenario.
pub(crate) fn run(cfg: &Config) -> Summary {
    let started_at = Instant::now();
    let mut setup_problems = Vec::new();
    // --- memory, first: RSS is read best in a process that has not yet allocated (and
    // half-freed, through deferred reclamation) anything big.
    let (memory, footprint_figures) = memory_phase(cfg, &mut setup_problems);
    let growth_figures = growth_phase(cfg, &mut setup_problems);
    let bursts = burst_phase(cfg, &mut setup_problems);
    let shared_deadline = deadline_phase(cfg, &mut setup_problems);
    let (rig, checker) = Rig::build(cfg);

    rss::reset_peak();
    let mut progress = Progress::new(Duration::from_secs_f64(cfg.duration_s));
    let mut summary = Summary {
        config: Some(cfg.clone()),
        memory,
        footprint: footprint_figures,
        growth: growth_figures,
        bursts,
        shared_deadline,
        violations: setup_problems.len() as u64,
        violation_reports: setup_problems,
        ..Summary::default()
    };
    traffic_phase(cfg, &rig, &mut progress, &mut summary);

    // --- drain: every tree completes, then every orphan expires.
    let quiet_since = drain_phase(&rig, &mut progress, &mut summary);
    collect_verdicts(&rig, checker, &mut summary);

    // --- cross-checks against the acker's own counters.
    cross_check(cfg, &rig, &mut summary);
    summary.peak_rss = rss::peak();

    idle_phase(&rig, quiet_since, &mut summary);

    drop(rig.topo);
    drop(rig.acker);

    summary.total_seconds = started_at.elapsed().as_secs_f64();
    summary
}

/// The memory phase (`--memory-roots`; 0 skips it): bytes per pending root over two waves
/// ([`memory`]), then the build cost and the churn's peak RSS in fresh child processes
/// ([`footprint`]).
fn memory_phase(
    cfg: &Config,
    setup_problems: &mut Vec<String>,
) -> (Option<Memory>, Option<footprint::Footprint>) {
    let mut memory = None;
    let mut footprint_figures = None;
    if cfg.memory_roots > 0 {
        eprintln!(
            "  memory phase: {} roots per wave, two waves",
            report::si(cfg.memory_roots as f64)
        );
        match memory::run(cfg.memory_roots, cfg.seed) {
            Ok(m) => {
                if let Some(m) = &m {
                    // Below a few hundred thousand roots RSS is too coarse (pages, arenas,
                    // a sanitizer's shadow memory) to call a growth a leak.
                    if m.max_pending >= MEMORY_CHECK_MIN_ROOTS && m.second_wave_growth > 0.25 {
                        setup_problems.push(format!(
                            "VIOLATION: memory grew {:.0} % from the first wave of {} roots to the second: it follows the roots ever seen",
                            m.second_wave_growth * 100.0,
                            m.max_pending
                        ));
                    }
                }
                memory = m;
            }
            Err(e) => {
                setup_problems.push(format!("VIOLATION: {e}"));
            }
        }
        // After the fill, which it does not disturb: every figure comes from a fresh child.
        eprintln!(
            "  memory phase: build cost ({} processes of 1 acker, 1 of {}), churn of {} trees",
            footprint::BUILD_SAMPLES,
            cfg.ackers_at_once,
            report::si(cfg.churn_trees as f64)
        );
        match footprint::run(cfg.churn_trees, cfg.ackers_at_once) {
            Ok(f) => footprint_figures = f,
            Err(e) => setup_problems.push(format!("VIOLATION: {e}")),
        }
    }
    (memory, footprint_figures)
}

/// The growth phase (`--growth-roots`; 0 skips it).
fn growth_phase(cfg: &Config, setup_problems: &mut Vec<String>) -> Option<growth::Growth> {
    let mut growth_figures = None;
    if cfg.growth_roots > 0 {
        eprintln!(
            "  growth phase: op latency while the tables grow to {} roots pending, then grown",
            report::si(cfg.growth_roots as f64)
        );
        match growth::run(cfg.growth_roots) {
            Ok(g) => growth_figures = Some(g),
            Err(e) => setup_problems.push(format!("VIOLATION: {e}")),
        }
    }
    growth_figures
}

/// The burst phase (`--burst-roots`; 0 skips it).
fn burst_phase(cfg: &Config, setup_problems: &mut Vec<String>) -> Vec<burst::Burst> {
    let mut bursts = Vec::new();
    if cfg.burst_roots > 0 {
        eprintln!(
            "  burst phase: {} trees started and completed on the plain and the async paths",
            report::si(cfg.burst_roots as f64)
        );
        match burst::run(cfg.burst_roots) {
            Ok(b) => bursts = b,
            Err(e) => setup_problems.push(format!("VIOLATION: {e}")),
        }
    }
    bursts
}

/// The shared-deadline phase (`--deadline-roots`; 0 skips it).
fn deadline_phase(
    cfg: &Config,
    setup_problems: &mut Vec<String>,
) -> Option<deadline::SharedDeadline> {
    let mut shared_deadline = None;
    if cfg.deadline_roots > 0 {
        eprintln!(
            "  shared-deadline phase: {} trees time out at once on a saturated runtime, every `track` timed",
            report::si(cfg.deadline_roots as f64)
        );
        match deadline::run(cfg.deadline_roots) {
            Ok(d) => shared_deadline = Some(d),
            Err(e) => setup_problems.push(format!("VIOLATION: {e}")),
        }
    }
    shared_deadline
}

/// The drain: every tree completes (within the timeout + 5 s), then every orphan expires
/// (within the timeout + 3 s). Returns the oracle's clock at its start, from which the idle
/// phase counts.
fn drain_phase(rig: &Rig, progress: &mut Progress, summary: &mut Summary) -> u64 {
    let Rig {
        oracle,
        acker,
        free,
        ..
    } = rig;
    let timeout = rig.timeout;
    let drain_start = Instant::now();
    let quiet_since = oracle.now();
    let limit = drain_start + timeout + Duration::from_secs(5);
    while oracle.in_flight(free) > 0 && Instant::now() < limit {
        progress.update(&format!(
            "draining: {} trees in flight, {} entries pending",
            oracle.in_flight(free),
            acker.pending()
        ));
        thread::sleep(Duration::from_millis(20));
    }
    oracle.report_stuck(free);
    let limit = Instant::now() + timeout + Duration::from_secs(3);
    while acker.pending() > 0 && Instant::now() < limit {
        progress.update(&format!(
            "draining: {} entries pending (orphans expire after the timeout)",
            acker.pending()
        ));
        thread::sleep(Duration::from_millis(20));
    }
    progress.finish();
    summary.pending_after_drain = acker.pending();
    summary.drain_seconds = drain_start.elapsed().as_secs_f64();
    quiet_since
}

/// The checker's verdicts: the oracle ends, the checker hands back its tallies, and the
/// summary takes them with the topology's counters.
fn collect_verdicts(rig: &Rig, checker: thread::JoinHandle<Tally>, summary: &mut Summary) {
    rig.oracle.end();
    let tally = checker.join().unwrap_or_else(|_| Tally {
        violations: 1,
        reports: vec!["VIOLATION: the checker thread panicked".into()],
        ..Tally::default()
    });
    fill_from_tally(summary, &tally);
    fill_from_counters(summary, &rig.topo);
}

/// The cross-checks: the acker's `stats()` against the oracle's counts, its own failures
/// (callbacks, reaper passes, grace-period barriers), `pending()` after the drain, ghost
/// acks against expired orphans, and inits refused `Full` with room left. Each problem is
/// a violation.
fn cross_check(cfg: &Config, rig: &Rig, summary: &mut Summary) {
    let Rig { acker, topo, .. } = rig;
    let stats = acker.stats();
    summary.stats_acked = stats.acked;
    summary.stats_failed = stats.failed;
    summary.stats_timed_out = stats.timed_out;
    summary.stats_orphans_expired = stats.orphans_expired;
    summary.stats_rejected_full = stats.rejected_full;
    summary.stats_callback_panics = stats.callback_panics;
    let rows = [
        &summary.clean,
        &summary.fail_sent,
        &summary.ack_dropped_or_duplicated,
    ];
    let oracle_acked: u64 = rows.iter().map(|r| r.acked).sum();
    let oracle_failed: u64 = rows.iter().map(|r| r.failed).sum();
    let oracle_timed_out: u64 = rows.iter().map(|r| r.timed_out).sum();
    let mut problems = Vec::new();
    if summary.pending_after_drain != 0 {
        problems.push(format!(
            "pending() is {} after the drain (timeout + 3 s after the last tree), not 0",
            summary.pending_after_drain
        ));
    }
    if (stats.acked, stats.failed, stats.timed_out)
        != (oracle_acked, oracle_failed, oracle_timed_out)
    {
        problems.push(format!(
            "stats() says {} acked / {} failed / {} timed out, the oracle saw {oracle_acked} / {oracle_failed} / {oracle_timed_out}",
            stats.acked, stats.failed, stats.timed_out
        ));
    }
    if stats.callback_panics != 0 {
        problems.push(format!(
            "{} on_complete calls panicked",
            stats.callback_panics
        ));
    }
    let refused_with_room = topo.refused_with_room.load(Ordering::Relaxed);
    if refused_with_room != 0 {
        problems.push(format!(
            "{refused_with_room} inits refused Full below max_pending (the latest with {} pending of {}): tombstones took the room and the init did not wait for them",
            topo.pending_at_refusal.load(Ordering::Relaxed),
            cfg.max_pending
        ));
    }
    if stats.orphans_expired + stats.rejected_full < summary.ghost_acks {
        problems.push(format!(
            "{} ghost acks (roots never initialized) but only {} orphans expired",
            summary.ghost_acks, stats.orphans_expired
        ));
    }
    summary.migrations = acker.table_migrations();
    summary.table_slots_after_drain = acker.table_slots();
    if acker.reaper_panics() != 0 {
        problems.push(format!("{} panics in reaper passes", acker.reaper_panics()));
    }
    if acker.grace_barrier_failures() != 0 {
        problems.push(format!(
            "{} grace-period barriers (membarrier) failed: retired slots were left waiting",
            acker.grace_barrier_failures()
        ));
    }
    for p in problems {
        summary.violations += 1;
        summary.violation_reports.push(format!("VIOLATION: {p}"));
    }
}

/// The idle phase: the reaper's wake-ups over one second, once nothing is left for it to
/// do.
fn idle_phase(rig: &Rig, quiet_since: u64, summary: &mut Summary) {
    let Rig { oracle, acker, .. } = rig;
    let timeout_ns = rig.timeout_ns;
    // --- idle: every deadline (stale wheel timers included) has passed, and the reaper's
    // linger after the last pending tree (four of its sleeps while trees are pending, 64
    // ticks each: 270 ms at the default 1 ms resolution) is over; count wake-ups.
    let quiet_until = quiet_since + timeout_ns + 2 * 1_000_000 + 50_000_000 + 300_000_000;
    while oracle.now() < quiet_until {
        thread::sleep(Duration::from_millis(10));
    }
    let before = acker.idle_wakeups();
    thread::sleep(Duration::from_secs(1));
    summary.idle_wakeups_per_s = acker.idle_wakeups() - before;
    summary.asymmetric_fences = acker.asymmetric_fences();
}
