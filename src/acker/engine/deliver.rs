//! A completion's last steps, on the thread whose CAS completed the tree (or the reaper's,
//! for a timeout): the payload is taken and the slot freed before anything that can panic
//! (the clock, the callback), so a panic loses no completion and leaks no slot; then the
//! statistics, and the callback if the calling operation found it open. A completion is
//! always counted before its callback runs; the reaper counts a pass's timeouts all at
//! once, before the first.
//!
//! ## A burst's order
//!
//! A pass claims its timeouts group by group, in the order of the tables' slots, which is
//! the order of the roots' hashes: unrelated to the order in which the trees were started.
//! The async acker's callback wakes each tree's task, so a pass that delivers a burst
//! touches a million task headers (and the runtime then polls and frees those tasks) in
//! a random order, a cache and TLB miss each; tokio's own timer fires the entries of one
//! deadline in the order they were registered. So an acker built with a delivery order (the
//! async acker's: each payload's cell number, which its slab hands out in about the order
//! the trees are started) delivers a pass of [`ORDER_FROM`] timeouts or more sorted by it.
//! In the stress run's shared-deadline phase (a million trees timing out at once on a
//! saturated two-worker runtime, 2-core VM), the last of the million timed out 0.73-2.33 s
//! after the deadline sorted (median 2.14 s), against 2.81-3.26 s in hash order (median
//! 3.03 s), five alternating pairs, with `tokio::time::timeout`'s last at 0.52-1.97 s in
//! the same runs. A caller's pass (a few dozen timeouts at most) is left unsorted: too few
//! to pay for the sort.
//!
//! The burst's completions are ended first, in the pass's own order (a walk of the tables'
//! lines, each read once for its lateness and its end), and the completions, which hold
//! their payloads, are sorted then: sorting the claims instead read each payload in the
//! table for its key and then walked the lines again in the sorted order, a random one,
//! for the lateness and the end. In the shared-deadline phase the deliveries of a million
//! took 261-316 ns a tree against 269-373 (three alternating pairs). The sort is unstable
//! (two payloads of one key, which the async acker's cell numbers never are, go in either
//! order): in place, where a stable sort of a million 40-byte completions takes a scratch
//! buffer as large, and about 1.5 times as long (31-32 ms against 45-51 ms on one core of
//! a 2-core VM, the hand-over's batches included).
//!
//! ## A burst's hand-over
//!
//! The async acker's callback wakes a task, and a task woken from the reaper thread, which
//! is no worker of its runtime, goes to the runtime's shared queue, one lock a task, while
//! the thread takes a third share of two cores that two busy workers need. So an acker
//! built with a hand-over for bursts (the async acker on a multi-thread runtime:
//! `future::async_acker::build`, "A burst on the workers") passes a pass's
//! burst of [`ORDER_FROM`] timeouts or more to it in batches of [`HAND_OVER_BATCH`],
//! each completion ended (payload taken, slot freed, counted) as it would be for the
//! callback, and the hand-over delivers them where it likes (a task on the runtime, which
//! wakes them from a worker into that worker's own queue). The hand-over stands for the
//! callback: it is called only while the operation finds the callback open, paused and
//! caught as the callback is (one that panics loses its batch, as a callback that panics
//! loses its completion: the async acker's only spawns a task, whose deliveries catch
//! their own payloads' panics), and shutdown drops it with the callback. In the stress run's
//! shared-deadline phase (2-core VM, eight runs alternating with seven of the thread's
//! own delivery), the last of the million timed out 1.57-1.99 s after the deadline
//! (median 1.74 s) against 1.30-2.43 s (median 2.13 s), and 0.93-1.16 times
//! `tokio::time::timeout`'s last in the same runs (median 1.05) against 0.74-2.16
//! (median 1.07).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use super::Engine;
use crate::acker::outcome::{BurstHandOver, Completion, Outcome};
use crate::acker::table::{Completed, Stamp, Table};
use crate::acker::threads::Active;
use crate::acker::timers::ticks::{full_near, Tick};

/// The fewest timeouts of one pass that are delivered in the acker's delivery order (module
/// docs, "A burst's order"). Fewer under Miri, whose tests of a burst interpret every
/// tree's init and timeout.
pub(super) const ORDER_FROM: usize = if cfg!(miri) { 64 } else { 1024 };

/// The completions in each batch of a burst's hand-over (module docs, "A burst's
/// hand-over"): a million make 245 tasks, each one lock on the runtime's shared queue,
/// where a task a completion would take a million; and a batch holds its worker for its
/// wake-ups alone, not for a whole burst's.
pub(super) const HAND_OVER_BATCH: usize = 4096;

impl<T: Send + 'static> Engine<T> {
    /// Finishes a message's completion claimed in `table` (a generation of `shard`): takes
    /// the payload, frees the slot, reads the clock, counts and delivers. `root`: the
    /// tree's id, which the completion reports, when the caller has it at hand (else it is
    /// computed back from the key). `active`: the calling operation, on the calling
    /// thread; it may call the callback if it found it
    /// [`open`](crate::acker::threads::Active::open).
    #[inline]
    pub(super) fn deliver(
        &self,
        shard: usize,
        table: &Table<T>,
        completed: Completed,
        root: Option<u64>,
        active: &Active,
    ) {
        self.finish_completion(shard, table, completed, None, active, true, root);
    }

    /// The timeouts of one reaper pass at full tick `now`: counted first, all at once
    /// (three statistics' RMWs a pass rather than a tree: locked operations that would each
    /// stall the pass's cache misses behind them), then delivered one by one. Counted
    /// before the first callback, as [`deliver`](Self::deliver) counts before its own. A
    /// burst that goes in the delivery order or to the hand-over is ended first
    /// ([`deliver_burst`](Self::deliver_burst)).
    pub(super) fn deliver_timeouts(
        &self,
        timed_out: Vec<(usize, &Table<T>, Completed)>,
        now: u64,
        active: &Active,
    ) {
        if timed_out.is_empty() {
            return;
        }
        let hand_over = if active.open && timed_out.len() >= ORDER_FROM {
            // Safety: the calling operation found the callback open, so shutdown drops
            // the hand-over with it only after this operation ends
            // ([`marks`](crate::acker::threads::marks), "Closing the callback").
            unsafe { &*self.burst_hand_over.get() }.as_ref()
        } else {
            None
        };
        let order = self
            .delivery_order
            .filter(|_| timed_out.len() >= ORDER_FROM);
        if hand_over.is_some() || order.is_some() {
            return self.deliver_burst(timed_out, now, order, hand_over, active);
        }
        let anchor = self.time.anchor();
        let (mut late_max, mut late_total) = (0, 0);
        for (_, table, completed) in &timed_out {
            let late = lateness(table, completed.slot, anchor, now);
            late_max = late_max.max(late);
            late_total += late;
        }
        self.count_timeouts(timed_out.len(), late_max, late_total, active);
        for (shard, table, completed) in timed_out {
            self.finish_completion(shard, table, completed, Some(now), active, false, None);
        }
    }

    /// A burst's timeouts (module docs, "A burst's order", "A burst's hand-over"): each
    /// ended in the pass's order (one walk of the tables' lines), counted, then sorted by
    /// `order` and delivered, to `hand_over` a batch at a time if there is one.
    fn deliver_burst(
        &self,
        timed_out: Vec<(usize, &Table<T>, Completed)>,
        now: u64,
        order: Option<fn(&T) -> u32>,
        hand_over: Option<&BurstHandOver<T>>,
        active: &Active,
    ) {
        let anchor = self.time.anchor();
        let (mut late_max, mut late_total) = (0, 0);
        let mut done = Vec::with_capacity(timed_out.len());
        for (shard, table, completed) in timed_out {
            // Read before the end frees the slot, with its times.
            let late = lateness(table, completed.slot, anchor, now);
            late_max = late_max.max(late);
            late_total += late;
            let (completion, _) =
                self.end_completion(shard, table, completed, Some(now), active, false, None);
            done.push(completion);
        }
        self.count_timeouts(done.len(), late_max, late_total, active);
        if let Some(order) = order {
            done.sort_unstable_by_key(|completion| order(&completion.payload));
        }
        match hand_over {
            Some(hand_over) => {
                let mut done = done.into_iter();
                loop {
                    let batch: Vec<_> = done.by_ref().take(HAND_OVER_BATCH).collect();
                    if batch.is_empty() {
                        break;
                    }
                    // Stands for the callback: paused and caught as it is.
                    self.paused_and_caught(active, || hand_over(batch));
                }
            }
            None => {
                for completion in done {
                    self.hand_over(completion, active);
                }
            }
        }
    }

    /// Counts a pass's `n` timeouts, their longest and total lateness.
    fn count_timeouts(&self, n: usize, late_max: u64, late_total: u64, active: &Active) {
        let tally = self.threads.tally_in(active);
        tally.max_lateness(late_max);
        tally.add(|c| &c.lateness_total, late_total);
        tally.add(|c| &c.timed_out, n as u64);
    }

    /// A message's completion ([`deliver`](Self::deliver)) or a timeout's: `now` is the
    /// reaper's tick for a timeout (it has it), else the clock is read; the completion is
    /// counted unless `count` is false (its caller counted it); `root`, the tree's id when
    /// the caller has it.
    #[inline]
    #[allow(clippy::too_many_arguments)] // inlined into each caller, whose constants fold
    fn finish_completion(
        &self,
        shard: usize,
        table: &Table<T>,
        completed: Completed,
        now: Option<u64>,
        active: &Active,
        count: bool,
        root: Option<u64>,
    ) {
        let (completion, clock_panic) =
            self.end_completion(shard, table, completed, now, active, count, root);
        self.hand_over(completion, active);
        if let Some(panic) = clock_panic {
            std::panic::resume_unwind(panic);
        }
    }

    /// A claimed completion ended (module docs): its payload taken, its slot freed, its
    /// elapsed time read (`now`, or the clock), counted unless `count` is false, and the
    /// completion made, with the panic of a clock that panicked for the caller to resume
    /// once it is delivered.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // as `finish_completion`
    fn end_completion(
        &self,
        shard: usize,
        table: &Table<T>,
        completed: Completed,
        now: Option<u64>,
        active: &Active,
        count: bool,
        root: Option<u64>,
    ) -> (Completion<T>, Option<Box<dyn std::any::Any + Send>>) {
        let Completed {
            slot, key, outcome, ..
        } = completed;
        // Safety: `completed` is a completion this acker's call claimed, ended (its payload
        // taken, its slot freed) once, here.
        let (stamp, own_timeout, payload) =
            unsafe { table.end(slot, key, self.threads.hand_in(active)) };
        // The tree is complete and its slot free: a clock that panics now must not lose the
        // completion. It is delivered (elapsed 0), and then the panic goes on to the
        // caller.
        let (now, clock_panic) = match now {
            Some(now) => (Some(now), None),
            // The counter's path reads `MonotonicClock`, which does not panic.
            None if self.time.tsc_ticks => (Some(self.time.caller_full()), None),
            None => match catch_unwind(AssertUnwindSafe(|| self.time.clock.now())) {
                Ok(ns) => (Some(self.time.ticks.full(ns)), None),
                Err(panic) => (None, Some(panic)),
            },
        };
        let elapsed = self.elapsed(table, stamp, own_timeout, outcome, now);
        if count {
            self.count_outcome(table, slot, outcome, now, active);
        }
        let completion = Completion {
            root: root.unwrap_or_else(|| self.tables.layout.root(shard, key)),
            payload,
            outcome,
            elapsed,
        };
        (completion, clock_panic)
    }

    /// A completion's `elapsed` (`now`: the full tick it completed at, if the clock could be
    /// read), from its start in full ticks ([`times`](crate::acker::table::times): it never
    /// aliases, whatever the tree's life); a clock that stepped back below the start gives
    /// 0.
    #[inline(always)]
    fn elapsed(
        &self,
        table: &Table<T>,
        stamp: Option<Stamp>,
        own_timeout: Option<Tick>,
        outcome: Outcome,
        now: Option<u64>,
    ) -> Duration {
        let ticks = match (stamp, now) {
            (Some(stamp), Some(now)) => stamp.age(self.time.anchor(), now),
            _ => 0,
        };
        let elapsed = self.time.ticks.nanos(ticks);
        if outcome != Outcome::TimedOut {
            return elapsed;
        }
        // Never less than the timeout (the deadline was reached: this only undoes the
        // rounding of ticks).
        let timeout = table.timeout_or_default(own_timeout);
        elapsed.max(self.time.ticks.nanos(u64::from(timeout - 1)))
    }

    /// Counts a completion of `slot` of `table` by its outcome, a timeout's lateness too.
    #[inline(always)]
    fn count_outcome(
        &self,
        table: &Table<T>,
        slot: usize,
        outcome: Outcome,
        now: Option<u64>,
        active: &Active,
    ) {
        let tally = self.threads.tally_in(active);
        match outcome {
            Outcome::Acked => tally.add(|c| &c.acked, 1),
            Outcome::Failed => tally.add(|c| &c.failed, 1),
            Outcome::TimedOut => {
                let anchor = self.time.anchor();
                let late = now.map_or(0, |now| lateness(table, slot, anchor, now));
                tally.max_lateness(late);
                tally.add(|c| &c.lateness_total, late);
                tally.add(|c| &c.timed_out, 1);
            }
        }
    }

    /// Hands a completion to the callback, inside the operation `active` marks, or drops
    /// it when there is none (or shutdown closed it).
    #[inline(always)]
    fn hand_over(&self, completion: Completion<T>, active: &Active) {
        // Caught: a panicking callback, or payload drop when there is none, must not unwind
        // through an acker operation (or end the reaper).
        let callback = if active.open {
            // Safety: the calling operation found the callback open, so shutdown drops it
            // only after this operation ends ([`marks`](crate::acker::threads::marks),
            // "Closing the callback").
            unsafe { &*self.on_complete.get() }.as_ref()
        } else {
            None
        };
        self.paused_and_caught(active, || match callback {
            Some(f) => f(completion),
            None => drop(completion),
        });
    }

    /// Runs `user`, the user's code (a callback, a payload's drop, the burst's hand-over
    /// that stands for the callback), inside the operation `active`: paused, and caught
    /// (counted in `callback_panics`).
    #[inline(always)]
    fn paused_and_caught(&self, active: &Active, user: impl FnOnce()) {
        // Paused ([`marks`](crate::acker::threads::marks), "Re-anchoring"): the user's code
        // may take as long as it likes or wait for a thread that is itself at an acker
        // entry; a re-anchoring goes on without it. What it is handed holds nothing of the
        // tables, and what the operation does after it reads its times again.
        let paused = self.threads.pause_in(active);
        let delivered = catch_unwind(AssertUnwindSafe(user));
        drop(paused);
        if delivered.is_err() {
            // Relaxed: a statistic.
            self.tally().add(|c| &c.callback_panics, 1);
        }
    }
}

/// How many ticks after its deadline's tick `slot`'s timeout at full tick `now` came, its
/// deadline decoded at `anchor`. (A completed slot keeps its times until it is freed; none
/// reads as on time.)
fn lateness<T>(table: &Table<T>, slot: usize, anchor: u64, now: u64) -> u64 {
    table.deadline(slot).map_or(0, |deadline| {
        now.saturating_sub(full_near(anchor, deadline))
    })
}
