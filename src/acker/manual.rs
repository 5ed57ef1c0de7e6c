//! Expiry driven from outside the acker: when a manual acker's next pass has work, so that
//! whoever runs its passes (a task, `ackwheel::future::spawn_expiry`) can sleep exactly,
//! and the hook that wakes it when a new entry makes that time earlier.
//!
//! The decision is the reaper thread's own ([`reaper`](crate::acker::engine::reaper),
//! `next_wait`), with its idle mark, and the driver publishes the tick its sleep ends in
//! (`Engine::driver_sleeps`) as the thread publishes its timer: a registration that makes
//! the tick by which a pass must scan the dirty groups earlier (or sets it, the first
//! since a scan) after the mark calls the hook where it would unpark the thread, when the
//! driver's sleep ends after that tick ([`wake`](crate::acker::threads::wake)), so no
//! entry waits for a driver asleep past its tick, and entries due later cost the driver
//! no wake-up.

use std::ops::ControlFlow;
use std::sync::Weak;
use std::time::Duration;

use super::engine::{self, Next};
use super::Acker;

impl<T: Send + 'static> Acker<T> {
    /// Manual mode: the clock time (nanoseconds on the clock's wrapping timeline, as every
    /// time in this crate) at which [`expire`](Self::expire) next has work, or `None` when
    /// nothing is pending anywhere.
    ///
    /// That is the earliest of: the tick by which a pass must scan the trees created since
    /// the last scan (the tick before the earliest of their deadlines, less a quarter of
    /// the timeout and at most 67 ms or 64 ticks, whichever is longer: a pass then files
    /// their groups on the reaper's wheel; most complete before, and cost it nothing), the reaper wheel's next due tick,
    /// and the tables' housekeeping's next work (a migration to finish, a table to shrink,
    /// memory to free). Deadlines are kept in ticks of the resolution and rounded up (a
    /// tree never times out early), so the time returned for a tree filed by a pass is its
    /// deadline rounded up to a tick, and for one not scanned yet its scan's tick.
    ///
    /// It may be earlier than strictly needed, never later: a tree that completed after a
    /// pass filed its timer still counts until its deadline, and a pass then finds nothing
    /// (with nothing pending, it counts until the next tick, whose pass sweeps it).
    /// An init (or an orphan ack) after the call may make it earlier; a driver that sleeps
    /// until it must also be woken by such an init, which is what
    /// `ackwheel::future::spawn_expiry` arranges (the `tokio` feature).
    ///
    /// On an acker built with [`build`](crate::AckerBuilder::build) it returns `None`: its
    /// reaper thread serves it. After [`shutdown`](Self::shutdown) it returns `None`.
    ///
    /// ```
    /// use ackwheel::{Acker, ManualClock, Outcome};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let done = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&done);
    /// let clock = ManualClock::new(0);
    /// let acker: Acker<&str> = Acker::builder()
    ///     .timeout(Duration::from_secs(30))
    ///     .clock(clock.clone())
    ///     .on_complete(move |c| sink.lock().unwrap().push((c.root, c.outcome)))
    ///     .build_manual()
    ///     .unwrap();
    /// assert_eq!(acker.next_expiration(), None); // nothing pending
    ///
    /// acker.init(1, 0b11, "lost").unwrap();
    /// let deadline = 30_000_000_000;
    /// // Before the deadline: the new tree waits for a pass to file its timer, 67 ms or so
    /// // before its deadline (rounded up to ticks).
    /// let next = acker.next_expiration().unwrap();
    /// assert!(next < deadline && deadline - next < 100_000_000);
    ///
    /// // Each pass has work at the time it announces, none earlier.
    /// loop {
    ///     let Some(next) = acker.next_expiration() else { break };
    ///     assert!(next < deadline + 10_000_000, "at most a few ticks after the deadline");
    ///     clock.set(next);
    ///     acker.expire();
    /// }
    /// assert_eq!(*done.lock().unwrap(), [(1, Outcome::TimedOut)]);
    /// ```
    pub fn next_expiration(&self) -> Option<u64> {
        match self.engine().next_pass() {
            Next::Now => Some(self.engine().now()),
            Next::At(at) => Some(at),
            Next::Never | Next::Stop => None,
        }
    }

    /// [`next_expiration`](Self::next_expiration) as a delay from the clock's now: zero
    /// when a pass has work already; `None` when nothing is pending (or a reaper thread
    /// serves the acker).
    ///
    /// ```
    /// use ackwheel::{Acker, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(0);
    /// let acker: Acker<&str> = Acker::builder()
    ///     .timeout(Duration::from_secs(30))
    ///     .clock(clock.clone())
    ///     .build_manual()
    ///     .unwrap();
    /// assert_eq!(acker.next_expiration_delay(), None);
    ///
    /// acker.init(1, 0b11, "lost").unwrap();
    /// acker.expire(); // files the tree's timer
    /// let delay = acker.next_expiration_delay().unwrap();
    /// assert!(delay >= Duration::from_secs(30) && delay < Duration::from_millis(30_010));
    ///
    /// clock.advance(delay);
    /// assert_eq!(acker.next_expiration_delay(), Some(Duration::ZERO));
    /// assert_eq!(acker.expire(), 1); // timed out
    /// assert_eq!(acker.next_expiration_delay(), None);
    /// ```
    pub fn next_expiration_delay(&self) -> Option<Duration> {
        let at = self.next_expiration()?;
        let ahead = at.wrapping_sub(self.engine().now()) as i64;
        Some(Duration::from_nanos(ahead.max(0) as u64))
    }

    /// Manual mode: sets the hook called where the reaper thread would be unparked (an
    /// entry made while the driver may sleep past its deadline, or shutdown). Once per
    /// acker: `false` when one is set already, or the acker has a reaper thread. The hook
    /// runs on the thread of the acker call that made the entry: it must be quick.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the tokio driver's
    pub(crate) fn set_expiry_waker(&self, wake: impl Fn() + Send + Sync + 'static) -> bool {
        self.engine().set_expiry_waker(Box::new(wake))
    }

    /// The handle a driver task keeps: it does not keep the acker alive (dropping its last
    /// handle stops the driver, as it stops a reaper thread).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the tokio driver's
    pub(crate) fn expiry_driver(&self) -> ExpiryDriver<T> {
        ExpiryDriver {
            handle: std::sync::Arc::downgrade(&self.handle),
        }
    }
}

/// What a task that runs a manual acker's passes holds (see [`Acker::expiry_driver`]).
#[derive(Debug)]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the tokio driver's
pub(crate) struct ExpiryDriver<T: Send + 'static> {
    handle: Weak<engine::Handle<T>>,
}

#[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the tokio driver's
impl<T: Send + 'static> ExpiryDriver<T> {
    /// One pass, then how long to sleep: `Continue(Some(delay))` (zero: pass again at
    /// once) or `Continue(None)` (until woken), each ended early by the expiry waker;
    /// `Break` when the acker is shut down or dropped. After any sleep call
    /// [`woken`](Self::woken).
    pub(crate) fn step(&self) -> ControlFlow<(), Option<Duration>> {
        let Some(handle) = self.handle.upgrade() else {
            return ControlFlow::Break(());
        };
        let engine = &handle.engine;
        if engine.stopping() {
            return ControlFlow::Break(());
        }
        if !engine.driven_pass() {
            return ControlFlow::Continue(Some(engine.tick())); // a panic: do not spin
        }
        let next = engine.next_pass();
        engine.driver_sleeps(next);
        ControlFlow::Continue(match next {
            Next::Now => Some(Duration::ZERO),
            Next::At(at) => {
                let ahead = at.wrapping_sub(engine.now()) as i64;
                Some(Duration::from_nanos(ahead.max(0) as u64))
            }
            Next::Never => None,
            Next::Stop => return ControlFlow::Break(()),
        })
    }

    /// After a sleep: no longer idle (so pushes stop calling the waker until the next
    /// idle mark). `Break` when the acker is shut down or dropped.
    pub(crate) fn woken(&self) -> ControlFlow<()> {
        let Some(handle) = self.handle.upgrade() else {
            return ControlFlow::Break(());
        };
        handle.engine.unidle();
        if handle.engine.stopping() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock, Outcome};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    const RESOLUTION: u64 = 1 << 20; // the default 1 ms, rounded up to a power of two
    const TIMEOUT: u64 = 30_000_000_000;

    type Seen = Arc<Mutex<Vec<(u64, Outcome)>>>;

    fn manual(clock: &ManualClock) -> (Acker<u32>, Seen) {
        let seen: Seen = Arc::default();
        let sink = Arc::clone(&seen);
        let acker = Acker::builder()
            .timeout(Duration::from_nanos(TIMEOUT))
            .clock(clock.clone())
            .on_complete(move |c| sink.lock().unwrap().push((c.root, c.outcome)))
            .build_manual()
            .unwrap();
        (acker, seen)
    }

    #[test]
    fn none_when_nothing_is_pending() {
        let clock = ManualClock::new(5);
        let (acker, _) = manual(&clock);
        assert_eq!(acker.next_expiration(), None);
        assert_eq!(acker.next_expiration_delay(), None);
        acker.expire();
        assert_eq!(acker.next_expiration(), None);
    }

    /// Trees not scanned yet make it the tick their scan is due at: the tick before their
    /// deadline, less the reaper's longest sleep while trees are pending (a quarter of the
    /// timeout, at most 64 ticks of this resolution).
    #[test]
    fn trees_not_scanned_yet_make_it_their_scans_tick() {
        const AHEAD: u64 = 65 * RESOLUTION;
        let clock = ManualClock::new(0);
        let (acker, seen) = manual(&clock);
        acker.init(1, 1, 1).unwrap();
        let next = acker.next_expiration().expect("a tree is pending");
        assert!(
            (TIMEOUT - AHEAD - 2 * RESOLUTION..TIMEOUT - AHEAD + 2 * RESOLUTION).contains(&next),
            "the scan's tick (rounded up to ticks), not {next}"
        );
        // The same from a later time, with no pass between.
        clock.set(7 * RESOLUTION + 3);
        assert_eq!(acker.next_expiration(), Some(next));
        // A tree with a shorter timeout of its own (from now, 7 ticks in) makes it earlier.
        acker
            .init_with_timeout(2, 1, 2, Duration::from_nanos(100 * RESOLUTION))
            .unwrap();
        let sooner = acker.next_expiration().unwrap();
        assert!(
            (40 * RESOLUTION..45 * RESOLUTION).contains(&sooner),
            "{sooner}"
        );
        // The pass then files it, and it times out at its deadline, never before.
        clock.set(sooner);
        assert_eq!(acker.expire(), 0);
        let deadline = acker.next_expiration().unwrap();
        assert!(deadline > sooner, "{deadline}");
        clock.set(deadline - 1);
        assert_eq!(acker.expire(), 0);
        clock.set(deadline);
        assert_eq!(acker.expire(), 1);
        assert_eq!(*seen.lock().unwrap(), [(2, Outcome::TimedOut)]);
        // Tree 1's group was filed by that pass (`expire` scans every dirty group): its
        // deadline.
        assert_eq!(acker.next_expiration(), Some(next + AHEAD));
    }

    #[test]
    fn a_trees_deadline_bounds_it_and_is_exact_to_the_tick() {
        let clock = ManualClock::new(0);
        let (acker, seen) = manual(&clock);
        acker.init(1, 1, 1).unwrap();
        assert_eq!(acker.expire(), 0); // files the timer in the wheel
        let next = acker.next_expiration().expect("a tree is pending");
        assert!(
            (TIMEOUT..TIMEOUT + 3 * RESOLUTION).contains(&next),
            "the deadline rounded up to ticks, not {next}"
        );
        // Not earlier than needed by more than... nothing: a nanosecond before, no work.
        clock.set(next - 1);
        assert_eq!(acker.expire(), 0);
        assert_eq!(acker.next_expiration(), Some(next));
        assert_eq!(acker.next_expiration_delay(), Some(Duration::from_nanos(1)));
        clock.set(next);
        assert_eq!(acker.next_expiration_delay(), Some(Duration::ZERO));
        assert_eq!(acker.expire(), 1);
        assert_eq!(*seen.lock().unwrap(), [(1, Outcome::TimedOut)]);
        assert_eq!(acker.next_expiration(), None);
    }

    #[test]
    fn the_earliest_of_several_trees_and_own_timeouts() {
        let clock = ManualClock::new(u64::MAX - 1_000_000_000); // wraps on the way
        let (acker, seen) = manual(&clock);
        acker.init(1, 1, 1).unwrap();
        acker
            .init_with_timeout(2, 1, 2, Duration::from_secs(2))
            .unwrap();
        acker.expire();
        let next = acker.next_expiration().unwrap();
        let ahead = next.wrapping_sub(clock.now());
        assert!(
            (2_000_000_000..2_000_000_000 + 3 * RESOLUTION).contains(&ahead),
            "{ahead}"
        );
        clock.set(next);
        assert_eq!(acker.expire(), 1);
        assert_eq!(*seen.lock().unwrap(), [(2, Outcome::TimedOut)]);
        let ahead = acker.next_expiration().unwrap().wrapping_sub(clock.now());
        assert!(ahead > 20_000_000_000, "tree 1's deadline next: {ahead}");
    }

    #[test]
    fn back_to_none_after_the_tree_completes_and_a_pass_runs() {
        let clock = ManualClock::new(0);
        let (acker, _) = manual(&clock);
        // Completed before a pass filed its timer: the pass drops it.
        acker.init(1, 1, 1).unwrap();
        assert!(acker.next_expiration().is_some());
        assert!(acker.ack(1, 1));
        acker.expire();
        assert_eq!(acker.next_expiration(), None);

        // Completed after: its dead timer still counts (earlier than needed) until a pass
        // drops it: with nothing pending, the next tick's sweep.
        acker.init(2, 1, 2).unwrap();
        acker.expire();
        assert!(acker.ack(2, 1));
        let next = acker.next_expiration().expect("the dead timer");
        clock.set(next);
        assert_eq!(acker.expire(), 0);
        assert_eq!(acker.next_expiration(), None);
    }

    #[test]
    fn none_on_an_acker_with_a_reaper_thread() {
        let acker: Acker<u32> = Acker::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        acker.init(1, 1, 1).unwrap();
        assert_eq!(acker.next_expiration(), None);
        assert_eq!(acker.next_expiration_delay(), None);
        assert!(!acker.set_expiry_waker(|| {}), "the thread serves it");
    }

    #[test]
    fn none_after_shutdown() {
        let clock = ManualClock::new(0);
        let (acker, _) = manual(&clock);
        acker.init(1, 1, 1).unwrap();
        assert_eq!(acker.shutdown().len(), 1);
        assert_eq!(acker.next_expiration(), None);
    }

    /// The calls of the expiry waker this sets.
    fn counting_waker(acker: &Acker<u32>) -> Arc<AtomicUsize> {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        assert!(acker.set_expiry_waker(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        calls
    }

    /// A driver asleep until the tick before a deadline is not woken by an entry due no
    /// sooner: new trees of the same timeout, later. A tree due sooner wakes it.
    #[test]
    fn the_waker_is_called_only_for_an_entry_due_before_the_drivers_sleep_ends() {
        let clock = ManualClock::new(0);
        let (acker, _) = manual(&clock);
        let calls = counting_waker(&acker);
        let driver = acker.expiry_driver();
        acker.init(1, 1, 1).unwrap();
        // The driver's pass leaves tree 1's group dirty (its scan is not due), and it
        // sleeps until the tick before the deadline.
        let ControlFlow::Continue(Some(sleep)) = driver.step() else {
            panic!("a timed sleep");
        };
        assert!(sleep > Duration::from_secs(29), "{sleep:?}");
        let before = calls.load(Ordering::SeqCst);
        // Later trees of the same timeout: due later.
        clock.advance(Duration::from_nanos(66 * RESOLUTION));
        acker.init(2, 1, 2).unwrap();
        acker.init(3, 1, 3).unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            before,
            "woken for nothing due sooner"
        );
        acker
            .init_with_timeout(4, 1, 4, Duration::from_millis(100))
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            before + 1,
            "tree 4 is due sooner"
        );
    }

    /// The hook is called for an entry made after the idle mark (by `next_expiration` or
    /// a driver's decision), on this thread or another, and by shutdown; once per idle
    /// mark, not once per entry.
    #[test]
    fn the_waker_is_called_for_an_entry_after_the_idle_mark_and_by_shutdown() {
        let clock = ManualClock::new(0);
        let (acker, _) = manual(&clock);
        let calls = counting_waker(&acker);
        assert!(!acker.set_expiry_waker(|| {}), "set once");

        assert_eq!(acker.next_expiration(), None); // idle now
        acker.init(1, 1, 1).unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the first entry wakes the driver"
        );
        let driver = acker.expiry_driver();
        assert!(driver.woken().is_continue());
        acker.init(2, 1, 2).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "awake: no call");

        // Another thread's entry, the first since the pass's scan, after the driver's
        // decision to sleep until the deadline.
        acker.expire();
        assert!(acker.next_expiration().is_some());
        let other = acker.clone();
        std::thread::spawn(move || other.init(3, 1, 3).unwrap())
            .join()
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "another thread's entry wakes it"
        );

        acker.shutdown();
        assert_eq!(calls.load(Ordering::SeqCst), 3, "shutdown wakes it");
        assert!(driver.step().is_break());
        assert!(driver.woken().is_break());
    }

    #[test]
    fn the_driver_stops_when_the_last_handle_is_dropped() {
        let clock = ManualClock::new(0);
        let (acker, _) = manual(&clock);
        let calls = counting_waker(&acker);
        let driver = acker.expiry_driver();
        assert_eq!(driver.step(), ControlFlow::Continue(None));
        acker.init(1, 1, 1).unwrap();
        assert!(driver.woken().is_continue());
        assert!(matches!(driver.step(), ControlFlow::Continue(Some(_))));
        drop(acker);
        assert!(
            calls.load(Ordering::SeqCst) >= 2,
            "the drop wakes the driver"
        );
        assert!(driver.step().is_break());
    }
}
