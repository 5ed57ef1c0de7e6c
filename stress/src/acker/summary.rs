//! What the acker scenario reports: its [`Summary`] (printed, and written by `--json`),
//! filled from the oracle's tallies and the topology's counters, and its printing.

use serde::Serialize;

use super::oracle::Tally;
use super::topology::Topology;
use super::{burst, deadline, footprint, growth, Config, Memory, MAX_ATTEMPTS};
use crate::common::report::{self, Percentiles, Sample};

/// Outcome counts for one fate.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Row {
    pub(crate) acked: u64,
    pub(crate) failed: u64,
    pub(crate) timed_out: u64,
}

/// What the run did and found; printed, and written by `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) config: Option<Config>,
    pub(crate) traffic_seconds: f64,
    pub(crate) total_seconds: f64,
    pub(crate) trees_started: u64,
    pub(crate) trees_completed: u64,
    pub(crate) trees_per_s: f64,
    pub(crate) acks: u64,
    pub(crate) acks_per_s: f64,
    /// Frames of acks sent through `Acker::apply` (`--ack-frames`; 0 without).
    pub(crate) ack_frames: u64,
    pub(crate) tuples: u64,
    pub(crate) fails_sent: u64,
    pub(crate) acks_dropped: u64,
    pub(crate) acks_duplicated: u64,
    pub(crate) resets: u64,
    pub(crate) ghost_acks: u64,
    pub(crate) joins: u64,
    pub(crate) inits_held_back: u64,
    /// Outcomes by fate: clean (expected Acked), fail sent (expected Failed), ack dropped or
    /// duplicated (expected TimedOut).
    pub(crate) clean: Row,
    pub(crate) fail_sent: Row,
    pub(crate) ack_dropped_or_duplicated: Row,
    pub(crate) inits_refused: u64,
    /// Table migrations during the traffic phase: to grow, to shrink; and
    /// the tables' slots after the drain.
    pub(crate) migrations: (u64, u64),
    pub(crate) table_slots_after_drain: usize,
    pub(crate) replays_started: u64,
    pub(crate) messages_acked_first_try: u64,
    pub(crate) messages_acked_after_replay: u64,
    pub(crate) messages_given_up: u64,
    pub(crate) violations: u64,
    pub(crate) violation_reports: Vec<String>,
    /// How many violations of each kind the oracle found.
    pub(crate) violation_kinds: Vec<(String, u64)>,
    /// Completion.elapsed - timeout, for TimedOut trees without a reset.
    pub(crate) timeout_lateness: Percentiles,
    /// Largest (completion - oracle deadline), by the oracle's own readings, in µs.
    pub(crate) oracle_lateness_max_us: f64,
    /// Completion.elapsed of Acked trees.
    pub(crate) completion_latency: Percentiles,
    pub(crate) stats_acked: u64,
    pub(crate) stats_failed: u64,
    pub(crate) stats_timed_out: u64,
    pub(crate) stats_orphans_expired: u64,
    pub(crate) stats_rejected_full: u64,
    pub(crate) stats_callback_panics: u64,
    pub(crate) pending_after_drain: usize,
    pub(crate) drain_seconds: f64,
    pub(crate) peak_rss: Option<u64>,
    pub(crate) idle_wakeups_per_s: u64,
    /// Whether the acker's pins used asymmetric fences (`membarrier`).
    pub(crate) asymmetric_fences: bool,
    pub(crate) memory: Option<Memory>,
    /// The memory phase's build cost and churn figures (`None` when skipped or unreadable).
    pub(crate) footprint: Option<footprint::Footprint>,
    /// `None` with `--growth-roots 0`.
    pub(crate) growth: Option<growth::Growth>,
    /// One per path; empty with `--burst-roots 0` or RSS unreadable.
    pub(crate) bursts: Vec<burst::Burst>,
    /// `None` with `--deadline-roots 0`.
    pub(crate) shared_deadline: Option<deadline::SharedDeadline>,
    pub(crate) throughput: Vec<Sample>,
    #[serde(skip)]
    pub(crate) lateness_curve: Vec<(f64, f64)>,
    #[serde(skip)]
    pub(crate) latency_curve: Vec<(f64, f64)>,
}

pub(super) fn fill_from_tally(summary: &mut Summary, t: &Tally) {
    let row = |r: &[u64; 3]| Row {
        acked: r[0],
        failed: r[1],
        timed_out: r[2],
    };
    summary.clean = row(&t.counts[0]);
    summary.fail_sent = row(&t.counts[1]);
    summary.ack_dropped_or_duplicated = row(&t.counts[2]);
    summary.inits_refused = t.refused;
    summary.messages_acked_first_try = t.msgs_first_try;
    summary.messages_acked_after_replay = t.msgs_after_replay;
    summary.messages_given_up = t.msgs_given_up;
    summary.violations += t.violations;
    summary.violation_reports.extend(t.reports.iter().cloned());
    summary.violation_kinds = t.kinds.iter().map(|(k, n)| (k.clone(), *n)).collect();
    if let Some(h) = &t.lateness {
        summary.timeout_lateness = Percentiles::of(h);
        summary.lateness_curve = report::percentile_curve(h);
    }
    if let Some(h) = &t.latency {
        summary.completion_latency = Percentiles::of(h);
        summary.latency_curve = report::percentile_curve(h);
    }
    summary.oracle_lateness_max_us = t.oracle_lateness_max as f64 / 1e3;
}

pub(super) fn fill_from_counters(summary: &mut Summary, topo: &Topology) {
    summary.trees_started = topo.sum(|c| &c.trees);
    summary.tuples = topo.sum(|c| &c.tuples);
    summary.fails_sent = topo.sum(|c| &c.fails);
    summary.acks_dropped = topo.sum(|c| &c.dropped);
    summary.acks_duplicated = topo.sum(|c| &c.duplicated);
    summary.resets = topo.sum(|c| &c.resets);
    summary.ghost_acks = topo.sum(|c| &c.ghosts);
    summary.ack_frames = topo.sum(|c| &c.frames);
    summary.joins = topo.sum(|c| &c.joins);
    summary.inits_held_back = topo.sum(|c| &c.inits_held);
    summary.replays_started = topo.sum(|c| &c.replays_started);
}

/// Prints the summary (stdout).
pub(crate) fn print(s: &Summary) {
    let Some(cfg) = &s.config else { return };
    println!(
        "acker: {:.1} s of traffic, seed {}, {} spout + {} bolt threads, fanout {}, depth {}, timeout {} ms{}, {} trees in flight at most{}",
        s.traffic_seconds,
        cfg.seed,
        cfg.spouts,
        cfg.bolts,
        cfg.fanout,
        cfg.depth,
        cfg.timeout_ms,
        cfg.resolution_us
            .map_or(String::new(), |us| format!(", resolution {us} µs")),
        cfg.in_flight,
        if cfg.replay { ", replays on" } else { "" }
    );
    println!(
        "  trees        {} started, {} completed: {} trees/s",
        report::si(s.trees_started as f64),
        report::si(s.trees_completed as f64),
        report::si(s.trees_per_s)
    );
    println!(
        "  acks         {}: {} acks/s ({} tuples processed{})",
        report::si(s.acks as f64),
        report::si(s.acks_per_s),
        report::si(s.tuples as f64),
        if s.ack_frames > 0 {
            format!(
                "; sent in {} frames through apply, {:.1} acks a frame",
                report::si(s.ack_frames as f64),
                s.acks as f64 / s.ack_frames as f64
            )
        } else {
            String::new()
        }
    );
    println!(
        "  injected     {} fails, {} dropped acks, {} duplicated acks, {} resets, {} ghost acks, {} joined tuples, {} held-back inits",
        s.fails_sent,
        s.acks_dropped,
        s.acks_duplicated,
        s.resets,
        s.ghost_acks,
        s.joins,
        s.inits_held_back
    );
    println!("  outcomes     fate                   expected       Acked      Failed    TimedOut");
    let line = |name: &str, expected: &str, r: &Row| {
        println!(
            "               {name:<22} {expected:<9} {:>10} {:>11} {:>11}",
            r.acked, r.failed, r.timed_out
        );
    };
    line("clean", "Acked", &s.clean);
    line("fail sent", "Failed", &s.fail_sent);
    line(
        "ack dropped/duplicated",
        "TimedOut",
        &s.ack_dropped_or_duplicated,
    );
    let late_clean = s.clean.timed_out;
    let late_fail = s.fail_sent.timed_out;
    if late_clean + late_fail > 0 {
        println!(
            "               ({} clean and {} failed trees timed out because a message came after the deadline: legal, and checked)",
            late_clean, late_fail
        );
    }
    if cfg.replay {
        println!(
            "  replays      {} started; messages acked first try {}, after a replay {}, given up after {MAX_ATTEMPTS} attempts {}",
            s.replays_started,
            s.messages_acked_first_try,
            s.messages_acked_after_replay,
            s.messages_given_up
        );
    }
    println!("  violations   {}", s.violations);
    for (kind, n) in &s.violation_kinds {
        println!("               {n} x {kind}");
    }
    println!("  timeout lateness    {}", s.timeout_lateness.line());
    println!("  completion latency  {}", s.completion_latency.line());
    println!(
        "  acker stats  acked {}, failed {}, timed out {}, orphans expired {}, rejected full {}, callback panics {}; pending after drain {} ({:.1} s drain)",
        s.stats_acked,
        s.stats_failed,
        s.stats_timed_out,
        s.stats_orphans_expired,
        s.stats_rejected_full,
        s.stats_callback_panics,
        s.pending_after_drain,
        s.drain_seconds
    );
    println!(
        "  tables       {} migrations to grow, {} to shrink; {} slots after the drain",
        s.migrations.0, s.migrations.1, s.table_slots_after_drain
    );
    println!(
        "  peak RSS     {}",
        s.peak_rss.map_or("unavailable".into(), report::bytes)
    );
    println!(
        "  idle         {} reaper wake-ups in 1 s with nothing due",
        s.idle_wakeups_per_s
    );
    println!(
        "  grace        {}",
        if s.asymmetric_fences {
            "asymmetric fences: pins store a word, the reaper calls membarrier"
        } else {
            "symmetric fences: a SeqCst fence per pin (membarrier unavailable)"
        }
    );
    match &s.memory {
        Some(m) => println!(
            "  memory       {:.1} B per pending root in manual mode, {} with a reaper thread ({} pending of max_pending {}: +{} RSS, of which {} right after build); second wave {:+.1} %; after drain +{}, after drop +{}",
            m.bytes_per_pending_root,
            m.bytes_per_pending_root_threaded
                .map_or("unmeasured".to_string(), |b| format!("{b:.1} B")),
            report::si(m.pending as f64),
            report::si(m.max_pending as f64),
            report::bytes(m.rss_full.saturating_sub(m.rss_before)),
            report::bytes(m.rss_built.saturating_sub(m.rss_before)),
            m.second_wave_growth * 100.0,
            report::bytes(m.rss_drained.saturating_sub(m.rss_before)),
            report::bytes(m.rss_dropped.saturating_sub(m.rss_before)),
        ),
        None if cfg.memory_roots > 0 => println!("  memory       unavailable (no /proc/self/status)"),
        None => {}
    }
    if let Some(m) = &s.memory {
        let [tables, successors, retired, wheel] = m.parts_per_root;
        println!(
            "  memory parts manual mode, per pending root: tables {tables:.1} B, successors {successors:.1} B, retired {retired:.1} B, reaper wheel {wheel:.1} B; the rest ({:.1} B) is heap outside the tables and the wheel (the threads' records, the passes' other scratch), payloads' allocator slack and heap overhead",
            m.bytes_per_pending_root - (tables + successors + retired + wheel)
        );
    }
    if let Some(f) = &s.footprint {
        print_footprint(f);
    }
    if let Some(g) = &s.growth {
        print_growth(g);
    }
    for b in &s.bursts {
        print_burst(b);
    }
    if let Some(d) = &s.shared_deadline {
        print_shared_deadline(d);
    }
    for r in &s.violation_reports {
        println!("{r}");
    }
}

/// A timed call's tail: p50, p99, p99.9, p99.99 (`p9999_us`) and max.
fn tail(p: &Percentiles, p9999_us: f64) -> String {
    let us = report::duration_us;
    format!(
        "p50 {}, p99 {}, p99.9 {}, p99.99 {}, max {}",
        us(p.p50_us),
        us(p.p99_us),
        us(p.p999_us),
        us(p9999_us),
        us(p.max_us)
    )
}

/// The shared-deadline line (targets beside, not judged).
fn print_shared_deadline(d: &deadline::SharedDeadline) {
    let us = report::duration_us;
    println!(
        "  deadline     one `track` call while {} trees time out at once on a saturated runtime: p50 {}, p99 {}, p99.9 {}, p99.99 {} (target ≤ 100 µs), max {} (target ≤ 1 ms), {} calls; the peer's start in the same loops (DashMap + oneshot + tokio::time::timeout) {}; {} passes run by callers (longest {}); {} of the trees timed out, the last {:.1} ms after the deadline (tokio::time::timeout on the same number under the same load: {} timed out, the last {:.1} ms after theirs); fill {:.2} s",
        report::si(d.roots as f64),
        us(d.track.p50_us),
        us(d.track.p99_us),
        us(d.track.p999_us),
        us(d.track_p9999_us),
        us(d.track.max_us),
        d.track.count,
        tail(&d.peer, d.peer_p9999_us),
        d.caller_passes,
        us(d.caller_pass_longest_us),
        d.timed_out,
        d.last_timeout_ms,
        d.peer_timed_out,
        d.peer_last_timeout_ms,
        d.fill_seconds,
    );
    println!(
        "               each worker's first `track` call (its thread's registration with the acker, before the deadline), timed apart: {} calls, the longest {}",
        d.first.calls,
        us(d.first.longest_us)
    );
    let slow = &d.slow;
    if slow.calls > 0 {
        println!(
            "               its {} calls of 100 µs or more: {} off their core for over half their time, {} faulting, {} running a caller's pass, {} on their core with no fault, switch or pass; the slowest {} ({} on its core, {} involuntary switches, {} faults, {})",
            slow.calls,
            slow.preempted,
            slow.faulted,
            slow.in_pass,
            slow.on_core,
            us(slow.slowest_us),
            us(slow.slowest_cpu_us),
            slow.slowest_switches,
            slow.slowest_faults,
            if slow.slowest_in_pass { "a caller's pass" } else { "no caller's pass" },
        );
    }
    let bare = &d.bare_slow;
    println!(
        "               a bare read in the same loops ({} dependent loads of cold lines, no library code): {}; {} of 100 µs or more, {} of them on their core with no fault or switch (nothing on the thread to explain them)",
        deadline::READS,
        tail(&d.bare, d.bare_p9999_us),
        bare.calls,
        bare.on_core,
    );
}

/// The build and churn lines, each figure with its target beside it (not judged).
fn print_footprint(f: &footprint::Footprint) {
    let b = &f.build;
    let time = |s: f64| report::duration_us(s * 1e6);
    println!(
        "  build        +{} RSS, {} per default acker (median of {} fresh processes; target ≤ {}, ≤ {}); {} at once +{}, {}",
        report::bytes(b.rss_growth),
        time(b.seconds),
        b.rss_growth_samples.len(),
        report::bytes(b.target_rss),
        time(b.target_seconds),
        b.ackers_at_once,
        report::bytes(b.rss_growth_at_once),
        time(b.seconds_at_once),
    );
    match &f.churn {
        Some(c) => println!(
            "  churn        +{} peak RSS (target ≤ {}): {} trees, {} in flight, max_pending {} (+{} right after build, +{} at the end); {} trees/s, {} inits refused Full",
            report::bytes(c.peak_rss_growth),
            report::bytes(c.target_rss),
            report::si(c.trees as f64),
            c.in_flight,
            report::si(c.max_pending as f64),
            report::bytes(c.built_rss_growth),
            report::bytes(c.end_rss_growth),
            report::si(c.trees_per_s),
            c.refused,
        ),
        None => println!("  churn        skipped (--churn-trees 0)"),
    }
}

/// A burst line: memory per tree in flight, and how soon it came back.
fn print_burst(b: &burst::Burst) {
    let setup = if b.path == "dashmap" {
        "DashMap + oneshot, no timer".to_string()
    } else {
        format!(
            "max_pending {}, real clock and reaper, timeout 600 s",
            report::si(b.max_pending as f64)
        )
    };
    println!(
        "  burst {:<6} {:.1} B per tree in flight ({} trees, {setup}; filled in {}); after completing them: {} above the baseline at 2 s, {}",
        b.path,
        b.bytes_per_tree,
        report::si(b.roots as f64),
        report::duration_us(b.fill_seconds * 1e6),
        report::bytes(b.held_after_2s),
        b.back_after.map_or(
            format!("not back within {} in 3 s", report::bytes(burst::BACK_WITHIN)),
            |s| format!("back within {} after {:.2} s", report::bytes(burst::BACK_WITHIN), s)
        ),
    );
    if b.path == "dashmap" {
        return;
    }
    println!(
        "               the acker held {:.1} B per tree of tables and {:.1} B of its reaper's wheel at the fill, {} and {} after",
        b.tables_full as f64 / b.roots as f64,
        b.wheel_full as f64 / b.roots as f64,
        report::bytes(b.tables_after),
        report::bytes(b.wheel_after),
    );
    if let Some(worst) = b.curve.iter().map(|&(_, per, ..)| per).reduce(f64::max) {
        let points: Vec<String> = b
            .curve
            .iter()
            .map(|&(n, per, tables, wheel)| {
                format!(
                    "{} {per:.1} ({tables:.1} + {wheel:.1})",
                    report::si(n as f64)
                )
            })
            .collect();
        println!(
            "               B per tree as the fill grew (tables + wheel): {} (most {worst:.1})",
            points.join(", ")
        );
    }
}

/// The growth lines: each row's operations, with the migrations started during it.
fn print_growth(g: &growth::Growth) {
    println!(
        "  growth       op latency, one clock read included: a filler inits {} roots while a neighbour runs trees ({} in flight, init + 2 acks); tables {} slots after the fill",
        report::si(g.roots as f64),
        growth::IN_FLIGHT,
        report::si(g.table_slots as f64),
    );
    for (name, row) in [("growing", &g.growing), ("grown", &g.grown)] {
        println!(
            "    {name:<8} {} migrations to grow, {} to shrink, fill {}",
            row.migrations.0,
            row.migrations.1,
            report::duration_us(row.seconds * 1e6),
        );
        println!("      filler's inits  {}", row.filler.fine_line());
        println!("      neighbour's ops {}", row.neighbour.fine_line());
    }
}
