//! A created entry's way to the reaper: an operation's effects finished (its new entries
//! registered by their groups' dirty bits, [`dirty`](crate::acker::timers::dirty), or
//! filed on the wheel for the roots a reaper pass moves; its completions delivered; what it
//! stranded moved). The way back, from an entry to its
//! slot, is the tables' ([`tables`](super::tables)).

use super::reaper::publish_timers;
use super::reaper::wheel::file;
use super::Engine;
use crate::acker::table::{Effects, Table, GROUP_SLOTS};
use crate::acker::threads::{Active, Registered};

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
            self.file_timers(table, effects);
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

    /// Registers the entries `effects` reports created in `table` or its successors: marks
    /// each one's group dirty, and lowers the acker's summary to the tick by which the
    /// reaper must scan for it, a quarter of the timeout before its deadline ([`dirty`](crate::acker::timers::dirty));
    /// wakes the reaper if it may be asleep past that tick.
    // Always: as `finish`.
    #[inline(always)]
    pub(in crate::acker::engine) fn file_timers(&self, table: &Table<T>, effects: &mut Effects) {
        let mut next = effects.take_to_file();
        if next.is_some() {
            // After the table's CAS that created the entry, before its group's bit is read.
            self.threads.registering();
        }
        while let Some((gen, slot)) = next {
            next = effects.take_to_file();
            let table = generation(table, gen);
            let Some(deadline) = table.deadline(slot) else {
                continue; // completed and freed already
            };
            table.dirty().mark(slot / GROUP_SLOTS);
            // To be scanned one of the reaper's longest sleeps before the tick before the
            // deadline ([`dirty`](crate::acker::timers::dirty), "When to scan"). The summary
            // made earlier, and the reaper idle: wake it if its timer ends after that tick
            // (`reaper_sleeps_past`).
            let by = deadline.wrapping_sub(1).wrapping_sub(self.pending_sleep);
            if let Registered::WakeReaper { by } = self.threads.registered(by) {
                if self.reaper_sleeps_past(by) {
                    self.wake_reaper();
                }
            }
        }
    }

    /// The groups a reaper pass moves (`housekeeping`): files the entries `effects` reports
    /// created in `table`'s successors straight on the wheel, not by their dirty bits, and
    /// publishes the wheel's next due tick again (`publish_timers`). The lines were just
    /// written, and a scan would read them again once a fill has pushed them out of the
    /// cache; in a fill the reaper thread moves most roots, and its time paces the fill.
    /// Takes the wheel's lock: called outside it.
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
            let at = generation(table, gen);
            if let Some(deadline) = at.deadline(slot) {
                file(self, &mut wheel, shard, at, slot, deadline);
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
