//! Acks in frames (`--ack-frames`): a bolt's acks gathered in a [`Frame`] and sent with one
//! `Acker::apply`, or one `ack` call each without frames.

use std::sync::atomic::Ordering;

use ackwheel::Message;
use rand::rngs::SmallRng;

use super::{Counters, Topology, Tuple};
use crate::acker::oracle::Event;

impl Topology {
    /// Sends an ack (`logged`: its tree's oracle slot and the event logged, `Ack`, or
    /// `AckTwice` for both copies of a duplicate; `None` for a ghost, unknown to the
    /// oracle): at once, or into the bolt's frame (module docs).
    pub(super) fn send_ack(
        &self,
        c: &Counters,
        rng: &mut SmallRng,
        frame: &mut Frame,
        logged: Option<(u32, Event)>,
        root: u64,
        xor: u64,
    ) {
        let copies = match logged {
            Some((_, Event::AckTwice)) => 2,
            _ => 1,
        };
        if self.shape.ack_frames == 0 {
            if let Some((slot, _)) = logged {
                self.oracle.calling(slot);
            }
            for _ in 0..copies {
                self.ack(c, root, xor);
            }
            if let Some((slot, event)) = logged {
                self.oracle.message_sent(slot, event, xor);
            }
            return;
        }
        if frame.messages.len() + copies > self.shape.ack_frames {
            self.flush(c, rng, frame);
        }
        for copy in 0..copies {
            frame.messages.push(Message::Ack { root, xor });
            // The oracle hears of the message once, with its last copy.
            let last = copy + 1 == copies;
            frame.logged.push(
                logged
                    .filter(|_| last)
                    .map(|(slot, event)| (slot, event, xor)),
            );
        }
    }

    /// Sends the frame's acks with one `apply`, then hands on the children that waited for
    /// them (module docs).
    pub(super) fn flush(&self, c: &Counters, rng: &mut SmallRng, frame: &mut Frame) {
        if frame.messages.is_empty() {
            self.hand_on(rng, frame.children.drain(..));
            self.finish(&frame.finished);
            frame.finished.clear();
            return;
        }
        for &(slot, _, _) in frame.logged.iter().flatten() {
            self.oracle.calling(slot);
        }
        let logged = &frame.logged;
        self.acker.apply_each(&frame.messages, |i, _| {
            if let Some((slot, event, xor)) = logged[i] {
                self.oracle.message_sent(slot, event, xor);
            }
        });
        c.acks
            .fetch_add(frame.messages.len() as u64, Ordering::Relaxed);
        c.frames.fetch_add(1, Ordering::Relaxed);
        frame.messages.clear();
        frame.logged.clear();
        self.hand_on(rng, frame.children.drain(..));
        self.finish(&frame.finished);
        frame.finished.clear();
    }
}

/// A bolt's acks not yet sent (module docs, "Acks in frames"), and for each what the
/// oracle logs once it has been applied.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    pub(super) messages: Vec<Message>,
    pub(super) logged: Vec<Option<(u32, Event, u64)>>,
    /// Children whose parents' acks are in the frame and must reach the acker first:
    /// handed on once the frame is sent.
    pub(super) children: Vec<Tuple>,
    /// Tuples whose acks are in the frame: released (`finish`) once it is sent, as a bolt
    /// that acks one at a time releases a tuple after its acks. Released earlier, a tree's
    /// last reference could go with its completion (a timeout) while its acks still waited
    /// here, and the oracle would judge it without them.
    pub(super) finished: Vec<Tuple>,
}
