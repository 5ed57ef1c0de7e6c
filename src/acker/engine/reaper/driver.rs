//! A manual acker's passes run by a driver in place of the reaper thread
//! ([`manual`](crate::acker::manual), and the tokio feature's `spawn_expiry`): when the
//! next pass has work, as the thread's sleep decision (`next_wait`) makes it, the
//! pass itself, and the hook that wakes a sleeping driver where the thread would be
//! unparked.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use super::pass::run_once;
use super::thread::{next_wait, Wait};
use super::AWAKE;
use crate::acker::engine::Engine;
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// Manual mode: when a pass next has work, as [`next_wait`] decides it after a
    /// pass (and with its idle mark: a driver unidles when it wakes, [`Engine::unidle`]).
    /// `Next::Never` on an acker with a reaper thread, which serves it, and the decision is
    /// then not made here (marking its reaper idle would only add wake-ups).
    pub(in crate::acker) fn next_pass(&self) -> Next {
        if !self.reaper.manual {
            return Next::Never;
        }
        if self.stopping() {
            return Next::Stop;
        }
        match next_wait(self) {
            Wait::Again => Next::Now,
            Wait::Tick { from } => Next::At(self.tick_start(from.wrapping_add(1))),
            // At least a tick, as the thread sleeps: each pass moves the wheel to the
            // clock's tick, so a driver that sleeps until this never spins.
            Wait::Ticks { ticks, from } => {
                Next::At(self.tick_start(from.wrapping_add(ticks.max(1))))
            }
            Wait::Forever => Next::Never,
            Wait::Stop => Next::Stop,
        }
    }

    /// The clock time at which full tick `tick` begins (`TickScale::full` of it is `tick`).
    pub(in crate::acker) fn tick_start(&self, tick: u64) -> u64 {
        // Bits shifted out wrap, as the clock's timeline does.
        self.time
            .ticks
            .epoch
            .wrapping_add(tick.wrapping_sub(1) << self.time.ticks.shift)
    }

    /// The clock's reading.
    pub(in crate::acker) fn now(&self) -> u64 {
        self.time.clock.now()
    }

    /// One tick of the resolution.
    pub(in crate::acker) fn tick(&self) -> Duration {
        Duration::from_nanos(1 << self.time.ticks.shift)
    }

    /// Manual mode, a driver's pass: the reaper thread's (the dirty groups scanned when
    /// their tick comes, so that trees completing before then never reach the wheel),
    /// counted as the thread's are.
    /// `false` when it panicked (counted): the driver then waits a tick, as the thread
    /// does, rather than spin on a clock that keeps panicking.
    pub(in crate::acker) fn driven_pass(&self) -> bool {
        match catch_unwind(AssertUnwindSafe(|| run_once(self, false))) {
            Ok(pass) => {
                if !pass.worked {
                    self.reaper.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic
                }
                true
            }
            Err(_) => {
                self.count_reaper_panic();
                false
            }
        }
    }

    /// Manual mode: one reaper pass now, scanning every dirty group. Completions delivered.
    pub(in crate::acker) fn expire(&self) -> usize {
        if !self.reaper.manual {
            return 0;
        }
        run_once(self, true).delivered
    }

    /// A driver woke ([`reaper`](super), [`Wait`]): awake until it publishes its next sleep
    /// ([`driver_sleeps`](Self::driver_sleeps)), so a registration made meanwhile calls its
    /// waker if it finds it idle again.
    pub(in crate::acker) fn unidle(&self) {
        self.reaper.thread_wakes_at.store(AWAKE, Ordering::SeqCst);
        self.threads.unidle();
    }

    /// Manual mode: the driver sleeps as `next` (from [`next_pass`](Self::next_pass))
    /// says: it publishes the tick its sleep ends in, so that a registration due no sooner
    /// need not call its waker (`Engine::reaper_sleeps_past`), as a registration leaves the
    /// reaper thread's timer be. Stored after `next_pass`'s idle mark and look at the
    /// summary: a registration those missed reads [`AWAKE`] (stored when the driver woke,
    /// before that mark) or this, and calls the waker for an entry due sooner.
    pub(in crate::acker) fn driver_sleeps(&self, next: Next) {
        let ends = match next {
            Next::At(at) => self.time.ticks.full(at),
            Next::Now | Next::Never | Next::Stop => AWAKE,
        };
        self.reaper.thread_wakes_at.store(ends, Ordering::SeqCst);
    }

    /// Manual mode: sets the hook [`Engine::wake_reaper`] calls. `false` when one is set
    /// already, or the acker has a reaper thread.
    pub(in crate::acker) fn set_expiry_waker(&self, wake: ExpiryWaker) -> bool {
        self.reaper.manual && self.reaper.expiry_waker.set(wake).is_ok()
    }

    /// Shutdown: a driver asleep must see it.
    pub(in crate::acker) fn wake_driver(&self) {
        if let Some(wake) = self.reaper.expiry_waker.get() {
            wake();
        }
    }
}

/// The hook that wakes a task driving a manual acker's passes.
pub(in crate::acker) type ExpiryWaker = Box<dyn Fn() + Send + Sync>;

/// When a manual acker's next pass has work ([`Engine::next_pass`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker) enum Next {
    /// Now: entries arrived as the pass finished.
    Now,
    /// At this clock time (on the clock's wrapping timeline); earlier when woken.
    At(u64),
    /// Nothing pending anywhere (or a reaper thread serves the acker): until woken.
    Never,
    /// Shut down: no more passes.
    Stop,
}
