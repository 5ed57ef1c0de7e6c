//! The origin's side of a tree: a work item pulled from the run's consumer becomes a tree
//! (the init to the root's owner, a sub-task per edge to the other nodes), and an item
//! whose completion never came is asked for again.

use super::{add, Node, Pending};
use crate::wire::{self, PartMessage, Task};
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long past the tracker's timeout an origin waits for a completion before it takes the
/// owner for lost and asks for the item again.
pub const SILENCE_BUDGET: Duration = Duration::from_millis(1500);

fn random_id(rng: &mut SmallRng) -> u64 {
    // 0 is not a valid edge (it would ack nothing) nor a useful root.
    rng.random_range(1..=u64::MAX)
}

pub async fn origin_loop(node: Arc<Node>, consumer: jetstream::consumer::PullConsumer) {
    let mut rng = SmallRng::from_os_rng();
    let nodes = node.args.nodes;
    let index = node.args.index;
    loop {
        // Heartbeats and short pulls: a pull request waits on the consumer's leader only,
        // so after a server is killed a node must notice and ask again within seconds.
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(256)
            .heartbeat(Duration::from_secs(1))
            .expires(Duration::from_secs(5))
            .messages()
            .await
        {
            Ok(messages) => messages,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Some(message) = messages.next().await {
            let Ok(message) = message else {
                // Missed heartbeats, a server gone under the pull: a new pull stream, whose
                // requests reach the consumer's leader as it is now.
                break;
            };
            let delivery = message.info().map(|i| i.delivered).unwrap_or(1) as u32;
            let (message, handle) = message.split();
            let item = match wire::decode_item(&message.payload) {
                Ok(item) => item,
                Err(_) => {
                    add(&node.counters.malformed, 1);
                    // Terminated, so that it is not redelivered forever (if this is lost,
                    // it comes back once more and is counted again).
                    let _ = handle.ack_with(AckKind::Term).await;
                    continue;
                }
            };
            let root = random_id(&mut rng);
            let mut xor = 0;
            let fanout = node.args.fanout;
            let tasks: Vec<(usize, Task)> = (0..fanout)
                .map(|_| {
                    let edge = random_id(&mut rng);
                    xor ^= edge;
                    // Sub-tasks go to the other nodes (to itself only when alone).
                    let to = if nodes > 1 {
                        (index + rng.random_range(1..nodes)) % nodes
                    } else {
                        index
                    };
                    (to, Task { root, edge })
                })
                .collect();
            node.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    root,
                    Pending {
                        item,
                        delivery,
                        pulled: Instant::now(),
                        handle,
                    },
                );
            node.outbox.part(
                wire::owner(root, nodes),
                PartMessage::Init {
                    root,
                    xor,
                    origin: index as u32,
                },
            );
            node.outbox.tasks(tasks);
            add(&node.counters.started, 1);
        }
    }
}

/// Asks again for items whose completion never came.
pub async fn silence_loop(node: Arc<Node>) {
    let limit = Duration::from_millis(node.args.timeout_ms) + SILENCE_BUDGET;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let silent: Vec<Pending> = {
            let mut pending = node.pending.lock().unwrap_or_else(|p| p.into_inner());
            let roots: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.pulled.elapsed() > limit)
                .map(|(&root, _)| root)
                .collect();
            roots.iter().filter_map(|r| pending.remove(r)).collect()
        };
        add(&node.counters.silent, silent.len() as u64);
        for p in silent {
            let _ = p.handle.ack_with(AckKind::Nak(None)).await;
        }
    }
}
