//! A created entry's way to the reaper: an operation's effects finished (its new entries
//! filed in the thread's hand-off list, or on the wheel for the roots a reaper pass moves;
//! its completions delivered; what it stranded moved). The way back, from an entry to its
//! slot, is the tables' ([`tables`](super::tables)).

use super::reaper::publish_timers;
use super::reaper::wheel::file;
use super::tables::EntrySlots;
use super::Engine;
use crate::acker::table::{Effects, Table};
use crate::acker::threads::{Active, Due, Pushed};

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
                    self.tally().add(|c| &c.roots_moved, u64::from(moved));
                }
                return crowded;
            };
            self.unstrand(shard, generation(table, gen), slot, effects);
        }
    }

    /// Files the entries `effects` reports created in `table` or its successors in this
    /// thread's hand-off list (the one `active`, the calling operation, entered with), and
    /// wakes the reaper if it may be asleep past the tick by which an entry must reach it.
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
            let entry = self.tables.entry_of(shard, slot, key, gen);
            // To the reaper after the hand-off age, or a tick before the deadline; by a
            // tick before the deadline in any case.
            let due = Due::new(
                stamp.start().wrapping_add(self.hand_off_age),
                deadline.wrapping_sub(1),
            );
            let pushed =
                self.threads
                    .push_in(active, entry, due, stamp.start(), EntrySlots(&self.tables));
            // The push made its hand-off list's earliest tick (or the inbox's) `by`, and the
            // reaper is idle: wake it if its timer ends after that (`reaper_sleeps_past`).
            if let Pushed::WakeReaper { by } = pushed {
                if self.reaper_sleeps_past(by) {
                    self.wake_reaper();
                }
            }
        }
    }

    /// The groups a reaper pass moves (`housekeeping`): files the entries `effects` reports
    /// created in `table`'s successors straight on the wheel, not in the thread's hand-off
    /// list, and publishes the wheel's next due tick again (`publish_timers`). The lines
    /// were just written, and the hand-off list would hand the same entries back to this
    /// thread a tick later, to be read twice more (its filter, then the filing) once a fill
    /// has pushed them out of the cache; in a fill the reaper thread moves most roots, and
    /// its time paces the fill. Takes the wheel's lock: called outside it.
    pub(in crate::acker::engine) fn file_on_wheel(
        &self,
        shard: usize,
        table: &Table<T>,
        effects: &mut Effects,
    ) {
        let Some(first) = effects.take_to_file() else {
            return;
        };
        let mut wheel = self.reaper.lock_wheel();
        for (gen, slot) in
            std::iter::once(first).chain(std::iter::from_fn(|| effects.take_to_file()))
        {
            if let Some((_, _, key)) = generation(table, gen).to_file(slot) {
                file(
                    self,
                    &mut wheel,
                    self.tables.entry_of(shard, slot, key, gen),
                );
            }
        }
        publish_timers(self, &wheel);
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
