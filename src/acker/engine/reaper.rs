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
//!    (`Roots::expire`): `TimedOut` is delivered here, after the wheel's lock is released;
//!    `Dropped` counts an orphan; `NotDue(deadline)` (a reset, a joining init, or a root
//!    that is simply due later) and `Joining` (an init writing its payload, a root being
//!    moved: the next tick) give the group's next look, filed at the earliest of them.
//!
//! ## Dead entries
//!
//! An entry whose group's trees all completed stays in the wheel until it comes due
//! (nothing cancels it: the completer never touches the reaper's structures), and so does
//! the later entry of a group that a registration filed earlier
//! ([`groups`](crate::acker::timers::groups), *stale*). The live entries are at most one
//! per group in use (a group of the tables' current generations or their successors) and at
//! most one per pending root: at most the smaller of the two. When the wheel holds an eighth
//! more than that bound (plus [`SWEEP_SLACK`]) the pass sweeps it, keeping each group's
//! named entry (and earlier ones) while the group has a root, and giving back the room of
//! buckets it leaves mostly empty. A sweep thus comes only after dead entries number an
//! eighth of the bound on live ones: each costs O(1) amortized, and the wheel stays within
//! about 9/8 entries per live one, plus the slack (a table's growth, which files every
//! moved group again in its successor, leaves a dead entry per group it moves).
//!
//! ## Sleeping
//!
//! While entries wait in batches the reaper wakes every tick to collect them; otherwise it
//! sleeps until the wheel's next due tick begins on the clock ([`sleep_until`]), or, with
//! nothing anywhere, parks with no deadline. Before any sleep longer than a tick it marks
//! itself idle in the batches and checks them once more: a push that makes a batch
//! non-empty wakes an idle reaper, so no entry waits for a reaper asleep for longer than a
//! tick ([`wake`](crate::acker::threads::wake), "Waking the reaper"). With nothing pending
//! it sleeps without wake-ups. [`next_wait`] makes this decision, for the thread and for a
//! task that runs a manual acker's passes in its place ([`manual`](crate::acker::manual)),
//! which the same pushes wake through a hook (`Engine::wake_reaper`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use super::anchor::REANCHOR_AFTER;
use super::{tag_of, Engine, GEN_MASK};
use crate::acker::table::{Done, Expiry, Judge, GROUP_SLOTS};
use crate::acker::threads::{trim, Entry};
use crate::acker::timers::groups::{File, Filed, GroupAt, GroupTimer};
use crate::acker::timers::ticks::{full_near, Tick};
use crate::acker::timers::wheel::CompactWheel;
use crate::sync::Ordering;
use std::sync::Arc;
use std::thread;

/// Entries the wheel may hold beyond its bound (module docs) before a sweep.
const SWEEP_SLACK: usize = 4096;

/// The reaper's wheel, its groups' filed ticks and its scratch vectors.
#[derive(Debug)]
pub(super) struct Wheel {
    buckets: CompactWheel<GroupTimer>,
    filed: Filed,
    /// The last full tick a pass ran at: passes never go back.
    now: u64,
    /// The clock's full tick at the last pass, which judged its deadlines (it may be
    /// behind `now`, after the clock stepped back).
    clock: u64,
    collected: Vec<Entry>,
    due: Vec<GroupTimer>,
    /// Heap bytes the sweeps and scratch trims gave back to the allocator since it was
    /// last asked to return free memory to the system (`Engine::give_back_memory`).
    released: usize,
}

impl Wheel {
    pub(super) fn new(now: u64) -> Self {
        Wheel {
            buckets: CompactWheel::new(now),
            filed: Filed::default(),
            now,
            clock: now,
            collected: Vec::new(),
            due: Vec::new(),
            released: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Heap bytes: the wheel's buckets, the filed ticks and the pass's scratch vectors.
    pub(super) fn heap_bytes(&self) -> usize {
        self.buckets.heap_bytes()
            + self.filed.heap_bytes()
            + self.collected.capacity() * std::mem::size_of::<Entry>()
            + self.due.capacity() * std::mem::size_of::<GroupTimer>()
    }

    /// The full tick of a `u32` tick near the wheel's time (within 2^31 ticks: the wheel's
    /// time is the anchor during a pass, [`anchor`](crate::acker::engine::anchor)).
    fn full(&self, tick: Tick) -> u64 {
        full_near(self.now, tick)
    }

    /// A re-anchoring to `to` ([`anchor`](crate::acker::engine::anchor)): the wheel's time
    /// moves there (its buckets follow at the next advance), and the groups' filed `u32`
    /// ticks are forgotten, as they would not decode. A group whose entry waits in the
    /// buckets may then get a second one: a stale entry, as
    /// [`groups`](crate::acker::timers::groups) has them.
    pub(super) fn reanchored(&mut self, to: u64) {
        self.filed = Filed::default();
        self.now = self.now.max(to);
        self.clock = self.clock.max(to);
    }

    /// The group's filed tick (tests' coverage count).
    pub(super) fn filed(&self, table: usize, gen: u32, group: usize) -> Option<u64> {
        let now = self.now;
        self.filed.filed(table, gen, group, |t| full_near(now, t))
    }

    /// The sweep (module docs), when the wheel holds more than `live` (a bound on its live
    /// entries) by an eighth and [`SWEEP_SLACK`].
    fn sweep_if_crowded<T: Send + 'static>(&mut self, engine: &Engine<T>, live: usize) {
        if self.buckets.len() <= live + live / 8 + SWEEP_SLACK {
            return;
        }
        let before = self.buckets.heap_bytes() + self.filed.heap_bytes();
        self.sweep(engine);
        let after = self.buckets.heap_bytes() + self.filed.heap_bytes();
        self.released += before.saturating_sub(after);
    }

    fn sweep<T: Send + 'static>(&mut self, engine: &Engine<T>) {
        let now = self.now;
        let Wheel { buckets, filed, .. } = self;
        buckets.retain_filed(|tick, timer| match engine.group_state(timer) {
            // Entries after the group's named one are covered by it
            // ([`groups`](crate::acker::timers::groups)); earlier ones, one waiting for the
            // next advance, or any when nothing reads as named, are kept.
            Some((at, true)) => {
                match (
                    tick,
                    filed.filed(at.table, at.gen, at.group, |t| full_near(now, t)),
                ) {
                    (Some(tick), Some(named)) => tick <= named,
                    _ => true,
                }
            }
            Some((at, false)) => {
                filed.clear(at.table, at.gen, at.group);
                false
            }
            None => false, // an older generation's: its roots moved, with timers of their own
        });
    }

    fn push(&mut self, decision: File, timer: GroupTimer) {
        if let File::At(tick) = decision {
            self.buckets.push(tick, timer);
        }
    }
}

/// What a pass did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pass {
    pub delivered: usize,
    /// Any entry collected, filed, due or dropped.
    pub worked: bool,
}

/// One pass at the clock's time (module docs). `everything`: take every batch's entries
/// (manual mode, where the caller's own batch is one of them).
pub(super) fn run_once<T: Send + 'static>(engine: &Engine<T>, everything: bool) -> Pass {
    let active = engine.batches.enter();
    let mut timed_out = Vec::new();
    let mut pass = Pass::default();
    // Deadlines are judged on the clock's own tick, so that a clock that stepped back
    // times out nothing before its deadline as read on that clock; the wheel's time (the
    // anchor's), which files and advances the group timers, never goes back. (While the
    // clock is behind it, a group it judges not yet due is looked at again each pass.)
    let clock = engine.ticks.full(engine.clock.now());
    // The anchor first ([`anchor`](crate::acker::engine::anchor)), outside the wheel's
    // lock: after a stall, a re-anchoring.
    engine.advance_anchor(clock);
    // The sweep's bound (module docs), read outside the wheel's lock.
    let groups_in_use = engine.groups_in_use();
    {
        let mut wheel = engine.reaper.lock().unwrap_or_else(|e| e.into_inner());
        let wheel = &mut *wheel;
        let anchor = engine.anchor();
        let now = anchor.max(wheel.now);
        wheel.now = now;
        wheel.clock = clock;
        let now32 = now as Tick;
        let mut collected = std::mem::take(&mut wheel.collected);
        engine.batches.collect(now32, everything, &mut collected);
        pass.worked |= !collected.is_empty();
        // Before filing: a growth's hand-off files every moved group again, and the dead
        // entries of the generations it left are best gone before the wheel's vectors
        // grow for the new ones.
        let live = engine.pending().min(groups_in_use);
        wheel.sweep_if_crowded(engine, live);
        for entry in collected.drain(..) {
            file(engine, wheel, entry);
        }
        wheel.collected = collected;
        let mut due = std::mem::take(&mut wheel.due);
        wheel.buckets.advance(now, &mut due);
        pass.worked |= !due.is_empty();
        for timer in due.drain(..) {
            let entry = Entry {
                slot: timer.first,
                tag: timer.gen,
            };
            let Some((table, roots, first)) = engine.locate(&entry) else {
                continue; // an older generation's: its roots moved, with timers of their own
            };
            // Every slot of the group: the earliest deadline left decides the next look.
            let mut earliest = None;
            for slot in first..first + GROUP_SLOTS {
                let Some(key) = roots.key_in(slot) else {
                    continue;
                };
                let mut done = Done::default();
                let tag = tag_of(key.tag(), roots.gen());
                let judge = Judge { anchor, clock };
                let next = match roots.expire_keeping(slot, tag, judge, &mut done) {
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
                        if let Some(completed) = done.take() {
                            timed_out.push((table, roots, completed));
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
                table,
                gen: roots.gen(),
                groups: roots.groups(),
                group: first / GROUP_SLOTS,
            };
            let decision = wheel.filed.refile(at, now, earliest, |t| full_near(now, t));
            wheel.push(decision, timer);
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
        // Entries of trees completed after their hand-off, and of groups that moved to a
        // successor, wait for their deadlines; once they crowd the wheel, a sweep drops
        // them (module docs).
        wheel.sweep_if_crowded(engine, live);
    }

    // Outside the lock: `on_complete` may call back into the acker, even `expire`.
    let now = engine.reaper.lock().unwrap_or_else(|e| e.into_inner()).now;
    // Migrations, shrinking, retired generations
    // ([`tables`](crate::acker::engine::tables)); outside the wheel's lock, as moving
    // entries files timers and may complete trees.
    pass.worked |= engine.housekeeping(now, active.open);
    // The filed ticks of generations that left their tables' chains, this pass's
    // promotions included: the pass that shrinks a burst's tables may be the last for a
    // long time, and a large generation's ticks are 4 B a group.
    let released = {
        let mut wheel = engine.reaper.lock().unwrap_or_else(|e| e.into_inner());
        let before = wheel.filed.heap_bytes();
        for table in 0..wheel.filed.tables() {
            engine.prune_filed(table, &mut wheel.filed);
        }
        wheel.released += before.saturating_sub(wheel.filed.heap_bytes());
        std::mem::take(&mut wheel.released)
    };
    pass.delivered = timed_out.len();
    engine.deliver_timeouts(timed_out, clock, active.open);
    drop(active);
    // Out of the operation: the generations this pass retired wait for no one but other
    // threads now (the pass itself was one of those their grace periods waited for).
    engine.free_retired();
    let kept = engine.give_back_memory(now as Tick, released);
    if kept > 0 {
        // Not given back yet: counted again at the next pass.
        engine
            .reaper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .released += kept;
    }
    pass
}

/// Registers `entry`'s root with the reaper: its group gets a timer at its deadline unless
/// one at or before it is filed already ([`groups`](crate::acker::timers::groups)). Nothing
/// when its slot no longer holds its root.
pub(super) fn file<T: Send + 'static>(engine: &Engine<T>, wheel: &mut Wheel, entry: Entry) {
    let Some((table, roots, slot)) = engine.locate(&entry) else {
        return;
    };
    if !engine.holds_entry(roots, slot, &entry) {
        return;
    }
    let Some(deadline) = roots.deadline(slot) else {
        return;
    };
    let now = wheel.now;
    // The wheel's time is the anchor (or past it, a clock gone back): decoded against it.
    let tick = wheel.full(deadline).max(now); // due already: the next advance returns it
    let group = slot / GROUP_SLOTS;
    let at = GroupAt {
        table,
        gen: roots.gen(),
        groups: roots.groups(),
        group,
    };
    let decision = wheel.filed.cover(at, tick, |t| full_near(now, t));
    let timer = GroupTimer {
        first: entry.slot - (slot % GROUP_SLOTS) as u32,
        gen: roots.gen() & GEN_MASK,
    };
    wheel.push(decision, timer);
}

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
        let wheel = engine.reaper.lock().unwrap_or_else(|e| e.into_inner());
        (
            engine.batches.waiting(),
            wheel.buckets.next_due(),
            wheel.now,
        )
    };
    if waiting_in_batches {
        engine.batches.unidle();
        return Wait::Tick { from: now };
    }
    // A longer sleep: idle first, then one more look at the batches (module docs).
    if engine.batches.park_check() {
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
    match wait {
        None => Wait::Forever,
        // At most half the anchor's reach while anything is pending
        // ([`anchor`](crate::acker::engine::anchor)), so that passes keep the anchor near
        // what is stored and no re-anchoring is ever needed.
        Some(ticks) => Wait::Ticks {
            ticks: ticks.min(REANCHOR_AFTER / 2),
            from: now,
        },
    }
}

fn reaper_loop<T: Send + 'static>(engine: &Engine<T>) {
    // The tick the last timed sleep aimed at (`sleep_until`).
    let mut aimed = None;
    let tick = Duration::from_nanos(1 << engine.ticks.shift);
    while !engine.stopping() {
        // A pass that panics (a clock's `now`) is counted and the loop goes on: a reaper
        // that stopped would leave every deadline unserved. A panic in a pass happens
        // before it moves entries out of the wheel or after it has delivered them
        // (`Engine::deliver` catches the callback's and the payload's), so nothing is lost.
        let pass = match catch_unwind(AssertUnwindSafe(|| run_once(engine, false))) {
            Ok(pass) => pass,
            Err(_) => {
                engine.reaper_panics.fetch_add(1, Ordering::SeqCst);
                thread::park_timeout(tick); // do not spin on a clock that keeps panicking
                continue;
            }
        };
        if !pass.worked {
            engine.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic
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
        engine.batches.unidle();
    }
}

/// Parks until full tick `tick` begins on the clock, or until woken, but never longer than
/// `ticks` ticks (the distance from the pass's tick).
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
    let tick_nanos = 1u64 << engine.ticks.shift;
    let most = ticks.saturating_mul(tick_nanos);
    let again = aimed.replace(tick) == Some(tick);
    let wait = match catch_unwind(AssertUnwindSafe(|| engine.now())) {
        Ok(now) => wait_nanos(engine.tick_start(tick), now, most),
        Err(_) => Some(most),
    };
    let wait = if again { wait.map(|_| most) } else { wait };
    if let Some(wait) = wait {
        thread::park_timeout(Duration::from_nanos(wait));
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
mod tests {
    use super::wait_nanos;

    const TICK: u64 = 1 << 20;

    #[test]
    fn a_sleep_ends_where_its_tick_begins_not_a_whole_number_of_ticks_from_now() {
        // The pass ran 70 % into tick 10; the wheel's next due tick is 13.
        let now = 10 * TICK + TICK * 7 / 10;
        assert_eq!(
            wait_nanos(13 * TICK, now, 3 * TICK),
            Some(3 * TICK - TICK * 7 / 10)
        );
        // A clock that stepped back far behind the wheel: no longer than the ticks apart.
        assert_eq!(wait_nanos(13 * TICK, TICK, 3 * TICK), Some(3 * TICK));
        // Begun already, or just now: no sleep.
        assert_eq!(wait_nanos(13 * TICK, 13 * TICK, 3 * TICK), None);
        assert_eq!(wait_nanos(13 * TICK, 14 * TICK, 3 * TICK), None);
        // Across the clock's wrap.
        assert_eq!(wait_nanos(5, u64::MAX - 4, 3 * TICK), Some(10));
        assert_eq!(wait_nanos(u64::MAX - 4, 5, 3 * TICK), None);
    }
}
