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
//! [`Frame`](frame::Frame) and sends up to N at once through `Acker::apply`, as a bolt that writes its
//! acks to a socket in frames would. It sends the frame when it is full, before a fail or a
//! reset (so that its messages to a root keep their order), and before it waits for a
//! tuple, so that no ack waits on an idle bolt. Children that their parents' acks must
//! precede (the order the duplicate fault relies on) wait in the frame and are handed on
//! once it has been sent, and a tuple whose acks are in the frame is released only then
//! (its tree's record must not be judged without them). The oracle hears of each framed ack as
//! under way from just before the frame is applied until its own message returned.
//!
//! The spouts are in [`spout`], the bolts in [`bolt`], the frames in [`frame`].

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ackwheel::Acker;
use crossbeam_channel::Sender;
use crossbeam_utils::CachePadded;
use rand::rngs::SmallRng;
use rand::Rng;

use super::oracle::Oracle;

mod bolt;
mod frame;
mod spout;

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
}
