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

    /// A spout takes a free slot for a new tree with `children` root tuples. Returns the
    /// reading taken before any message of the tree, which starts the oracle's deadline.
    pub(crate) fn begin(
        &self,
        slot: u32,
        root: u64,
        tree: u64,
        msg: u64,
        attempt: u8,
        children: u32,
    ) -> u64 {
        let s = self.slot(slot);
        // Relaxed throughout: the slot reaches other threads only through a channel send
        // (a tuple, or the payload inside the acker), which orders these stores before them.
        s.tree.store(tree, Ordering::Relaxed);
        s.msg
            .store(msg << 8 | u64::from(attempt), Ordering::Relaxed);
        // Spout until init is sent, the completion, and one per root tuple.
        s.refs.store(2 + children, Ordering::Relaxed);
        s.flags.store(0, Ordering::Relaxed);
        s.completions.store(0, Ordering::Relaxed);
        s.outcome.store(0, Ordering::Relaxed);
        s.init_after.store(0, Ordering::Relaxed);
        s.fail_before.store(u64::MAX, Ordering::Relaxed);
        s.fail_after.store(u64::MAX, Ordering::Relaxed);
        s.completed_at.store(0, Ordering::Relaxed);
        s.elapsed.store(0, Ordering::Relaxed);
        s.log_len.store(0, Ordering::Relaxed);
        s.messages_in_flight.store(0, Ordering::Relaxed);
        s.last_message_after.store(0, Ordering::Relaxed);
        s.late_resets_len.store(0, Ordering::Relaxed);
        s.root.store(root, Ordering::Release);
        let before = self.now();
        s.first_before.store(before, Ordering::Relaxed);
        s.last_after.store(before, Ordering::Relaxed);
        s.deadline
            .store(before.wrapping_add(self.timeout), Ordering::Relaxed);
        self.log(slot, Event::Start, before, u64::from(children));
        before
    }

    /// Appends to the tree's history.
    pub(crate) fn log(&self, slot: u32, event: Event, time: u64, data: u64) {
        let s = self.slot(slot);
        let i = s.log_len.fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(entry) = s.log.get(i) {
            entry[0].store((event as u64) << 56 | (time & TIME_MASK), Ordering::Relaxed);
            entry[1].store(data, Ordering::Relaxed);
        }
    }

    /// A message call for the tree has just returned: note the time and log it.
    pub(crate) fn sent(&self, slot: u32, event: Event, data: u64) -> u64 {
        let after = self.now();
        self.slot(slot)
            .last_after
            .fetch_max(after, Ordering::Relaxed);
        self.log(slot, event, after, data);
        after
    }

    /// An ack or fail for the tree is about to be called: returns the reading before it.
    /// Every such call ends with [`message_sent`](Self::message_sent) (or `fail_sent`).
    pub(crate) fn calling(&self, slot: u32) -> u64 {
        // SeqCst (and below): a reset's `late_reset` must see either this count or the
        // message's `last_message_after`, whichever way they interleave.
        self.slot(slot)
            .messages_in_flight
            .fetch_add(1, Ordering::SeqCst);
        self.now()
    }

    /// An ack or fail announced by [`calling`](Self::calling) has returned: note the time
    /// and log it.
    pub(crate) fn message_sent(&self, slot: u32, event: Event, data: u64) -> u64 {
        let after = self.sent(slot, event, data);
        let s = self.slot(slot);
        s.last_message_after.fetch_max(after, Ordering::SeqCst);
        s.messages_in_flight.fetch_sub(1, Ordering::SeqCst);
        after
    }

    pub(crate) fn flag(&self, slot: u32, flag: u32) {
        self.slot(slot).flags.fetch_or(flag, Ordering::Relaxed);
    }

    pub(crate) fn init_sent(&self, slot: u32, xor: u64) {
        let after = self.sent(slot, Event::Init, xor);
        self.slot(slot).init_after.store(after, Ordering::Relaxed);
    }

    pub(crate) fn fail_sent(&self, slot: u32, before: u64, completed: bool) {
        let after = self.message_sent(slot, Event::Fail, u64::from(completed));
        let s = self.slot(slot);
        s.flags.fetch_or(FAIL_SENT, Ordering::Relaxed);
        s.fail_before.fetch_min(before, Ordering::Relaxed);
        s.fail_after.fetch_min(after, Ordering::Relaxed);
    }

    /// A `reset_timeout` called at `called` returned `pending`. The acker must honour
    /// every reset that found the tree pending, even one racing the old deadline: the
    /// oracle's deadline becomes `called + timeout`.
    ///
    /// A `true` can also be about an orphan, not the tree: once the reaper has decided the
    /// tree's timeout, a late ack or fail makes an orphan for the root, and a reset finds it
    /// ("an uncompleted entry, initialized or not", API.md). The completion is delivered
    /// after the reaper's pass, tens of milliseconds later under TSan, so delivery does not
    /// date the decision. Two things do:
    ///
    /// * the decision came after the reaper read its clock, which `Completion::elapsed`
    ///   gives to within a tick: not before `first_before + elapsed - 2 ticks` (`verify`'s
    ///   `decided_after`);
    /// * an orphan needs a message that returned after the decision and began before the
    ///   reset returned. The latest such return the reset can vouch for is `orphan_by`:
    ///   the reset's own return when a message was under way, else the last message's
    ///   return (the count and the time are read in that order, and a message stores them
    ///   in the other, so one that began before the reset returned shows in one of them).
    ///   A message begun in the nanoseconds between the reset's return and these reads
    ///   counts too: lenient, by that window only.
    ///
    /// So a reset binds unless `orphan_by` is after the decision's earliest time. One whose
    /// `orphan_by` is before the base deadline less two ticks binds for certain, now; a later
    /// one is kept and decided when the tree is judged ([`LATE_RESETS`] of them; further ones
    /// are not held against the acker). A reset begun after the completion was delivered
    /// never binds.
    pub(crate) fn reset(&self, slot: u32, called: u64, pending: bool) {
        let after = self.sent(slot, Event::Reset, u64::from(pending));
        let s = self.slot(slot);
        // SeqCst: against the store in `on_complete`; a completion not seen yet is one
        // that may have raced the reset, which is held to it (the strict side).
        let completed_at = s.completed_at.load(Ordering::SeqCst);
        let after_completion = completed_at != 0 && before(completed_at, called);
        if !pending || after_completion {
            return;
        }
        // SeqCst (both): against `calling` and `message_sent` (see above).
        let orphan_by = if s.messages_in_flight.load(Ordering::SeqCst) > 0 {
            after
        } else {
            let last = s.last_message_after.load(Ordering::SeqCst);
            if before(last, after) {
                last
            } else {
                after
            }
        };
        // Relaxed (here and below): read by `snapshot` after every reference is dropped,
        // which the reference count's AcqRel orders.
        let certain = s
            .first_before
            .load(Ordering::Relaxed)
            .wrapping_add(self.timeout)
            .wrapping_sub(2 * ELAPSED_TICK_NS);
        if !before(certain, orphan_by) {
            s.deadline
                .fetch_max(called.wrapping_add(self.timeout), Ordering::Relaxed);
            s.flags.fetch_or(RESET, Ordering::Relaxed);
        } else if let Some(late) = s
            .late_resets
            .get(s.late_resets_len.fetch_add(1, Ordering::Relaxed) as usize)
        {
            late[0].store(called, Ordering::Relaxed);
            late[1].store(orphan_by, Ordering::Relaxed);
        }
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
mod verdict;
pub(crate) use checker::{check, Tally};
use verdict::{before, binding_deadline, decided_after, ELAPSED_TICK_NS};
pub(crate) use verdict::{history, verify, Fate};

#[cfg(test)]
mod tests;
