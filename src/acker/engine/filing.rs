//! A created entry's way to the reaper, and back to its slot: an operation's effects
//! finished (its new entries filed in the thread's batch, or on the wheel for the roots a
//! reaper pass moves; its completions delivered; what it stranded moved), and the lookups
//! the batches' filter and the reaper make of an entry or a group timer in the tables'
//! generations (module docs, "Timers").

use super::generations::chain;
use super::reaper::publish_timers;
use super::reaper::wheel::file;
use super::Engine;
use crate::acker::table::word::Key;
use crate::acker::table::{Effects, Table, GROUP_SLOTS};
use crate::acker::threads::{Active, Entry, Liveness, Pushed};
use crate::acker::timers::groups::{Filed, GroupAt, GroupTimer};
use crate::acker::timers::ticks::reached;
use crate::acker::timers::{GEN_TAG_BITS, TAG_CHECK_MASK};
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// After an operation's table calls on `table` (and its successors): files the timers
    /// and delivers the completions `effects` reports. Whether a claim found the table
    /// crowded.
    // Always: in the operation's frame
    // ([`Table::init_or`](crate::acker::table::Table::init_or)).
    #[inline(always)]
    pub(in crate::acker::engine) fn finish(
        &self,
        shard: usize,
        table: &Table<T>,
        effects: &mut Effects,
        active: &Active,
    ) -> bool {
        let crowded = effects.crowded();
        loop {
            self.file_timers(shard, table, effects, active);
            while let Some(completed) = effects.take() {
                let in_gen = generation(table, completed.gen);
                self.deliver(shard, in_gen, completed, None, active);
            }
            let Some((gen, slot)) = effects.take_stranded() else {
                let moved = effects.take_moved();
                if moved > 0 {
                    // Relaxed: a statistic.
                    self.counters()
                        .roots_moved
                        .fetch_add(u64::from(moved), Ordering::Relaxed);
                }
                return crowded;
            };
            self.unstrand(shard, generation(table, gen), slot, effects);
        }
    }

    /// Files the entries `effects` reports created in `table` or its successors in this
    /// thread's batch (the one `active`, the calling operation, entered with), and wakes the
    /// reaper if it may be asleep with no deadline.
    // Always: as `finish`.
    #[inline(always)]
    pub(in crate::acker::engine) fn file_timers(
        &self,
        shard: usize,
        table: &Table<T>,
        effects: &mut Effects,
        active: &Active,
    ) {
        while let Some((gen, slot)) = effects.take_to_file() {
            let Some((stamp, deadline, key)) = generation(table, gen).to_file(slot) else {
                continue; // completed and freed already
            };
            let entry = self.entry_of(shard, slot, key, gen);
            // To the reaper after the hand-off age, or a tick before the deadline.
            let (aged, last) = (
                stamp.start().wrapping_add(self.hand_off_age),
                deadline.wrapping_sub(1),
            );
            let (hand_off, soon) = if reached(aged, last) {
                (aged, false)
            } else {
                (last, true) // a short timeout of its own
            };
            let mut pushed =
                self.threads
                    .push_in(active, entry, hand_off, stamp.start(), EntrySlots(self));
            // A push into an empty batch checks whether the reaper is idle; one due before
            // the hand-off age checks too, as the reaper's timer may end after it even
            // when the batch's first entry's did not (`reaper_sleeps_past`).
            if soon && pushed == Pushed::Filed {
                pushed = self.threads.wake_check();
            }
            if pushed == Pushed::WakeReaper && self.reaper_sleeps_past(hand_off) {
                self.wake_reaper();
            }
        }
    }

    /// The groups a reaper pass moves (`housekeeping`): files the entries `effects` reports
    /// created in `table`'s successors straight on the wheel, not in the thread's batch, and
    /// publishes the wheel's next due tick again (`publish_timers`). The lines were just
    /// written, and the batch would hand the same entries back to this thread a tick later,
    /// to be read twice more (its filter, then the filing) once a fill has pushed them out
    /// of the cache; in a fill the reaper thread moves most roots, and its time paces the
    /// fill. Takes the wheel's lock: called outside it.
    pub(in crate::acker::engine) fn file_on_wheel(
        &self,
        shard: usize,
        table: &Table<T>,
        effects: &mut Effects,
    ) {
        let Some(first) = effects.take_to_file() else {
            return;
        };
        let mut wheel = self.reaper.wheel.lock().unwrap_or_else(|e| e.into_inner());
        for (gen, slot) in
            std::iter::once(first).chain(std::iter::from_fn(|| effects.take_to_file()))
        {
            if let Some((_, _, key)) = generation(table, gen).to_file(slot) {
                file(self, &mut wheel, self.entry_of(shard, slot, key, gen));
            }
        }
        publish_timers(self, &wheel);
    }

    /// The batch entry of `slot` of `shard`'s generation `gen`, which holds `key`.
    #[inline(always)]
    fn entry_of(&self, shard: usize, slot: usize, key: Key, gen: u32) -> Entry {
        Entry {
            slot: (shard << self.tables.slot_bits | slot) as u32,
            tag: tag_of(key.tag(), gen),
        }
    }

    /// Asks for the line of a batch entry's slot (in its table's current generation, where
    /// nearly every entry is; another's is not worth the walk for a hint). Called inside
    /// an acker operation.
    #[inline]
    pub(in crate::acker::engine) fn prefetch_entry(&self, entry: &Entry) {
        let (shard, slot) = self.shard_and_slot(entry);
        let Some(generations) = self.tables.shards.get(shard) else {
            return;
        };
        // Safety: the caller's contract.
        let current = unsafe { generations.current() };
        if current.gen() & GEN_MASK == entry.tag & GEN_MASK {
            current.prefetch_slot(slot);
        }
    }

    /// Whether a batch entry's slot still holds an uncompleted (or moving) root of its
    /// tag. Called inside an acker operation.
    #[inline]
    pub(in crate::acker::engine) fn entry_live(&self, entry: &Entry) -> bool {
        self.locate(entry)
            .is_some_and(|(_, table, slot)| self.holds_entry(table, slot, entry))
    }

    /// Whether `slot` of `table` (where [`locate`](Self::locate) put `entry`) still holds
    /// the entry's root.
    #[inline]
    pub(in crate::acker::engine) fn holds_entry(
        &self,
        table: &Table<T>,
        slot: usize,
        entry: &Entry,
    ) -> bool {
        table
            .key_in(slot)
            .is_some_and(|key| tag_of(key.tag(), table.gen()) == entry.tag)
    }

    /// A group timer's group, and whether any slot of it holds a root (or one being
    /// moved); `None` for an older generation's. Called inside an acker operation.
    pub(in crate::acker::engine) fn group_state(
        &self,
        timer: &GroupTimer,
    ) -> Option<(GroupAt, bool)> {
        let entry = Entry {
            slot: timer.first,
            tag: timer.gen,
        };
        let (shard, table, first) = self.locate(&entry)?;
        let live = (first..first + GROUP_SLOTS).any(|slot| table.key_in(slot).is_some());
        let at = GroupAt {
            shard,
            gen: table.gen(),
            groups: table.groups(),
            group: first / GROUP_SLOTS,
        };
        Some((at, live))
    }

    /// Drops the reaper's filed ticks of `shard`'s generations that left its chain. Called
    /// inside an acker operation.
    pub(in crate::acker::engine) fn prune_filed(&self, shard: usize, filed: &mut Filed) {
        if let Some(t) = self.tables.shards.get(shard) {
            // Safety: the caller's contract.
            let current = unsafe { t.current() };
            filed.prune(shard, |gen| chain(current).any(|g| g.gen() == gen));
        }
    }

    /// A timer entry's table generation and slot: the table is the slot number's top bits
    /// (a shift and a mask: the batch filter does this per entry), the generation the
    /// tag's low bits, which must be the current one's or its successor's. `None` for an
    /// entry of an older generation: its root was moved, with a timer of its own.
    /// Called inside an acker operation, and the result used only within it.
    #[inline]
    pub(in crate::acker::engine) fn locate(
        &self,
        entry: &Entry,
    ) -> Option<(usize, &Table<T>, usize)> {
        let (shard, slot) = self.shard_and_slot(entry);
        let gen = entry.tag & GEN_MASK;
        // Safety: the caller's contract.
        let current = unsafe { self.tables.shards[shard].current() };
        let table = chain(current).find(|g| g.gen() & GEN_MASK == gen)?;
        (slot < table.slots()).then_some((shard, table, slot))
    }

    /// A timer entry's shard and its slot in the shard's tables: the slot number's top
    /// bits and the rest.
    #[inline]
    fn shard_and_slot(&self, entry: &Entry) -> (usize, usize) {
        (
            entry.slot as usize >> self.tables.slot_bits,
            entry.slot as usize & ((1 << self.tables.slot_bits) - 1),
        )
    }
}

/// `table` or the successor of the generation `gen` (an operation's table calls start at
/// `table` and only ever move forward).
#[inline]
pub(in crate::acker::engine) fn generation<T>(table: &Table<T>, gen: u32) -> &Table<T> {
    let mut at = table;
    while at.gen() != gen {
        match at.successor() {
            Some(next) => at = next,
            None => {
                debug_assert!(false, "generation {gen} is not {} or after it", table.gen());
                return table;
            }
        }
    }
    at
}

/// A batch entry's tag: the key's tag's check bits, with the generation in the low bits
/// and the bits above zero.
#[inline]
pub(in crate::acker::engine) fn tag_of(key_tag: u32, gen: u32) -> u32 {
    key_tag & TAG_CHECK_MASK & !GEN_MASK | gen & GEN_MASK
}

/// The generation bits of a timer entry's tag.
pub(in crate::acker::engine) const GEN_MASK: u32 = (1 << GEN_TAG_BITS) - 1;

/// The engine as the batches' filter sees it: whether an entry's slot still holds its
/// root, and its line asked for ahead of that look. Used inside an acker operation.
struct EntrySlots<'a, T: Send + 'static>(&'a Engine<T>);

impl<T: Send + 'static> Liveness for EntrySlots<'_, T> {
    #[inline]
    fn live(&mut self, entry: &Entry) -> bool {
        self.0.entry_live(entry)
    }

    #[inline]
    fn prefetch(&self, entry: &Entry) {
        self.0.prefetch_entry(entry);
    }
}
