//! The reaper: one pass (`run_once`), and the one thread that runs them.
//!
//! ## A pass
//!
//! 1. Collect the batches' entries ([`handoff`](crate::acker::threads::handoff)): those
//!    handed off by their owners, and those of batches quiet since an earlier tick (in
//!    manual mode, every batch's).
//! 2. Register each root ([`groups`](crate::acker::timers::groups)): its group of slots
//!    gets a wheel entry at the root's deadline, unless one filed at or before it covers it
//!    already; an entry whose slot no longer holds an uncompleted root of its tag is
//!    dropped.
//! 3. Advance the wheel to now, and for each due group look at every slot of it
//!    (`Table::expire`): `TimedOut` claims the tree for step 4; `Dropped` counts an
//!    orphan; `NotDue(deadline)` (a reset, a joining init, or a root that is simply due
//!    later) and `Joining` (an init writing its payload, a root being moved: the next
//!    tick) give the group's next look, filed at the earliest of them.
//! 4. Deliver the timeouts, once the wheel's lock is released (a callback may call back
//!    into the acker); a burst in the acker's delivery order, where it has one
//!    ([`deliver`](crate::acker::engine::deliver), "A burst's order").
//! 5. The upkeep (the reaper's passes only): migrations helped and finished, successors
//!    that callers asked for built, tables shrunk, retired generations freed, memory given
//!    back ([`growth`](crate::acker::engine::growth)). After the deliveries: building a
//!    successor zeroes its pages (about 0.1 ms a MiB) and a migration moves whole tables,
//!    and timeouts already claimed must not wait behind either.
//!
//! ## Sleeping
//!
//! While entries wait in batches the reaper wakes every tick to collect them; otherwise it
//! sleeps until the wheel's next due tick begins on the clock ([`sleep_until`]) (the next
//! tick, when nothing is pending and the wheel holds entries to sweep: [`wheel`], "Dead
//! entries"), or, with nothing anywhere, parks with no deadline. Before any sleep longer
//! than a tick it marks itself idle in the batches and checks them once more: a push that
//! makes a batch non-empty wakes an idle reaper, so no entry waits for a reaper asleep for
//! longer than a tick ([`wake`](crate::acker::threads::wake), "Waking the reaper"). With
//! nothing pending it sleeps without wake-ups.
//!
//! A push that wakes the thread costs its caller more than the syscall: the thread's short
//! slice ([`slice`](crate::sync::slice)) makes the kernel switch to it at once, and the call
//! that pushed (an `init`, a `track` on a runtime's worker) waits out the reaper's turn,
//! milliseconds when that turn delivers a burst's timeouts. So while trees are pending the
//! thread sleeps at most the hand-off age (64 ticks: 17 ms at the async acker's tick, 67 ms
//! at `build`'s), and a push wakes it only when its timer, as published, would end after
//! the new entry's hand-off tick (`Engine::reaper_sleeps_past`): it is parked with
//! nothing pending, or the entry is due sooner (a short timeout of its own). Trees started
//! beside pending ones never wake it; a long-lived tree alone costs the thread a wake-up
//! per hand-off age. Once nothing is pending it keeps those sleeps for four hand-off ages
//! more before it parks ([`LINGER_AGES`]): requests that each complete before the next
//! begins leave nothing pending between them, and would otherwise each wake it from its
//! park. So an acker that goes idle costs four more wake-ups, then none. [`next_wait`] makes this decision, for the
//! thread and for a task that runs a manual acker's passes in its place
//! ([`manual`](crate::acker::manual)), which the same pushes wake through a hook
//! (`Engine::wake_reaper`).
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
//! thread publishes the tick its timer is set for (`Reaper::wakes_at`; [`AWAKE`]
//! while it runs, or sleeps with nothing pending), every pass the wheel's next due tick
//! (`Reaper::timers_due_at`), and a caller reads them after its init: once the thread's
//! tick has begun and a timer is due, the caller runs the pass's timers itself
//! ([`help_if_late`]). A tick the thread wakes at only to collect the batches (every tick
//! while entries wait) is left to it unless it is [`LATE_AFTER_NS`] (250 µs) late: a pass
//! per tick on the callers, with the heavy fence of a takeover, would cost them more than
//! the timers they deliver. (The async acker's completions only wake
//! tasks, fill a queue or drop a payload nobody awaits, so they may run on a caller; a
//! plain acker's `on_complete` is the user's code, and stays on the reaper thread.) The
//! caller first moves the published tick to the next one (a CAS: only one caller claims a
//! pass), and after its pass to the wheel's next due tick, so callers run a pass when
//! timers are due, not at every call. It wakes the thread only when the thread's sleep
//! would end more than a lag after the tick it published (a pushed entry relies on that
//! tick, "Sleeping"): woken at every caller's pass, the thread would run beside the
//! workers, and callers find no pass to claim while it runs.
//!
//! A caller's pass makes callers lead (`Reaper::callers_lead`), and the thread becomes
//! their backstop: it sleeps [`BACKSTOP_NS`] (500 µs) past each timer (a tick it wakes at
//! only to collect the batches too: callers then leave that to it unless it is a lateness
//! past the lag, and the thread kept waking beside the workers made an HTTP load's 504s
//! as late as before), leaving the tick to
//! the first caller in it, and judges its own pass that far behind the clock, so that it
//! delivers only what callers left that late. The first of its passes that delivers a
//! timeout ends the lead: callers no longer come in time (the load has gone), and the
//! thread runs on its timers again; so does a caller's pass that leaves work behind (a
//! burst, "A caller's pass"). An idle acker therefore pays one lag's lateness after a
//! caller happened to come first, and a busy one has its timeouts delivered on its
//! workers (an HTTP service under load: `http-timeouts/`, whose 504s came 1.6-2.5 times
//! as late as `tokio::time::timeout`'s when its workers were saturated, and at about
//! tokio's with callers first). A push that wakes the idle thread publishes its own tick plus
//! [`LATE_AFTER_NS`] (250 µs), as a timer that ends then: the caller that pushed leaves the
//! thread its pass unless the thread gets no core. A pass may run beside another one (a
//! manual acker's `expire` beside its driver does the same): the wheel is under its lock,
//! moves and promotions are the operations' own protocols, and each timed-out tree is
//! taken by one CAS.
//!
//! ## A caller's pass
//!
//! The caller is a task on a runtime's worker, and starting a tree must not wait on other
//! work (the async acker's `track` promises never to), so its pass is bounded:
//!
//! * **Nothing that waits.** It takes the wheel's lock with `try_lock`: a pass under way
//!   (the thread's after all, a manual `expire`) does this one's work; and the locks of
//!   the inbox and the batches' list too, leaving their entries when another thread holds
//!   one (a holder the kernel preempted would hold the caller for its whole wait). It leaves a
//!   re-anchoring (a walk of every table that waits for every thread,
//!   [`anchor`](crate::acker::engine::time)) to the thread, and runs nothing once
//!   shutdown has closed the callback, so no pass runs after `shutdown` returned.
//! * **Its timers only**: no sweep of the wheel, no migration, shrink or freeing of retired
//!   generations, no pruning and no giving memory back: the upkeep waits for the thread.
//! * **A bounded batch.** It files at most [`CALLER_ENTRIES`] of the entries handed off or
//!   left in quiet batches (taken over as the thread does, with its heavy fence: a few
//!   microseconds), and its advance of the wheel moves at most [`CALLER_GROUPS`] groups
//!   ([`advance_within`](crate::acker::timers::wheel::CompactWheel::advance_within), which
//!   takes due entries out of a coarse bucket too large to cascade): at most
//!   `CALLER_GROUPS` × [`GROUP_SLOTS`] timeouts delivered on the caller (a million trees
//!   that share a deadline are a million wake-ups: the caller wakes a few dozen). What it
//!   leaves stays where it was, due: a burst, which is the thread's. Callers stop leading
//!   ("Callers first"), the caller publishes a tick [`LATE_AFTER_NS`] on and wakes the
//!   thread, so the next caller takes the next batch only while the thread gets no core
//!   (in the shared-deadline stress phase, callers that took batch after batch ran 7,000
//!   to 9,000 passes of its million timeouts, and `track`'s p99.99 was 0.2-4 ms; leaving
//!   the burst to the thread, 100 to 2,000, and 115-169 µs).
//! * **Its publication keeps the pushers' promise** ("Sleeping"): a push that found the
//!   published tick early enough did not wake the thread, so after its pass the caller
//!   publishes no later than the thread would sleep, and once more checks the batches
//!   after a fence (against the push's fence before it read the tick): entries waiting
//!   mean the next tick.
//!
//! Each such pass is counted with the longest one
//! ([`AckerStats::caller_passes`](crate::AckerStats::caller_passes)).
//!
//! [`LATE_AFTER_NS`]: callers::LATE_AFTER_NS
//! [`BACKSTOP_NS`]: callers::BACKSTOP_NS

mod callers;
mod hooks;
pub(in crate::acker) mod wheel;

use callers::backstop_lag;
pub(in crate::acker::engine) use callers::{help_if_late, late_after};

use wheel::{file, Wheel};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::TryLockError;
use std::time::{Duration, Instant};

use super::tables::tag_of;
use super::time::REANCHOR_AFTER;
use super::Engine;
use super::ExpiryWaker;
use crate::acker::table::{Completed, Effects, Expiry, Judge, Table, GROUP_SLOTS};
use crate::acker::threads::{trim, Active, Entry, LOOK_AHEAD};
use crate::acker::timers::groups::{GroupAt, GroupTimer};
use crate::acker::timers::ticks::{full_near, Tick};
use crate::sync::{store_raced, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::Arc;
use std::sync::OnceLock;
use std::thread;

/// The reaper's state, one per acker: the wheel a pass files and advances, the thread that
/// runs the passes, what it publishes to the callers that may run one in its place
/// ("Callers first"), and its counters. Its passes and its thread's loop are the functions
/// of this module.
pub(in crate::acker::engine) struct Reaper {
    /// The wheel and its scratch, owned by whoever runs a pass.
    pub(in crate::acker::engine) wheel: Mutex<Wheel>,
    pub(in crate::acker::engine) thread: OnceLock<thread::Thread>,
    /// The full tick whose start the reaper thread's timer is set for while it sleeps on
    /// one, else [`AWAKE`]: a caller that reads a tick at or past it runs the pass when a
    /// timer is due, and a lateness past it when none is ("Callers first").
    pub(in crate::acker::engine) wakes_at: CachePadded<AtomicU64>,
    /// A caller is running the reaper's pass: one at a time.
    pub(in crate::acker::engine) helping: AtomicBool,
    /// The full tick the reaper thread's timed sleep ends in, its backstop's lag included,
    /// else [`AWAKE`]: a caller whose publication is more than a lag earlier wakes the
    /// thread to plan again ("Callers first").
    pub(in crate::acker::engine) thread_wakes_at: AtomicU64,
    /// The wheel's next due tick as the last pass left it, else [`AWAKE`]: callers run a
    /// pass for its timers ("Callers first"), not for the thread's tick by tick collection
    /// of the batches.
    pub(in crate::acker::engine) timers_due_at: AtomicU64,
    /// Callers ran the last passes due, and the thread is their backstop: it sleeps past
    /// its timers and judges its passes behind the clock ("Callers first").
    pub(in crate::acker::engine) callers_lead: AtomicBool,
    /// The last full tick at which the reaper's sleep decision saw trees pending, 0 before
    /// the first ("Sleeping").
    pub(in crate::acker::engine) busy_at: AtomicU64,
    /// Manual mode: what wakes a task that runs the passes in place of the reaper thread
    /// ([`manual`](crate::acker::manual)), called where the thread would be unparked. Set
    /// once, by that task.
    pub(in crate::acker::engine) expiry_waker: OnceLock<ExpiryWaker>,
    /// Reaper wake-ups that found nothing to do.
    pub(in crate::acker::engine) idle_wakeups: AtomicU64,
    /// Panics caught in reaper passes (a clock, a payload's drop).
    pub(in crate::acker::engine) panics: AtomicU64,
    /// Late reapers' passes run by callers, and the longest of them in nanoseconds.
    pub(in crate::acker::engine) caller_passes: AtomicU64,
    pub(in crate::acker::engine) caller_pass_longest: AtomicU64,
}

impl Reaper {
    /// A reaper whose wheel starts at full tick `now`, its thread not started.
    pub(in crate::acker::engine) fn new(now: u64) -> Self {
        Reaper {
            wheel: Mutex::new(Wheel::new(now)),
            thread: OnceLock::new(),
            wakes_at: CachePadded::new(AtomicU64::new(AWAKE)),
            helping: AtomicBool::new(false),
            thread_wakes_at: AtomicU64::new(AWAKE),
            timers_due_at: AtomicU64::new(AWAKE),
            callers_lead: AtomicBool::new(false),
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

    /// Who leads after a pass (`caller`'s or the thread's) that ran for timers come due
    /// (`timers`) or not: callers lead once one runs a pass for timers (a collection of the
    /// batches alone is the thread's), unless it leaves work (a burst: the thread's), and
    /// until the thread's delivers timeouts they left (judged a lag behind: they no longer
    /// come in time) ("Callers first").
    fn lead_after(&self, caller: bool, pass: &Pass, timers: bool) {
        // Relaxed (all): `backstop_lag`'s hint.
        if caller && pass.left {
            self.callers_lead.store(false, Ordering::Relaxed);
        } else if caller && timers {
            self.callers_lead.store(true, Ordering::Relaxed);
        } else if !caller && pass.delivered > 0 {
            self.callers_lead.store(false, Ordering::Relaxed);
        }
    }

    /// Counts a caller's pass begun at `started`, with the longest.
    fn count_caller_pass(&self, started: Instant) {
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Relaxed (both): statistics.
        self.caller_passes.fetch_add(1, Ordering::Relaxed);
        self.caller_pass_longest.fetch_max(took, Ordering::Relaxed);
    }
}

/// What a pass did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pass {
    pub delivered: usize,
    /// Any entry collected, filed, due or dropped.
    pub worked: bool,
    /// A caller's pass: work left that its bounds kept it from (entries handed off, groups
    /// due), for the next pass.
    pub left: bool,
    /// It ran: a caller's pass gives way to a re-anchoring, to another pass under way and
    /// to shutdown.
    pub ran: bool,
}

/// Who runs a pass, and so how much of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// The reaper thread, or a manual acker's driver or `expire`: the whole pass.
    /// `everything`: take every batch's entries (manual mode, where the caller's own batch
    /// is one of them). `behind`: ticks before the clock that the pass judges deadlines
    /// at, the thread's lag as the callers' backstop (module docs, "Callers first").
    Reaper { everything: bool, behind: u64 },
    /// A caller running the reaper's pass: its timers only, within bounds (module docs,
    /// "A caller's pass").
    Caller,
}

/// The most entries a caller's pass takes from the reaper's inbox and quiet batches
/// (module docs, "A caller's pass").
const CALLER_ENTRIES: usize = 256;

/// The most groups a caller's pass looks at (each of [`GROUP_SLOTS`] slots, so at most
/// that many timeouts each), and the most entries its advance of the wheel moves.
const CALLER_GROUPS: usize = 32;

/// One pass at the clock's time (module docs). `everything`: take every batch's entries
/// (manual mode, where the caller's own batch is one of them).
pub(super) fn run_once<T: Send + 'static>(engine: &Engine<T>, everything: bool) -> Pass {
    pass(
        engine,
        Runner::Reaper {
            everything,
            behind: 0,
        },
    )
}

/// A pass (module docs): the whole of it for the reaper; for a caller, only its timers and
/// within bounds, and nothing once shutdown has closed the callback.
fn pass<T: Send + 'static>(engine: &Engine<T>, runner: Runner) -> Pass {
    let caller = runner == Runner::Caller;
    // A caller's pass is timed on the monotonic clock whatever the acker's is: what a
    // server exports is how long its caller was held.
    let started = caller.then(Instant::now);
    let active = engine.threads.enter();
    let mut pass = Pass::default();
    if caller && !active.open {
        // Shutdown has closed the callback, and takes back what is live: a pass now could
        // run after `shutdown` returned. (A caller's pass whose operation found it open
        // ends before shutdown drops the callback, which waits for it.)
        return pass;
    }
    // Deadlines are judged on the clock's own tick, so that a clock that stepped back
    // times out nothing before its deadline as read on that clock; the wheel's time (the
    // anchor's), which files and advances the group timers, never goes back. (While the
    // clock is behind it, a group it judges not yet due is looked at again each pass.)
    let read = engine.time.ticks.full(engine.time.clock.now());
    // The thread as the callers' backstop judges what they left that late ("Callers
    // first"); its deliveries' lateness is counted on the clock as read.
    let clock = match runner {
        Runner::Reaper { behind, .. } => read.saturating_sub(behind),
        Runner::Caller => read,
    };
    // The anchor first ([`anchor`](crate::acker::engine::time)), outside the wheel's
    // lock: after a stall, a re-anchoring, which walks every table: the thread's work.
    if caller && engine.time.needs_reanchoring(clock) {
        return pass;
    }
    engine
        .time
        .advance_anchor(clock, &engine.threads, |from, to| engine.rebase(from, to));
    // The sweep's bound ([`wheel`], "Dead entries"), read outside the wheel's lock.
    let live = match runner {
        Runner::Reaper { .. } => engine.pending().min(engine.groups_in_use()),
        Runner::Caller => 0, // no sweeps
    };
    let mut timed_out = Vec::new();
    let timers = {
        let mut wheel = match runner {
            Runner::Reaper { .. } => engine.reaper.lock_wheel(),
            // Another pass is under way (the thread's after all, or a manual `expire`):
            // it does this one's work.
            Runner::Caller => match engine.reaper.try_lock_wheel() {
                Some(wheel) => wheel,
                None => return pass,
            },
        };
        pass.ran = true;
        let judge = Judge {
            anchor: engine.time.anchor(),
            clock,
        };
        collect_and_file(engine, &mut wheel, runner, judge, live, &mut pass);
        let timers = take_due(engine, &mut wheel, runner, judge, &mut pass, &mut timed_out);
        // Entries of trees completed after their hand-off, and of groups that moved to a
        // successor, wait for their deadlines; once they crowd the wheel, a sweep drops
        // them ([`wheel`], "Dead entries").
        if !caller {
            pass.worked |= wheel.sweep_if_crowded(engine, live);
        }
        publish_timers(engine, &wheel);
        timers
    };
    pass.delivered = timed_out.len();
    engine.reaper.lead_after(caller, &pass, timers);
    // Outside the lock: `on_complete` may call back into the acker, even `expire`. Before
    // the upkeep below: it may build a successor a caller asked for (the kernel zeroes its
    // pages, about 0.1 ms a MiB) and finish whole migrations, while the thread is
    // published as running and no caller delivers in its place; the timeouts this pass
    // has claimed are due now.
    engine.deliver_timeouts(timed_out, read, &active);
    match started {
        // Its timers only: the upkeep waits for the thread ("A caller's pass"). Counted
        // inside the operation, which shutdown waits for: no count after it.
        Some(started) => engine.reaper.count_caller_pass(started),
        None => pass.worked |= upkeep(engine, active),
    }
    pass
}

/// A pass's first step, under the wheel's lock: the wheel's time moved to the anchor's
/// (never back), the batches' entries collected (within the caller's bound) and filed.
fn collect_and_file<T: Send + 'static>(
    engine: &Engine<T>,
    wheel: &mut Wheel,
    runner: Runner,
    judge: Judge,
    live: usize,
    pass: &mut Pass,
) {
    let now = judge.anchor.max(wheel.now);
    wheel.now = now;
    wheel.clock = judge.clock;
    let mut collected = std::mem::take(&mut wheel.collected);
    match runner {
        Runner::Reaper { everything, .. } => {
            engine
                .threads
                .collect(now as Tick, everything, &mut collected);
        }
        Runner::Caller => {
            pass.left |= engine
                .threads
                .collect_within(now as Tick, CALLER_ENTRIES, &mut collected);
        }
    }
    pass.worked |= !collected.is_empty();
    // Before filing: the groups operations moved come through their batches, filed
    // again in their successors, and the dead entries of the generations they left
    // are best gone before the wheel's vectors grow for the new ones. (The groups a
    // pass moves are filed at once, `Engine::file_on_wheel`, and swept at the next.)
    if runner != Runner::Caller {
        pass.worked |= wheel.sweep_if_crowded(engine, live);
    }
    // Filing reads each entry's line, long out of cache for a tree past its hand-off
    // age: asked for ahead, as the batches' filter does.
    for entry in collected.iter().take(LOOK_AHEAD) {
        engine.tables.prefetch_entry(entry);
    }
    for i in 0..collected.len() {
        if let Some(ahead) = collected.get(i + LOOK_AHEAD) {
            engine.tables.prefetch_entry(ahead);
        }
        file(engine, wheel, collected[i]);
    }
    collected.clear();
    wheel.collected = collected;
}

/// A pass's second step, under the wheel's lock: the wheel advanced to its time (a
/// caller's advance within its bound), and every group come due looked at
/// ([`look_at_group`]), its timeouts claimed into `timed_out`. Whether any group came due:
/// the pass ran for timers, not only to collect the batches.
fn take_due<'e, T: Send + 'static>(
    engine: &'e Engine<T>,
    wheel: &mut Wheel,
    runner: Runner,
    judge: Judge,
    pass: &mut Pass,
    timed_out: &mut Vec<(usize, &'e Table<T>, Completed)>,
) -> bool {
    let now = wheel.now;
    let mut due = std::mem::take(&mut wheel.due);
    let before = wheel.timers.len();
    match runner {
        Runner::Reaper { .. } => wheel.timers.advance(now, &mut due),
        Runner::Caller => {
            pass.left |= !wheel.timers.advance_within(now, CALLER_GROUPS, &mut due);
        }
    }
    // The entries come due are no longer there to defer an idle sweep.
    wheel.kept = wheel.kept.saturating_sub(before - wheel.timers.len());
    let timers = !due.is_empty();
    pass.worked |= timers;
    for timer in due.drain(..) {
        look_at_group(engine, wheel, timer, judge, timed_out);
    }
    wheel.due = due;
    // A burst (a million trees handed over at once) must not keep its scratch space.
    let scratch = |w: &Wheel| {
        w.collected.capacity() * std::mem::size_of::<Entry>()
            + w.due.capacity() * std::mem::size_of::<GroupTimer>()
    };
    let before = scratch(wheel);
    trim(&mut wheel.collected);
    trim(&mut wheel.due);
    wheel.released += before - scratch(wheel);
    timers
}

/// The reaper's upkeep after its pass's deliveries (module docs, "A pass", 5): migrations
/// helped and finished, tables shrunk, the filed ticks of generations gone pruned, retired
/// generations freed (out of the operation `active`, which it ends), memory given back.
/// Whether it did anything.
fn upkeep<T: Send + 'static>(engine: &Engine<T>, active: Active) -> bool {
    let now = engine.reaper.lock_wheel().now;
    // Migrations, shrinking, retired generations
    // ([`generations`](crate::acker::engine::generations)); outside the wheel's lock, as
    // a move may complete a tree (its callback may call `expire`), and the filing of the
    // groups it moved takes the lock itself (`Engine::file_on_wheel`; not reentrant).
    let worked = engine.housekeeping(now, &active);
    let released = {
        // The filed ticks of generations that left their tables' chains, this pass's
        // promotions included: the pass that shrinks a burst's tables may be the last for
        // a long time, and a large generation's ticks are 4 B a group.
        let mut wheel = engine.reaper.lock_wheel();
        let before = wheel.filed.heap_bytes();
        for shard in 0..wheel.filed.tables() {
            engine.tables.prune_filed(shard, &mut wheel.filed);
        }
        wheel.released += before.saturating_sub(wheel.filed.heap_bytes());
        std::mem::take(&mut wheel.released)
    };
    drop(active);
    // Out of the operation: the generations this pass retired wait for no one but other
    // threads now (the pass itself was one of those their grace periods waited for).
    engine.free_retired();
    let kept = engine.give_back_memory(now as Tick, released);
    if kept > 0 {
        // Not given back yet: counted again at the next pass.
        engine.reaper.lock_wheel().released += kept;
    }
    worked
}

/// Looks at every slot of a group come due (module docs, "A pass", 3): its timeouts join
/// `timed_out`, and the group is filed again at the earliest deadline left, if any.
fn look_at_group<'e, T: Send + 'static>(
    engine: &'e Engine<T>,
    wheel: &mut Wheel,
    timer: GroupTimer,
    judge: Judge,
    timed_out: &mut Vec<(usize, &'e Table<T>, Completed)>,
) {
    let now = wheel.now;
    let entry = Entry {
        slot: timer.first,
        tag: timer.gen,
    };
    let Some((shard, table, first)) = engine.tables.locate(&entry) else {
        return; // an older generation's: its roots moved, with timers of their own
    };
    // Every slot of the group: the earliest deadline left decides the next look.
    let mut earliest = None;
    for slot in first..first + GROUP_SLOTS {
        let Some(key) = table.key_in(slot) else {
            continue;
        };
        let mut effects = Effects::default();
        let tag = tag_of(key.tag(), table.gen());
        let next = match table.expire_keeping(slot, tag, judge, &mut effects) {
            Expiry::Gone => None,
            Expiry::Dropped => {
                // Relaxed: a statistic.
                engine
                    .counters()
                    .orphans_expired
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            Expiry::TimedOut => {
                if let Some(completed) = effects.take() {
                    timed_out.push((shard, table, completed));
                }
                None
            }
            Expiry::NotDue(deadline) => Some(wheel.full(deadline)),
            Expiry::Joining => Some(now + 1),
        };
        if let Some(next) = next {
            earliest = Some(earliest.map_or(next, |e: u64| e.min(next)));
        }
    }
    let at = GroupAt {
        shard,
        gen: table.gen(),
        groups: table.groups(),
        group: first / GROUP_SLOTS,
    };
    let decision = wheel.filed.refile(at, now, earliest, |t| full_near(now, t));
    wheel.push(decision, timer);
}

/// [`Reaper::wakes_at`] while the reaper thread is not asleep on its timer: running,
/// parked with nothing pending, or not started (a manual acker's is always this).
pub(super) const AWAKE: u64 = u64::MAX;

/// Starts the reaper thread; `handle` keeps its join handle.
pub(super) fn spawn<T: Send + 'static>(
    engine: &Arc<Engine<T>>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let engine = Arc::clone(engine);
    let handle = std::thread::Builder::new()
        .name("ackwheel-reaper".into())
        .spawn(move || reaper_loop(&engine))?;
    Ok(handle)
}

/// What to do after a pass: the reaper thread's sleep decision, which a task that drives a
/// manual acker's passes makes the same way (`Engine::next_pass`). Every variant but
/// [`Wait::Tick`] and [`Wait::Again`] has marked the reaper idle
/// ([`wake`](crate::acker::threads::wake), "Waking the reaper"): whoever sleeps on it must
/// call `batches.unidle()` when it wakes, and must be woken by `Engine::wake_reaper`, or a
/// push made while it sleeps waits for its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// Entries wait in batches: one tick after `from` (the last pass's tick), not idle.
    Tick { from: u64 },
    /// An entry arrived while the reaper marked itself idle: a pass now (not idle).
    Again,
    /// Idle: `ticks` after `from` (the last pass's tick), the wheel's next due tick or
    /// housekeeping's next work, whichever is sooner, or until woken.
    Ticks { ticks: u64, from: u64 },
    /// Idle with nothing pending anywhere: until woken.
    Forever,
    /// Shutting down: no more passes.
    Stop,
}

/// The sleep decision after a pass (module docs): a tick at a time while batches hold
/// entries; otherwise idle (then one more look at the batches), until the wheel's next due
/// tick or housekeeping's next work, or until woken when neither has any.
pub(super) fn next_wait<T: Send + 'static>(engine: &Engine<T>) -> Wait {
    let (waiting_in_batches, next_due, now) = {
        let mut wheel = engine.reaper.lock_wheel();
        // Dead entries with nothing pending: the next tick's pass sweeps them, rather than
        // their deadlines ([`wheel`], "Dead entries").
        let next_due = if wheel.ask_idle_sweep(engine.pending()) {
            Some(wheel.now + 1)
        } else {
            wheel.timers.next_due()
        };
        (engine.threads.waiting(), next_due, wheel.now)
    };
    if waiting_in_batches {
        engine.threads.unidle();
        return Wait::Tick { from: now };
    }
    // A longer sleep: idle first, then one more look at the batches (module docs).
    if engine.threads.park_check() {
        return Wait::Again;
    }
    if engine.stopping() {
        return Wait::Stop;
    }
    // Until the next deadline or housekeeping's next work (a migration, a generation
    // to free, a table to shrink), whichever comes first; unbounded when neither.
    let house = engine.housekeeping_due(now as Tick).map(u64::from);
    let wait = match (next_due.map(|due| due.saturating_sub(now)), house) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // At most half the anchor's reach while anything is pending
    // ([`anchor`](crate::acker::engine::time)), so that passes keep the anchor near what
    // is stored and no re-anchoring is ever needed; and the thread, while trees are
    // pending, at most the hand-off age, so that a tree started while it sleeps reaches it
    // in time without a wake-up from the thread that started it (module docs, "Sleeping").
    let most = longest_sleep(engine, now);
    match wait {
        // Nothing pending: no wake-ups at all, once the linger is over ("Sleeping").
        None if most < REANCHOR_AFTER / 2 => Wait::Ticks {
            ticks: most,
            from: now,
        },
        None => Wait::Forever,
        Some(ticks) => Wait::Ticks {
            ticks: ticks.min(most),
            from: now,
        },
    }
}

/// Publishes the wheel's next due tick for callers (`Reaper::timers_due_at`, "Callers
/// first").
pub(in crate::acker::engine) fn publish_timers<T: Send + 'static>(
    engine: &Engine<T>,
    wheel: &Wheel,
) {
    let due = wheel.timers.next_due().unwrap_or(AWAKE);
    // Relaxed: a hint; a stale one costs a caller a pass with no timer due, or leaves a
    // due one to the thread a lateness longer.
    engine.reaper.timers_due_at.store(due, Ordering::Relaxed);
}

/// How long, in hand-off ages, the reaper thread keeps sleeping a hand-off age at a time
/// after the last tree it saw pending ("Sleeping"): a server whose requests each complete
/// before the next begins would otherwise wake it from its park at every request.
const LINGER_AGES: u64 = 4;

/// The most ticks the reaper thread sleeps on a timer at full tick `now` ([`next_wait`]):
/// the hand-off age while trees are pending and for [`LINGER_AGES`] of them after,
/// otherwise half the anchor's reach. A manual acker's driver is woken by every push that
/// needs it, and sleeps as long as it likes.
fn longest_sleep<T: Send + 'static>(engine: &Engine<T>, now: u64) -> u64 {
    let age = u64::from(engine.hand_off_age);
    if engine.manual {
        return REANCHOR_AFTER / 2;
    }
    if engine.pending() > 0 {
        // Relaxed (both): a hint for how long to sleep; the thread alone reads it to
        // decide, and a caller's publication only ever shortens a sleep with it.
        engine.reaper.busy_at.fetch_max(now, Ordering::Relaxed);
        return age;
    }
    let busy_at = engine.reaper.busy_at.load(Ordering::Relaxed); // Relaxed: as above
    if busy_at != 0 && now < busy_at + LINGER_AGES * age {
        age
    } else {
        REANCHOR_AFTER / 2
    }
}

fn reaper_loop<T: Send + 'static>(engine: &Engine<T>) {
    // Woken by its timer, the reaper should run at once even when every core is busy
    // ([`slice`](crate::sync::slice)).
    crate::sync::slice::ask_for_slice(crate::sync::slice::REAPER_SLICE_NS);
    // The tick the last timed sleep aimed at (`sleep_until`).
    let mut aimed = None;
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    while !engine.stopping() {
        // Running: no caller runs this pass in its place ("Callers first").
        // Raced by callers' CASes (`store_raced`: the loom models see a real store).
        store_raced(&engine.reaper.wakes_at, AWAKE, Ordering::SeqCst);
        engine.reaper.thread_wakes_at.store(AWAKE, Ordering::SeqCst);
        // A pass that panics (a clock's `now`) is counted and the loop goes on: a reaper
        // that stopped would leave every deadline unserved. A panic in a pass happens
        // before it moves entries out of the wheel or after it has delivered them
        // (`Engine::deliver` catches the callback's and the payload's), so nothing is lost.
        let runner = Runner::Reaper {
            everything: false,
            behind: backstop_lag(engine),
        };
        let pass = match catch_unwind(AssertUnwindSafe(|| pass(engine, runner))) {
            Ok(pass) => pass,
            Err(_) => {
                engine.count_reaper_panic();
                thread::park_timeout(tick); // do not spin on a clock that keeps panicking
                continue;
            }
        };
        if !pass.worked {
            engine.reaper.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic
        }
        match next_wait(engine) {
            Wait::Tick { from } => {
                sleep_until(engine, from.wrapping_add(1), 1, &mut aimed);
                continue; // not idle: nothing to undo
            }
            Wait::Again => continue,
            Wait::Stop => break,
            Wait::Forever => thread::park(),
            Wait::Ticks { ticks, from } => {
                let ticks = ticks.max(1);
                sleep_until(engine, from.wrapping_add(ticks), ticks, &mut aimed);
            }
        }
        engine.threads.unidle();
    }
}

/// Parks until full tick `tick` begins on the clock, or until woken, but never longer than
/// `ticks` ticks (the distance from the pass's tick); while callers lead, a backstop's lag
/// longer, even when `tick` has begun ("Callers first").
///
/// A duration of `ticks` ticks from now would wake the reaper as far into tick `tick` as
/// this moment is into the pass's tick: up to a tick late for every timeout, half a tick
/// on average (the stress harness's timeout lateness). The bound keeps a clock that stepped
/// back behind the wheel's time (a pass never goes back) from making the sleep longer, and
/// a clock that panics here costs the precision only: the pass's own read is the one whose
/// panic is counted. A second sleep aimed at the same tick (`aimed`) lasts the whole
/// `ticks`, as before: a clock that does not follow real time (a frozen or coarse custom
/// clock) can read just short of the tick after every wake, and must not make the reaper
/// spin; with the monotonic clock that happens only after an unpark.
fn sleep_until<T: Send + 'static>(
    engine: &Engine<T>,
    tick: u64,
    ticks: u64,
    aimed: &mut Option<u64>,
) {
    let tick_nanos = 1u64 << engine.time.ticks.shift;
    let most = ticks.saturating_mul(tick_nanos);
    let again = aimed.replace(tick) == Some(tick);
    let now = catch_unwind(AssertUnwindSafe(|| engine.now())).ok();
    let wait = match now {
        Some(now) => wait_nanos(engine.tick_start(tick), now, most),
        None => Some(most),
    };
    let wait = if again { wait.map(|_| most) } else { wait };
    // While callers lead, the thread sleeps a lag past its timer: the first caller in the
    // tick runs the pass if a timer is due ("Callers first"); a tick for the batches
    // alone, callers leave to the thread unless it is a lateness past the lag.
    let lag = backstop_lag(engine) * tick_nanos;
    let wait = match wait {
        None if lag > 0 => Some(0),
        wait => wait,
    };
    if let Some(wait) = wait {
        // The tick the timer ends in: `tick`, or later for a whole `ticks` from now (a
        // second sleep aimed at it); unknown with a clock that panicked. A caller runs the
        // pass once it begins ("Callers first"); a push relies on the thread or a caller
        // to run it by then ("Sleeping").
        let ends = now.map_or(AWAKE, |now| {
            tick.max(engine.time.ticks.full(now.wrapping_add(wait)))
        });
        store_raced(&engine.reaper.wakes_at, ends, Ordering::SeqCst);
        let lag_ticks = lag >> engine.time.ticks.shift;
        engine
            .reaper
            .thread_wakes_at
            .store(ends.saturating_add(lag_ticks), Ordering::SeqCst);
        thread::park_timeout(Duration::from_nanos(wait + lag));
    }
}

/// Nanoseconds from `now` until `start` (on the clock's wrapping timeline), at most `most`;
/// `None` once `start` has come.
fn wait_nanos(start: u64, now: u64, most: u64) -> Option<u64> {
    match start.wrapping_sub(now) as i64 {
        ..=0 => None,
        left => Some((left as u64).min(most)),
    }
}

#[cfg(test)]
mod tests;
