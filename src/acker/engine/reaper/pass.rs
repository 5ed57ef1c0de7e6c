//! One pass of the reaper (module docs of [`reaper`](super), "A pass"): the dirty groups
//! scanned when due, the wheel advanced, each group dirty or come due looked at, the
//! timeouts delivered, then (the reaper's passes only) the upkeep; a caller's pass within
//! its bounds ("A caller's pass").

use std::time::Instant;

use super::wheel::Wheel;
use crate::acker::engine::tables::tag_of;
use crate::acker::engine::Engine;
use crate::acker::table::{Completed, Effects, Expiry, Judge, Table, GROUP_SLOTS};
use crate::acker::threads::{trim, Active, Registered};
use crate::acker::timers::groups::{Entry, GroupAt, GroupTimer};
use crate::acker::timers::ticks::{full_near, reached, Tick};
use crate::sync::Ordering;

use super::AWAKE;

/// What a pass did.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::acker::engine) struct Pass {
    pub delivered: usize,
    /// Any group scanned, due or dropped.
    pub worked: bool,
    /// A caller's pass: groups due that its bounds kept it from, or dirty groups the
    /// reaper must scan within the thread's lag (a burst, or the scan: the thread's).
    pub left: bool,
    /// It ran: a caller's pass gives way to a re-anchoring, to another pass under way and
    /// to shutdown.
    pub ran: bool,
    /// Dirty groups it left (a failed barrier) made the summary's tick this one, and found
    /// the reaper idle: a manual acker's driver, woken once the wheel's lock is released if
    /// it sleeps past it (a caller's pass leaves them to the thread, `left`, instead).
    wake: Option<Tick>,
}

/// Who runs a pass, and so how much of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Runner {
    /// The reaper thread, or a manual acker's driver or `expire`: the whole pass.
    /// `everything`: scan the dirty groups whatever the summary's tick (a manual acker's
    /// `expire`, whose caller registered its own trees a moment ago). `behind`: ticks before the clock that the pass
    /// judges deadlines at, the thread's lag as the callers' backstop (module docs of
    /// [`reaper`](super), "Callers first").
    Reaper { everything: bool, behind: u64 },
    /// A caller running the reaper's pass: its timers only, within bounds (module docs,
    /// "A caller's pass").
    Caller,
}

/// Dirty groups whose lines a pass asks for ahead of the one it looks at: enough misses in
/// flight to fill a core's queue of them (10 to 16 on current x86 cores), few enough that
/// the lines asked for first are still in cache when their group's turn comes.
const LOOK_AHEAD: usize = 8;

/// The groups a caller's pass looks at before it takes no more, a [`CALLER_PART`] at a
/// time (so at most this plus a part; module docs of [`reaper`](super), "A caller's
/// pass").
pub(super) const CALLER_GROUPS: usize = 256;

/// The groups a caller's pass takes out of the wheel at a time: it takes no more once it
/// has claimed [`CALLER_TIMEOUTS`] timeouts (each group of [`GROUP_SLOTS`] slots holds up
/// to that many).
pub(super) const CALLER_PART: usize = 8;

/// The most entries the cascades of a part of a caller's advance of the wheel move: a
/// coarser bucket (or an overflow) of more is a burst (module docs of [`reaper`](super), "A
/// caller's pass"). A cascade moves entries of `u64` from vector to vector; a group looked
/// at reads lines.
pub(super) const CALLER_CASCADE: usize = 1024;

/// The timeouts a caller's pass claims before it takes no more groups: at most this plus
/// a part's ([`CALLER_PART`] × [`GROUP_SLOTS`]) are delivered on the caller.
pub(super) const CALLER_TIMEOUTS: usize = 32;

/// One pass at the clock's time (module docs). `everything`: scan the dirty groups whatever
/// the summary's tick (a manual acker's `expire`).
pub(in crate::acker::engine) fn run_once<T: Send + 'static>(
    engine: &Engine<T>,
    everything: bool,
) -> Pass {
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
pub(super) fn pass<T: Send + 'static>(engine: &Engine<T>, runner: Runner) -> Pass {
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
    let Some((read, clock)) = anchored_clock(engine, runner) else {
        return pass;
    };
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
        scan_dirty(engine, &mut wheel, runner, judge, live, &mut pass);
        let timers = take_due(engine, &mut wheel, runner, judge, &mut pass, &mut timed_out);
        // Entries of groups whose trees completed after they were filed, and of groups that
        // moved to a successor, wait for their deadlines; once they crowd the wheel, a sweep drops
        // them ([`wheel`], "Dead entries").
        if !caller {
            pass.worked |= wheel.sweep_if_crowded(engine, live);
        }
        publish_timers(engine, &wheel);
        timers
    };
    // Outside the lock: a manual acker's waker is the user's code.
    if let Some(by) = pass.wake {
        if engine.reaper_sleeps_past(by) {
            engine.wake_reaper();
        }
    }
    pass.delivered = timed_out.len();
    // Relaxed: a count the lead's hint compares.
    let caller_passes = engine.reaper.caller_passes.load(Ordering::Relaxed);
    engine.reaper.lead.after(
        caller,
        pass.left,
        pass.delivered > 0,
        timers,
        caller_passes,
        engine.time.ticks.shift,
    );
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

/// A pass's clock, read, and the anchor raised to it (outside the wheel's lock): the tick
/// as read, and the tick the pass judges deadlines at (the thread's, a backstop's lag
/// behind); `None` for a caller's pass that would re-anchor (after a stall: a walk of every
/// table, the thread's work).
fn anchored_clock<T: Send + 'static>(engine: &Engine<T>, runner: Runner) -> Option<(u64, u64)> {
    // Deadlines are judged on the clock's own tick, so that a clock that stepped back
    // times out nothing before its deadline as read on that clock; the wheel's time (the
    // anchor's), which files and advances the group timers, never goes back. (While the
    // clock is behind it, a group it judges not yet due is looked at again each pass.)
    let read = engine.time.clock_full();
    // The thread as the callers' backstop judges what they left that late ("Callers
    // first"); its deliveries' lateness is counted on the clock as read.
    let clock = match runner {
        Runner::Reaper { behind, .. } => read.saturating_sub(behind),
        Runner::Caller => read,
    };
    // The anchor first ([`anchor`](crate::acker::engine::time)), outside the wheel's
    // lock: after a stall, a re-anchoring, which walks every table: the thread's work.
    if runner == Runner::Caller && engine.time.needs_reanchoring(clock) {
        return None;
    }
    engine
        .time
        .advance_anchor(clock, &engine.threads, |from, to| engine.rebase(from, to));
    Some((read, clock))
}

/// A pass's first step, under the wheel's lock: the wheel's time moved to the anchor's
/// (never back), and the dirty groups taken into the wheel's `dirty` list when the
/// summary's tick has come (or `everything`), for the second step to look at
/// ([`dirty`](crate::acker::timers::dirty)); a caller's pass takes at most
/// [`CALLER_GROUPS`] and leaves the rest to the next scan (`Pass::left`).
fn scan_dirty<T: Send + 'static>(
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
    // While callers lead, the thread wakes a lag before the tick it aims at ("Callers
    // first"): the scan is due once that lag before its tick has come. A manual acker's
    // `expire` scans whatever the summary says (a registration under way may have set its
    // bit and not the summary yet). A caller's pass scans within its bound ("A caller's
    // pass").
    let lag = engine.reaper.lead.lag() as Tick;
    let due = engine
        .threads
        .earliest_due()
        .is_some_and(|by| reached(by.wrapping_sub(lag), now as Tick));
    let (due, most) = match runner {
        Runner::Reaper { everything, .. } => (due || everything, usize::MAX),
        Runner::Caller => (due, CALLER_GROUPS),
    };
    if !due {
        return;
    }
    if runner != Runner::Caller {
        // Before the scan: the groups operations moved are dirty in their successors, and
        // the dead entries of the generations they left are best gone before the wheel's
        // vectors grow for the new ones. (The groups a pass moves are filed at once,
        // `Engine::file_on_wheel`, and swept at the next.)
        pass.worked |= wheel.sweep_if_crowded(engine, live);
    }
    // The summary first, then the bits: a bit set after the summary's swap stores it again
    // (module docs of `dirty`, "Why no root is missed").
    let by = engine.threads.take_dirty().unwrap_or(now as Tick);
    let left = engine.tables.take_dirty(most, &mut wheel.dirty);
    // The heavy side of the registration's Dekker pair, before the looks read the slots
    // (none to read, none needed). Without the barrier a root whose operation found its bit
    // set may not be seen: the bits go back, for the next pass.
    if !wheel.dirty.is_empty() && !engine.threads.scanned() {
        leave_dirty(engine, wheel.dirty.iter(), by, runner, pass);
        wheel.dirty.clear();
    } else if left {
        // Past a caller's bound: the bits left are due as they were.
        leave_dirty(engine, [].iter(), by, runner, pass);
    }
    pass.worked |= !wheel.dirty.is_empty();
}

/// Dirty groups a scan took and will not look at (`timers`; a failed barrier, or a caller's
/// bound), and the bits it did not take: marked again, the summary due at `by` (no later
/// than it was), for the next scan ([`dirty`](crate::acker::timers::dirty)). A caller's
/// pass leaves them to the thread (`Pass::left`); a reaper's wakes an idle driver after
/// its lock (`Pass::wake`).
fn leave_dirty<'a, T: Send + 'static>(
    engine: &Engine<T>,
    timers: impl Iterator<Item = &'a GroupTimer>,
    by: Tick,
    runner: Runner,
    pass: &mut Pass,
) {
    for timer in timers {
        engine.tables.mark_dirty(timer);
    }
    let woke = engine.threads.registered(by);
    match runner {
        Runner::Caller => pass.left = true,
        Runner::Reaper { .. } => {
            if let Registered::WakeReaper { by } = woke {
                pass.wake = Some(by);
            }
        }
    }
}

/// A pass's second step, under the wheel's lock: the wheel advanced to its time (a
/// caller's advance within its bound), and every group come due looked at
/// ([`look_at_group`]), as is every dirty group the first step took; its timeouts claimed
/// into `timed_out`. Whether any group came due: the pass ran for timers, not only to
/// scan.
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
    let mut taken = 0;
    // The dirty groups first, before the advance: a group they file due already comes out
    // of it ([`groups`](crate::acker::timers::groups)).
    let scanned = look_at_dirty(engine, wheel, runner, judge, pass, timed_out);
    match runner {
        Runner::Reaper { .. } => {
            wheel.timers.advance(now, &mut due);
            taken = due.len();
            for timer in due.drain(..) {
                look_at_group(engine, wheel, timer, judge, timed_out);
            }
        }
        // A part at a time, until the wheel reaches `now` or the caller's bounds: most
        // groups come due with their trees long completed (an entry waits for its
        // deadline), and a look at one of those is a line read.
        Runner::Caller => {
            loop {
                let reached =
                    wheel
                        .timers
                        .advance_within(now, CALLER_PART, CALLER_CASCADE, &mut due);
                let took = due.len();
                taken += took;
                for timer in due.drain(..) {
                    look_at_group(engine, wheel, timer, judge, timed_out);
                }
                if reached {
                    break;
                }
                // A part that took nothing stopped at a bucket or an overflow too large to
                // cascade within its bound (a bucket's due entries come out a part at a
                // time first): a burst. Or the caller's bounds are reached.
                if took == 0
                    || timed_out.len() >= CALLER_TIMEOUTS
                    || scanned + taken >= CALLER_GROUPS
                {
                    pass.left = true;
                    break;
                }
            }
        }
    }
    // The entries come due are no longer there to defer an idle sweep.
    wheel.kept = wheel.kept.saturating_sub(taken);
    let timers = taken > 0;
    pass.worked |= timers;
    wheel.due = due;
    // A burst (a million trees handed over at once) must not keep its scratch space.
    let scratch =
        |w: &Wheel| (w.dirty.capacity() + w.due.capacity()) * std::mem::size_of::<GroupTimer>();
    let before = scratch(wheel);
    trim(&mut wheel.dirty);
    trim(&mut wheel.due);
    wheel.released += before - scratch(wheel);
    timers
}

/// Looks at every dirty group the first step took ([`look_at_group`]), until a caller's
/// pass has claimed [`CALLER_TIMEOUTS`] timeouts: the rest wait for the next scan, due now
/// ("A caller's pass"). Their lines are long out of cache (a scan comes most of a timeout
/// after the first of them was marked): asked for ahead, so that their misses overlap. How
/// many the scan took.
fn look_at_dirty<'e, T: Send + 'static>(
    engine: &'e Engine<T>,
    wheel: &mut Wheel,
    runner: Runner,
    judge: Judge,
    pass: &mut Pass,
    timed_out: &mut Vec<(usize, &'e Table<T>, Completed)>,
) -> usize {
    let mut dirty = std::mem::take(&mut wheel.dirty);
    for timer in dirty.iter().take(LOOK_AHEAD) {
        engine.tables.prefetch_group(timer);
    }
    for i in 0..dirty.len() {
        if runner == Runner::Caller && timed_out.len() >= CALLER_TIMEOUTS {
            leave_dirty(engine, dirty[i..].iter(), wheel.now as Tick, runner, pass);
            break;
        }
        if let Some(ahead) = dirty.get(i + LOOK_AHEAD) {
            engine.tables.prefetch_group(ahead);
        }
        look_at_group(engine, wheel, dirty[i], judge, timed_out);
    }
    let scanned = dirty.len();
    dirty.clear();
    wheel.dirty = dirty;
    scanned
}

/// The reaper's upkeep after its pass's deliveries (module docs of [`reaper`](super), "A
/// pass", 5): migrations helped and finished, tables shrunk, the filed ticks of generations
/// gone pruned, retired generations freed (out of the operation `active`, which it ends),
/// memory given back. Whether it did anything.
fn upkeep<T: Send + 'static>(engine: &Engine<T>, active: Active) -> bool {
    let now = engine.reaper.lock_wheel().now;
    // Migrations, shrinking, retired generations
    // ([`generations`](crate::acker::engine::tables::generations)); outside the wheel's
    // lock, as a move may complete a tree (its callback may call `expire`), and the filing
    // of the groups it moved takes the lock itself (`Engine::file_on_wheel`; not
    // reentrant).
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
    // The hands of threads that ended, back to the stripes, then their records.
    engine.credits.reclaim();
    engine.threads.prune_ended();
    let kept = engine.give_back_memory(now as Tick, released);
    if kept > 0 {
        // Not given back yet: counted again at the next pass.
        engine.reaper.lock_wheel().released += kept;
    }
    worked
}

/// Looks at every slot of a group come due (module docs of [`reaper`](super), "A pass", 3):
/// its timeouts join `timed_out`, and the group is filed again at the earliest deadline
/// left, if any.
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
                engine.tally().add(|c| &c.orphans_expired, 1);
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
