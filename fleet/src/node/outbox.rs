//! Frames per destination: records gathered for about a millisecond and sent as one NATS
//! message each (`wire.rs`), the way Storm batches acks per acker task. Any thread may add
//! a record (an owner's completion comes from the Acker's reaper thread); one task sends.

use super::Node;
use crate::wire::{Done, PartMessage, Task};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest frame sent, bytes: well under NATS's default 1 MiB payload limit.
const MAX_FRAME: usize = 240 * 1024;

pub struct Outbox {
    buffers: Mutex<Buffers>,
}

#[derive(Default)]
struct Buffers {
    part: Vec<Vec<u8>>,
    task: Vec<Vec<u8>>,
    done: Vec<Vec<u8>>,
}

/// One NATS message to send.
pub struct Frame {
    pub subject: String,
    pub bytes: Vec<u8>,
}

impl Outbox {
    pub fn new(nodes: usize) -> Outbox {
        Outbox {
            buffers: Mutex::new(Buffers {
                part: vec![Vec::new(); nodes],
                task: vec![Vec::new(); nodes],
                done: vec![Vec::new(); nodes],
            }),
        }
    }

    fn with(&self, f: impl FnOnce(&mut Buffers)) {
        // A poisoned lock only means a thread panicked mid-push; the buffers are still
        // whole records (each push writes one record in one call), so go on.
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut buffers);
    }

    pub fn part(&self, partition: usize, message: PartMessage) {
        self.with(|b| message.encode(&mut b.part[partition]));
    }

    pub fn parts(&self, messages: impl IntoIterator<Item = (usize, PartMessage)>) {
        self.with(|b| {
            for (partition, message) in messages {
                message.encode(&mut b.part[partition]);
            }
        });
    }

    pub fn tasks(&self, tasks: impl IntoIterator<Item = (usize, Task)>) {
        self.with(|b| {
            for (node, task) in tasks {
                task.encode(&mut b.task[node]);
            }
        });
    }

    pub fn done(&self, origin: usize, done: Done) {
        self.with(|b| {
            if let Some(buffer) = b.done.get_mut(origin) {
                done.encode(buffer);
            }
        });
    }

    /// Everything gathered so far, as frames of at most [`MAX_FRAME`] bytes.
    pub fn take(&self, run: &str) -> Vec<Frame> {
        let mut taken = Buffers::default();
        self.with(|b| {
            let n = b.part.len();
            taken.part = std::mem::replace(&mut b.part, vec![Vec::new(); n]);
            taken.task = std::mem::replace(&mut b.task, vec![Vec::new(); n]);
            taken.done = std::mem::replace(&mut b.done, vec![Vec::new(); n]);
        });
        let mut frames = Vec::new();
        for (name, buffers, record) in [
            ("part", taken.part, PartMessage::SIZE),
            ("task", taken.task, Task::SIZE),
            ("done", taken.done, Done::SIZE),
        ] {
            for (to, bytes) in buffers.into_iter().enumerate() {
                let most = MAX_FRAME / record * record;
                for chunk in bytes.chunks(most) {
                    frames.push(Frame {
                        subject: format!("{run}.{name}.{to}"),
                        bytes: chunk.to_vec(),
                    });
                }
            }
        }
        frames
    }
}

/// Sends what the outbox gathered, every millisecond: the one task that sends.
pub async fn flush_loop(node: Arc<Node>) {
    let run = node.args.run.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for frame in node.outbox.take(&run) {
            // Core NATS is at most once: a frame lost with a server is a tree that times
            // out and is replayed.
            let _ = node.client.publish(frame.subject, frame.bytes.into()).await;
        }
    }
}
