//! The tables: one chain of generations per shard ([`generations`]),
//! where a root lives ([`layout`]), how large a shard's table may grow
//! ([`growth`]), and the generations retired by migrations until their
//! grace period ends; and the way back from a timer entry (a root the reaper files, a group
//! timer in its wheel) to its slot: an entry names its shard and slot in one `u32` and its
//! generation in its tag's low bits, and is live while its slot holds a root of its tag.

pub(in crate::acker) mod generations;
pub(in crate::acker) mod growth;
pub(in crate::acker) mod layout;

use crate::acker::bound::Credits;
use crate::acker::table::{Table, GROUP_SLOTS};
use crate::acker::timers::groups::{Entry, Filed, GroupAt, GroupTimer};
use crate::acker::timers::ticks::Tick;
use crate::acker::timers::{GEN_TAG_BITS, TAG_CHECK_MASK};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex};
use generations::{chain, Generations};
use growth::{staggered, Retired, MIN_TABLE_SLOTS};
use layout::{Layout, Mix};

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
    /// The groups of the smallest table, before staggering ([`staggered`]): at most
    /// [`MIN_TABLE_SLOTS`]' groups (the async acker's are fewer).
    pub(super) smallest_groups: usize,
    /// Bits of a timer entry's slot number that hold the slot (the rest, above, the
    /// table): enough for `room_table_slots`. Tables times 2^slot_bits stays within `u32`:
    /// 2 x max_pending (at most 2^31) rounded up to a power of two per table.
    slot_bits: u32,
    /// Generations retired, waiting for their grace period (freed by reaper passes).
    retired: Mutex<Vec<Retired<T>>>,
    /// The most roots pending at a pass since the allocator was last asked to give memory
    /// back ([`growth`], `give_back_memory`).
    peak_pending: AtomicUsize,
    /// Migrations started: to grow, to shrink.
    migrations: [AtomicU64; 2],
    /// Of the growths, those the reaper thread started at a caller's request
    /// ([`growth`], "Who builds a successor"): for the tests.
    #[cfg(test)]
    grown_by_reaper: AtomicU64,
}

impl<T> Tables<T> {
    /// `shards` tables (a power of two) for at most `max_pending` roots, the smallest of
    /// `smallest_groups` groups (fewer only: the default is [`MIN_TABLE_SLOTS`]' groups),
    /// taking their credits from `credits`, with `timeout` ticks as the default timeout,
    /// placed by `mix`.
    pub(super) fn new(
        shards: usize,
        max_pending: usize,
        smallest_groups: Option<usize>,
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
        let default_groups = MIN_TABLE_SLOTS / GROUP_SLOTS;
        let smallest_groups =
            smallest_groups.map_or(default_groups, |g| g.clamp(1, default_groups));
        Tables {
            shards: (0..shards)
                .map(|shard| {
                    let credits = Some(Arc::clone(credits));
                    // As `smallest_slots`, which needs the engine.
                    let groups = staggered(smallest_groups, shard, shards)
                        .min(max_table_slots / GROUP_SLOTS);
                    Generations::new(Table::bounded(groups, credits, timeout, false))
                })
                .collect(),
            layout: Layout::new(mix, shards.trailing_zeros()),
            max_table_slots,
            room_table_slots,
            smallest_groups,
            slot_bits: room_table_slots.next_power_of_two().trailing_zeros(),
            retired: Mutex::new(Vec::new()),
            peak_pending: AtomicUsize::new(0),
            migrations: [AtomicU64::new(0), AtomicU64::new(0)],
            #[cfg(test)]
            grown_by_reaper: AtomicU64::new(0),
        }
    }
}

impl<T: Send + 'static> Tables<T> {
    /// The group timer of `group` of `table`, a generation of `shard`.
    #[inline]
    pub(super) fn group_timer(&self, shard: usize, table: &Table<T>, group: usize) -> GroupTimer {
        GroupTimer {
            first: ((shard << self.slot_bits) | (group * GROUP_SLOTS)) as u32,
            gen: table.gen() & GEN_MASK,
        }
    }

    /// Asks for the line of a group timer's group (in its shard's current generation, where
    /// nearly every group is; another's is not worth the walk for a hint), without waiting.
    /// Called inside an acker operation.
    #[inline]
    pub(super) fn prefetch_group(&self, timer: &GroupTimer) {
        let (shard, first) = self.shard_and_slot(&Entry {
            slot: timer.first,
            tag: timer.gen,
        });
        let Some(generations) = self.shards.get(shard) else {
            return;
        };
        // Safety: the caller's contract.
        let current = unsafe { generations.current() };
        if current.gen() & GEN_MASK == timer.gen & GEN_MASK {
            current.prefetch_slot(first);
        }
    }

    /// A group timer's group, and whether any slot of it holds a root (or one being
    /// moved); `None` for an older generation's. Called inside an acker operation.
    pub(super) fn group_state(&self, timer: &GroupTimer) -> Option<(GroupAt, bool)> {
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

    /// Takes the dirty bits of every generation of every shard
    /// ([`dirty`](crate::acker::timers::dirty)), a word of 64 groups at a time, until `into`
    /// holds `most` or more: each dirty group into `into`, as its group timer. `true` when
    /// it stopped before the last word (bits may be left). Called inside an acker
    /// operation, after the summary's swap.
    pub(super) fn take_dirty(&self, most: usize, into: &mut Vec<GroupTimer>) -> bool {
        for (shard, generations) in self.shards.iter().enumerate() {
            // Safety: the caller's contract.
            let current = unsafe { generations.current() };
            for table in chain(current) {
                let dirty = table.dirty();
                for word in 0..dirty.words() {
                    if into.len() >= most {
                        return true;
                    }
                    let mut bits = dirty.take(word);
                    while bits != 0 {
                        let group = word * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        into.push(self.group_timer(shard, table, group));
                    }
                }
            }
        }
        false
    }

    /// Marks a group timer's group dirty again (a scan that could not look at it), unless
    /// its generation left the chain (its roots moved, each registered in the successor).
    /// Called inside an acker operation.
    pub(super) fn mark_dirty(&self, timer: &GroupTimer) {
        let entry = Entry {
            slot: timer.first,
            tag: timer.gen,
        };
        if let Some((_, table, first)) = self.locate(&entry) {
            table.dirty().mark(first / GROUP_SLOTS);
        }
    }

    /// Drops the reaper's filed ticks of `shard`'s generations that left its chain. Called
    /// inside an acker operation.
    pub(super) fn prune_filed(&self, shard: usize, filed: &mut Filed) {
        if let Some(t) = self.shards.get(shard) {
            // Safety: the caller's contract.
            let current = unsafe { t.current() };
            filed.prune(shard, |gen| chain(current).any(|g| g.gen() == gen));
        }
    }

    /// A timer entry's table generation and slot: the table is the slot number's top bits
    /// (a shift and a mask), the generation
    /// the tag's low bits, which must be the current one's or its successor's. `None` for
    /// an entry of an older generation: its root was moved, with a timer of its own. Called
    /// inside an acker operation, and the result used only within it.
    #[inline]
    pub(super) fn locate(&self, entry: &Entry) -> Option<(usize, &Table<T>, usize)> {
        let (shard, slot) = self.shard_and_slot(entry);
        let gen = entry.tag & GEN_MASK;
        // Safety: the caller's contract.
        let current = unsafe { self.shards[shard].current() };
        let table = chain(current).find(|g| g.gen() & GEN_MASK == gen)?;
        (slot < table.slots()).then_some((shard, table, slot))
    }

    /// A re-anchoring's rewrite of the tables from the anchor `from` to `to`
    /// ([`time`](super::time)): every stored base and start, in each generation of each
    /// chain. Called inside an operation, every other thread quiescent.
    pub(super) fn rebase(&self, from: u64, to: u64) {
        for shard in self.shards.iter() {
            // Safety: the caller's contract.
            let current = unsafe { shard.current() };
            for table in chain(current) {
                for slot in 0..table.slots() {
                    table.rebase(slot, from, to);
                }
            }
            shard.forget_low();
        }
    }

    /// A timer entry's shard and its slot in the shard's tables: the slot number's top
    /// bits and the rest.
    #[inline]
    fn shard_and_slot(&self, entry: &Entry) -> (usize, usize) {
        (
            entry.slot as usize >> self.slot_bits,
            entry.slot as usize & ((1 << self.slot_bits) - 1),
        )
    }
}

/// A timer entry's tag: the key's tag's check bits, with the generation in the low bits
/// and the bits above zero.
#[inline]
pub(super) fn tag_of(key_tag: u32, gen: u32) -> u32 {
    key_tag & TAG_CHECK_MASK & !GEN_MASK | gen & GEN_MASK
}

/// The generation bits of a timer entry's tag.
pub(super) const GEN_MASK: u32 = (1 << GEN_TAG_BITS) - 1;
