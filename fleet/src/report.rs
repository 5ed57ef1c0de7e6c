//! What a run prints: one report per tracker's phase, then the trackers compared.

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

    fn tracker_ns_per_message(&self) -> f64 {
        let n: u64 = self
            .nodes
            .iter()
            .map(|n| n.acks_applied + n.inits_applied + n.fails_applied)
            .sum();
        self.nodes.iter().map(|n| n.tracker_ns).sum::<u64>() as f64 / n.max(1) as f64
    }

    fn items_per_s(&self) -> f64 {
        (self.published as f64 - self.missing.len() as f64) / self.seconds
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
            "== tracker {}: {:.1} s of load and drain ({:.1} s drain)",
            self.tracker, self.seconds, self.drain_seconds
        );
        println!(
            "  items      {} published, {} completed: {:.0} items/s",
            self.published,
            self.published - self.missing.len() as u64,
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
        let tracker = sum(|n| n.tracker_ns) as f64 / 1e9;
        let per_message = self.tracker_ns_per_message();
        let servers = self
            .server_cpu_ms
            .map_or("not measured (servers not ours)".to_string(), |ms| {
                format!("{:.1} s", ms as f64 / 1000.0)
            });
        println!(
            "  cpu        NATS servers {servers}, nodes {node_cpu:.1} s (of which the owners' tracker {tracker:.2} s: {:.1} ns an ack or init), publisher {:.1} s; {:.1} s of wall time",
            per_message,
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

/// The Acker's runs against the hand-written tracker's, medians over the runs of each (pass
/// `--trackers acker,dashmap,acker,dashmap` to alternate them on a noisy machine).
pub(crate) fn compare(reports: &[Report]) {
    let median = |tracker: TrackerKind, f: &dyn Fn(&Report) -> f64| -> Option<f64> {
        let mut v: Vec<f64> = reports
            .iter()
            .filter(|r| r.tracker == tracker)
            .map(f)
            .collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    type Figure<'a> = (&'a str, &'a dyn Fn(&Report) -> f64);
    let figures: [Figure; 4] = [
        ("items/s", &|r| r.items_per_s()),
        ("acks/s", &|r| r.acks_per_s()),
        ("tracker ns an ack", &|r| r.tracker_ns_per_message()),
        ("p50 latency ms", &|r| r.latency_ms(0.5)),
    ];
    for (name, f) in figures {
        if let (Some(a), Some(d)) = (
            median(TrackerKind::Acker, f),
            median(TrackerKind::Dashmap, f),
        ) {
            println!(
                "acker against dashmap, {name}: {a:.1} against {d:.1} ({:.2}x)",
                a / d.max(1e-9)
            );
        }
    }
}
