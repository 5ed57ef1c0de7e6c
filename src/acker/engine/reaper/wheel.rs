//! The reaper's wheel: its group timers in a [`CompactWheel`], the tick each group is filed
//! at ([`groups`](crate::acker::timers::groups)), and the pass's scratch vectors. A pass
//! ([`reaper`](super)) files entries here ([`file()`]) and takes the due groups out.
//!
//! ## Dead entries
//!
//! An entry whose group's trees all completed stays in the wheel until it comes due
//! (nothing cancels it: the completer never touches the reaper's structures), and so does
//! the later entry of a group that a registration filed earlier
//! ([`groups`](crate::acker::timers::groups), *stale*). The live entries are at most one
//! per group in use (a group of the tables' current generations or their successors) and at
//! most one per pending root: at most the smaller of the two. When the wheel holds an
//! eighth more than that bound (plus [`SWEEP_SLACK`]) the pass sweeps it, keeping each
//! group's named entry (and earlier ones) while the group has a root, and giving back the
//! room of buckets it leaves mostly empty. A sweep thus comes only after dead entries
//! number an eighth of the bound on live ones: each costs O(1) amortized, and the wheel
//! stays within about 9/8 entries per live one, plus the slack (a table's growth, which
//! files every moved group again in its successor, leaves a dead entry per group it moves).
//!
//! With nothing pending every entry is dead, yet the slack would keep up to 4,096 of them
//! (about 170 KiB of buckets) until their deadlines, a whole timeout after a burst. So a
//! pass that reads nothing pending sweeps whatever was filed since the last sweep
//! ([`Wheel::idle_sweep_due`]), and the wheel is back at its fixed part. After a burst such
//! passes come soon: the reaper looks at the load ten times a second while a table is above
//! its smallest size ([`growth`](crate::acker::engine::tables::growth)), and a reaper about
//! to sleep that reads nothing pending with entries unswept comes back a tick later for
//! that pass. It does so once per sweep ([`Wheel::ask_idle_sweep`]): trees that come and go
//! between the pass's reading of `pending` and its own may be pending again at the pass it
//! comes back for, which then sweeps nothing, and asking after every pass would make that a
//! wake-up every tick. (Completions do not wake the reaper, which would cost each a check:
//! trees that complete while it sleeps until a far deadline, in tables at their smallest,
//! leave their entries to the next pass, at most the slack.) A sweep keeps every group that
//! holds a root, and `pending` may read low while credits move, so an idle sweep may keep
//! some: the next one waits until an eighth more were filed, and each entry is still swept
//! at O(1) amortized.

use crate::acker::engine::Engine;
use crate::acker::table::Table;
use crate::acker::table::GROUP_SLOTS;
use crate::acker::timers::groups::{File, Filed, GroupAt, GroupTimer};
use crate::acker::timers::ticks::{full_near, Tick};
use crate::acker::timers::wheel::CompactWheel;

/// Entries the wheel may hold beyond its bound (module docs) before a sweep.
const SWEEP_SLACK: usize = 4096;

/// The reaper's wheel, its groups' filed ticks and its scratch vectors.
#[derive(Debug)]
pub(in crate::acker::engine) struct Wheel {
    /// The group timers, by deadline.
    pub(super) timers: CompactWheel<GroupTimer>,
    pub(super) filed: Filed,
    /// The last full tick a pass ran at: passes never go back.
    pub(super) now: u64,
    /// The clock's full tick at the last pass, which judged its deadlines (it may be
    /// behind `now`, after the clock stepped back).
    pub(super) clock: u64,
    /// The dirty groups a pass's scan took, for its look.
    pub(super) dirty: Vec<GroupTimer>,
    pub(super) due: Vec<GroupTimer>,
    /// Heap bytes the sweeps and scratch trims gave back to the allocator since it was
    /// last asked to return free memory to the system (`Engine::give_back_memory`).
    pub(super) released: usize,
    /// The entries the last sweep kept with nothing pending, less those that came due since
    /// (module docs, "Dead entries").
    pub(super) kept: usize,
    /// A reaper about to sleep has come back a tick later for an idle sweep since the last
    /// sweep (module docs, "Dead entries"): once per sweep.
    idle_sweep_asked: bool,
}

impl Wheel {
    pub(in crate::acker::engine) fn new(now: u64) -> Self {
        Wheel {
            timers: CompactWheel::new(now),
            filed: Filed::default(),
            now,
            clock: now,
            dirty: Vec::new(),
            due: Vec::new(),
            released: 0,
            kept: 0,
            idle_sweep_asked: false,
        }
    }

    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker::engine) fn len(&self) -> usize {
        self.timers.len()
    }

    /// Heap bytes: the wheel's timers, the filed ticks and the pass's scratch vectors.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker::engine) fn heap_bytes(&self) -> usize {
        self.timers.heap_bytes()
            + self.filed.heap_bytes()
            + (self.dirty.capacity() + self.due.capacity()) * std::mem::size_of::<GroupTimer>()
    }

    /// The full tick of a `u32` tick near the wheel's time (within 2^31 ticks: the wheel's
    /// time is the anchor during a pass, [`anchor`](crate::acker::engine::time)).
    pub(super) fn full(&self, tick: Tick) -> u64 {
        full_near(self.now, tick)
    }

    /// A re-anchoring to `to` ([`anchor`](crate::acker::engine::time)): the wheel's time
    /// moves there (its buckets follow at the next advance), and the groups' filed `u32`
    /// ticks are forgotten, as they would not decode. A group whose entry waits in the
    /// buckets may then get a second one: a stale entry, as
    /// [`groups`](crate::acker::timers::groups) has them.
    pub(in crate::acker::engine) fn reanchored(&mut self, to: u64) {
        self.filed = Filed::default();
        self.now = self.now.max(to);
        self.clock = self.clock.max(to);
    }

    /// The group's filed tick (tests' coverage count).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker::engine) fn filed(
        &self,
        shard: usize,
        gen: u32,
        group: usize,
    ) -> Option<u64> {
        let now = self.now;
        self.filed.filed(shard, gen, group, |t| full_near(now, t))
    }

    /// The sweep (module docs), when the wheel holds more than `live` (a bound on its live
    /// entries) by an eighth and [`SWEEP_SLACK`], or when nothing is live and entries came
    /// since the last sweep ([`idle_sweep_due`](Self::idle_sweep_due)). Whether it dropped
    /// any.
    pub(super) fn sweep_if_crowded<T: Send + 'static>(
        &mut self,
        engine: &Engine<T>,
        live: usize,
    ) -> bool {
        let len = self.timers.len();
        if len <= live + live / 8 + SWEEP_SLACK && !self.idle_sweep_due(live) {
            return false;
        }
        let before = self.timers.heap_bytes() + self.filed.heap_bytes();
        self.sweep(engine);
        let after = self.timers.heap_bytes() + self.filed.heap_bytes();
        self.released += before.saturating_sub(after);
        // What a sweep with roots pending keeps may die before the next pass: only an idle
        // sweep's survivors defer the next idle sweep.
        self.kept = if live == 0 { self.timers.len() } else { 0 };
        self.idle_sweep_asked = false;
        self.timers.len() < len
    }

    /// A reaper about to sleep, which reads `pending` now: whether to come back at the next
    /// tick for an idle sweep ([`idle_sweep_due`](Self::idle_sweep_due)). Once per sweep
    /// (module docs, "Dead entries").
    pub(super) fn ask_idle_sweep(&mut self, pending: usize) -> bool {
        if self.idle_sweep_asked || !self.idle_sweep_due(pending) {
            return false;
        }
        self.idle_sweep_asked = true;
        true
    }

    /// With `live` (a bound on the live entries) at 0, whether the wheel holds an eighth
    /// more than the last sweep kept: all dead, to be swept now rather than at their
    /// deadlines (module docs, "Dead entries").
    pub(super) fn idle_sweep_due(&self, live: usize) -> bool {
        live == 0 && self.timers.len() > self.kept + self.kept / 8
    }

    fn sweep<T: Send + 'static>(&mut self, engine: &Engine<T>) {
        let now = self.now;
        let Wheel { timers, filed, .. } = self;
        timers.retain_filed(|tick, timer| match engine.tables.group_state(timer) {
            // Entries after the group's named one are covered by it
            // ([`groups`](crate::acker::timers::groups)); earlier ones, one waiting for the
            // next advance, or any when nothing reads as named, are kept.
            Some((at, true)) => {
                match (
                    tick,
                    filed.filed(at.shard, at.gen, at.group, |t| full_near(now, t)),
                ) {
                    (Some(tick), Some(named)) => tick <= named,
                    _ => true,
                }
            }
            Some((at, false)) => {
                filed.clear(at.shard, at.gen, at.group);
                false
            }
            None => false, // an older generation's: its roots moved, with timers of their own
        });
    }

    pub(super) fn push(&mut self, decision: File, timer: GroupTimer) {
        if let File::At(tick) = decision {
            self.timers.push(tick, timer);
        }
    }
}

/// Registers the root in `slot` of `table` (a generation of `shard`), due at `deadline`,
/// with the reaper: its group gets a timer at the deadline unless one at or before it is
/// filed already ([`groups`](crate::acker::timers::groups)). A root that completed since
/// its deadline was read leaves its group a timer that finds nothing, as a completion does
/// to any timer of its group.
pub(in crate::acker::engine) fn file<T: Send + 'static>(
    engine: &Engine<T>,
    wheel: &mut Wheel,
    shard: usize,
    table: &Table<T>,
    slot: usize,
    deadline: Tick,
) {
    let now = wheel.now;
    // The wheel's time is the anchor (or past it, a clock gone back): decoded against it.
    let tick = wheel.full(deadline).max(now); // due already: the next advance returns it
    let group = slot / GROUP_SLOTS;
    let at = GroupAt {
        shard,
        gen: table.gen(),
        groups: table.groups(),
        group,
    };
    let decision = wheel.filed.cover(at, tick, |t| full_near(now, t));
    wheel.push(decision, engine.tables.group_timer(shard, table, group));
}
