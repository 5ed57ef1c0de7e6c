//! The reaper: one pass (`run_once`), and the one thread that runs them.
//!
//! ## A pass
//!
//! 1. Once the summary's tick has come (a manual `expire`: always), scan the dirty groups
//!    ([`dirty`](crate::acker::timers::dirty)): take the summary, then every table
//!    generation's bits, then a heavy fence.
//! 2. Look at each dirty group as at a due one (3): what is due times out, and the group
//!    gets a wheel entry at the earliest deadline left in it, unless one filed at or before
//!    that covers it already ([`groups`](crate::acker::timers::groups)).
//! 3. Advance the wheel to now, and for each due group look at every slot of it
//!    (`Table::expire`): `TimedOut` claims the tree for step 4; `Dropped` counts an
//!    orphan; `NotDue(deadline)` (a reset, a joining init, or a root that is simply due
//!    later) and `Joining` (an init writing its payload, a root being moved: the next
//!    tick) give the group's next look, filed at the earliest of them.
//! 4. Deliver the timeouts, once the wheel's lock is released (a callback may call back
//!    into the acker); a burst in the acker's delivery order, where it has one, and to
//!    its hand-over, where it has one (the async acker's: tasks on its runtime)
//!    ([`deliver`](crate::acker::engine::deliver), "A burst's order", "A burst's
//!    hand-over").
//! 5. The upkeep (the reaper's passes only): migrations helped and finished, successors
//!    that callers asked for built, tables shrunk, retired generations freed, memory given
//!    back ([`growth`](crate::acker::engine::tables::growth)). After the deliveries:
//!    building a successor zeroes its pages (about 0.1 ms a MiB) and a migration moves
//!    whole tables, and timeouts already claimed must not wait behind either.
//!
//! ## Sleeping
//!
//! The reaper sleeps until the earliest of: the wheel's next due tick (the next tick, when
//! nothing is pending and the wheel holds entries to sweep: [`wheel`], "Dead entries"),
//! the tick by which it must scan the dirty groups (a quarter of the timeout before the
//! earliest deadline registered since its last scan: [`dirty`](crate::acker::timers::dirty),
//! "When to scan"), and housekeeping's next work; each begins on the clock ([`sleep_until`]). With none of
//! them, it parks with no deadline. Before any sleep longer than a tick it marks itself
//! idle and reads the summary once more: a registration that makes the summary's tick
//! earlier wakes an idle reaper that would sleep past it, so no entry waits for a reaper
//! asleep past its tick ([`wake`](crate::acker::threads::wake)). With nothing pending it
//! sleeps without wake-ups.
//!
//! A registration that wakes the thread costs its caller more than the syscall: the
//! thread's short slice ([`slice`](crate::sync::slice)) makes the kernel switch to it at
//! once, and the call that registered (an `init`, a `track` on a runtime's worker) waits
//! out the reaper's turn, milliseconds when that turn delivers a burst's timeouts. So while
//! trees are pending the thread sleeps at most a quarter of the timeout (at most 67 ms:
//! 25 ms for a 100 ms timeout, `Engine::pending_sleep`), and a registration wakes it only
//! when its timer, as published, would end after the tick by which it must scan
//! (`Engine::reaper_sleeps_past`): it is parked with nothing pending, or the entry is due
//! sooner (a short timeout of its own). Trees started beside pending ones never wake it; a
//! long-lived tree alone costs the thread a wake-up per such sleep. Once nothing is
//! pending it keeps those sleeps for four more before it parks ([`LINGER_AGES`]): requests
//! that each complete before the next begins leave nothing pending between them, and would
//! otherwise each wake it from its park. So an acker that goes idle costs four more
//! wake-ups, then none. [`next_wait`] makes this decision, for the thread and for a task
//! that runs a manual acker's passes in its place ([`manual`](crate::acker::manual)),
//! which the same registrations wake through a hook (`Engine::wake_reaper`).
//!
//! ## Callers first
//!
//! On the async acker, the timeouts a pass delivers wake tasks. Woken from the reaper
//! thread, a task goes to its runtime's shared queue, and on a busy runtime (every worker
//! running) waits there behind the workers' own queues: a real HTTP load answered its
//! 504s milliseconds after `tokio::time::timeout` did on the same runtime. Woken from a
//! worker, it joins that worker's own queue, as a timer of the runtime's would. And when
//! every core is busy, the thread itself may wait milliseconds for one after its timer
//! ends: its short scheduling slice ([`slice`](crate::sync::slice)) makes that rare, not
//! impossible.
//!
//! So the callers that start trees on the async acker run the passes when they can. The
//! thread publishes the tick its timer is set for (`Reaper::wakes_at`; [`AWAKE`] while it
//! runs, or sleeps with nothing pending), every pass the wheel's next due tick
//! (`Reaper::timers_due_at`), and a caller reads them after its init, at the init's own
//! tick: once the thread's tick has begun and a timer is due, the caller runs the pass's
//! timers itself ([`help_if_late_at`]). A tick the thread wakes at only to scan the dirty groups (or for its
//! upkeep) is left to it unless it is [`LATE_AFTER_NS`] (250 µs) late: a scan on the
//! callers, with its heavy fence, would cost them more than the timers they deliver. (The async acker's completions only wake tasks, fill a
//! queue or drop a payload nobody awaits, so they may run on a caller; a plain acker's
//! `on_complete` is the user's code, and stays on the reaper thread.) The caller first
//! moves the published tick to the next one (a CAS: only one caller claims a pass), and
//! after its pass to the wheel's next due tick, so callers run a pass when timers are due,
//! not at every call. It wakes the thread only when the thread's sleep would end more than
//! a lag after the tick it published (a registration relies on that tick, "Sleeping"):
//! woken at every caller's pass, the thread would run beside the workers, and callers find
//! no pass to claim while it runs.
//!
//! A caller's pass makes callers lead (`Lead`), and the thread becomes their
//! backstop: it sleeps a lag past each timer (a tick it wakes at only to scan the dirty
//! groups too: callers then leave that to it unless it is a lateness past the lag, and the
//! thread kept waking beside the workers made an HTTP load's 504s as late as without
//! callers), leaving the tick to the first caller in it, and judges its own pass that far
//! behind the clock, so that it delivers only what callers left that late. The lag starts
//! at [`BACKSTOP_NS`] (500 µs) and doubles, up to [`BACKSTOP_MOST_NS`] (2 ms), at each of
//! the thread's passes that finds nothing left with a caller's pass run since its last:
//! while callers keep up, the thread wakes less often beside them (`Lead::after`).
//! The first of its passes that delivers a timeout ends the lead: callers no longer come in
//! time (the load has gone), and the thread runs on its timers again; so does a caller's
//! pass that leaves groups due behind (a burst, "A caller's pass"). An idle acker therefore
//! pays one lag's lateness after a caller happened to come first, and a busy one has its
//! timeouts delivered on its workers (an HTTP service under load: `http-timeouts/`, whose
//! 504s came 1.6-2.5 times as late as `tokio::time::timeout`'s when its workers were
//! saturated, and at about tokio's with callers first). A registration that wakes the idle
//! thread publishes its own tick plus [`LATE_AFTER_NS`] (250 µs), as a timer that ends
//! then: the caller that registered leaves the thread its pass unless the thread gets no
//! core. A pass may
//! run beside another one (a manual acker's `expire` beside its driver does the same): the
//! wheel is under its lock, moves and promotions are the operations' own protocols, and
//! each timed-out tree is taken by one CAS.
//!
//! ## A caller's pass
//!
//! The caller is a task on a runtime's worker, and starting a tree must not wait on other
//! work (the async acker's `track` promises never to), so its pass is bounded:
//!
//! * **Nothing that waits.** It takes the wheel's lock with `try_lock`: a pass under way
//!   (the thread's after all, a manual `expire`) does this one's work (a holder the kernel
//!   preempted would hold the caller for its whole wait). It
//!   leaves a re-anchoring (a walk of every table that waits for every thread,
//!   [`anchor`](crate::acker::engine::time)) to the thread, and runs nothing once shutdown
//!   has closed the callback, so no pass runs after `shutdown` returned.
//! * **Its timers only**: no sweep of the wheel, no migration, shrink or freeing of retired
//!   generations, no pruning and no giving memory back: the upkeep waits for the thread.
//! * **Bounded work.** A scan of the dirty groups due within the thread's lag (the thread
//!   late for it) takes at most [`CALLER_GROUPS`] of them and the rest of the word of 64
//!   it reached, with the heavy fence (a few microseconds), and looks at them until it has
//!   claimed [`CALLER_TIMEOUTS`] timeouts; the groups it leaves wait for the next scan, due
//!   at once or as they were, and are a burst, the thread's. Its advance of the wheel takes
//!   [`CALLER_PART`] groups at a time
//!   ([`advance_within`](crate::acker::timers::wheel::CompactWheel::advance_within), which
//!   takes due entries out of a coarse bucket too large to cascade), and no more once it
//!   has claimed [`CALLER_TIMEOUTS`] timeouts or looked at [`CALLER_GROUPS`] groups (the
//!   scan's with them): at
//!   most `CALLER_TIMEOUTS` plus a part's timeouts (`CALLER_PART` × [`GROUP_SLOTS`]) are
//!   delivered on the caller (a million trees that share a deadline are a million
//!   wake-ups: the caller wakes a few dozen). Most groups that come due in a service hold
//!   only trees completed after their group was filed (an entry waits for its deadline,
//!   [`wheel`], "Dead entries"), a line read each: a bound of 32 groups left due ones behind in about
//!   one caller's pass in ten in `http-timeouts/`, each a wake-up of the thread and an end
//!   of the callers' lead. Groups left due are a burst, the thread's. Callers stop leading
//!   ("Callers first"), and the caller leaves the burst to the thread's own timer when that
//!   ends within the longest lag ([`BACKSTOP_MOST_NS`]), publishing its tick
//!   ([`LATE_AFTER_NS`] on at the soonest), so the next caller runs a pass only while the
//!   thread gets no core (in the shared-deadline stress phase, callers that ran the next
//!   pass at once, bound after bound, ran 7,000 to 9,000 passes of its million timeouts,
//!   and `track`'s p99.99 was 0.2-4 ms; leaving the burst to the thread, 100 to 2,000, and
//!   115-169 µs). It does not wake the thread from the call: the thread, with its short
//!   slice, took the caller's core at once, and the `track` that had run the pass waited
//!   milliseconds off its core (in 3 of 10 runs of that phase a call of 3.4-3.8 ms; the two
//!   looked into had each run a caller's pass, 54 and 57 µs on its core, two involuntary
//!   switches). The thread's own timer, which ends a lag after the burst's tick, can still
//!   come while a caller's pass runs and take its core the same way (in 2 of 12 runs
//!   since, a pass of 3.5-3.8 ms). A thread asleep longer (planned before the burst's
//!   groups were filed), or parked with no timer, is woken, and the next caller helps a
//!   lateness on. The thread
//!   claims the burst, and the async acker's hands its wake-ups to tasks on its runtime
//!   ([`deliver`](crate::acker::engine::deliver), "A burst's hand-over"): on the workers
//!   after all, but a batch at a time, on tasks of their own.
//! * **Its publication keeps the registrations' promise** ("Sleeping"): a registration
//!   that found the published tick early enough did not wake the thread, so after its pass
//!   the caller publishes no later than the thread would sleep, the summary's tick
//!   included.
//!
//! Each such pass is counted with the longest one
//! ([`AckerStats::caller_passes`](crate::AckerStats::caller_passes)).
//!
//! [`LATE_AFTER_NS`]: callers::LATE_AFTER_NS
//! [`BACKSTOP_NS`]: lead::BACKSTOP_NS
//! [`BACKSTOP_MOST_NS`]: lead::BACKSTOP_MOST_NS
//! [`CALLER_GROUPS`]: pass::CALLER_GROUPS
//! [`CALLER_PART`]: pass::CALLER_PART
//! [`CALLER_TIMEOUTS`]: pass::CALLER_TIMEOUTS
//! [`GROUP_SLOTS`]: crate::acker::table::GROUP_SLOTS
//! [`LINGER_AGES`]: thread::LINGER_AGES
//! [`next_wait`]: thread::next_wait
//! [`sleep_until`]: thread::sleep_until

mod callers;
mod driver;
mod hooks;
mod lead;
mod pass;
#[cfg(any(test, loom, feature = "internals"))]
mod probes;
mod thread;
pub(in crate::acker) mod wheel;

#[cfg(any(test, loom, feature = "internals"))]
pub(in crate::acker::engine) use callers::help_if_late;
pub(in crate::acker::engine) use callers::{help_if_late_at, late_after};
pub(in crate::acker) use driver::{ExpiryWaker, Next};
pub(in crate::acker::engine) use pass::publish_timers;
pub(in crate::acker::engine) use thread::spawn;

use lead::Lead;
use wheel::Wheel;

use std::sync::TryLockError;
use std::time::Instant;

use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::OnceLock;
use std::thread as std_thread;

/// The reaper's state, one per acker: the wheel a pass files and advances, the thread that
/// runs the passes, what it publishes to the callers that may run one in its place
/// ("Callers first"), and its counters. Its passes are [`pass`]'s, its thread's loop and
/// sleep decision [`thread`]'s, the callers' help [`callers`]'.
pub(in crate::acker::engine) struct Reaper {
    /// Manual mode: no thread; a driver ([`driver`]) or `expire` runs the passes.
    pub(in crate::acker::engine) manual: bool,
    /// The wheel and its scratch, owned by whoever runs a pass.
    wheel: Mutex<Wheel>,
    pub(in crate::acker::engine) thread: OnceLock<std_thread::Thread>,
    /// The full tick whose start the reaper thread's timer is set for while it sleeps on
    /// one, else [`AWAKE`]: a caller that reads a tick at or past it runs the pass when a
    /// timer is due, and a lateness past it when none is ("Callers first").
    wakes_at: CachePadded<AtomicU64>,
    /// A caller is running the reaper's pass: one at a time.
    helping: AtomicBool,
    /// The full tick the reaper thread's timed sleep ends in, its backstop's lag included,
    /// else [`AWAKE`]: a caller whose publication is more than a lag earlier wakes the
    /// thread to plan again ("Callers first"). In manual mode, the tick a driver's sleep
    /// ends in, else [`AWAKE`] (awake, or asleep with no deadline): a registration due
    /// sooner calls its waker (`Engine::reaper_sleeps_past`).
    thread_wakes_at: AtomicU64,
    /// The wheel's next due tick as the last pass left it, else [`AWAKE`]: callers run a
    /// pass for its timers ("Callers first"), not for the thread's scans of the dirty
    /// groups.
    timers_due_at: AtomicU64,
    /// Whether callers lead, and the thread's lag behind its timers as their backstop
    /// ("Callers first").
    lead: Lead,
    /// The last full tick at which the reaper's sleep decision saw trees pending, 0 before
    /// the first ("Sleeping").
    busy_at: AtomicU64,
    /// Manual mode: what wakes a task that runs the passes in place of the reaper thread
    /// ([`manual`](crate::acker::manual)), called where the thread would be unparked. Set
    /// once, by that task.
    expiry_waker: OnceLock<ExpiryWaker>,
    /// Reaper wake-ups that found nothing to do.
    pub(in crate::acker::engine) idle_wakeups: AtomicU64,
    /// Panics caught in reaper passes (a clock, a payload's drop).
    panics: AtomicU64,
    /// Late reapers' passes run by callers, and the longest of them in nanoseconds.
    pub(in crate::acker::engine) caller_passes: AtomicU64,
    pub(in crate::acker::engine) caller_pass_longest: AtomicU64,
}

impl Reaper {
    /// A reaper whose wheel starts at full tick `now`, its thread not started (`manual`:
    /// none will be).
    pub(in crate::acker::engine) fn new(now: u64, manual: bool) -> Self {
        Reaper {
            manual,
            wheel: Mutex::new(Wheel::new(now)),
            thread: OnceLock::new(),
            wakes_at: CachePadded::new(AtomicU64::new(AWAKE)),
            helping: AtomicBool::new(false),
            thread_wakes_at: AtomicU64::new(AWAKE),
            timers_due_at: AtomicU64::new(AWAKE),
            lead: Lead::default(),
            busy_at: AtomicU64::new(0),
            expiry_waker: OnceLock::new(),
            idle_wakeups: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            caller_passes: AtomicU64::new(0),
            caller_pass_longest: AtomicU64::new(0),
        }
    }

    /// The wheel, locked (a panic under the lock left nothing half done that a pass
    /// cannot take up again).
    pub(in crate::acker::engine) fn lock_wheel(&self) -> MutexGuard<'_, Wheel> {
        self.wheel.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wheel, locked, unless another pass holds it (a caller's pass does not wait).
    pub(super) fn try_lock_wheel(&self) -> Option<MutexGuard<'_, Wheel>> {
        match self.wheel.try_lock() {
            Ok(wheel) => Some(wheel),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Counts a caller's pass begun at `started`, with the longest.
    pub(super) fn count_caller_pass(&self, started: Instant) {
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Relaxed (both): statistics.
        self.caller_passes.fetch_add(1, Ordering::Relaxed);
        self.caller_pass_longest.fetch_max(took, Ordering::Relaxed);
    }
}

/// [`Reaper::wakes_at`] while the reaper thread is not asleep on its timer: running,
/// parked with nothing pending, or not started (a manual acker's is always this).
pub(in crate::acker::engine) const AWAKE: u64 = u64::MAX;

#[cfg(test)]
mod tests;
