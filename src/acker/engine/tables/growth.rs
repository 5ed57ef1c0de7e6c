//! Growth and shrink as the acker drives them: operations help the oldest migration of
//! their table's chain, grow the chain's last generation when a claim finds it crowded and
//! the load calls for it (or ask the reaper thread to, for a large one; unconditionally
//! when it had no room), and move the entries they stranded; reaper passes finish
//! migrations, promote what has moved, shrink tables whose load stayed low (to 2/3, or to a
//! load of 1/4 at once), and free retired generations after their grace period. A pass
//! files the groups it moves on its wheel at once (`Engine::file_on_wheel`), where an
//! operation registers those it moves by their groups' dirty bits: in a fill the reaper
//! thread moves most roots, and a scan would read each line again, gone from the cache by
//! then. The protocol itself is
//! [`migrate`](crate::acker::table::migrate); the generations' ownership is
//! [`generations`](crate::acker::engine::tables::generations).
//!
//! ## Who builds a successor
//!
//! A growing table's successor has its pages faulted in at once
//! ([`zeroed`](crate::zeroed), "Pages written at once"): the kernel zeroes every page
//! of it in the call that builds it, about 0.1 ms a MiB. Built by the caller whose claim
//! found the table crowded, that was a filling thread's time: `perf` put an eighth of a
//! 1M fill's filler samples in `clear_page_erms`. So with a reaper thread, a caller
//! that finds a large table loaded enough to grow ([`REAPER_BUILDS_FROM`]) only asks:
//! it sets its chain's request flag and wakes the thread, whose next pass builds the
//! successor (`housekeeping`) while the caller goes on filling the crowded table. A
//! request already waiting costs a caller one load. Nothing waits on it: a claim that
//! finds no room at all grows the chain itself (`make_room`), as before, so a thread that
//! gets no core delays a growth, never an init; a successor it builds from
//! [`REAPER_BUILDS_FROM`] up is left to fault its pages as the moves write them, 4 KiB at
//! a time ([`zeroed`](crate::zeroed), "Huge pages only at once"; a million trees draining
//! from near-full tables made a `track` that found no room take 190 faults and 4-5 ms on
//! its core when it was populated, and 13-15 huge-page faults and 4-5 ms when it asked for
//! huge pages). Small successors (the first steps of a fill, which the tables' load would
//! outrun in the time a wake-up takes) and a manual acker's (no thread) are built by the
//! caller.

use std::ptr::NonNull;

use super::generations::chain;
use crate::acker::engine::Engine;
use crate::acker::table::{Effects, Table, GROUP_SLOTS};
use crate::acker::threads::{Active, Grace};
use crate::acker::timers::ticks::Tick;
use crate::sync::Ordering;
use crate::zeroed::HUGE;

/// The fewest slots per table (the async acker's start smaller: `build_async`'s
/// `ASYNC_SMALLEST_GROUPS`): 512 groups, 64 KiB of lines for a `u32` payload, 1 MiB of
/// mapped memory for the default 16 tables (untouched until used:
/// [`lines`](crate::acker::table::lines)). A few thousand roots in flight then sit at a
/// load of an eighth or less: few are displaced from their home group (the ack's short
/// path), and two threads' roots seldom share a line. Sharing is what two threads pay most
/// for: with 1k trees in flight each, their roots in tables of their own ran 1.6x faster
/// than in shared tables of 128 groups, where about 4 roots in 10 had the other thread's on
/// their line. Memory per root matters at scale, where tables grow past this anyway. (Under
/// loom, one probe window: models stay small; under Miri, which interprets every slot, 32
/// groups.)
pub(in crate::acker::engine) const MIN_TABLE_SLOTS: usize = if cfg!(loom) {
    (crate::acker::table::MAX_PROBE + 1) * GROUP_SLOTS
} else if cfg!(miri) {
    32 * GROUP_SLOTS
} else {
    512 * GROUP_SLOTS
};

/// The groups shard `shard` of `tables` starts with: `smallest` times 2^(`shard` /
/// `tables`), so that the tables' sizes, and the pending counts at which they grow, spread
/// evenly over a doubling (the engine's module docs, "The bound, and growth"). Equal under
/// loom, whose models count on the smallest tables.
pub(in crate::acker::engine) fn staggered(smallest: usize, shard: usize, tables: usize) -> usize {
    if cfg!(loom) {
        return smallest;
    }
    let step = (shard as f64 / tables as f64).exp2();
    (smallest as f64 * step).round() as usize
}

/// The size, in bytes of lines, from which a growing table's successor is built by the
/// reaper thread (module docs, "Who builds a successor"): 256 KiB, 8,192 slots for a `u32`
/// payload, about 25 µs of zeroing; a table that size takes a few milliseconds of a fill
/// to go from 3/4 full to its probe windows' limit.
pub(in crate::acker::engine) const REAPER_BUILDS_FROM: usize = 256 << 10;

/// Groups a reaper pass moves between two finishes of a migration round (`housekeeping`).
const MOVE_PART: usize = 256;

/// How many ticks a table's load must stay under 1/8 before the reaper shrinks it (to 2/3
/// of its groups).
const SHRINK_AFTER: Tick = 256;

/// How often, in nanoseconds, the reaper looks at the load of tables larger than the
/// smallest while none is low yet: acks and fails that empty a table do not wake the
/// reaper (that would cost every completion a check), so a reaper asleep until a far
/// deadline (a 600 s timeout) would keep a burst's tables that long. Ten looks a second
/// while the tables are large, none once they are back to their smallest.
const LOOK_AT_LOAD_NS: u64 = 100_000_000;

/// The fewest roots pending at a peak for whose fall the allocator is asked to give memory
/// back ([`Engine::give_back_memory`]): below it, what a burst leaves is under a few MiB.
const GIVE_BACK_FROM: usize = 1 << 16;

/// Heap bytes the reaper's structures release (sweeps, trimmed scratch vectors, pruned
/// filed ticks) before the allocator is asked to give memory back
/// ([`Engine::give_back_memory`]): a growing acker releases about a fifth of its wheel's
/// size at each growth.
const GIVE_BACK_RELEASED: usize = 1 << 18;

/// A generation retired by a promotion, freed (dropped) once its grace period is over.
pub(in crate::acker::engine) struct Retired<T> {
    table: NonNull<Table<T>>,
    pub(in crate::acker::engine) grace: Grace,
}

// Safety: a retired generation is owned by this value alone (the table handed it over in
// its promotion CAS), and a `Table<T>` may move between threads when `T: Send`.
unsafe impl<T: Send> Send for Retired<T> {}

impl<T> Drop for Retired<T> {
    fn drop(&mut self) {
        // Safety: the table's `Box` of this generation, handed over once by `promote` and
        // freed once here, after its grace period (or with the acker): no operation holds
        // a reference into it any more.
        drop(unsafe { Box::from_raw(self.table.as_ptr()) });
    }
}

impl<T: Send + 'static> Engine<T> {
    /// The groups a table of `table`'s size grows to: twice as many, up to `max_slots`.
    /// Growth starts at 3/4 load, so a table that has just grown is 3/8 full; the tables'
    /// staggered sizes keep the acker's memory between its tables' extremes (the engine's
    /// module docs, "The bound, and growth"). A fill moves each root about once.
    fn grown(&self, table: &Table<T>, max_slots: usize) -> usize {
        (table.groups() * 2).min(max_slots / GROUP_SLOTS)
    }

    /// Groups in every table generation that may hold roots (each chain's current one and
    /// its successors): a bound on the reaper's live group timers.
    pub(in crate::acker::engine) fn groups_in_use(&self) -> usize {
        self.sum_over_generations(Table::groups)
    }

    /// `per_table` summed over every table generation (each chain's current one and its
    /// successors), inside an operation of its own.
    fn sum_over_generations(&self, per_table: impl Fn(&Table<T>) -> usize) -> usize {
        let _active = self.threads.enter();
        let mut sum = 0;
        for shard in self.tables.shards.iter() {
            // Safety: inside the operation `_active` marks.
            let current = unsafe { shard.current() };
            sum += chain(current).map(&per_table).sum::<usize>();
        }
        sum
    }

    /// Helps the oldest migration in `table`'s chain (`table` is `shard`'s current
    /// generation, or was): moves one group, and promotes what has moved entirely.
    #[inline]
    pub(in crate::acker::engine) fn help(
        &self,
        shard: usize,
        table: &Table<T>,
        effects: &mut Effects,
    ) {
        if table.successor().is_none() {
            return;
        }
        if let Some(migrating) = chain(table).find(|g| g.successor().is_some() && !g.moved_all()) {
            migrating.help_move(effects);
        }
        self.promote_moved(shard);
    }

    /// Promotes the current generation of `shard` while it has moved entirely (a chain
    /// may hold several such), retiring each.
    pub(in crate::acker::engine) fn promote_moved(&self, shard: usize) {
        loop {
            // Safety: called inside an acker operation.
            let current = unsafe { self.tables.shards[shard].current() };
            if current.successor().is_none() || !current.moved_all() {
                return;
            }
            if let Some(old) = self.tables.shards[shard].promote(current) {
                let grace = self.threads.grace();
                // Generations retired earlier are most likely past their grace by now (a
                // table grows step by step): freed here rather than at the next reaper
                // pass, so that a table that grows fast does not hold all its past sizes.
                self.free_retired_then(|retired| retired.push(Retired { table: old, grace }));
            }
        }
    }

    /// After a claim found its table crowded: starts growth of the chain's last generation
    /// when [`growth_due`](Self::growth_due), or asks the reaper thread to (module docs, "Who
    /// builds a successor").
    #[cold]
    pub(in crate::acker::engine) fn grow_if_loaded(&self, shard: usize, table: &Table<T>) {
        let Some((last, groups)) = self.growth_due(table) else {
            return;
        };
        match self.reaper.thread.get() {
            Some(thread) if Table::<T>::line_bytes(groups) >= REAPER_BUILDS_FROM => {
                if self.tables.shards[shard].ask_growth() {
                    thread.unpark();
                }
            }
            _ => {
                self.start_migration(shard, last, groups, false, true);
            }
        }
    }

    /// The last generation of `table`'s chain and the groups it grows to, when the pending
    /// count per table is over 3/4 of its slots and it is smaller than load grows a table
    /// to.
    fn growth_due<'t>(&self, table: &'t Table<T>) -> Option<(&'t Table<T>, usize)> {
        let last = chain(table).last()?;
        if last.slots() >= self.tables.max_table_slots {
            return None;
        }
        // Without the hands' credits (no lock: crowded claims come here): high by at most
        // what the threads' hands hold, a table grown a little early.
        let per_table = self.credits.held_without_hands() / self.tables.shards.len();
        let loaded = per_table * 4 > last.slots() * 3;
        loaded.then(|| (last, self.grown(last, self.tables.max_table_slots)))
    }

    /// A growth a caller asked the reaper thread for ([`grow_if_loaded`](Self::grow_if_loaded)),
    /// started if the chain still calls for it: `true` when it was.
    fn grow_as_asked(&self, shard: usize, table: &Table<T>) -> bool {
        let Some((last, groups)) = self.growth_due(table) else {
            return false;
        };
        // A caller that holds the lock (`make_room`, which found no room) grows the
        // chain itself.
        let started = self.start_migration(shard, last, groups, false, true) == Some(true);
        #[cfg(test)]
        if started {
            // Relaxed: a statistic.
            self.tables.grown_by_reaper.fetch_add(1, Ordering::Relaxed);
        }
        started
    }

    /// [`Generations::start_migration`](super::generations::Generations::start_migration),
    /// counted; `fault_in`: a growing successor has its pages faulted in at once (module
    /// docs, "Who builds a successor").
    pub(in crate::acker::engine) fn start_migration(
        &self,
        shard: usize,
        from: &Table<T>,
        groups: usize,
        wait: bool,
        fault_in: bool,
    ) -> Option<bool> {
        let started =
            self.tables.shards[shard]
                .start_migration(from, groups, wait, fault_in, || self.stopping());
        if started == Some(true) {
            let shrink = usize::from(groups < from.groups());
            self.tables.migrations[shrink].fetch_add(1, Ordering::Relaxed); // a statistic
        }
        started
    }

    /// Growths the reaper thread started at a caller's request (module docs, "Who builds a
    /// successor").
    #[cfg(test)]
    pub(in crate::acker) fn grown_by_reaper(&self) -> u64 {
        self.tables.grown_by_reaper.load(Ordering::Relaxed) // Relaxed: a statistic
    }

    /// Migrations started so far: to grow, and to shrink.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn migrations(&self) -> (u64, u64) {
        // Relaxed: statistics.
        let [grown, shrunk] = &self.tables.migrations;
        (
            grown.load(Ordering::Relaxed),
            shrunk.load(Ordering::Relaxed),
        )
    }

    /// An operation found no room for its root in the last generation of `table`'s chain:
    /// that generation gets a successor twice as large, up to `room_table_slots` (past
    /// the size load alone grows a table to: a root whose probe window is full in a table
    /// that is not must not be refused below `max_pending`). `false` when it is that large
    /// (the operation is refused) or the acker is shutting down.
    #[cold]
    pub(in crate::acker::engine) fn make_room(&self, shard: usize, table: &Table<T>) -> bool {
        let Some(last) = chain(table).last() else {
            return false;
        };
        // Past the size load grows a table to, a table is near the brim by design: a
        // step of an eighth makes room for the clustered window without the quarter.
        let groups = if last.slots() < self.tables.max_table_slots {
            self.grown(last, self.tables.max_table_slots)
        } else {
            (last.groups() + last.groups().div_ceil(8))
                .min(self.tables.room_table_slots / GROUP_SLOTS)
        };
        // A large successor's pages are left to fault as the moves write them: built here,
        // in the call of an init (a `track` on a worker), zeroing them would hold it for
        // milliseconds (module docs, "Who builds a successor").
        let fault_in = Table::<T>::line_bytes(groups) < REAPER_BUILDS_FROM;
        last.slots() < self.tables.room_table_slots
            && self
                .start_migration(shard, last, groups, true, fault_in)
                .is_some()
    }

    /// An entry this operation created in `from` while it migrates, with no room in the
    /// successor ([`migrate`](crate::acker::table::migrate)): grows the chain and moves it,
    /// until it is moved. Only shutdown stops that: the entry, which `from` may hold out of
    /// its scan's sight (a retired generation), is then given up here (module docs,
    /// "Shutdown").
    #[cold]
    pub(in crate::acker::engine) fn unstrand(
        &self,
        shard: usize,
        from: &Table<T>,
        slot: usize,
        effects: &mut Effects,
    ) {
        let mut backoff = crate::sync::Backoff::default();
        while !from.relocate_stranded(slot, effects) {
            if !self.make_room(shard, from) {
                if self.stopping() {
                    self.give_up_stranded(shard, from, slot);
                    return;
                }
                // As large as a table grows: room comes as trees complete, on threads that
                // a re-anchoring may hold at their entry: quiescent while it waits (the
                // stranded entry's times are rewritten in place, and read when it moves).
                let _paused = self.threads.pause();
                backoff.wait();
            }
        }
    }

    /// Shutdown came while `slot` of `from` waited for room: a stranded entry is HELD (a
    /// claim in a migrating table is unjoined before it moves, and no init joins an entry
    /// of a table with a successor: [`migrate`](crate::acker::table::migrate)), so it is
    /// dropped, giving its credit back; were it ever LIVE, its tree is taken back for
    /// shutdown to hand back.
    fn give_up_stranded(&self, shard: usize, from: &Table<T>, slot: usize) {
        let Some(key) = from.key_in(slot) else {
            return; // completed, or moved meanwhile
        };
        if let Some(payload) = from.take_back(slot, key) {
            debug_assert!(false, "a stranded entry was LIVE");
            let root = self.tables.layout.root(shard, key);
            let mut late = self
                .late_handed_back
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            late.push((root, payload));
        } else if from.discard(slot, key) {
            // Relaxed: a statistic.
            self.tally().add(|c| &c.orphans_expired, 1);
        }
    }

    /// Reaper passes: helps every migration under way (and promotes those that finish),
    /// shrinks tables whose load stayed low, and frees retired generations whose grace
    /// period is over. Called inside an acker operation (the pass's, `active`), whose
    /// `open` says whether completions may go to the callback (a move can complete a
    /// tree).
    pub(in crate::acker::engine) fn housekeeping(&self, now: u64, active: &Active) -> bool {
        // A move may create an entry (a stranded twin's): stamped with the pass's tick,
        // which is at the anchor ([`anchor`](crate::acker::engine::time)).
        let stamp = crate::acker::engine::time::stamp_at(now);
        let now = now as Tick;
        let per_table = self.pending() / self.tables.shards.len();
        let mut worked = false;
        for (index, shard) in self.tables.shards.iter().enumerate() {
            // Safety: the caller's contract.
            let table = unsafe { shard.current() };
            if shard.take_growth_request() {
                worked |= self.grow_as_asked(index, table);
            }
            // Only a load that stayed low for SHRINK_AFTER ticks: a shrink while what is
            // pending rises again fills the smaller table before its migration ends.
            if shard.low_for(self.shrinkable(index, table, per_table), now) >= SHRINK_AFTER {
                // To 2/3, or straight to a load of 1/4 when what is pending fell further
                // (a drained acker gives its memory back in one migration, not twenty).
                let groups = (table.groups() * 2 / 3)
                    .min(per_table.div_ceil(GROUP_SLOTS) * 4)
                    .max(self.smallest_slots(index) / GROUP_SLOTS);
                let fault_in = shrink_faults_in(Table::<T>::line_bytes(groups), per_table);
                worked |= self.start_migration(index, table, groups, false, fault_in) == Some(true);
            }
            for migrating in chain(table).filter(|g| g.successor().is_some()) {
                // In parts, each finished before the next: the timers a part files are
                // collected in its `Effects`, whose vectors a whole round of a large table
                // would grow to hundreds of KiB on the reaper's heap, which glibc then
                // keeps ([`zeroed`](crate::zeroed)).
                let groups = migrating.groups();
                for from in (0..groups).step_by(MOVE_PART) {
                    let mut effects = Effects::stamped(stamp);
                    migrating.move_groups(from..(from + MOVE_PART).min(groups), &mut effects);
                    self.file_on_wheel(index, table, &mut effects);
                    // A move can complete a tree (a twin's contents carried to it):
                    // delivered through the callback when the pass found it open, as any
                    // completion.
                    self.finish(index, table, &mut effects, active);
                }
                worked = true;
            }
            self.promote_moved(index);
        }
        self.free_retired();
        worked
    }

    /// Whether `table` (shard `shard`'s current generation) is large for `per_table`
    /// entries: under 1/8 full, and larger than the table's smallest, with no migration
    /// under way.
    fn shrinkable(&self, shard: usize, table: &Table<T>, per_table: usize) -> bool {
        table.successor().is_none()
            && table.slots() > self.smallest_slots(shard)
            && per_table * 8 < table.slots()
    }

    /// The slots shard `shard`'s table starts with, and shrinks back to
    /// ([`staggered`]).
    pub(in crate::acker::engine) fn smallest_slots(&self, shard: usize) -> usize {
        let tables = &self.tables;
        staggered(tables.smallest_groups, shard, tables.shards.len())
            .min(tables.max_table_slots / GROUP_SLOTS)
            * GROUP_SLOTS
    }

    /// Frees the retired generations whose grace period is over.
    pub(in crate::acker::engine) fn free_retired(&self) {
        self.free_retired_then(|_| {});
    }

    /// [`free_retired`](Self::free_retired), then `then` on the list, under one lock.
    fn free_retired_then(&self, then: impl FnOnce(&mut Vec<Retired<T>>)) {
        let mut retired = self
            .tables
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        retired.retain_mut(|r| !self.threads.grace_over(&mut r.grace));
        then(&mut retired);
    }

    /// In how many ticks from `now` housekeeping has work: 1 while a migration is under way
    /// or a generation waits to be freed; the rest of a low table's SHRINK_AFTER ticks when
    /// one waits to shrink; [`LOOK_AT_LOAD_NS`] while a table is larger than the smallest
    /// (its load may fall without the reaper hearing of it); `None` when nothing does. The
    /// reaper sleeps that long, so waiting for a shrink costs no wake-up per tick.
    pub(in crate::acker::engine) fn housekeeping_due(&self, now: Tick) -> Option<Tick> {
        let _active = self.threads.enter();
        if !(self
            .tables
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner()))
        .is_empty()
        {
            return Some(1);
        }
        let per_table = self.pending() / self.tables.shards.len();
        let mut due: Option<Tick> = None;
        for (index, shard) in self.tables.shards.iter().enumerate() {
            // Safety: inside the operation `_active` marks.
            let table = unsafe { shard.current() };
            if table.successor().is_some() {
                return Some(1);
            }
            let left = if self.shrinkable(index, table, per_table) {
                SHRINK_AFTER.saturating_sub(shard.low_ticks(now)).max(1)
            } else if table.slots() > self.smallest_slots(index) {
                self.look_at_load()
            } else {
                continue;
            };
            due = Some(due.map_or(left, |d| d.min(left)));
        }
        due
    }

    /// After a pass: asks the allocator to give its free memory back to the system once
    /// what is pending has fallen to under a quarter of its peak (of at least
    /// [`GIVE_BACK_FROM`] roots) and the tables have settled (no migration, no generation
    /// waiting to be freed, none waiting to shrink), or once the reaper's own structures
    /// have released [`GIVE_BACK_RELEASED`] bytes since the last time (`released` is this
    /// pass's share). Returns the released bytes not yet given back.
    ///
    /// The tables are mapped directly and go back when freed, but what a burst of trees
    /// allocated on the heap (the reaper's wheel, filed ticks and scratch, the payloads'
    /// own allocations, an async caller's waiters) goes back to
    /// glibc's arenas, which keep it: a small block left near the top of an arena holds
    /// every free page below it, and once a large block has been freed glibc serves blocks
    /// of that size from its arenas rather than from mappings of their own. So the burst's
    /// memory stays in the process's RSS for as long as it runs (measured: 2-6 MiB after a
    /// million plain trees, 100 MiB after a million tracked ones), and a growing acker's
    /// replaced wheel vectors add a few bytes to every root's RSS while the tables grow.
    /// `malloc_trim` returns the free pages of every arena. It runs on the reaper's thread,
    /// at most once a pass, and costs a walk of the arenas' free lists (well under a
    /// millisecond here). Other allocators, and other systems, have no such call: nothing.
    pub(in crate::acker::engine) fn give_back_memory(&self, now: Tick, released: usize) -> usize {
        let pending = self.pending();
        // Relaxed (both): only passes, which the reaper's lock serializes, touch it.
        let peak = self
            .tables
            .peak_pending
            .load(Ordering::Relaxed)
            .max(pending);
        let settled = || match self.housekeeping_due(now) {
            None => true,
            Some(due) => due == self.look_at_load() && due > 1,
        };
        if peak >= GIVE_BACK_FROM && pending < peak / 4 && settled() {
            self.tables.peak_pending.store(pending, Ordering::Relaxed);
            crate::sync::give_back_free_memory();
            0
        } else if released >= GIVE_BACK_RELEASED {
            self.tables.peak_pending.store(peak, Ordering::Relaxed);
            crate::sync::give_back_free_memory();
            0
        } else {
            self.tables.peak_pending.store(peak, Ordering::Relaxed);
            released
        }
    }

    /// [`LOOK_AT_LOAD_NS`] in ticks (at least 1).
    fn look_at_load(&self) -> Tick {
        (LOOK_AT_LOAD_NS >> self.time.ticks.shift).clamp(1, Tick::MAX as u64) as Tick
    }

    /// Bytes held now by the tables' current generations, by their successors (a
    /// migration under way), and by retired generations waiting for their grace period.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn table_bytes(&self) -> [usize; 3] {
        let _active = self.threads.enter();
        let mut bytes = [0; 3];
        for shard in self.tables.shards.iter() {
            // Safety: inside the operation `_active` marks.
            let current = unsafe { shard.current() };
            bytes[0] += current.bytes();
            bytes[1] += chain(current).skip(1).map(Table::bytes).sum::<usize>();
        }
        let retired = self
            .tables
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        bytes[2] = retired
            .iter()
            .map(|r| {
                // Safety: a retired generation is freed only by dropping its `Retired`,
                // under this lock.
                unsafe { r.table.as_ref() }.bytes()
            })
            .sum();
        bytes
    }

    /// Entries held now that no init has joined (orphans): a scan of every generation's
    /// words. A moving entry is counted once (FROZEN words are not HELD).
    pub(in crate::acker) fn orphans_held(&self) -> usize {
        self.sum_over_generations(Table::held)
    }

    /// Slots in every table's generations now (current and successor).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn slots(&self) -> usize {
        let _active = self.threads.enter();
        // Safety: inside the operation `_active` marks.
        self.tables
            .shards
            .iter()
            .map(|t| unsafe { t.slots() })
            .sum()
    }
}

/// Whether a shrinking table's successor of `bytes` of lines, which `roots` roots move
/// into, is worth faulting in at once, as a growing one is ([`zeroed`](crate::zeroed),
/// "Pages written at once").
///
/// * One smaller than a huge page, always: it holds at most 2 MiB, and its 4 KiB pages,
///   left to fault, are each first read by a search, which maps the shared zero page, and
///   then written by a claim, whose fault copies it and flushes the other cores' TLBs by
///   interrupt. In the shared-deadline stress phase, where every shard's table shrinks to
///   its smallest once the million has timed out, those pairs of faults came in the
///   `track` calls of the callers, 50 µs to 0.5 ms a pair (the interrupt waits for the
///   other core, which a VM may not be running).
/// * A larger one when mapped on huge pages and holding four roots or more a page (a page
///   of 2 MiB holds tens of thousands of slots), so that the moves write nearly every page
///   anyway. Its zeroing is then done by the pass that starts the migration, not a 2 MiB
///   fault at a time by the callers whose operations help move its groups: in the same
///   phase, one `track` call took 13 to 15 such faults and up to 8 ms. A sparser one is
///   left to fault as its roots need: a drained table's would otherwise hold memory that
///   its few roots never touch.
fn shrink_faults_in(bytes: usize, roots: usize) -> bool {
    bytes < HUGE || roots >= 4 * (bytes / HUGE)
}
