//! The load: numbered items published as fast as the nodes take them, paced by the
//! consumer's backlog; then the drain.

use crate::wire;
use async_nats::jetstream::{self, consumer};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The load: numbered items published until `end` while the consumer's `backlog` is under
/// `most`, each until JetStream confirms it, with an id (`Nats-Msg-Id`) so that a publish
/// retried after a lost confirmation is stored once. Returns the confirmed items and how
/// many were still unconfirmed 30 s after `end`.
pub async fn publish(
    js: &jetstream::Context,
    run: &str,
    work_subject: &str,
    backlog: &AtomicU64,
    most: u64,
    end: Instant,
) -> (HashSet<u64>, u64) {
    let mut confirmed: HashSet<u64> = HashSet::new();
    let mut retries: VecDeque<u64> = VecDeque::new();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut unconfirmed = 0u64;
    let give_up = end + Duration::from_secs(30);
    loop {
        let loading = Instant::now() < end;
        if !loading && retries.is_empty() && in_flight.is_empty() {
            break;
        }
        if Instant::now() > give_up {
            unconfirmed = (retries.len() + in_flight.len()) as u64;
            eprintln!("fleet: {unconfirmed} items never confirmed by JetStream");
            break;
        }
        while in_flight.len() < 256 {
            let item = if let Some(item) = retries.pop_front() {
                item
            } else if loading && backlog.load(Ordering::Relaxed) < most {
                next += 1;
                next - 1
            } else {
                break;
            };
            let (js, subject) = (js.clone(), work_subject.to_string());
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("{run}-{item}").as_str());
            in_flight.push(async move {
                let stored = match js
                    .publish_with_headers(subject, headers, wire::encode_item(item).into())
                    .await
                {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                (item, stored)
            });
        }
        tokio::select! {
            Some((item, stored)) = in_flight.next() => {
                if stored {
                    confirmed.insert(item);
                } else {
                    retries.push_back(item);
                    // A server may be down: no busy loop while it is.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    (confirmed, unconfirmed)
}

/// The consumer's backlog (items not yet delivered), read by the publisher: refreshed
/// every 100 ms by a task.
pub fn watch_backlog(mut consumer: consumer::PullConsumer) -> (Arc<AtomicU64>, JoinHandle<()>) {
    let backlog = Arc::new(AtomicU64::new(0));
    let watcher = {
        let backlog = backlog.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(info) = consumer.info().await {
                    // Relaxed: a hint for pacing.
                    backlog.store(info.num_pending, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    (backlog, watcher)
}

/// The drain: waits until the consumer has nothing pending and nothing unacknowledged, or
/// `drain_limit` seconds.
pub async fn drain(mut consumer: consumer::PullConsumer, drain_limit: u64) {
    let drain_start = Instant::now();
    loop {
        if let Ok(info) = consumer.info().await {
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                break;
            }
        }
        if drain_start.elapsed() > Duration::from_secs(drain_limit) {
            eprintln!("fleet: the pipeline did not drain within {drain_limit} s");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
