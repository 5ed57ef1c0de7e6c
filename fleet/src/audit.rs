//! The audit of a run: every published item on record, every duplicate with its cause, and
//! what each kill did to the completion rate.
//!
//! The record is the completed stream (3 replicas), read whole once the pipeline has
//! drained (the consumer has nothing pending and nothing unacknowledged). An item is lost
//! when JetStream confirmed its publish and no record holds it: the audit fails. An item
//! recorded more than once was done again after a replay, which at-least-once allows; the
//! cause is told from the two records (which node, which delivery) and the run's kills.

use crate::report::Fault;
use crate::wire::Completed;
use async_nats::jetstream::{consumer, stream};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every record of the completed stream, in order.
pub(crate) async fn read_record(mut done_stream: stream::Stream) -> Result<Vec<Completed>, String> {
    let expected = done_stream
        .info()
        .await
        .map_err(|e| format!("completed stream: {e}"))?
        .state
        .messages;
    let reader: consumer::PullConsumer = done_stream
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("completed stream reader: {e}"))?;
    let mut records: Vec<Completed> = Vec::new();
    let mut read = 0u64;
    let start = Instant::now();
    while read < expected {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "read {read} of {expected} completed batches in 60 s"
            ));
        }
        let mut batch = reader
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .map_err(|e| format!("read the completed stream: {e}"))?;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| format!("read the completed stream: {e}"))?;
            read += 1;
            records.extend(Completed::decode_frame(&m.payload).map_err(|e| e.to_string())?);
        }
    }
    Ok(records)
}

/// What the record says of the published items.
pub(crate) struct Judged {
    /// Confirmed items no record holds, in order.
    pub(crate) missing: Vec<u64>,
    /// Items done more than once, by cause.
    pub(crate) duplicates: HashMap<&'static str, u64>,
    /// Pull to completion of each item's first record, sorted.
    pub(crate) latencies_us: Vec<u64>,
}

/// Judges `records` against the `confirmed` items; `victim` is the node the run killed.
pub(crate) fn judge(
    records: &[Completed],
    confirmed: &HashSet<u64>,
    victim: Option<u32>,
) -> Judged {
    let mut seen: HashMap<u64, Completed> = HashMap::new();
    let mut duplicates: HashMap<&'static str, u64> = HashMap::new();
    let mut latencies_us = Vec::with_capacity(records.len());
    for r in records {
        match seen.get(&r.item) {
            None => {
                seen.insert(r.item, *r);
                latencies_us.push(r.latency_us);
            }
            Some(first) => {
                let cause = if r.delivery <= first.delivery && r.node == first.node {
                    "recorded twice by one origin (a completed-stream publish retried after a lost confirmation)"
                } else if Some(first.node) == victim {
                    "its first origin was killed after recording it, before its work ack reached JetStream (redelivered)"
                } else {
                    "its work ack was lost or late (a server killed, or the ack wait passed on a starved origin), so JetStream redelivered it"
                };
                *duplicates.entry(cause).or_default() += 1;
            }
        }
    }
    latencies_us.sort_unstable();
    let mut missing: Vec<u64> = confirmed
        .iter()
        .copied()
        .filter(|i| !seen.contains_key(i))
        .collect();
    missing.sort_unstable();
    Judged {
        missing,
        duplicates,
        latencies_us,
    }
}

/// The completion rate around each kill, from `buckets` (completions per 100 ms since
/// `timeline_start`); `start` and `end` bound the load.
pub(crate) fn recoveries(
    buckets: &[AtomicU64],
    timeline_start: Instant,
    start: Instant,
    end: Instant,
    kills: &[(String, Instant)],
) -> Vec<Fault> {
    let rate = |from: usize, to: usize| -> f64 {
        let n = to.saturating_sub(from).max(1);
        (from..to)
            // Relaxed: counts read after the run.
            .map(|b| buckets.get(b).map_or(0, |c| c.load(Ordering::Relaxed)))
            .sum::<u64>() as f64
            / n as f64
    };
    let bucket =
        |at: Instant| (at.saturating_duration_since(timeline_start).as_millis() / 100) as usize;
    let end_bucket = bucket(end);
    kills
        .iter()
        .map(|(what, at)| {
            let k = bucket(*at);
            let before = rate(k.saturating_sub(20), k);
            let (lowest_at, lowest) = (k..(k + 40).min(end_bucket.saturating_sub(10)))
                .map(|b| (b, rate(b, b + 10)))
                .fold(
                    (k, f64::INFINITY),
                    |low, (b, r)| if r < low.1 { (b, r) } else { low },
                );
            // Counted from the kill, searched from the bottom of the dip (the first windows
            // after a kill still hold completions of trees it did not touch).
            let recovered = (lowest_at..end_bucket.saturating_sub(5))
                .find(|&b| rate(b, b + 5) >= 0.8 * before)
                .map(|b| (b - k) as f64 / 10.0);
            Fault {
                what: what.clone(),
                at: at.saturating_duration_since(start).as_secs_f64(),
                before: before * 10.0,
                lowest: lowest * 10.0,
                recovered,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(item: u64, node: u32, delivery: u32) -> Completed {
        Completed {
            item,
            node,
            delivery,
            latency_us: item,
        }
    }

    #[test]
    fn a_confirmed_item_without_a_record_is_missing() {
        let confirmed: HashSet<u64> = [1, 2, 3].into();
        let judged = judge(&[record(1, 0, 1), record(3, 1, 1)], &confirmed, None);
        assert_eq!(judged.missing, vec![2]);
        assert_eq!(judged.latencies_us, vec![1, 3]);
    }

    #[test]
    fn duplicates_are_counted_by_cause() {
        let confirmed: HashSet<u64> = [1, 2, 3].into();
        let records = [
            record(1, 2, 1),
            record(1, 0, 2), // first origin node 2 was the victim
            record(2, 0, 1),
            record(2, 1, 2), // redelivered from a live origin
            record(3, 1, 1),
            record(3, 1, 1), // the same batch stored twice
        ];
        let judged = judge(&records, &confirmed, Some(2));
        assert!(judged.missing.is_empty());
        assert_eq!(judged.duplicates.values().sum::<u64>(), 3);
        assert_eq!(judged.duplicates.len(), 3, "{:?}", judged.duplicates);
    }
}
