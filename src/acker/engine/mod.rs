//! The Acker's engine: lock-free tables of 16-byte root words, lazy timers, one reaper.
//! [`Acker`](crate::Acker) is the public API over it.
//!
//! ## A tree's path
//!
//! A tree's path through the engine (placement, the operations, completion, the timers'
//! registration with the reaper, a due group's judgement, growth) is told once, in the
//! [`acker`](crate::acker) module docs, "A tree's path". The sections below are the details
//! it points to; the timers' are in [`dirty`](crate::acker::timers::dirty),
//! [`groups`](crate::acker::timers::groups) and [`reaper`].
//!
//! ## Times
//!
//! Times are ticks of the resolution (a power of two of nanoseconds), counted from the
//! clock's reading at build (plus one, so that tick 0 is never used). A slot keeps its base
//! (the first message's tick, or the last reset's) as a `u32` and its start beside it
//! ([`times`](crate::acker::table::times)), and both are read against the *anchor*
//! ([`time`]), a full tick that every stored tick stays within 2^31 ticks of, whatever the
//! gap between passes: a writer re-anchors first when its clock is far past it, and a
//! re-anchoring rewrites what a stall left behind. The start is a gap from the base while a
//! tree is young and a coarse full tick once it is old, kept decodable by the reaper's
//! looks, so `elapsed` never aliases either. A writer reads its tick once per operation
//! round, where it holds nothing of the tables ([`Engine::write_tick`]); with the default
//! clock that read is of the time-stamp counter where the CPU and kernel allow it
//! ([`TimeBase::caller_full`](time::TimeBase::caller_full), [`tsc`](crate::clock::tsc)):
//! the clock's tick or the next one, never an earlier one; the reaper reads the clock
//! itself. A tree's deadline is its base plus its timeout in ticks, rounded up, plus one: a
//! tick read at the first message may be up to one tick old, so the deadline is never
//! early. The reaper judges it in full ticks against the clock's own reading, so a clock
//! that stepped back times nothing out before its deadline on that clock. A `TimedOut`
//! completion reports at least its timeout. Timeouts are at most [`MAX_TIMEOUT_TICKS`]
//! ticks.
//!
//! ## The bound, and growth
//!
//! `max_pending` credits ([`bound`](crate::acker::bound)): a claim takes one (from its
//! thread's hand) and emptying the slot gives it back, inside the table, so the bound is
//! exact. Tables start at
//! [`MIN_TABLE_SLOTS`](tables::growth::MIN_TABLE_SLOTS) or up to twice that, staggered
//! ([`staggered`](tables::growth::staggered)), and follow what is pending
//! ([`growth`](tables::growth), [`generations`](tables::generations),
//! [`migrate`](crate::acker::table::migrate)): a claim that lands far from its home, or
//! finds no room, reports its table crowded, and when the pending count per table is over
//! 3/4 of its slots (or there was no room at all) the table starts moving to one twice as
//! large (built by the reaper thread when it is large: [`growth`](tables::growth), "Who
//! builds a successor"); every operation on it moves a group before its own work, and the
//! reaper finishes what is left. Doubling moves a root about once as the tables fill
//! (growing by a quarter moved it about four times, which made a fill from empty cost 3x a
//! `DashMap`'s), and leaves a table that has just grown at 3/8 load; the tables' staggered
//! sizes spread their growths over each doubling of what is pending, so that their loads
//! spread from 3/8 to 3/4 at any count, and memory follows what is pending smoothly: about
//! 1.9 slots a root (62 B of table with a `u32` payload) rather than a step to 2.7 after
//! each growth. The reaper also shrinks a table to 2/3 of its groups once its load stayed
//! under 1/8, and frees retired generations after their grace period. Load grows a table up
//! to its share of `max_pending` at a load of 4/5; a root that finds no room at all grows
//! it further, up to a load of 2/3, so that only the credits refuse below `max_pending`.
//!
//! ## Shutdown
//!
//! Shutdown stops and joins the reaper, takes back every LIVE tree (an init that settles
//! after the scan sees the flag and takes back its own: one CAS decides), and then drops
//! `on_complete` once no operation can call it ([`marks`](crate::acker::threads::marks),
//! "Closing the callback"). The scan walks each table's chain of generations, holding the
//! table's migration lock so that no migration starts under it (one under way only moves
//! entries forward, into a generation scanned later). Once the callback is closed no
//! operation is under way and every later message finds it closed and changes nothing, so a
//! last walk drops the orphans left (and takes back any tree, though none is expected):
//! `pending()` is 0 when shutdown returns. An entry *stranded* by a migration whose
//! successor had no room ([`migrate`](crate::acker::table::migrate)) may sit in a retired
//! generation that no walk sees; the operation that stranded it waits for room, and when
//! shutdown stops it, it gives the entry up itself ([`growth`](tables::growth),
//! `give_up_stranded`). Such an entry is always HELD (a claim in a migrating table is
//! unjoined before it moves, and an init keeps no join made in a table with a successor:
//! it unjoins before it moves the entry), so no payload is ever in one; were one LIVE, it
//! would be taken back and handed back with the rest.

pub(super) mod batched;
pub(super) mod deliver;
pub(super) mod filing;
pub(super) mod reaper;
pub(super) mod shutdown;
pub(super) mod tables;
pub(super) mod time;

pub(super) use reaper::Next;
pub(super) use shutdown::Handle;

use std::time::Duration;

use super::outcome::{BurstHandOver, Callback, InitError};
use super::stats::{AckerStats, Counters, Tally};
use super::threads::{Active, Threads};
use crate::acker::bound::Credits;
use crate::acker::table::word::{Key, KEY_SHIFT};
use crate::acker::table::{Applied, Change, Effects, Refused};
use crate::acker::timers::ticks::Tick;
use crate::clock::Clock;
use crate::sync::fences::Fences;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};
use tables::generations::chain;
use tables::layout::Mix;
use tables::Tables;
use time::{TickScale, TimeBase};

/// The longest timeout, in ticks: a deadline is at most this far past its base, which
/// keeps every stored deadline within 2^31 ticks of the anchor ([`time`]).
pub(super) const MAX_TIMEOUT_TICKS: u64 = (1 << 30) - 2;

/// The longest the reaper thread sleeps while trees are pending ([`reaper`], "Sleeping"),
/// in ticks of `shift` (2^shift ns): 2^26 ns (67 ms), or 64 ticks where a tick is coarser
/// than 2^20 ns (`build`'s default resolution, whose 64 ticks make those 67 ms). A root
/// registered while it sleeps is due at the reaper three quarters of a timeout later, three
/// of these sleeps or more, so a registration never wakes it (only one into an acker whose
/// reaper parked, or of a tree with a short timeout of its own); shorter wakes it more
/// often, longer makes an idle acker's reaper park later (after four of them,
/// `LINGER_AGES`).
fn pending_sleep_most(shift: u32) -> Tick {
    const AGE_NS: u64 = 1 << 26;
    const AGE_TICKS: Tick = 64;
    Tick::try_from(AGE_NS >> shift).map_or(Tick::MAX, |ticks| ticks.max(AGE_TICKS))
}

/// The fewest shards: a key drops the top [`KEY_SHIFT`] bits of the root's hash, which
/// the table's index must carry.
const MIN_SHARDS: usize = 1 << KEY_SHIFT;

/// What the builder settled, for [`Engine::new`].
pub(super) struct Config<T> {
    pub shards: usize,
    pub max_pending: usize,
    pub timeout_ns: u64,
    pub resolution_ns: u64,
    pub clock: Box<dyn Clock>,
    /// `clock` is [`MonotonicClock`](crate::MonotonicClock) and callers may take their
    /// ticks from the time-stamp counter ([`tsc`](crate::clock::tsc)).
    pub tsc_ticks: bool,
    pub on_complete: Option<Callback<T>>,
    /// A key of each payload that a burst of timeouts is delivered in the order of
    /// ([`deliver`], "A burst's order").
    pub delivery_order: Option<fn(&T) -> u32>,
    /// Where the reaper thread's bursts of timeouts go, a batch at a time, in place of
    /// `on_complete` ([`deliver`], "A burst's hand-over").
    pub burst_hand_over: Option<BurstHandOver<T>>,
    /// The groups of the smallest table, before staggering
    /// ([`staggered`](tables::growth::staggered)); `None` for
    /// [`MIN_TABLE_SLOTS`](tables::growth::MIN_TABLE_SLOTS)' groups.
    pub smallest_groups: Option<usize>,
    pub manual: bool,
}

/// The engine every [`Acker`](crate::Acker) call delegates to. See the module docs.
pub(super) struct Engine<T> {
    /// The shards' tables, their sizes and growth ([`tables`]).
    tables: Tables<T>,
    /// Trees taken back by an operation that shutdown stopped ([`growth`](tables::growth),
    /// `give_up_stranded`), for shutdown to hand back with the rest.
    late_handed_back: Mutex<Vec<(u64, T)>>,
    credits: Arc<Credits>,
    /// Each thread's record: its operations' marks, its hand of credits
    /// ([`threads`](crate::acker::threads)); shared with `credits`. And the summary of the
    /// dirty groups, for the reaper's sleep.
    threads: Arc<Threads>,
    /// The clock, its ticks and the anchor they are read against ([`time`]).
    time: TimeBase,
    /// The longest the reaper thread sleeps while trees are pending: a quarter of the
    /// default timeout, at most [`pending_sleep_most`].
    pending_sleep: Tick,
    /// Dropped by shutdown once no operation can call it
    /// ([`marks`](crate::acker::threads::marks), "Closing the callback"), which breaks the
    /// cycle of a callback that holds a handle of its acker.
    on_complete: std::cell::UnsafeCell<Option<Callback<T>>>,
    /// [`Config::delivery_order`].
    delivery_order: Option<fn(&T) -> u32>,
    /// [`Config::burst_hand_over`]: `on_complete`'s stand-in for a burst, under the same
    /// protocol (read by operations that found the callback open, dropped with it).
    burst_hand_over: std::cell::UnsafeCell<Option<BurstHandOver<T>>>,
    shutdown: AtomicBool,
    /// The reaper's state: its wheel, its thread, what it publishes to callers, its
    /// counters ([`reaper`]).
    reaper: reaper::Reaper,
}

// Safety: `on_complete` and `burst_hand_over` are the only parts that are not `Sync` by
// themselves: each is read only by operations that found the callback open and taken only
// by shutdown after all of those have ended (`drop_callback`); both closures are
// `Send + Sync`. The tables need `T: Send`.
unsafe impl<T: Send> Sync for Engine<T> {}

impl<T> std::fmt::Debug for Engine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("tables", &self.tables.shards.len())
            .field("max_table_slots", &self.tables.max_table_slots)
            .field("pending", &self.credits.held())
            .field("manual", &self.reaper.manual)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Engine<T> {
    pub(super) fn new(config: Config<T>) -> Self {
        let shards = config.shards.max(MIN_SHARDS).next_power_of_two();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stripes = Credits::stripes_for(cores);
        let now = config.clock.now();
        let ticks = TickScale {
            epoch: now,
            shift: config.resolution_ns.trailing_zeros(),
        };
        let timeout = ticks.timeout(config.timeout_ns);
        let pending_sleep = (timeout / 4).clamp(1, pending_sleep_most(ticks.shift));
        let fences = if cfg!(loom) {
            Fences::Symmetric
        } else {
            Fences::detect()
        };
        let threads = Arc::new(Threads::new(fences));
        let credits = Arc::new(Credits::new(
            config.max_pending,
            stripes,
            Arc::clone(&threads),
        ));
        let seed = if cfg!(loom) {
            0x5eed
        } else {
            use std::hash::{BuildHasher, Hasher};
            let mut h = crate::sync::RandomState::default().build_hasher();
            h.write_u64(now);
            h.finish()
        };
        Engine {
            tables: Tables::new(
                shards,
                config.max_pending,
                config.smallest_groups,
                &credits,
                timeout,
                Mix { seed },
            ),
            late_handed_back: Mutex::new(Vec::new()),
            credits,
            threads,
            pending_sleep,
            reaper: reaper::Reaper::new(ticks.full(now), config.manual),
            time: TimeBase::new(config.clock, config.tsc_ticks, ticks),
            on_complete: std::cell::UnsafeCell::new(config.on_complete),
            delivery_order: config.delivery_order,
            burst_hand_over: std::cell::UnsafeCell::new(config.burst_hand_over),
            shutdown: AtomicBool::new(false),
        }
    }

    /// The full tick a writer stamps with ([`TimeBase::write_tick`]), re-anchoring first
    /// when the clock is far past the anchor ([`time`]). Called inside an operation, where
    /// it holds nothing of the tables: its entry, or the top of a retry.
    // Always: in the operation's frame
    // ([`Table::init_or`](crate::acker::table::Table::init_or)).
    #[inline(always)]
    fn write_tick(&self) -> u64 {
        self.time
            .write_tick(&self.threads, |from, to| self.rebase(from, to))
    }

    /// A re-anchoring's rewrite from the anchor `from` to `to`, every other thread
    /// quiescent ([`time`]): every stored base and start in the tables; the reaper's wheel,
    /// whose filed `u32` ticks are forgotten; and the dirty groups' summary, whose tick
    /// becomes `to` (the next pass scans them).
    /// Called inside an operation, not under the wheel's lock.
    fn rebase(&self, from: u64, to: u64) {
        let mut wheel = self.reaper.lock_wheel();
        self.tables.rebase(from, to);
        wheel.reanchored(to);
        self.threads.rebase_dirty(to as Tick);
    }

    /// A re-anchoring is under way (its thread waits for the busy ones, or sweeps).
    /// The threads' records not dropped yet.
    #[cfg(test)]
    pub(in crate::acker) fn thread_records(&self) -> usize {
        self.threads.records()
    }

    #[cfg(test)]
    pub(in crate::acker) fn reanchoring(&self) -> bool {
        self.threads.moving()
    }

    /// The calling thread's counters ([`stats`](crate::acker::stats)).
    #[inline]
    fn tally(&self) -> Tally<'_> {
        self.threads.tally()
    }

    #[inline]
    pub(super) fn init(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout_ns: Option<u64>,
    ) -> Result<(), InitError<T>> {
        self.init_at(root, xor, payload, timeout_ns, &mut 0)
    }

    /// [`init`](Self::init), and then the reaper's pass if one is due to callers
    /// ([`help_if_late_at`](reaper::help_if_late_at), "Callers first"), judged at the tick
    /// the init stamped with: the async acker's start of a tree.
    pub(super) fn init_then_help(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout_ns: Option<u64>,
    ) -> Result<(), InitError<T>> {
        let mut tick = 0;
        let started = self.init_at(root, xor, payload, timeout_ns, &mut tick);
        // 0: refused before it read the clock (shut down), when no pass is due anyway.
        if tick != 0 {
            reaper::help_if_late_at(self, tick);
        }
        started
    }

    /// [`init`](Self::init), leaving in `tick` the full tick it stamped with last (0 if it
    /// read none: tick 0 is never used, the module docs' "Times").
    fn init_at(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout_ns: Option<u64>,
        tick: &mut u64,
    ) -> Result<(), InitError<T>> {
        // Entered before the shutdown check: an init that shutdown's close did not wait for
        // finds the callback closed, and must not create a tree that could complete with no
        // callback to deliver it (`drop_callback`).
        let active = self.threads.enter();
        if !active.open || self.shutdown.load(Ordering::SeqCst) {
            return Err(InitError::Shutdown(payload));
        }
        let (shard, key) = self.tables.layout.place(root);
        let timeout = timeout_ns.map(|ns| self.time.ticks.timeout(ns));
        let mut payload = payload;
        loop {
            // Read here, where the operation holds nothing of the tables
            // ([`anchor`](crate::acker::engine::time)): the first message is this call.
            *tick = self.write_tick();
            let stamp = time::stamp_at(*tick);
            // Safety: inside the operation `active` marks.
            let table = unsafe { self.tables.shards[shard].current() };
            // Safety: the hand is the record of the operation `active` marks, which
            // outlives it; the effects live within it, on this thread.
            let mut effects =
                unsafe { Effects::stamped(stamp).with_hand(self.threads.hand_in(&active)) };
            self.help(shard, table, &mut effects);
            // Along the chain (one table but during a migration): create only in the last.
            let mut at = table;
            let result = loop {
                let last = at.successor().is_none();
                match at.init_or(key, xor, payload, timeout, last, &mut effects) {
                    Err(Refused::Missing(p)) if !last => {
                        payload = p;
                        at = at.successor().unwrap_or(at);
                    }
                    result => break result,
                }
            };
            let settled = result.is_ok() && effects.is_none();
            if effects.joined() {
                // Relaxed: a statistic.
                self.tally().add(|c| &c.orphans_joined, 1);
            }
            let crowded = self.finish(shard, table, &mut effects, &active);
            return match result {
                Ok(()) => {
                    if crowded {
                        self.grow_if_loaded(shard, table);
                    }
                    // Shutdown may have scanned past our slot before we settled: then this
                    // init takes its own tree back (one CAS decides between it and the
                    // scan).
                    if settled && self.shutdown.load(Ordering::SeqCst) {
                        if let Some(payload) = self.take_back_root(shard, key) {
                            return Err(InitError::Shutdown(payload));
                        }
                    }
                    Ok(())
                }
                Err(Refused::Duplicate(payload)) => Err(InitError::Duplicate(payload)),
                Err(Refused::Retry(p) | Refused::Missing(p)) => {
                    payload = p;
                    continue;
                }
                Err(Refused::Full(p)) => {
                    if crowded && self.make_room(shard, table) {
                        payload = p;
                        continue;
                    }
                    self.tally().add(|c| &c.rejected_full, 1); // a statistic
                    Err(InitError::Full(p))
                }
            };
        }
    }

    pub(super) fn ack(&self, root: u64, xor: u64) -> bool {
        self.message(root, Change::Ack(xor))
    }

    pub(super) fn fail(&self, root: u64) -> bool {
        self.message(root, Change::Fail)
    }

    /// An ack or a fail: applies it to the root's table (during a migration, to its entry
    /// in the old table or else in the successor), files the timer of an entry it created,
    /// delivers what it completed. `true` when it completed a tree.
    ///
    /// The common case inline and the general path out of line: the common case's frame
    /// then holds only what it needs (fewer registers saved, a smaller stack frame), which
    /// an ack one at a time pays on every call.
    #[inline]
    fn message(&self, root: u64, message: Change) -> bool {
        let active = self.threads.enter();
        let (shard, key) = self.tables.layout.place(root);
        self.message_with(&active, Some(root), shard, key, message, || {
            self.message_general_outlined(&active, shard, key, message)
        })
    }

    /// [`message`](Self::message) for the root `layout` placed at `key` in `shard`, inside
    /// the operation `active` marks, where it holds nothing of the tables. Both paths
    /// inline: a batch calls this out of line already, and its own call of the general path
    /// cost more there than it saved.
    #[inline]
    fn message_in(&self, active: &Active, shard: usize, key: Key, message: Change) -> bool {
        // No root: a batch's frame keeps less across its messages without it.
        self.message_with(active, None, shard, key, message, || {
            self.message_general(active, shard, key, message)
        })
    }

    /// A message's common case first (no migration, and the entry exists: `apply_found`),
    /// else `general`, the general path ([`message_general`](Self::message_general)).
    /// `root`: the message's root id, if the caller has it, for the completion to report.
    #[inline(always)]
    fn message_with(
        &self,
        active: &Active,
        root: Option<u64>,
        shard: usize,
        key: Key,
        message: Change,
        general: impl FnOnce() -> bool,
    ) -> bool {
        if !active.open && self.stopping() {
            // Shut down: nothing is pending, and nothing may be held (`take_back_all`).
            return false;
        }
        // Safety: inside the operation `active` marks.
        let table = unsafe { self.tables.shards[shard].current() };
        if table.successor().is_none() {
            if let Some(completed) = table.apply_found(key, message) {
                let Some(completed) = completed else {
                    return false;
                };
                self.deliver(shard, table, completed, root, active);
                return true;
            }
        }
        general()
    }

    /// [`message_general`](Self::message_general), never inlined ([`message`](Self::message)).
    #[inline(never)]
    fn message_general_outlined(
        &self,
        active: &Active,
        shard: usize,
        key: Key,
        message: Change,
    ) -> bool {
        self.message_general(active, shard, key, message)
    }

    /// [`message_in`](Self::message_in) past its common case: the general path, from the
    /// search.
    #[inline]
    fn message_general(&self, active: &Active, shard: usize, key: Key, message: Change) -> bool {
        let mut completed = false;
        loop {
            // Read here, where the operation holds nothing of the tables
            // ([`anchor`](crate::acker::engine::time)).
            let stamp = time::stamp_at(self.write_tick());
            // Safety: inside the operation `active` marks.
            let table = unsafe { self.tables.shards[shard].current() };
            // Safety: the hand is the record of the operation `active` marks, which
            // outlives it; the effects live within it, on this thread.
            let mut effects =
                unsafe { Effects::stamped(stamp).with_hand(self.threads.hand_in(active)) };
            self.help(shard, table, &mut effects);
            // Along the chain (one table but during a migration): create only in the last.
            let mut at = table;
            let applied = loop {
                let last = at.successor().is_none();
                match at.apply(key, message, last, &mut effects) {
                    Applied::Missing if !last => at = at.successor().unwrap_or(at),
                    applied => break applied,
                }
            };
            completed |= !effects.is_none();
            let crowded = self.finish(shard, table, &mut effects, active);
            match applied {
                Applied::Retry | Applied::Missing => continue,
                Applied::Full if crowded && self.make_room(shard, table) => continue,
                Applied::Full => {
                    self.tally().add(|c| &c.rejected_full, 1); // a statistic
                }
                Applied::Created if crowded => self.grow_if_loaded(shard, table),
                Applied::Created | Applied::Changed => {}
            }
            return completed;
        }
    }

    pub(super) fn reset_timeout(&self, root: u64) -> bool {
        let _active = self.threads.enter();
        let (shard, key) = self.tables.layout.place(root);
        self.reset_in(shard, key)
    }

    /// [`reset_timeout`](Self::reset_timeout) for the root `layout` placed at `key` in
    /// `shard`, inside an operation, where it holds nothing of the tables.
    fn reset_in(&self, shard: usize, key: Key) -> bool {
        let now = self.write_tick() as Tick;
        // Safety: inside the operation `active` marks.
        let table = unsafe { self.tables.shards[shard].current() };
        // The entry is registered (its group dirty, or filed on the reaper's wheel) since its
        // creation; the reaper files it again when the old deadline comes (R, or `NotDue`). During a
        // migration the old table's entry first (`reset` waits for one being moved), then
        // the successor's. Every generation's entry, not just the first found (no short
        // circuit).
        chain(table)
            .map(|table| table.reset(key, now))
            .fold(false, |any, reset| any | reset)
    }

    pub(super) fn pending(&self) -> usize {
        self.credits.held()
    }

    pub(super) fn stats(&self) -> AckerStats {
        let shift = self.time.ticks.shift;
        let each = |f: &mut dyn FnMut(&Counters)| self.threads.each_counters(f);
        let mut stats = Counters::sum(each, self.pending(), |ticks| {
            Duration::from_nanos(ticks.saturating_mul(1 << shift))
        });
        // Relaxed (both): statistics.
        stats.caller_passes = self.reaper.caller_passes.load(Ordering::Relaxed);
        stats.caller_pass_longest =
            Duration::from_nanos(self.reaper.caller_pass_longest.load(Ordering::Relaxed));
        stats
    }

    /// Re-anchorings done ([`time`]).
    pub(super) fn reanchored(&self) -> u64 {
        self.time.reanchored.load(Ordering::Relaxed) // Relaxed: a statistic
    }

    pub(super) fn idle_wakeups(&self) -> u64 {
        self.reaper.idle_wakeups.load(Ordering::SeqCst)
    }

    /// Where the acker's memory is, in bytes: tables (current, successors, retired) and
    /// the reaper's wheel.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(super) fn memory_parts(&self) -> [usize; 4] {
        let [current, successors, retired] = self.table_bytes();
        let wheel = self.reaper.lock_wheel().heap_bytes();
        [current, successors, retired, wheel]
    }

    /// The `(table, 0)` a root lives in: its group is not fixed (tables grow), so the loom
    /// models pick roots that share a table.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(super) fn placement(&self, root: u64) -> (usize, usize) {
        (self.tables.layout.place(root).0, 0)
    }

    /// Process-wide memory barriers that failed since build
    /// ([`Acker::grace_barrier_failures`](crate::Acker::grace_barrier_failures)).
    pub(super) fn barrier_failures(&self) -> u64 {
        self.threads.barrier_failures()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
