//! The worker's side: each sub-task's edge acked to its root's owner, or, as injected
//! faults, failed, dropped or sent twice.

use super::{add, Node};
use crate::wire::{self, PartMessage, Task};
use futures::StreamExt;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

pub async fn worker_loop(node: Arc<Node>, mut frames: async_nats::Subscriber) {
    let mut rng = SmallRng::from_os_rng();
    let nodes = node.args.nodes;
    let (fail, drop, dup) = (node.args.fail_rate, node.args.drop_rate, node.args.dup_rate);
    let mut out = Vec::new();
    while let Some(frame) = frames.next().await {
        let Ok(tasks) = Task::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        for Task { root, edge } in tasks {
            let owner = wire::owner(root, nodes);
            let roll: f64 = rng.random();
            if roll < fail {
                out.push((owner, PartMessage::Fail { root }));
            } else if roll < fail + drop {
                // The ack is lost: the tree times out and its item is replayed.
            } else {
                out.push((owner, PartMessage::Ack { root, xor: edge }));
                if roll < fail + drop + dup {
                    out.push((owner, PartMessage::Ack { root, xor: edge }));
                }
            }
        }
        node.outbox.parts(out.drain(..));
    }
}
