//! The completion records an origin owes the run's completed stream, and the rule for
//! publishing them.
//!
//! **Why they wait.** An origin acks a work item to JetStream only once the item's record
//! is confirmed in the completed stream: the audit reads that stream, and an item acked but
//! not on record would be lost for good (JetStream would never deliver it again). So from
//! its tree's `Acked` until that confirmation, the item's record and its work message's ack
//! handle wait here:
//!
//! ```text
//! completion loop --send (waits while full)--> [queue of CAPACITY] --chunk of <= CHUNK--> record loop
//!                                                        publish the chunk until confirmed, then ack each item
//! ```
//!
//! **Bounded, with back-pressure.** The queue holds at most [`CAPACITY`] records; beside it
//! are only the one chunk the record loop is publishing and the rest of the one completion
//! frame the completion loop is handing over. When it is full, the completion loop waits
//! for room instead of growing it: nothing is dropped, and no item is acked meanwhile, so the
//! work consumer's `max_ack_pending` soon stops delivering new items to the fleet. The
//! pipeline slows to what JetStream takes. (Completions that queue in the NATS subscription
//! past its slow-consumer limit are dropped by the client; their items go silent at the
//! origin and are asked for again: replayed, not lost.)
//!
//! **Giving up.** A chunk is published (with a `Nats-Msg-Id`, so a retry after a lost
//! confirmation is stored once) until JetStream confirms it, with back-off from 50 ms to
//! 1 s. When no attempt has been confirmed for `--nats-limit` since the chunk's first, the
//! node stops with an error ([`until_confirmed`] returns [`GaveUp`]): JetStream is
//! unreachable (no quorum, the stream deleted, no connection). That loses nothing
//! confirmed: the waiting items' work messages were not acked, so JetStream delivers them
//! again to a live node after the consumer's ack wait. A chunk stored whose confirmation was
//! lost is at worst recorded twice, which the audit allows and explains.

use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Most records waiting for the record loop. Well above what one node holds in the run
/// (the consumer's `max_ack_pending` is 2048 items a node, and every waiting item is one
/// not acked), so it binds only when JetStream stops taking records; at about 100 bytes a
/// record (its ack handle's reply subject), 1.6 MiB.
pub const CAPACITY: usize = 16384;

/// Most records in one message of the completed stream (24 B each: 96 KiB, well under
/// NATS's 1 MiB payload limit).
pub const CHUNK: usize = 4096;

/// How long the record loop gathers records after the first one before it publishes them,
/// so that a busy node sends a few large messages rather than one per item.
const GATHER: Duration = Duration::from_millis(5);

/// The shortest time one attempt is given, even at the limit: long enough for a healthy
/// JetStream to confirm on loopback.
const LEAST_ATTEMPT: Duration = Duration::from_millis(100);

/// The queue between the completion loop and the record loop, of `capacity` records.
pub fn queue<T>(capacity: usize) -> (mpsc::Sender<T>, mpsc::Receiver<T>) {
    mpsc::channel(capacity)
}

/// The next chunk: waits for a first record, gathers for [`GATHER`] more, and returns at
/// most `max` in the order they were sent. `None` once every sender is gone and the queue
/// is empty.
pub async fn next_chunk<T>(records: &mut mpsc::Receiver<T>, max: usize) -> Option<Vec<T>> {
    let mut chunk = Vec::new();
    if records.recv_many(&mut chunk, max).await == 0 {
        return None;
    }
    if chunk.len() < max {
        tokio::time::sleep(GATHER).await;
        while chunk.len() < max {
            match records.try_recv() {
                Ok(record) => chunk.push(record),
                Err(_) => break,
            }
        }
    }
    Some(chunk)
}

/// Why a chunk was given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaveUp {
    /// From the first attempt to the decision.
    pub waited: Duration,
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: String,
}

/// Runs `attempt` until one succeeds, with back-off from 50 ms doubling to 1 s, and
/// returns how many it took; or gives up once `limit` has passed since the first attempt
/// without a success. Each attempt is given the time left until the limit (at least
/// [`LEAST_ATTEMPT`]) and fails when it takes longer, so a confirmation that never comes
/// counts against the limit too.
pub async fn until_confirmed<F, Fut>(limit: Duration, mut attempt: F) -> Result<u32, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    let deadline = start + limit;
    let mut backoff = Duration::from_millis(50);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let time = deadline
            .saturating_duration_since(Instant::now())
            .max(LEAST_ATTEMPT);
        let last_error = match tokio::time::timeout(time, attempt()).await {
            Ok(Ok(())) => return Ok(attempts),
            Ok(Err(e)) => e,
            Err(_) => format!("no confirmation within {time:?}"),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(GaveUp {
                waited: start.elapsed(),
                attempts,
                last_error,
            });
        }
        tokio::time::sleep(backoff.min(left)).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_full_queue_makes_the_sender_wait_and_loses_nothing() {
        let (tx, mut rx) = queue::<u32>(4);
        let producer = tokio::spawn(async move {
            for i in 0..10 {
                tx.send(i).await.expect("the receiver is alive");
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !producer.is_finished(),
            "ten records went into room for four"
        );
        assert_eq!(rx.len(), 4);
        let mut taken = Vec::new();
        while let Some(chunk) = next_chunk(&mut rx, 3).await {
            assert!(chunk.len() <= 3, "a chunk of {}", chunk.len());
            assert!(rx.len() <= 4);
            taken.extend(chunk);
        }
        // The sender is gone and every record came through, in order.
        producer.await.unwrap();
        assert_eq!(taken, (0..10).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn attempts_go_on_until_one_is_confirmed() {
        let tries = AtomicU32::new(0);
        let confirmed = until_confirmed(Duration::from_secs(10), || async {
            match tries.fetch_add(1, Ordering::Relaxed) {
                0..=2 => Err("no responders".to_string()),
                _ => Ok(()),
            }
        })
        .await;
        assert_eq!(confirmed, Ok(4));
    }

    #[tokio::test]
    async fn refused_attempts_are_given_up_after_the_limit_with_the_last_error() {
        let limit = Duration::from_millis(300);
        let start = Instant::now();
        let gave_up = until_confirmed(limit, || async { Err("no responders".to_string()) })
            .await
            .unwrap_err();
        let took = start.elapsed();
        assert!(took >= limit && took < limit * 3, "gave up after {took:?}");
        assert!(gave_up.waited >= limit);
        assert!(gave_up.attempts >= 3, "{gave_up:?}");
        assert_eq!(gave_up.last_error, "no responders");
    }

    #[tokio::test]
    async fn a_confirmation_that_never_comes_counts_against_the_limit() {
        let limit = Duration::from_millis(300);
        let start = Instant::now();
        let gave_up = until_confirmed(limit, std::future::pending::<Result<(), String>>)
            .await
            .unwrap_err();
        assert!(start.elapsed() < limit * 3, "{gave_up:?}");
        assert!(
            gave_up.last_error.starts_with("no confirmation within"),
            "{gave_up:?}"
        );
    }
}
