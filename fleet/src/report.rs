//! What a run prints: one report per phase (a tracker's turn in a round), then the trackers
//! compared over the rounds.
//!
//! **The comparison.** On a small machine the NATS servers take most of the CPU and each
//! tracker a few percent, so a phase's throughput moves with the servers' scheduling more
//! than with the tracker, and one phase of each says little. The run alternates the
//! trackers (A B A B ..., `--rounds`) so that a drift of the machine hits both, and the
//! summary gives each figure as the median of a tracker's rounds with their range
//! ([`Spread`]). It prints first what the trackers themselves cost: the time per message
//! (an ack, fail or init) spent in the owners' calls into the tracker plus its own thread's
//! CPU (the Acker's reaper, the sweeper of the hand-written one), and that as a share of the
//! run's CPU. Then the throughput ratio, judged against what the trackers' cost can explain:
//! with the run CPU-bound, a tracker cheaper by `t` CPU seconds an item makes items at most
//! `(c + t) / c` as fast, `c` being all the CPU an item takes ([`summary`]). A ratio within
//! the rounds' spread, or far beyond that bound, is the pipeline's noise and says so.

use crate::node::NodeStats;
use crate::TrackerKind;
use std::collections::HashMap;

/// A kill and the completion rate around it (from the run's 100 ms timeline).
pub(crate) struct Fault {
    pub(crate) what: String,
    pub(crate) at: f64,
    /// Items completed per second over the 2 s before the kill.
    pub(crate) before: f64,
    /// The lowest rate of a 1 s window starting within the 4 s after it.
    pub(crate) lowest: f64,
    /// Seconds until a 0.5 s window is back to 80 % of `before`.
    pub(crate) recovered: Option<f64>,
}

pub(crate) struct Report {
    pub(crate) tracker: TrackerKind,
    /// This phase's round (from 1) and the run's rounds.
    pub(crate) round: (usize, usize),
    pub(crate) seconds: f64,
    pub(crate) drain_seconds: f64,
    pub(crate) published: u64,
    pub(crate) records: usize,
    pub(crate) missing: Vec<u64>,
    pub(crate) duplicates: HashMap<&'static str, u64>,
    pub(crate) latencies_us: Vec<u64>,
    pub(crate) nodes: Vec<NodeStats>,
    pub(crate) max_rss: u64,
    /// Each node's RSS when the run stopped it.
    pub(crate) final_rss: Vec<Option<u64>>,
    pub(crate) kills: Vec<Fault>,
    /// Malformed and misrouted inputs injected, which the nodes must have counted.
    pub(crate) injected: (u64, u64),
    /// Items whose publish JetStream never confirmed (they may be stored, unchecked).
    pub(crate) unconfirmed: u64,
    /// CPU time of the NATS servers over the load and drain (when the run started them).
    pub(crate) server_cpu_ms: Option<u64>,
    /// CPU time of this process (the publisher and the audit's bookkeeping).
    pub(crate) run_cpu_ms: u64,
}

impl Report {
    /// The malformed and misrouted inputs the nodes counted, when they are not the ones
    /// injected.
    pub(crate) fn wire_mismatch(&self) -> Option<String> {
        let counted = (
            self.nodes.iter().map(|n| n.malformed).sum::<u64>(),
            self.nodes.iter().map(|n| n.misrouted).sum::<u64>(),
        );
        // A malformed work item is terminated with a plain ack; if that is lost, it comes
        // back and is counted once more, so more is fine. Fewer is not.
        let ok = counted.0 >= self.injected.0 && counted.1 == self.injected.1;
        (!ok).then(|| {
            format!(
                "the nodes counted {} malformed and {} misrouted inputs; {} and {} were injected",
                counted.0, counted.1, self.injected.0, self.injected.1
            )
        })
    }

    /// "acker, round 2 of 3": which phase this is.
    pub(crate) fn phase(&self) -> String {
        format!(
            "{}, round {} of {}",
            self.tracker, self.round.0, self.round.1
        )
    }

    /// Inits, acks and fails the owners applied.
    fn messages(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.acks_applied + n.inits_applied + n.fails_applied)
            .sum()
    }

    /// The trackers' time: in the owners' calls, and on their own threads; seconds.
    fn tracker_seconds(&self) -> (f64, f64) {
        let calls: u64 = self.nodes.iter().map(|n| n.tracker_ns).sum();
        let thread: u64 = self.nodes.iter().map(|n| n.tracker_thread_ns).sum();
        (calls as f64 / 1e9, thread as f64 / 1e9)
    }

    /// The tracker's cost of a message (an init, ack or fail): its calls and its thread.
    fn tracker_ns_per_message(&self) -> f64 {
        let (calls, thread) = self.tracker_seconds();
        (calls + thread) * 1e9 / self.messages().max(1) as f64
    }

    /// CPU seconds of the whole run: the servers (when the run started them), the nodes and
    /// the publisher.
    fn cpu_seconds(&self) -> f64 {
        let nodes: u64 = self.nodes.iter().map(|n| n.cpu_ms).sum();
        (self.server_cpu_ms.unwrap_or(0) + nodes + self.run_cpu_ms) as f64 / 1000.0
    }

    /// The trackers' share of the run's CPU.
    fn tracker_share(&self) -> f64 {
        let (calls, thread) = self.tracker_seconds();
        (calls + thread) / self.cpu_seconds().max(1e-9)
    }

    /// The NATS servers' share of the run's CPU, when the run started them.
    fn server_share(&self) -> Option<f64> {
        Some(self.server_cpu_ms? as f64 / 1000.0 / self.cpu_seconds().max(1e-9))
    }

    fn completed(&self) -> u64 {
        self.published - self.missing.len() as u64
    }

    fn items_per_s(&self) -> f64 {
        self.completed() as f64 / self.seconds
    }

    fn acks_per_s(&self) -> f64 {
        self.nodes.iter().map(|n| n.acks_applied).sum::<u64>() as f64 / self.seconds
    }

    fn latency_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        self.latencies_us[i] as f64 / 1000.0
    }

    pub(crate) fn print(&self) {
        let sum = |f: fn(&NodeStats) -> u64| self.nodes.iter().map(f).sum::<u64>();
        println!(
            "== round {} of {}, tracker {}: {:.1} s of load and drain ({:.1} s drain)",
            self.round.0, self.round.1, self.tracker, self.seconds, self.drain_seconds
        );
        println!(
            "  items      {} published, {} completed: {:.0} items/s",
            self.published,
            self.completed(),
            self.items_per_s()
        );
        println!(
            "  acks       {} applied by the owners in {} frames: {:.0} acks/s ({} inits, {} fails)",
            sum(|n| n.acks_applied),
            sum(|n| n.part_frames),
            self.acks_per_s(),
            sum(|n| n.inits_applied),
            sum(|n| n.fails_applied),
        );
        println!(
            "  latency    pull to completion: p50 {:.1} ms  p99 {:.1} ms  p99.9 {:.1} ms  max {:.1} ms (n = {})",
            self.latency_ms(0.5),
            self.latency_ms(0.99),
            self.latency_ms(0.999),
            self.latency_ms(1.0),
            self.latencies_us.len()
        );
        println!(
            "  replays    {} failed, {} timed out, {} owner silent (asked again by their origin); {} completions for roots no longer waited for",
            sum(|n| n.failed),
            sum(|n| n.timed_out),
            sum(|n| n.silent),
            sum(|n| n.unknown_completions),
        );
        println!(
            "  wire       {} malformed inputs and {} misrouted records counted and dropped ({} and {} injected), {} refused inits, {} NATS disconnections",
            sum(|n| n.malformed),
            sum(|n| n.misrouted),
            self.injected.0,
            self.injected.1,
            sum(|n| n.refused_inits),
            sum(|n| n.nats_disconnects),
        );
        for f in &self.kills {
            let back = match f.recovered {
                Some(r) => format!("back to 80 % of it within {r:.1} s"),
                None => "not back to 80 % of it before the load stopped".into(),
            };
            println!(
                "  fault      {} at {:.1} s: {:.0} items/s completed in the 2 s before, the slowest second of the 4 after {:.0} ({:.0} %), {back}",
                f.what,
                f.at,
                f.before,
                f.lowest,
                100.0 * f.lowest / f.before.max(1e-9),
            );
        }
        let node_cpu = sum(|n| n.cpu_ms) as f64 / 1000.0;
        let (calls, thread) = self.tracker_seconds();
        let per_message = self.tracker_ns_per_message();
        let servers = self
            .server_cpu_ms
            .map_or("not measured (servers not ours)".to_string(), |ms| {
                format!("{:.1} s", ms as f64 / 1000.0)
            });
        println!(
            "  cpu        NATS servers {servers}, nodes {node_cpu:.1} s (of which the tracker {:.2} s, {:.1} % of the run's CPU: {calls:.2} s in the owners' calls and {thread:.2} s on its {} thread; {per_message:.1} ns a message), publisher {:.1} s; {:.1} s of wall time",
            calls + thread,
            100.0 * self.tracker_share(),
            match self.tracker {
                TrackerKind::Acker => "reaper",
                TrackerKind::Dashmap => "sweeper",
            },
            self.run_cpu_ms as f64 / 1000.0,
            self.seconds,
        );
        let each: Vec<String> = self
            .final_rss
            .iter()
            .map(|r| r.map_or("?".into(), |b| format!("{:.1}", b as f64 / 1048576.0)))
            .collect();
        println!(
            "  memory     node RSS at the end {} MiB; the largest seen {:.1} MiB",
            each.join(" | "),
            self.max_rss as f64 / 1048576.0
        );
        let mut causes: Vec<_> = self.duplicates.iter().collect();
        causes.sort();
        let total: u64 = self.duplicates.values().sum();
        println!(
            "  audit      {} records; {} items missing; {} items done more than once",
            self.records,
            self.missing.len(),
            total
        );
        for (cause, n) in causes {
            println!("             {n} done again: {cause}");
        }
        if !self.missing.is_empty() {
            let shown: Vec<_> = self.missing.iter().take(20).collect();
            println!("  MISSING    {shown:?}");
        }
    }
}

/// The median of a tracker's rounds' values, their range, and each round's value in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) values: Vec<f64>,
}

impl Spread {
    /// `None` for no values. The median of an even count is the mean of the middle two.
    pub(crate) fn of(values: Vec<f64>) -> Option<Spread> {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            values,
        })
    }

    fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }

    /// `median (min-max)` with `decimals`, or the one value of a single round.
    fn show(&self, decimals: usize) -> String {
        if self.values.len() == 1 {
            return format!("{:.decimals$}", self.median);
        }
        format!(
            "{:.decimals$} ({:.decimals$}-{:.decimals$})",
            self.median, self.min, self.max
        )
    }

    /// Each round's value, in order.
    fn rounds(&self, decimals: usize) -> String {
        let each: Vec<String> = self
            .values
            .iter()
            .map(|v| format!("{v:.decimals$}"))
            .collect();
        each.join(" ")
    }
}

/// The summary's lines: per tracker, the median and range over its rounds of what it costs
/// a message, of its share of the CPU, then of the throughput and latency, each with the
/// ratio of the Acker to the hand-written tracker; the throughput ratio judged against what
/// the trackers' cost explains (the module's docs).
pub(crate) fn summary(reports: &[Report]) -> Vec<String> {
    let spread = |tracker: TrackerKind, f: &dyn Fn(&Report) -> f64| {
        Spread::of(
            reports
                .iter()
                .filter(|r| r.tracker == tracker)
                .map(f)
                .collect(),
        )
    };
    let trackers = [TrackerKind::Acker, TrackerKind::Dashmap];
    let order: Vec<String> = reports.iter().map(|r| r.tracker.to_string()).collect();
    let single = trackers
        .iter()
        .all(|&t| reports.iter().filter(|r| r.tracker == t).count() <= 1);
    let mut lines = vec![format!(
        "== summary of {} phases ({}): {}",
        reports.len(),
        order.join(" "),
        if single {
            "one phase of each tracker, so no spread to tell noise by (--rounds 3)"
        } else {
            "each figure the median (min-max) of a tracker's rounds"
        }
    )];
    // One figure: per tracker its spread, and the Acker's median over the other's.
    let figure = |lines: &mut Vec<String>,
                  name: &str,
                  decimals: usize,
                  each: bool,
                  f: &dyn Fn(&Report) -> f64|
     -> Option<(Spread, Spread)> {
        let spreads: Vec<(TrackerKind, Spread)> = trackers
            .iter()
            .filter_map(|&t| Some((t, spread(t, f)?)))
            .collect();
        if spreads.is_empty() {
            return None;
        }
        let mut line = format!("  {name:<18}");
        for (t, s) in &spreads {
            line += &format!("  {t} {}", s.show(decimals));
        }
        let pair = match spreads.as_slice() {
            [(_, a), (_, d)] => {
                line += &format!(": {:.2}x", a.median / d.median.max(1e-9));
                Some((a.clone(), d.clone()))
            }
            _ => None,
        };
        lines.push(line);
        if each && spreads.iter().any(|(_, s)| s.values.len() > 1) {
            let rounds: Vec<String> = spreads
                .iter()
                .map(|(t, s)| format!("{t} {}", s.rounds(decimals)))
                .collect();
            lines.push(format!("  {:<18}  rounds: {}", "", rounds.join(" | ")));
        }
        pair
    };
    figure(
        &mut lines,
        "tracker ns/message",
        1,
        true,
        &Report::tracker_ns_per_message,
    );
    lines.push(format!(
        "  {:<18}  (a message is an ack, fail or init; the cost is the owner thread's CPU time in the tracker's calls plus the tracker's own thread's, the reaper or the sweeper)",
        ""
    ));
    figure(&mut lines, "tracker % of CPU", 2, false, &|r| {
        100.0 * r.tracker_share()
    });
    let items = figure(&mut lines, "items/s", 0, true, &Report::items_per_s);
    if let Some((a, d)) = items {
        lines.push(format!("  {:<18}  {}", "", judge(reports, &a, &d)));
    }
    figure(&mut lines, "acks/s", 0, false, &Report::acks_per_s);
    figure(&mut lines, "p50 latency ms", 1, false, &|r| {
        r.latency_ms(0.5)
    });
    lines
}

/// What the throughput ratio of `acker` (items/s) to `dashmap` says: the trackers' cost
/// explains at most `(c + t_dashmap) / (c + t_acker)` when the run is CPU-bound, `c` being
/// the rest of the CPU an item takes and `t` a tracker's CPU an item (medians).
fn judge(reports: &[Report], acker: &Spread, dashmap: &Spread) -> String {
    let median = |v: Vec<f64>| Spread::of(v).map_or(0.0, |s| s.median);
    let per_item = |tracker: Option<TrackerKind>, f: &dyn Fn(&Report) -> f64| {
        median(
            reports
                .iter()
                .filter(|r| tracker.is_none_or(|t| r.tracker == t))
                .map(|r| f(r) / r.completed().max(1) as f64)
                .collect(),
        )
    };
    let tracker_cpu = |r: &Report| {
        let (calls, thread) = r.tracker_seconds();
        calls + thread
    };
    let rest = per_item(None, &|r| r.cpu_seconds() - tracker_cpu(r));
    let t_acker = per_item(Some(TrackerKind::Acker), &tracker_cpu);
    let t_dashmap = per_item(Some(TrackerKind::Dashmap), &tracker_cpu);
    let explained = (rest + t_dashmap) / (rest + t_acker).max(1e-18);
    let measured = acker.median / dashmap.median.max(1e-9);
    let servers = median(reports.iter().filter_map(Report::server_share).collect());
    let context = format!(
        "the trackers' cost alone explains {explained:.3}x{}",
        if reports.iter().any(|r| r.server_cpu_ms.is_some()) {
            format!(
                "; the NATS servers use {:.0} % of the run's CPU",
                100.0 * servers
            )
        } else {
            String::new()
        }
    );
    let verdict = if acker.overlaps(dashmap) {
        "within the rounds' spread: mostly the pipeline's noise, not the trackers"
    } else if measured.ln().abs() > 2.0 * explained.ln().abs() + 0.02 {
        "more than the trackers' cost explains: mostly the pipeline's noise, not the trackers"
    } else {
        "about what the trackers' cost explains"
    };
    format!("{measured:.2}x: {verdict} ({context})")
}

/// Prints [`summary`].
pub(crate) fn print_summary(reports: &[Report]) {
    for line in summary(reports) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_range_of_the_rounds_in_their_order() {
        let odd = Spread::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        assert_eq!(odd.values, vec![3.0, 1.0, 2.0]);
        assert_eq!(odd.show(1), "2.0 (1.0-3.0)");
        assert_eq!(odd.rounds(0), "3 1 2");
        let even = Spread::of(vec![10.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert_eq!(Spread::of(vec![4.0]).unwrap().show(1), "4.0");
        assert_eq!(Spread::of(vec![]), None);
    }

    /// A phase whose owners applied 1M messages in `tracker_ms` of tracker time, and
    /// completed `items` in 10 s, on 20 s of CPU (15 s of it the servers').
    fn phase(tracker: TrackerKind, round: usize, tracker_ms: u64, items: u64) -> Report {
        Report {
            tracker,
            round: (round, 3),
            seconds: 10.0,
            drain_seconds: 1.0,
            published: items,
            records: items as usize,
            missing: vec![],
            duplicates: HashMap::new(),
            latencies_us: vec![1000, 2000, 3000],
            nodes: vec![NodeStats {
                acks_applied: 990_000,
                inits_applied: 10_000,
                tracker_ns: tracker_ms * 900_000,
                tracker_thread_ns: tracker_ms * 100_000,
                cpu_ms: 4_000,
                ..NodeStats::default()
            }],
            max_rss: 0,
            final_rss: vec![],
            kills: vec![],
            injected: (0, 0),
            unconfirmed: 0,
            server_cpu_ms: Some(15_000),
            run_cpu_ms: 1_000,
        }
    }

    fn alternating(acker: [(u64, u64); 3], dashmap: [(u64, u64); 3]) -> Vec<Report> {
        (0..3)
            .flat_map(|i| {
                [
                    phase(TrackerKind::Acker, i + 1, acker[i].0, acker[i].1),
                    phase(TrackerKind::Dashmap, i + 1, dashmap[i].0, dashmap[i].1),
                ]
            })
            .collect()
    }

    fn line<'a>(lines: &'a [String], start: &str) -> (usize, &'a str) {
        lines
            .iter()
            .enumerate()
            .find(|(_, l)| l.trim_start().starts_with(start))
            .map(|(i, l)| (i, l.as_str()))
            .unwrap_or_else(|| panic!("no line {start:?} in {lines:#?}"))
    }

    #[test]
    fn the_summary_gives_the_trackers_cost_first_then_throughput_called_noise() {
        // Acker 40-50 ms of tracker time for 1M messages, dashmap 60-70 ms; items/s that
        // overlap: the throughput ratio is noise.
        let reports = alternating(
            [(40, 120_000), (45, 110_000), (50, 125_000)],
            [(60, 118_000), (70, 121_000), (65, 112_000)],
        );
        let lines = summary(&reports);
        let (cost_at, cost) = line(&lines, "tracker ns/message");
        assert!(
            cost.contains("acker 45.0 (40.0-50.0)") && cost.contains("dashmap 65.0 (60.0-70.0)"),
            "{cost}"
        );
        assert!(cost.ends_with(": 0.69x"), "{cost}");
        let (_, rounds) = line(&lines, "rounds: acker 40.0 45.0 50.0");
        assert!(rounds.contains("dashmap 60.0 70.0 65.0"), "{rounds}");
        let (items_at, items) = line(&lines, "items/s");
        assert!(cost_at < items_at, "{lines:#?}");
        assert!(
            items.contains("acker 12000 (11000-12500)") && items.contains("dashmap 11800"),
            "{items}"
        );
        let verdict = &lines[items_at + 2];
        assert!(
            verdict.contains("1.02x: within the rounds' spread: mostly the pipeline's noise"),
            "{verdict}"
        );
        // 20 s of CPU for each of 11000-12500 items, of which 0.04-0.07 s the tracker's:
        // 20.07 / 20.045 at most.
        assert!(
            verdict.contains("the trackers' cost alone explains 1.001x"),
            "{verdict}"
        );
        assert!(
            verdict.contains("the NATS servers use 75 % of the run's CPU"),
            "{verdict}"
        );
    }

    #[test]
    fn a_gap_beyond_what_the_trackers_cost_explains_is_called_noise_too() {
        // Ranges apart, 10 % faster, yet the trackers' cost explains 0.1 %.
        let reports = alternating(
            [(40, 130_000), (45, 131_000), (50, 132_000)],
            [(60, 118_000), (70, 119_000), (65, 120_000)],
        );
        let lines = summary(&reports);
        let (at, _) = line(&lines, "items/s");
        assert!(
            lines[at + 2].contains("1.10x: more than the trackers' cost explains"),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_gap_the_trackers_cost_explains_is_not_called_noise() {
        // A tracker that takes a quarter of the CPU: 5 s of 20 s per phase against 1 s.
        let reports = alternating(
            [(1_000, 125_000), (1_000, 126_000), (1_000, 124_000)],
            [(5_000, 100_000), (5_000, 101_000), (5_000, 99_000)],
        );
        let lines = summary(&reports);
        let (at, _) = line(&lines, "items/s");
        assert!(
            lines[at + 2].contains("1.25x: about what the trackers' cost explains"),
            "{lines:#?}"
        );
    }
}
