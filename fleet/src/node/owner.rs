//! The owner's side: the frames for this node's partition applied to its tracker
//! (`tracker.rs`), and the CPU time those calls take.

use super::{add, Node};
use crate::wire::{self, Done, PartMessage};
use ackwheel::{Message, Outcome};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Instant;

pub async fn owner_loop(node: Arc<Node>, mut frames: async_nats::Subscriber) {
    let (index, nodes) = (node.args.index, node.args.nodes);
    // A frame's acks and fails, and its inits with the number of acks and fails before each:
    // sorted out first, so that the tracker's calls run in one stretch that is timed once.
    let mut batch: Vec<Message> = Vec::new();
    let mut inits: Vec<(usize, u64, u64, u32)> = Vec::new();
    let mut refused: Vec<(u64, u32)> = Vec::new();
    while let Some(frame) = frames.next().await {
        let Ok(records) = PartMessage::decode_frame(&frame.payload) else {
            add(&node.counters.malformed, 1);
            continue;
        };
        add(&node.counters.part_frames, 1);
        let (mut acks, mut fails, mut init_count, mut misrouted) = (0, 0, 0, 0);
        for record in records {
            if wire::owner(record.root(), nodes) != index {
                misrouted += 1;
                continue;
            }
            match record {
                PartMessage::Init { root, xor, origin } => {
                    init_count += 1;
                    if (origin as usize) < nodes {
                        inits.push((batch.len(), root, xor, origin));
                    } else {
                        misrouted += 1;
                    }
                }
                PartMessage::Ack { root, xor } => {
                    acks += 1;
                    batch.push(Message::Ack { root, xor });
                }
                PartMessage::Fail { root } => {
                    fails += 1;
                    batch.push(Message::Fail { root });
                }
            }
        }
        let timer = CallTimer::start();
        // In the frame's order: the messages before an init go first.
        let mut applied = 0;
        for &(before, root, xor, origin) in &inits {
            node.tracker.apply(&batch[applied..before]);
            applied = before;
            if !node.tracker.init(root, xor, origin) {
                refused.push((root, origin));
            }
        }
        node.tracker.apply(&batch[applied..]);
        add(&node.counters.tracker_ns, timer.ns());
        for (root, origin) in refused.drain(..) {
            add(&node.counters.refused_inits, 1);
            let outcome = Outcome::Failed;
            node.outbox.done(origin as usize, Done { root, outcome });
        }
        batch.clear();
        inits.clear();
        add(&node.counters.acks_applied, acks);
        add(&node.counters.fails_applied, fails);
        add(&node.counters.inits_applied, init_count);
        add(&node.counters.misrouted, misrouted);
    }
}

/// Times the owner's calls into its tracker by this thread's CPU time
/// (`CLOCK_THREAD_CPUTIME_ID`): what the calls ran, not the time the thread spent preempted
/// on a crowded machine (which the wall clock would add, and more with the servers
/// busier). Falls back to the wall clock where that clock is not available.
struct CallTimer {
    cpu_ns: Option<u64>,
    wall: Instant,
}

impl CallTimer {
    fn start() -> CallTimer {
        CallTimer {
            cpu_ns: thread_cpu_now_ns(),
            wall: Instant::now(),
        }
    }

    /// Nanoseconds since [`CallTimer::start`].
    fn ns(&self) -> u64 {
        match (self.cpu_ns, thread_cpu_now_ns()) {
            (Some(start), Some(now)) => now.saturating_sub(start),
            _ => self.wall.elapsed().as_nanos() as u64,
        }
    }
}

/// The calling thread's CPU time, nanoseconds.
fn thread_cpu_now_ns() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which points to a
    // local that lives across the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (rc == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}
