//! The checker thread: judges every record the oracle sends ([`verify`]), keeps the
//! tallies and histograms, prints the first violations of each kind with their history,
//! and asks the spouts for replays.

use std::collections::BTreeMap;

use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;

use super::*;
use crate::common::report;

/// Outcome counts by fate: `counts[fate][outcome]`, outcome 0 = Acked, 1 = Failed,
/// 2 = TimedOut.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) counts: [[u64; 3]; 3],
    pub(crate) judged: u64,
    pub(crate) refused: u64,
    pub(crate) violations: u64,
    /// The first few violations of each kind, each with its history.
    pub(crate) reports: Vec<String>,
    /// Violations by kind (the title without its numbers).
    pub(crate) kinds: BTreeMap<String, u64>,
    /// Messages (spout tuples, across replays) acked on the first attempt / after a replay /
    /// given up after the last attempt.
    pub(crate) msgs_first_try: u64,
    pub(crate) msgs_after_replay: u64,
    pub(crate) msgs_given_up: u64,
    pub(crate) replays_requested: u64,
    /// Timeout lateness (Completion.elapsed - timeout) of trees without a reset, ns.
    pub(crate) lateness: Option<Histogram<u64>>,
    /// Completion.elapsed of Acked trees, ns.
    pub(crate) latency: Option<Histogram<u64>>,
    /// Largest lateness by the oracle's own clock readings (completion - oracle deadline).
    pub(crate) oracle_lateness_max: u64,
}

/// Replays go back to the spout that owns the message.
pub(crate) type ReplaySender = Sender<(u64, u8)>;

/// At most this many violations are printed in full, and this many of each kind.
const PRINTED: usize = 20;
const PRINTED_PER_KIND: u64 = 3;

/// Judges every record on one thread, until `Report::End`.
pub(crate) fn check(
    reports: Receiver<Report>,
    timeout: u64,
    replays: Option<(Vec<ReplaySender>, u8)>,
) -> Tally {
    let mut tally = Tally {
        lateness: Some(report::histogram()),
        latency: Some(report::histogram()),
        ..Tally::default()
    };
    let violation = |tally: &mut Tally, title: String, body: String| {
        tally.violations += 1;
        // Print a few of each kind (the title without its numbers), not just the first 20
        // of the most frequent one.
        let kind = title
            .split_whitespace()
            .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
            .collect::<Vec<_>>()
            .join(" ")
            .trim_start_matches("root ")
            .to_string();
        let seen = tally.kinds.entry(kind).or_insert(0);
        *seen += 1;
        if *seen <= PRINTED_PER_KIND && tally.reports.len() < PRINTED {
            let text = format!("VIOLATION: {title}\n{body}");
            if tally.reports.is_empty() {
                eprintln!("\n{text}");
            }
            tally.reports.push(text);
        }
    };
    for report in reports {
        match report {
            Report::End => break,
            Report::Stray {
                root,
                payload,
                outcome,
            } => violation(
                &mut tally,
                format!("completion {outcome:?} for root {root:#018x} (payload {payload}), which is not in flight: never initialized, or completed before"),
                String::new(),
            ),
            Report::Extra(r, outcome) => violation(
                &mut tally,
                format!("a second completion ({outcome:?}) for root {:#018x}", r.root),
                history(&r, timeout),
            ),
            Report::Stuck(r) => {
                let title = if r.completions == 0 && r.flags & REFUSED == 0 {
                    format!("no completion for root {:#018x} by the end of the drain", r.root)
                } else {
                    format!(
                        "root {:#018x} still has tuples outstanding after the drain (harness bug)",
                        r.root
                    )
                };
                violation(&mut tally, title, history(&r, timeout));
            }
            Report::Final(r) => {
                tally.judged += 1;
                let problems = verify(&r, timeout);
                if !problems.is_empty() {
                    violation(
                        &mut tally,
                        format!("root {:#018x}: {}", r.root, problems.join("; ")),
                        history(&r, timeout),
                    );
                }
                if r.flags & REFUSED != 0 {
                    tally.refused += 1;
                    continue;
                }
                let fate = Fate::of(r.flags) as usize;
                if (1..=3).contains(&r.outcome) {
                    tally.counts[fate][r.outcome as usize - 1] += 1;
                }
                match r.outcome {
                    1 => {
                        if let Some(h) = &mut tally.latency {
                            h.saturating_record(r.elapsed.max(1));
                        }
                        if r.attempt == 0 {
                            tally.msgs_first_try += 1;
                        } else {
                            tally.msgs_after_replay += 1;
                        }
                    }
                    2 | 3 => {
                        if r.outcome == 3 {
                            if r.flags & RESET == 0 {
                                if let Some(h) = &mut tally.lateness {
                                    h.saturating_record(r.elapsed.saturating_sub(timeout).max(1));
                                }
                            }
                            let late = r.completed_at.wrapping_sub(r.deadline);
                            if (late as i64) > 0 {
                                tally.oracle_lateness_max = tally.oracle_lateness_max.max(late);
                            }
                        }
                        match &replays {
                            Some((senders, max)) if r.attempt + 1 < *max => {
                                let spout = (r.msg >> 48) as usize;
                                if let Some(tx) = senders.get(spout) {
                                    let _ = tx.send((r.msg, r.attempt + 1));
                                    tally.replays_requested += 1;
                                }
                            }
                            _ => tally.msgs_given_up += 1,
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    tally
}
