//! The simulated Storm topology: spout threads start tuple trees, bolt threads process
//! tuples received over channels, and both talk to one shared `Acker` as Storm's acker bolt.
//!
//! ## Edge ids and anchoring (Storm's scheme)
//!
//! A tuple carries, for each tree it belongs to, the root and its own random 64-bit edge id
//! in that tree. The spout inits a root with the XOR of its root tuples' edge ids. A bolt
//! that processes a tuple with edge id `e` and emits children `c1..ck` anchored to it acks
//! `e ^ c1 ^ ... ^ ck` to the root: the child ids enter the value with the parent's ack and
//! leave it with the child's, so the value is 0 exactly when every tuple has been acked once.
//!
//! An *aggregating* bolt holds one tuple back and, when a tuple of another tree arrives,
//! emits one child anchored to both: the child gets an edge id in each tree, each input is
//! acked to its own root, and the child's own ack later goes to both roots. Its descendants
//! stay anchored to both trees.
//!
//! ## Faults, by rate
//!
//! * `--fail-rate` (per tuple): the bolt fails the tuple instead of processing it — one
//!   `fail` per root it is anchored to, no ack, no children — so the value never returns
//!   to 0: the tree must complete `Failed`.
//! * `--drop-rate` (per ack message): the ack is never sent: the tree must time out.
//! * `--dup-rate` (per ack message of a tuple with children): the ack is sent twice. It is
//!   sent before the children are handed on, so the children's edge ids are still in the
//!   value and neither copy can bring it to 0: the tree must time out. (A duplicate of a
//!   tree's very last ack would legitimately complete it `Acked` with the first copy; that
//!   race is real, but it would make "a tree with a duplicated ack is never Acked" untrue.)
//!
//! ## Orders the acker must handle
//!
//! The spout sends the init before emitting (sometimes), after emitting (mostly), or holds
//! it back for up to a twentieth of the timeout (sometimes), so acks and fails often reach
//! the acker before the init. A bolt sends its acks before or after handing on its
//! children, at random. Bolts also call `reset_timeout` now and then on trees of any age, and
//! send the odd *ghost* ack for a root no spout ever used, which the acker must hold as an
//! orphan and expire silently.
//!
//! ## Acks in frames
//!
//! With `--ack-frames N` a bolt gathers its acks (duplicates and ghosts included) in a
//! [`Frame`] and sends up to N at once through `Acker::apply`, as a bolt that writes its
//! acks to a socket in frames would. It sends the frame when it is full, before a fail or a
//! reset (so that its messages to a root keep their order), and before it waits for a
//! tuple, so that no ack waits on an idle bolt. Children that their parents' acks must
//! precede (the order the duplicate fault relies on) wait in the frame and are handed on
//! once it has been sent, and a tuple whose acks are in the frame is released only then
//! (its tree's record must not be judged without them). The oracle hears of each framed ack as
//! under way from just before the frame is applied until its own message returned.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Acker, InitError, Message};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use crossbeam_utils::CachePadded;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::oracle::{self, Event, Oracle};

/// Rates and shapes of the simulated topology.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) fanout: u32,
    pub(crate) depth: u8,
    pub(crate) fail_rate: f64,
    pub(crate) drop_rate: f64,
    pub(crate) dup_rate: f64,
    /// Per tuple: `reset_timeout` on each of its young trees.
    pub(crate) reset_rate: f64,
    /// Per tuple: an extra ack for a root no spout used.
    pub(crate) ghost_rate: f64,
    /// Per single-anchored tuple: hold it back to join it with the next one.
    pub(crate) join_rate: f64,
    /// Per tree: the init goes before the children / is held back.
    pub(crate) init_first_rate: f64,
    pub(crate) init_held_rate: f64,
    /// Stop starting trees after this many (across spouts).
    pub(crate) max_trees: u64,
    /// Start no tree in the last quarter of every period of this many ns (0: never).
    pub(crate) breathe_ns: u64,
    /// Acks per frame sent through `Acker::apply` (0: one `ack` call each; module docs).
    pub(crate) ack_frames: usize,
}

/// One anchor of a tuple: the tree (its oracle slot and root) and the tuple's edge id in it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Anchor {
    slot: u32,
    root: u64,
    edge: u64,
}

/// A tuple in flight between threads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuple {
    anchors: [Anchor; 2],
    len: u8,
    depth: u8,
}

impl Tuple {
    fn anchors(&self) -> &[Anchor] {
        &self.anchors[..self.len as usize]
    }
}

/// Per-thread counters, summed for the progress line and the report.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) trees: AtomicU64,
    pub(crate) tuples: AtomicU64,
    pub(crate) acks: AtomicU64,
    /// Frames of acks sent through `apply` (`--ack-frames`).
    pub(crate) frames: AtomicU64,
    pub(crate) fails: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) duplicated: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) ghosts: AtomicU64,
    pub(crate) joins: AtomicU64,
    pub(crate) inits_held: AtomicU64,
    pub(crate) replays_started: AtomicU64,
}

/// Everything the topology's threads share.
#[derive(Debug)]
pub(crate) struct Topology {
    pub(crate) acker: Acker<u32>,
    pub(crate) oracle: Arc<Oracle>,
    pub(crate) shape: Shape,
    pub(crate) bolts: Vec<Sender<Tuple>>,
    /// Tuples sent or held but not yet processed; bolts stop when it is 0 and spouts are done.
    pub(crate) outstanding: AtomicI64,
    pub(crate) spouts_running: AtomicUsize,
    pub(crate) stop: AtomicBool,
    pub(crate) started: AtomicU64,
    pub(crate) counters: Vec<CachePadded<Counters>>,
    /// The acker's `max_pending`.
    pub(crate) max_pending: usize,
    /// Inits refused `Full` while `pending()`, read right after, was below three quarters
    /// of `max_pending`: the room was there, taken by tombstones the init should have
    /// waited out. Pending cannot fall by a quarter of `max_pending` in those nanoseconds.
    pub(crate) refused_with_room: AtomicU64,
    /// `pending()` at the latest such refusal.
    pub(crate) pending_at_refusal: AtomicUsize,
}

/// A non-zero random id (0 would make an edge invisible to the XOR).
fn id(rng: &mut SmallRng) -> u64 {
    loop {
        let v: u64 = rng.random();
        if v != 0 {
            return v;
        }
    }
}

impl Topology {
    pub(crate) fn sum(&self, f: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.counters
            .iter()
            .map(|c| f(c).load(Ordering::Relaxed))
            .sum()
    }

    fn ack(&self, c: &Counters, root: u64, xor: u64) {
        self.acker.ack(root, xor);
        c.acks.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends an ack (`logged`: its tree's oracle slot and the event logged, `Ack`, or
    /// `AckTwice` for both copies of a duplicate; `None` for a ghost, unknown to the
    /// oracle): at once, or into the bolt's frame (module docs).
    fn send_ack(
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
    fn flush(&self, c: &Counters, rng: &mut SmallRng, frame: &mut Frame) {
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

    // === spout ===

    /// Spout `index`: starts trees while it has free slots, until told to stop.
    pub(crate) fn spout(
        &self,
        index: usize,
        seed: u64,
        free: &Receiver<u32>,
        replays: &Receiver<(u64, u8)>,
    ) {
        let c = &self.counters[index];
        let mut rng = SmallRng::seed_from_u64(seed);
        // Inits held back: (due, slot, root, xor).
        let mut held: BinaryHeap<Reverse<(u64, u32, u64, u64)>> = BinaryHeap::new();
        let mut serial = 0u64;
        let max_hold = self.oracle.timeout() / 20;
        loop {
            let now = self.oracle.now();
            while held.peek().is_some_and(|Reverse(h)| h.0 <= now) {
                let Some(Reverse((_, slot, root, xor))) = held.pop() else {
                    break;
                };
                self.send_init(slot, root, xor);
            }
            // Relaxed: a flag only; what the spout did reaches others through channels.
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let breath = self.shape.breathe_ns;
            if breath > 0 && now % breath >= breath / 4 * 3 {
                std::thread::sleep(Duration::from_millis(1)); // holding its breath
                continue;
            }
            let wait = held.peek().map_or(Duration::from_millis(2), |Reverse(h)| {
                Duration::from_nanos(h.0.saturating_sub(now)).min(Duration::from_millis(2))
            });
            let slot = match free.recv_timeout(wait) {
                Ok(slot) => slot,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if self.started.fetch_add(1, Ordering::Relaxed) >= self.shape.max_trees {
                // --trees reached: the slot goes back unused, and every spout stops.
                self.started.fetch_sub(1, Ordering::Relaxed);
                self.oracle.give_back(slot);
                self.stop.store(true, Ordering::Relaxed);
                continue;
            }
            let (msg, attempt) = match replays.try_recv() {
                Ok(replay) => {
                    c.replays_started.fetch_add(1, Ordering::Relaxed);
                    replay
                }
                Err(_) => {
                    serial += 1;
                    ((index as u64) << 48 | serial, 0)
                }
            };
            let tree = c.trees.fetch_add(1, Ordering::Relaxed);
            let root = id(&mut rng);
            let k = rng.random_range(1..=self.shape.fanout);
            let edges: Vec<u64> = (0..k).map(|_| id(&mut rng)).collect();
            let xor = edges.iter().fold(0, |a, e| a ^ e);
            // Tree numbers are unique across spouts: spout index in the top bits.
            let tree = (index as u64) << 48 | tree;
            self.oracle.begin(slot, root, tree, msg, attempt, k);
            let mode: f64 = rng.random();
            let first = mode < self.shape.init_first_rate;
            let hold = !first && mode < self.shape.init_first_rate + self.shape.init_held_rate;
            if first {
                self.oracle.flag(slot, oracle::INIT_FIRST);
                self.send_init(slot, root, xor);
            }
            self.outstanding.fetch_add(i64::from(k), Ordering::SeqCst);
            for edge in edges {
                let to = rng.random_range(0..self.bolts.len());
                let tuple = Tuple {
                    anchors: [Anchor { slot, root, edge }, Anchor::default()],
                    len: 1,
                    depth: 1,
                };
                let _ = self.bolts[to].send(tuple);
            }
            if hold {
                let delay = rng.random_range(0..=max_hold);
                self.oracle.flag(slot, oracle::INIT_DELAYED);
                self.oracle
                    .log(slot, Event::InitHeld, self.oracle.now(), delay);
                c.inits_held.fetch_add(1, Ordering::Relaxed);
                held.push(Reverse((self.oracle.now() + delay, slot, root, xor)));
            } else if !first {
                self.send_init(slot, root, xor);
            }
        }
        // Stopping: every held init goes out now, so every started tree can finish.
        while let Some(Reverse((_, slot, root, xor))) = held.pop() {
            self.send_init(slot, root, xor);
        }
    }

    /// Sends the init, then drops the spout's reference on the tree.
    fn send_init(&self, slot: u32, root: u64, xor: u64) {
        match self.acker.init(root, xor, slot) {
            Ok(()) => {}
            Err(InitError::Duplicate(_)) => {
                // No completion will come for this init; the checker reports the flag.
                self.oracle.flag(slot, oracle::DUPLICATE_INIT);
                self.oracle.release(slot);
            }
            Err(refusal) => {
                let pending = self.acker.pending();
                if matches!(refusal, InitError::Full(_)) && pending < self.max_pending / 4 * 3 {
                    self.refused_with_room.fetch_add(1, Ordering::Relaxed);
                    self.pending_at_refusal.store(pending, Ordering::Relaxed);
                }
                // Full or Shutdown: legal refusals; no completion may come.
                self.oracle.flag(slot, oracle::REFUSED);
                self.oracle.release(slot);
            }
        }
        self.oracle.init_sent(slot, xor);
        self.oracle.release(slot);
    }

    // === bolt ===

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

    fn hand_on(&self, rng: &mut SmallRng, children: impl Iterator<Item = Tuple>) {
        for child in children {
            let to = rng.random_range(0..self.bolts.len());
            let _ = self.bolts[to].send(child);
        }
    }

    /// The inputs are done with: drop their references on their trees.
    fn finish(&self, inputs: &[Tuple]) {
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

/// A bolt's acks not yet sent (module docs, "Acks in frames"), and for each what the
/// oracle logs once it has been applied.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    messages: Vec<Message>,
    logged: Vec<Option<(u32, Event, u64)>>,
    /// Children whose parents' acks are in the frame and must reach the acker first:
    /// handed on once the frame is sent.
    children: Vec<Tuple>,
    /// Tuples whose acks are in the frame: released (`finish`) once it is sent, as a bolt
    /// that acks one at a time releases a tuple after its acks. Released earlier, a tree's
    /// last reference could go with its completion (a timeout) while its acks still waited
    /// here, and the oracle would judge it without them.
    finished: Vec<Tuple>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Drop,
    Twice,
}
