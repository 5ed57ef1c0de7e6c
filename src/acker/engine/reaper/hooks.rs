//! The engine's side of the reaper's publication (module docs, "Sleeping" and "Callers
//! first"): whether a push must wake the thread, the wake itself, the caller's help, and
//! the hooks the tests and loom models use to stand in for the thread or to look at its
//! wheel, a manual acker's pass, and the count of its panics.

use std::thread;

use super::{help_if_late, late_after, AWAKE};
#[cfg(any(test, loom, feature = "internals"))]
use crate::acker::engine::generations::chain;
use crate::acker::engine::Engine;
#[cfg(any(test, loom, feature = "internals"))]
use crate::acker::table::GROUP_SLOTS;
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// Whether the reaper thread, marked idle, may sleep past tick `hand_off` (an entry's,
    /// which must reach it by then): parked with nothing pending (or about to sleep, its
    /// timer not yet published), or asleep on a timer set after it. Otherwise its timer
    /// wakes it in time, and the push need not: a wake from the caller's thread makes the
    /// kernel switch to the reaper at once (its short slice,
    /// [`slice`](crate::sync::slice)), and the call that pushed waits out the reaper's
    /// turn ([`reaper`](super), "Sleeping"). A manual acker's driver publishes no timer: always.
    #[inline]
    pub(in crate::acker::engine) fn reaper_sleeps_past(&self, hand_off: Tick) -> bool {
        if self.manual {
            return true;
        }
        let wakes_at = self.reaper.wakes_at.load(Ordering::SeqCst);
        wakes_at == AWAKE || !reached(wakes_at as Tick, hand_off)
    }

    pub(in crate::acker::engine) fn wake_reaper(&self) {
        if let Some(thread) = self.reaper.thread.get() {
            // Its pass is due now: if it gets no core within a lateness, a caller runs it
            // ([`reaper`](super), "Callers first"); not at once, or the caller that pushed would
            // run the pass it has just woken the thread for. The thread publishes again
            // when it runs.
            let late = self.time.caller_full() + late_after(self.time.ticks.shift);
            self.reaper.wakes_at.fetch_min(late, Ordering::SeqCst);
            // For callers, as a timer due then, so that they help a thread starved that
            // long (a pass publishes the wheel's own again). Relaxed: a hint.
            self.reaper.timers_due_at.fetch_min(late, Ordering::Relaxed);
            thread.unpark();
        } else if let Some(wake) = self.reaper.expiry_waker.get() {
            wake();
        }
    }

    /// Runs the reaper thread's pass here once it is due ([`reaper`](super), "Callers first"):
    /// `true` when it did.
    pub(in crate::acker) fn help_late_reaper(&self) -> bool {
        help_if_late(self)
    }

    /// [`Acker::pretend_reaper_late`](crate::Acker::pretend_reaper_late).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn pretend_reaper_late(&self) {
        let now = self.time.ticks.full(self.time.clock.now());
        crate::sync::store_raced(
            &self.reaper.wakes_at,
            now.saturating_sub(2),
            Ordering::SeqCst,
        );
    }

    /// [`Acker::pretend_reaper_running`](crate::Acker::pretend_reaper_running).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn pretend_reaper_running(&self) {
        crate::sync::store_raced(&self.reaper.wakes_at, AWAKE, Ordering::SeqCst);
    }

    /// Whether the published timer says the reaper thread runs (no timer), for the loom
    /// models.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn reaper_published_running(&self) -> bool {
        self.reaper.wakes_at.load(Ordering::SeqCst) == AWAKE
    }

    pub(in crate::acker) fn set_reaper_thread(&self, thread: thread::Thread) {
        let _ = self.reaper.thread.set(thread);
    }

    /// Entries in the reaper's wheel (for tests).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn scheduled_timers(&self) -> usize {
        self.reaper.lock_wheel().len()
    }

    /// Roots the reaper's timers cover: in a group whose filed tick is at or before their
    /// deadline ([`groups`](crate::acker::timers::groups)). For tests: right after a manual
    /// pass, every pending root.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn covered_roots(&self) -> usize {
        let active = self.threads.enter();
        let wheel = self.reaper.lock_wheel();
        let mut covered = 0;
        for (shard, t) in self.tables.shards.iter().enumerate() {
            // Safety: inside the operation `active` marks.
            for table in chain(unsafe { t.current() }) {
                for slot in 0..table.slots() {
                    let (Some(_), Some(deadline)) = (table.key_in(slot), table.deadline(slot))
                    else {
                        continue;
                    };
                    let filed = wheel.filed(shard, table.gen(), slot / GROUP_SLOTS);
                    if filed.is_some_and(|filed| reached(filed as Tick, deadline)) {
                        covered += 1;
                    }
                }
            }
        }
        drop(wheel);
        drop(active);
        covered
    }

    /// Manual mode: one reaper pass now, with every batch's entries. Completions delivered.
    pub(in crate::acker) fn expire(&self) -> usize {
        if !self.manual {
            return 0;
        }
        super::run_once(self, true).delivered
    }

    /// A panic in a reaper pass (the thread's or a caller's, or the caller's clock before
    /// one), or a reaper thread lost to one: counted.
    pub(in crate::acker::engine) fn count_reaper_panic(&self) {
        self.reaper.panics.fetch_add(1, Ordering::SeqCst);
    }

    /// Panics caught in reaper passes, and reaper threads lost to one.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn reaper_panics(&self) -> u64 {
        self.reaper.panics.load(Ordering::SeqCst)
    }
}
