//! The engine's side of the reaper's publication (module docs, "Sleeping" and "Callers
//! first"): whether a registration must wake the thread, the wake itself, the caller's help, the
//! thread's handle and the count of its panics. (The manual driver's side is
//! [`driver`](super::driver); what the tests and loom models use to stand in for the
//! thread or look at its wheel, `probes`.)

use std::thread;

use super::{late_after, AWAKE};
use crate::acker::engine::Engine;
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// Whether the reaper thread, marked idle, may sleep past tick `by` (an entry's, which
    /// must reach it by then): parked with nothing pending (or about to sleep, its timer
    /// not yet published), or asleep on a timer set after it. Otherwise its timer wakes it
    /// in time, and the registration need not: a wake from the caller's thread makes the
    /// kernel switch to the reaper at once (its short slice, [`slice`](crate::sync::slice)),
    /// and the call that registered waits out the reaper's turn ([`reaper`](super), "Sleeping"). A
    /// manual acker's driver publishes the tick its sleep ends in
    /// ([`driver`](super::driver)), [`AWAKE`] while it runs a pass or sleeps with no
    /// deadline.
    #[inline]
    pub(in crate::acker::engine) fn reaper_sleeps_past(&self, by: Tick) -> bool {
        let wakes_at = if self.reaper.manual {
            &self.reaper.thread_wakes_at
        } else {
            &*self.reaper.wakes_at
        };
        let wakes_at = wakes_at.load(Ordering::SeqCst);
        wakes_at == AWAKE || !reached(wakes_at as Tick, by)
    }

    pub(in crate::acker::engine) fn wake_reaper(&self) {
        if let Some(thread) = self.reaper.thread.get() {
            // Its pass is due now: if it gets no core within a lateness, a caller runs it
            // ([`reaper`](super), "Callers first"); not at once, or the caller that
            // registered would run the pass it has just woken the thread for. The thread publishes again
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
    /// `true` when it did. (The async acker's inits help at their own tick,
    /// [`init_then_help`](Engine::init_then_help).)
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn help_late_reaper(&self) -> bool {
        super::help_if_late(self)
    }

    pub(in crate::acker) fn set_reaper_thread(&self, thread: thread::Thread) {
        let _ = self.reaper.thread.set(thread);
    }

    /// A panic in a reaper pass (the thread's or a caller's, or the caller's clock before
    /// one), or a reaper thread lost to one: counted.
    pub(in crate::acker::engine) fn count_reaper_panic(&self) {
        self.reaper.panics.fetch_add(1, Ordering::SeqCst);
    }
}
