//! The bolts: each processes tuples (fails, acks, children, aggregation, the faults by
//! rate) until the spouts are done and nothing is outstanding.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::frame::Frame;
use super::{id, Anchor, Counters, Topology, Tuple};
use crate::acker::oracle::{self, Event};

impl Topology {
    /// A bolt (its counters at `counter`): processes tuples until the spouts are done and
    /// nothing is outstanding.
    pub(crate) fn bolt(&self, counter: usize, seed: u64, rx: &Receiver<Tuple>) {
        let c = &self.counters[counter];
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut held: Option<Tuple> = None;
        let mut frame = Frame::default();
        loop {
            let next = match rx.try_recv() {
                Ok(tuple) => Ok(tuple),
                Err(_) => {
                    // About to wait: no ack waits with it.
                    self.flush(c, &mut rng, &mut frame);
                    rx.recv_timeout(Duration::from_millis(1))
                }
            };
            match next {
                Ok(tuple) => self.handle(c, &mut rng, &mut frame, &mut held, tuple),
                Err(RecvTimeoutError::Timeout) => {
                    // Nothing to join with: process the held tuple on its own.
                    if let Some(h) = held.take() {
                        self.process(c, &mut rng, &mut frame, &[h]);
                        self.flush(c, &mut rng, &mut frame);
                    }
                    if self.spouts_running.load(Ordering::SeqCst) == 0
                        && self.outstanding.load(Ordering::SeqCst) == 0
                    {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    fn handle(
        &self,
        c: &Counters,
        rng: &mut SmallRng,
        frame: &mut Frame,
        held: &mut Option<Tuple>,
        t: Tuple,
    ) {
        c.tuples.fetch_add(1, Ordering::Relaxed);
        if rng.random_bool(self.shape.ghost_rate) {
            // An ack for a root nobody initialized: an orphan that must expire silently.
            let (root, xor) = (id(rng), id(rng));
            self.send_ack(c, rng, frame, None, root, xor);
            c.ghosts.fetch_add(1, Ordering::Relaxed);
        }
        if rng.random_bool(self.shape.fail_rate) {
            self.flush(c, rng, frame);
            for a in t.anchors() {
                let before = self.oracle.calling(a.slot);
                let completed = self.acker.fail(a.root);
                self.oracle.fail_sent(a.slot, before, completed);
                c.fails.fetch_add(1, Ordering::Relaxed);
            }
            self.finish(&[t]);
            return;
        }
        if rng.random_bool(self.shape.reset_rate) {
            self.flush(c, rng, frame);
            for a in t.anchors() {
                // Old trees too: a reset racing the reaper at the old deadline either reports
                // the tree gone or is honoured, and the oracle holds the acker to it.
                let before = self.oracle.now();
                let pending = self.acker.reset_timeout(a.root);
                self.oracle.reset(a.slot, before, pending);
                c.resets.fetch_add(1, Ordering::Relaxed);
            }
        }
        if t.len == 1 && t.depth < self.shape.depth && rng.random_bool(self.shape.join_rate) {
            match held.take() {
                None => {
                    *held = Some(t);
                    return;
                }
                Some(h) if h.anchors[0].slot != t.anchors[0].slot => {
                    c.joins.fetch_add(1, Ordering::Relaxed);
                    self.oracle.log(
                        h.anchors[0].slot,
                        Event::Join,
                        self.oracle.now(),
                        t.anchors[0].root,
                    );
                    self.oracle.log(
                        t.anchors[0].slot,
                        Event::Join,
                        self.oracle.now(),
                        h.anchors[0].root,
                    );
                    self.oracle.flag(h.anchors[0].slot, oracle::JOINED);
                    self.oracle.flag(t.anchors[0].slot, oracle::JOINED);
                    self.process(c, rng, frame, &[h, t]);
                    return;
                }
                Some(h) => *held = Some(h),
            }
        }
        self.process(c, rng, frame, &[t]);
    }

    /// Processes one tuple, or two joined ones (which then get exactly one child, anchored to
    /// both): emits children, acks the inputs (with faults), hands the children on.
    fn process(&self, c: &Counters, rng: &mut SmallRng, frame: &mut Frame, inputs: &[Tuple]) {
        // The children's anchors: every tree of every input (at most two).
        let mut anchors = [Anchor::default(); 2];
        let mut len = 0usize;
        for a in inputs.iter().flat_map(Tuple::anchors) {
            anchors[len] = *a;
            len += 1;
        }
        let depth = inputs.iter().map(|t| t.depth).max().unwrap_or(0);
        let k = if inputs.len() == 2 {
            1
        } else if depth < self.shape.depth {
            rng.random_range(0..=self.shape.fanout)
        } else {
            0
        };
        let mut children = Vec::with_capacity(k as usize);
        let mut child_xor = [0u64; 2];
        for _ in 0..k {
            let mut child = Tuple {
                anchors,
                len: len as u8,
                depth: depth + 1,
            };
            for (j, a) in child.anchors[..len].iter_mut().enumerate() {
                a.edge = id(rng);
                child_xor[j] ^= a.edge;
            }
            children.push(child);
        }
        for a in &anchors[..len] {
            self.oracle.add_refs(a.slot, k);
        }
        self.outstanding.fetch_add(i64::from(k), Ordering::SeqCst);

        // One ack message per (input, tree): the input's edge and its children's edges.
        let mut messages = [(Anchor::default(), 0u64, Fault::None); 2];
        for (j, a) in anchors[..len].iter().enumerate() {
            let fault = if rng.random_bool(self.shape.drop_rate) {
                Fault::Drop
            } else if k > 0 && rng.random_bool(self.shape.dup_rate) {
                Fault::Twice
            } else {
                Fault::None
            };
            messages[j] = (*a, a.edge ^ child_xor[j], fault);
        }
        let messages = &messages[..len];
        let ack_first = messages.iter().any(|m| m.2 == Fault::Twice) || rng.random_bool(0.5);
        if !ack_first {
            self.hand_on(rng, children.drain(..));
        }
        for &(a, xor, fault) in messages {
            match fault {
                Fault::None => {
                    self.send_ack(c, rng, frame, Some((a.slot, Event::Ack)), a.root, xor)
                }
                Fault::Drop => {
                    c.dropped.fetch_add(1, Ordering::Relaxed);
                    self.oracle.flag(a.slot, oracle::DROPPED);
                    self.oracle
                        .log(a.slot, Event::AckDropped, self.oracle.now(), xor);
                }
                Fault::Twice => {
                    c.duplicated.fetch_add(1, Ordering::Relaxed);
                    self.oracle.flag(a.slot, oracle::DUPED);
                    self.send_ack(c, rng, frame, Some((a.slot, Event::AckTwice)), a.root, xor);
                }
            }
        }
        if ack_first && self.shape.ack_frames > 0 {
            // The children must not overtake these acks: they wait in the frame with them
            // (module docs).
            frame.children.append(&mut children);
        }
        self.hand_on(rng, children.drain(..));
        if self.shape.ack_frames > 0 {
            // Released once their acks are sent (`Frame::finished`).
            frame.finished.extend_from_slice(inputs);
        } else {
            self.finish(inputs);
        }
    }

    pub(super) fn hand_on(&self, rng: &mut SmallRng, children: impl Iterator<Item = Tuple>) {
        for child in children {
            let to = rng.random_range(0..self.bolts.len());
            let _ = self.bolts[to].send(child);
        }
    }

    /// The inputs are done with: drop their references on their trees.
    pub(super) fn finish(&self, inputs: &[Tuple]) {
        for t in inputs {
            for a in t.anchors() {
                self.oracle.release(a.slot);
            }
        }
        // SeqCst: with the bolts' exit check, a count of 0 must mean no tuple anywhere.
        self.outstanding
            .fetch_sub(inputs.len() as i64, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Drop,
    Twice,
}
