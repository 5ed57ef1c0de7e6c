//! What becomes of the completions an origin receives: an acked item's record goes to the
//! run's completed stream, and its work message is acked once JetStream confirmed the
//! record (`records.rs`); a failed or timed-out item is asked for again at once.

use super::{add, records, Node};
use crate::wire::{Completed, Done};
use ackwheel::Outcome;
use async_nats::jetstream::{message::Acker as JsAcker, AckKind};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

pub async fn completion_loop(
    node: Arc<Node>,
    mut frames: async_nats::Subscriber,
) -> Result<(), String> {
    let index = node.args.index as u32;
    while let Some(frame) = frames.next().await {
        let Ok(dones) = Done::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        let mut naks = Vec::new();
        let mut to_record = Vec::new();
        {
            let mut pending = node.pending.lock().unwrap_or_else(|p| p.into_inner());
            for Done { root, outcome } in dones {
                let Some(p) = pending.remove(&root) else {
                    // Already judged silent and asked for again, or a stranger's root.
                    add(&node.counters.unknown_completions, 1);
                    continue;
                };
                match outcome {
                    Outcome::Acked => {
                        add(&node.counters.acked, 1);
                        let record = Completed {
                            item: p.item,
                            node: index,
                            delivery: p.delivery,
                            latency_us: p.pulled.elapsed().as_micros() as u64,
                        };
                        to_record.push((record, p.handle));
                    }
                    Outcome::Failed => {
                        add(&node.counters.failed, 1);
                        naks.push(p.handle);
                    }
                    _ => {
                        add(&node.counters.timed_out, 1);
                        naks.push(p.handle);
                    }
                }
            }
        }
        for handle in naks {
            let _ = handle.ack_with(AckKind::Nak(None)).await;
        }
        // Waits while the queue is full (back-pressure, `records.rs`): never dropped.
        for record in to_record {
            node.records
                .send(record)
                .await
                .map_err(|_| "the record loop is gone".to_string())?;
        }
    }
    Err("the completion loop ended (its subscription closed)".into())
}

/// Appends acked items to the completed stream, a chunk per JetStream message, and acks
/// their work messages only once JetStream has confirmed the chunk: an item is never acked
/// before it is on record. Gives up with an error when JetStream confirms nothing for
/// `--nats-limit` (`records.rs`).
pub async fn record_loop(
    node: Arc<Node>,
    mut records: tokio::sync::mpsc::Receiver<(Completed, JsAcker)>,
) -> Result<(), String> {
    let subject = format!("{}.completed", node.args.run);
    let limit = Duration::from_secs(node.args.nats_limit);
    // Each chunk carries an id unique to this process and chunk, so that a publish retried
    // after a lost confirmation is stored once (JetStream's duplicate window).
    let mut chunks = 0u64;
    // Random, not the pid: a restarted node may get its killed predecessor's pid, and a
    // chunk id the dead process used would be taken for a duplicate and not stored.
    let incarnation: u64 = rand::random();
    while let Some(chunk) = records::next_chunk(&mut records, records::CHUNK).await {
        let mut bytes = Vec::with_capacity(chunk.len() * Completed::SIZE);
        for (record, _) in &chunk {
            record.encode(&mut bytes);
        }
        let bytes = bytes::Bytes::from(bytes);
        chunks += 1;
        let mut headers = async_nats::HeaderMap::new();
        let id = format!(
            "{}-{}-{incarnation:x}-{chunks}",
            node.args.run, node.args.index
        );
        headers.insert("Nats-Msg-Id", id.as_str());
        let publish = || async {
            let ack = node
                .js
                .publish_with_headers(subject.clone(), headers.clone(), bytes.clone())
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|_| ()).map_err(|e| e.to_string())
        };
        if let Err(gave_up) = records::until_confirmed(limit, publish).await {
            return Err(format!(
                "JetStream confirmed no completion record on {subject} for {:.1} s \
                 ({} attempts; the last: {}), past --nats-limit {} s: giving up; \
                 items not acked, so JetStream delivers them again after the consumer's \
                 ack wait: {} in that record, {} waiting behind it",
                gave_up.waited.as_secs_f64(),
                gave_up.attempts,
                gave_up.last_error,
                limit.as_secs(),
                chunk.len(),
                records.len(),
            ));
        }
        add(&node.counters.recorded, chunk.len() as u64);
        for (_, handle) in chunk {
            let _ = handle.ack().await;
        }
    }
    Err("the record loop's queue closed".into())
}
