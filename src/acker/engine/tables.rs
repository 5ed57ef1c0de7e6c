//! The tables: one chain of generations per shard ([`generations`](super::generations)), where a root lives
//! ([`layout`](super::layout)), how large a shard's table may grow ([`growth`](super::growth)), and the generations
//! retired by migrations until their grace period ends.

use super::generations::Generations;
use super::growth::{staggered, Retired, MIN_TABLE_SLOTS};
use super::layout::{Layout, Mix};
use crate::acker::bound::Credits;
use crate::acker::table::{Table, GROUP_SLOTS};
use crate::acker::timers::ticks::Tick;
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex};

/// Every shard's chain of table generations, and what governs their sizes.
pub(super) struct Tables<T> {
    /// One chain of generations per shard, indexed by the shard [`Layout::place`] gives.
    pub(super) shards: Box<[Generations<T>]>,
    pub(super) layout: Layout,
    /// The most slots a table grows to as its load rises: its share of `max_pending` at a
    /// load of 4/5, in whole groups (any group count works: the home is a multiply-shift).
    /// A power of two here left the tables of a full acker at a load of 0.48 (1M pending:
    /// 64 B of table per root, against 41-43 B now). Even so, 2 of 2^20 random roots found
    /// their probe window full at the brim: `make_room` grows a table past this.
    pub(super) max_table_slots: usize,
    /// The most slots a table grows to for want of room (`make_room`): its share of
    /// `max_pending` at a load of 2/3. The bound is exact (credits); a full probe window
    /// in a table at `max_table_slots` is no reason to refuse.
    pub(super) room_table_slots: usize,
    /// Bits of a timer entry's slot number that hold the slot (the rest, above, the
    /// table): enough for `room_table_slots`. Tables times 2^slot_bits stays within `u32`:
    /// 2 x max_pending (at most 2^31) rounded up to a power of two per table.
    pub(super) slot_bits: u32,
    /// Generations retired, waiting for their grace period (freed by reaper passes).
    pub(super) retired: Mutex<Vec<Retired<T>>>,
    /// The most roots pending at a pass since the allocator was last asked to give memory
    /// back ([`growth`](super::growth), `give_back_memory`).
    pub(super) peak_pending: AtomicUsize,
    /// Migrations started: to grow, to shrink.
    pub(super) migrations: [AtomicU64; 2],
    /// Of the growths, those the reaper thread started at a caller's request
    /// ([`growth`](super::growth), "Who builds a successor"): for the tests.
    #[cfg(test)]
    pub(super) grown_by_reaper: AtomicU64,
}

impl<T> Tables<T> {
    /// `shards` tables (a power of two) for at most `max_pending` roots, taking their
    /// credits from `credits`, with `timeout` ticks as the default timeout, placed by `mix`.
    pub(super) fn new(
        shards: usize,
        max_pending: usize,
        credits: &Arc<Credits>,
        timeout: Tick,
        mix: Mix,
    ) -> Self {
        // About 4/5 full at max_pending (a full acker's memory is its tables: 2/3 cost 5 B
        // more per root at 1M), and at least the smallest table.
        let share = max_pending.div_ceil(shards);
        let max_table_slots = (share * 5)
            .div_ceil(4)
            .max(MIN_TABLE_SLOTS)
            .next_multiple_of(GROUP_SLOTS);
        let room_table_slots = (share * 3)
            .div_ceil(2)
            .max(max_table_slots)
            .next_multiple_of(GROUP_SLOTS);
        Tables {
            shards: (0..shards)
                .map(|shard| {
                    let credits = Some(Arc::clone(credits));
                    // As `smallest_slots`, which needs the engine.
                    let groups = staggered(shard, shards).min(max_table_slots / GROUP_SLOTS);
                    Generations::new(Table::bounded(groups, credits, timeout, false))
                })
                .collect(),
            layout: Layout::new(mix, shards.trailing_zeros()),
            max_table_slots,
            room_table_slots,
            slot_bits: room_table_slots.next_power_of_two().trailing_zeros(),
            retired: Mutex::new(Vec::new()),
            peak_pending: AtomicUsize::new(0),
            migrations: [AtomicU64::new(0), AtomicU64::new(0)],
            #[cfg(test)]
            grown_by_reaper: AtomicU64::new(0),
        }
    }
}
