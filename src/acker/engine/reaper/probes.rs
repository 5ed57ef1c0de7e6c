//! What the tests and loom models use to stand in for the reaper thread (a timer
//! published late, or the thread running) or to look at its wheel, and its panics' count.

use super::AWAKE;
use crate::acker::engine::tables::generations::chain;
use crate::acker::engine::Engine;
use crate::acker::table::GROUP_SLOTS;
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// [`Acker::pretend_reaper_late`](crate::Acker::pretend_reaper_late).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn pretend_reaper_late(&self) {
        let now = self.time.clock_full();
        crate::sync::store_raced(
            &self.reaper.wakes_at,
            now.saturating_sub(2),
            Ordering::SeqCst,
        );
    }

    /// [`Acker::pretend_reaper_running`](crate::Acker::pretend_reaper_running).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn pretend_reaper_running(&self) {
        crate::sync::store_raced(&self.reaper.wakes_at, AWAKE, Ordering::SeqCst);
    }

    /// Whether the published timer says the reaper thread runs (no timer), for the loom
    /// models.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn reaper_published_running(&self) -> bool {
        self.reaper.wakes_at.load(Ordering::SeqCst) == AWAKE
    }

    /// Entries in the reaper's wheel (for tests).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn scheduled_timers(&self) -> usize {
        self.reaper.lock_wheel().len()
    }

    /// Roots the reaper's timers cover: in a group whose filed tick is at or before their
    /// deadline ([`groups`](crate::acker::timers::groups)), or dirty while the summary's
    /// tick is before it ([`dirty`](crate::acker::timers::dirty)). For tests: every pending
    /// root, once the operations that created them returned.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn covered_roots(&self) -> usize {
        let active = self.threads.enter();
        let wheel = self.reaper.lock_wheel();
        let scan = self.threads.earliest_due();
        let mut covered = 0;
        for (shard, t) in self.tables.shards.iter().enumerate() {
            // Safety: inside the operation `active` marks.
            for table in chain(unsafe { t.current() }) {
                for slot in 0..table.slots() {
                    let (Some(_), Some(deadline)) = (table.key_in(slot), table.deadline(slot))
                    else {
                        continue;
                    };
                    let group = slot / GROUP_SLOTS;
                    let filed = wheel.filed(shard, table.gen(), group);
                    let dirty = table.dirty().is_marked(group)
                        && scan.is_some_and(|by| reached(by, deadline.wrapping_sub(1)));
                    if dirty || filed.is_some_and(|filed| reached(filed as Tick, deadline)) {
                        covered += 1;
                    }
                }
            }
        }
        drop(wheel);
        drop(active);
        covered
    }

    /// Panics caught in reaper passes, and reaper threads lost to one.
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker) fn reaper_panics(&self) -> u64 {
        self.reaper.panics.load(Ordering::SeqCst)
    }
}
