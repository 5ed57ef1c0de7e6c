//! The oracle: what each tree's fate was, what the acker said about it, and whether the two
//! agree.
//!
//! ## Records
//!
//! Every tree in flight owns one [`Slot`] of a fixed array; the acker's payload is the slot
//! index, so a completion finds its record without a lookup, and a completion whose root is
//! not the slot's current root is a completion for a root that was never initialized (or is
//! long gone). The array's size is the harness's max-spout-pending: a spout waits for a free
//! slot before it starts a tree, exactly like Storm's `max.spout.pending`.
//!
//! A slot is written by many threads at once (the spout, every bolt holding one of the tree's
//! tuples, the thread that completes it), all with atomics: flags are OR-ed in, times are
//! min-ed or max-ed, and each message is appended to a small event log (the *history*
//! printed with a violation). Nothing here takes a lock.
//! The calls the spouts and bolts make as they send a tree's messages are in [`messages`].
//!
//! ## When a tree is judged
//!
//! A slot carries a reference count: one for the spout until the init has been sent, one for
//! the completion, and one per tuple of the tree that is still queued or being processed
//! (a tuple anchored to two trees holds one on each). Whoever drops the last reference —
//! so no thread can still send a message for the tree — snapshots the slot into a [`Record`],
//! sends it to the checker thread and hands the slot back to its spout. The checker
//! ([`check`]) judges it against [`verify`], keeps the tallies and histograms, and asks the
//! spout for a replay when that is enabled. Keeping the judging on one thread keeps the
//! histograms unshared and the bolts' critical path short.
//!
//! ## Time
//!
//! Every time here is a reading of `MonotonicClock`, the acker's own clock (one process-wide
//! origin), so "before the deadline" means the same thing to both. The oracle's deadline is
//! the spout's reading *before* the tree's first message, plus the timeout: the acker's real
//! deadline (its reading at the first message it saw, plus the timeout) is never earlier,
//! so a `TimedOut` completion read before the oracle's deadline was early for certain.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ackwheel::{Clock, Completion, MonotonicClock, Outcome};
use crossbeam_channel::{Receiver, Sender};

/// Events kept per tree for its history; later ones are counted, not kept.
const LOG: usize = 21;
/// Resets kept per tree whose bearing on the deadline is decided when the tree is judged
/// ([`Oracle::reset`]); later ones are not held against the acker.
const LATE_RESETS: usize = 2;

// Tree flags: what was done to the tree's messages.
/// A bolt failed one of the tree's tuples.
pub(crate) const FAIL_SENT: u32 = 1 << 0;
/// An ack for the tree was dropped on its way to the acker.
pub(crate) const DROPPED: u32 = 1 << 1;
/// An ack for the tree was sent twice.
pub(crate) const DUPED: u32 = 1 << 2;
/// The spout held the init back for a while (acks may arrive first).
pub(crate) const INIT_DELAYED: u32 = 1 << 3;
/// A `reset_timeout` that the acker had to honour moved the oracle's deadline.
pub(crate) const RESET: u32 = 1 << 4;
/// A tuple of the tree was anchored to another tree as well (an aggregating bolt).
pub(crate) const JOINED: u32 = 1 << 5;
/// `init` was refused (`Full` or `Shutdown`): no completion may come.
pub(crate) const REFUSED: u32 = 1 << 6;
/// `init` returned `Duplicate` for a fresh random root.
pub(crate) const DUPLICATE_INIT: u32 = 1 << 7;
/// The spout sent the init before emitting the root's children.
pub(crate) const INIT_FIRST: u32 = 1 << 8;

/// What a history line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The spout is about to emit; data = number of root children.
    Start = 1,
    /// `init` returned; data = the init XOR.
    Init,
    /// The spout decided to hold the init back; data = the delay in ns.
    InitHeld,
    /// `ack` returned; data = the XOR.
    Ack,
    /// `ack` was called twice with the same XOR; data = the XOR.
    AckTwice,
    /// An ack was dropped (never sent); data = the XOR.
    AckDropped,
    /// `fail` returned; data = 1 if it completed the tree.
    Fail,
    /// `reset_timeout` returned; data = its result.
    Reset,
    /// A tuple of this tree was joined with one of another tree; data = the other root.
    Join,
    /// `on_complete` ran; data = the outcome code, + 16 per extra completion.
    Complete,
}

impl Event {
    fn from_code(code: u64) -> Option<Event> {
        use Event::*;
        [
            Start, Init, InitHeld, Ack, AckTwice, AckDropped, Fail, Reset, Join, Complete,
        ]
        .into_iter()
        .find(|e| *e as u64 == code)
    }
}

/// `Outcome` as a small number for an atomic (0 = none yet).
pub(crate) fn outcome_code(o: Outcome) -> u32 {
    match o {
        Outcome::Acked => 1,
        Outcome::Failed => 2,
        Outcome::TimedOut => 3,
        _ => 4,
    }
}

fn outcome_name(code: u32) -> &'static str {
    match code {
        0 => "none",
        1 => "Acked",
        2 => "Failed",
        3 => "TimedOut",
        _ => "unknown",
    }
}

/// Event word: the kind in the top byte, the time (< 2^56 ns, two years) below.
const TIME_MASK: u64 = (1 << 56) - 1;

// === impl Slot ===

/// One tree in flight. See the module docs for who writes what.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    root: AtomicU64,
    tree: AtomicU64,
    /// Message id (spout << 48 | serial) and replay attempt, `msg << 8 | attempt`.
    msg: AtomicU64,
    refs: AtomicU32,
    flags: AtomicU32,
    completions: AtomicU32,
    outcome: AtomicU32,
    first_before: AtomicU64,
    init_after: AtomicU64,
    /// Earliest reading before / after a `fail` call (u64::MAX: none).
    fail_before: AtomicU64,
    fail_after: AtomicU64,
    /// Latest reading after any message call returned.
    last_after: AtomicU64,
    /// The oracle's deadline: `first_before + timeout`, raised by honoured resets.
    deadline: AtomicU64,
    /// Acks and fails under way (called, not yet returned).
    messages_in_flight: AtomicU32,
    /// Latest reading after an ack or fail returned.
    last_message_after: AtomicU64,
    /// Resets that may have come after the tree's completion was decided: (called, the
    /// latest moment a message could have made an orphan for the reset to find).
    late_resets: [[AtomicU64; 2]; LATE_RESETS],
    late_resets_len: AtomicU32,
    completed_at: AtomicU64,
    elapsed: AtomicU64,
    log_len: AtomicU32,
    log: [[AtomicU64; 2]; LOG],
}

/// A judged tree: a plain copy of its slot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Record {
    pub(crate) slot: u32,
    pub(crate) root: u64,
    pub(crate) tree: u64,
    pub(crate) msg: u64,
    pub(crate) attempt: u8,
    pub(crate) flags: u32,
    pub(crate) completions: u32,
    pub(crate) outcome: u32,
    pub(crate) first_before: u64,
    pub(crate) init_after: u64,
    pub(crate) fail_before: u64,
    pub(crate) fail_after: u64,
    pub(crate) last_after: u64,
    pub(crate) deadline: u64,
    pub(crate) completed_at: u64,
    pub(crate) elapsed: u64,
    pub(crate) events_dropped: u32,
    pub(crate) log: Vec<(u64, Event, u64)>,
}

/// What the checker thread receives.
#[derive(Debug)]
pub(crate) enum Report {
    /// Every reference to the tree is gone: judge it.
    Final(Box<Record>),
    /// A second (or later) completion for a tree still in flight.
    Extra(Box<Record>, Outcome),
    /// A completion whose payload does not name a slot holding that root.
    Stray {
        root: u64,
        payload: u32,
        outcome: Outcome,
    },
    /// A tree still holding references after the run drained (judged as never completed).
    Stuck(Box<Record>),
    /// The run is over: hand back the tallies.
    End,
}

// === impl Oracle ===

/// The slots, the clock, and the channels out: to the checker and back to the spouts.
#[derive(Debug)]
pub(crate) struct Oracle {
    slots: Box<[Slot]>,
    clock: MonotonicClock,
    timeout: u64,
    per_spout: usize,
    free: Vec<Sender<u32>>,
    reports: Sender<Report>,
    /// Completions seen (for the progress line).
    pub(crate) completions: AtomicU64,
    /// For a planted-bug check: report every `Acked` as `Failed` (see `--plant-bug`).
    plant_bug: bool,
}

impl Oracle {
    /// `spouts * per_spout` slots; returns the oracle, each spout's free-slot receiver
    /// (pre-filled with its slots) and the checker's receiver.
    pub(crate) fn new(
        spouts: usize,
        per_spout: usize,
        timeout: u64,
        plant_bug: bool,
    ) -> (Oracle, Vec<Receiver<u32>>, Receiver<Report>) {
        let mut free = Vec::new();
        let mut free_rx = Vec::new();
        for s in 0..spouts {
            let (tx, rx) = crossbeam_channel::bounded(per_spout);
            for i in 0..per_spout {
                tx.send((s * per_spout + i) as u32)
                    .expect("fill a free list");
            }
            free.push(tx);
            free_rx.push(rx);
        }
        let (reports, reports_rx) = crossbeam_channel::unbounded();
        let oracle = Oracle {
            slots: (0..spouts * per_spout).map(|_| Slot::default()).collect(),
            clock: MonotonicClock::new(),
            timeout,
            per_spout,
            free,
            reports,
            completions: AtomicU64::new(0),
            plant_bug,
        };
        (oracle, free_rx, reports_rx)
    }

    /// The acker's clock.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    pub(crate) fn timeout(&self) -> u64 {
        self.timeout
    }

    fn slot(&self, slot: u32) -> &Slot {
        &self.slots[slot as usize]
    }

    pub(crate) fn add_refs(&self, slot: u32, n: u32) {
        if n > 0 {
            // Relaxed: the caller holds a reference, so the count cannot reach 0 meanwhile.
            self.slot(slot).refs.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Drops one reference; the last one sends the tree to the checker and frees the slot.
    pub(crate) fn release(&self, slot: u32) {
        // AcqRel: every thread's writes to the slot happen before its release, and the last
        // releaser's snapshot must see them all.
        if self.slot(slot).refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            let record = self.snapshot(slot);
            self.slot(slot).root.store(0, Ordering::Release);
            let _ = self.reports.send(Report::Final(Box::new(record)));
            let owner = slot as usize / self.per_spout;
            let _ = self.free[owner].send(slot);
        }
    }

    /// A slot a spout took but did not use goes back to its free list.
    pub(crate) fn give_back(&self, slot: u32) {
        let _ = self.free[slot as usize / self.per_spout].send(slot);
    }

    /// The acker's `on_complete`.
    pub(crate) fn on_complete(&self, c: Completion<u32>) {
        let now = self.now();
        self.completions.fetch_add(1, Ordering::Relaxed);
        let outcome = if self.plant_bug && c.outcome == Outcome::Acked {
            Outcome::Failed
        } else {
            c.outcome
        };
        let slot = c.payload;
        let known = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.root.load(Ordering::Acquire) == c.root && c.root != 0);
        if !known {
            let _ = self.reports.send(Report::Stray {
                root: c.root,
                payload: slot,
                outcome,
            });
            return;
        }
        let s = self.slot(slot);
        let elapsed = u64::try_from(c.elapsed.as_nanos()).unwrap_or(u64::MAX);
        let n = s.completions.fetch_add(1, Ordering::AcqRel);
        self.log(
            slot,
            Event::Complete,
            now,
            u64::from(outcome_code(outcome)) + 16 * u64::from(n),
        );
        if n == 0 {
            s.outcome.store(outcome_code(outcome), Ordering::Relaxed);
            s.completed_at.store(now, Ordering::SeqCst); // SeqCst: see `reset`
            s.elapsed.store(elapsed, Ordering::Relaxed);
            self.release(slot);
        } else {
            let _ = self
                .reports
                .send(Report::Extra(Box::new(self.snapshot(slot)), outcome));
        }
    }

    /// Slots still referenced (trees in flight).
    pub(crate) fn in_flight(&self, free: &[Receiver<u32>]) -> usize {
        self.slots.len() - free.iter().map(Receiver::len).sum::<usize>()
    }

    /// After the drain: every slot still referenced goes to the checker as stuck.
    pub(crate) fn report_stuck(&self, free: &[Receiver<u32>]) {
        let mut is_free = vec![false; self.slots.len()];
        for rx in free {
            for slot in rx.try_iter().collect::<Vec<_>>() {
                is_free[slot as usize] = true;
            }
        }
        for (slot, free) in is_free.into_iter().enumerate() {
            if !free {
                let record = self.snapshot(slot as u32);
                let _ = self.reports.send(Report::Stuck(Box::new(record)));
            }
        }
    }

    pub(crate) fn end(&self) {
        let _ = self.reports.send(Report::End);
    }

    fn snapshot(&self, slot: u32) -> Record {
        let s = self.slot(slot);
        let len = s.log_len.load(Ordering::Acquire) as usize;
        let mut log: Vec<(u64, Event, u64)> = s.log[..len.min(LOG)]
            .iter()
            .filter_map(|e| {
                let w = e[0].load(Ordering::Relaxed);
                Event::from_code(w >> 56)
                    .map(|ev| (w & TIME_MASK, ev, e[1].load(Ordering::Relaxed)))
            })
            .collect();
        log.sort_by_key(|e| e.0);
        let msg = s.msg.load(Ordering::Relaxed);
        let late = s.late_resets_len.load(Ordering::Relaxed) as usize;
        let late: Vec<(u64, u64)> = s.late_resets[..late.min(LATE_RESETS)]
            .iter()
            .map(|r| (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed)))
            .collect();
        let (deadline, reset) = binding_deadline(
            s.deadline.load(Ordering::Relaxed),
            &late,
            decided_after(
                s.first_before.load(Ordering::Relaxed),
                s.outcome.load(Ordering::Relaxed),
                s.elapsed.load(Ordering::Relaxed),
            ),
            self.timeout,
        );
        Record {
            slot,
            root: s.root.load(Ordering::Acquire),
            tree: s.tree.load(Ordering::Relaxed),
            msg: msg >> 8,
            attempt: msg as u8,
            flags: s.flags.load(Ordering::Relaxed) | if reset { RESET } else { 0 },
            completions: s.completions.load(Ordering::Relaxed),
            outcome: s.outcome.load(Ordering::Relaxed),
            first_before: s.first_before.load(Ordering::Relaxed),
            init_after: s.init_after.load(Ordering::Relaxed),
            fail_before: s.fail_before.load(Ordering::Relaxed),
            fail_after: s.fail_after.load(Ordering::Relaxed),
            last_after: s.last_after.load(Ordering::Relaxed),
            deadline,
            completed_at: s.completed_at.load(Ordering::Relaxed),
            elapsed: s.elapsed.load(Ordering::Relaxed),
            events_dropped: len.saturating_sub(LOG) as u32,
            log,
        }
    }
}

// === verify ===

mod checker;
mod messages;
mod verdict;
pub(crate) use checker::{check, Tally};
use verdict::{before, binding_deadline, decided_after, ELAPSED_TICK_NS};
pub(crate) use verdict::{history, verify, Fate};

#[cfg(test)]
mod tests;
