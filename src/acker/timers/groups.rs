//! The reaper's timers: one per *group* of slots (the words of one cache line), not one
//! per root.
//!
//! A root is *registered* with the reaper once a scan of the dirty groups has looked at
//! its group ([`dirty`](super::dirty)), or once the reaper moved it, and the reaper must
//! then look at it by its deadline. Rather than a wheel entry per root, the reaper files one per group: when it
//! comes due, the reaper looks at every slot of the group (one line), times out what is
//! due, and files the group again at the earliest deadline left. A full acker's groups hold
//! about three roots each, so the wheel holds about a third as many entries, plus one filed
//! tick per group here (at 1M pending: 2.5 + 1.25 B per root, against 8 B for an entry per
//! root).
//!
//! ## Filed ticks
//!
//! For each group of each table generation the reaper keeps `filed`: the tick of an entry
//! for the group that is in the wheel (or in the pass's due list, not yet looked at), or
//! none. The invariant: every registered root still in its group has its deadline at or
//! after `filed`, and an entry at `filed` will make the reaper look at the group.
//!
//! * Registering a root whose deadline is `d` ([`Filed::cover`], for a root the reaper
//!   moved): if `filed` is at or before `d`, that entry covers it; otherwise an entry is
//!   filed at `d` and `filed = d` (the later entry stays in the wheel, *stale*).
//! * A scan's look at a dirty group is an entry come due, as below: every root in the
//!   group is registered by it.
//! * An entry comes due: the reaper looks at the group's slots and finds the earliest
//!   deadline `m` left among them (the next tick for an init under way or a root being
//!   moved). If `filed` is none or at or before now, this entry (or one due in the same
//!   pass) is the one `filed` named: the group is filed at `m`, or `filed` becomes none if
//!   no root is left ([`Filed::refile`]). Otherwise this entry is stale, and the group is
//!   filed at `m` only if `m` is before `filed`.
//! * The look sees every registered root still in the group: a slot holds its root from
//!   the root's creation to its completion or its move to a successor table (the mover
//!   registers the copy again, in the successor's group), and registration came after the
//!   creation. A root the look misses was created during it and is not registered yet:
//!   its group is dirty, and the next scan's look files an entry if `filed` does not
//!   cover it.
//! * A sweep drops the entries of groups with no root left (their `filed` becomes none),
//!   and of the others the entries after `filed`, which the named entry covers. It keeps
//!   entries before `filed`: normally stale ones that will look again early, but after a
//!   tick that read as none (below), the one a registered root needs.
//!
//! Every entry the reaper files at a tick at or before its time comes out of the wheel's
//! next advance, before any look of that advance's pass: a pass looks at the dirty groups
//! it scanned before it advances, and the groups its upkeep moved after its looks (their entries come
//! out of the next pass's advance). So "`filed` at or before now" means its entry is due in
//! this pass, and never means it was lost.
//!
//! Ticks are kept as their low 32 bits plus one, 0 meaning none. A tick whose low bits are
//! all ones (once in 2^32 ticks) reads as none: a stale entry that comes due is then taken
//! for the named one, or a registration files an entry of its own, later than the one at
//! that tick, and names it; the sweep keeps the earlier one (above). Either costs a spare
//! look, never a missed one (the tests' coverage count, `Engine::covered_roots`, misses
//! such a root until its group is filed again). A generation's ticks are dropped once it
//! leaves its table's chain.

use std::mem;

use crate::acker::timers::wheel::WheelEntry;
use crate::zeroed::Slice;

/// A root's slot, for the reaper to find again: its slot (across the acker's tables) and a
/// tag: its table's generation and 18 bits of its root's key, which tell nearly every
/// stale entry apart cheaply (the reaper re-reads the slot's word and times anyway, so a
/// tag that matches a later root costs a look, never a wrong timeout). The tag's top bits
/// are zero. A group timer's first slot, with the generation alone as its tag, names its
/// group the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The slot, numbered across the acker's tables.
    pub slot: u32,
    /// Bits of the root's key (`Key::tag`, below `TAG_CHECK_BITS`) with the generation in
    /// the lowest; the rest zero.
    pub tag: u32,
}

/// A wheel entry: a group of a table generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker) struct GroupTimer {
    /// The group's first slot, numbered across the acker's tables (as `Entry::slot`).
    pub first: u32,
    /// The generation's low bits (`GEN_MASK`), and above them the wheel's spare bits.
    pub gen: u32,
}

/// Bits of [`GroupTimer::gen`] that hold the generation.
const GEN_BITS: u32 = super::GEN_TAG_BITS;

// Every level of the wheel keeps its offsets in the entry (a level-5 bucket spans 2^30
// ticks, [`wheel`](crate::acker::timers::wheel)): no `u32` beside it.
const _: () = assert!(u32::BITS - GEN_BITS >= 30);

impl WheelEntry for GroupTimer {
    const SPARE_BITS: u32 = u32::BITS - GEN_BITS;

    #[inline]
    fn spare(self) -> u32 {
        self.gen >> GEN_BITS
    }

    #[inline]
    fn with_spare(self, bits: u32) -> Self {
        GroupTimer {
            first: self.first,
            gen: self.gen & ((1 << GEN_BITS) - 1) | bits << GEN_BITS,
        }
    }
}

/// A group of a table generation, as [`Filed`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker) struct GroupAt {
    pub shard: usize,
    /// The generation, in full (`Table::gen`).
    pub gen: u32,
    /// The generation's group count (the size of its filed ticks).
    pub groups: usize,
    pub group: usize,
}

/// The filed ticks of one table generation's groups.
struct Generation {
    gen: u32,
    /// One `u32` per group, zeroed memory of its own ([`zeroed`](crate::zeroed)): the pages
    /// of groups never filed are never touched, and a large table's go back to the system
    /// with it rather than stay in the reaper's heap.
    ticks: Slice<u32>,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("gen", &self.gen)
            .field("groups", &self.ticks.len())
            .finish_non_exhaustive()
    }
}

/// Tick records this large or larger are mapped (those of tables from 16k groups).
const MAP_TICKS_AT: usize = 64 << 10;

impl Generation {
    fn new(gen: u32, groups: usize) -> Self {
        Generation {
            gen,
            // Safety: a zero `u32` is a `u32` (none filed).
            ticks: unsafe { Slice::new(groups, 1, MAP_TICKS_AT, false) },
        }
    }
}

/// The filed tick of every group the reaper has timers for, per table and generation.
#[derive(Debug, Default)]
pub(in crate::acker) struct Filed {
    tables: Vec<Vec<Generation>>,
}

/// What [`Filed::cover`] and [`Filed::refile`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker) enum File {
    /// An entry must be filed at this tick.
    At(u64),
    /// Nothing to file: the group's entries cover it, or it has no root left.
    Nothing,
}

impl Filed {
    /// The filed ticks of `gen` (a generation of `shard` with `groups` groups), created
    /// all none.
    fn ticks(&mut self, shard: usize, gen: u32, groups: usize) -> &mut [u32] {
        if self.tables.len() <= shard {
            self.tables.resize_with(shard + 1, Vec::new);
        }
        let gens = &mut self.tables[shard];
        let i = match gens.iter().position(|g| g.gen == gen) {
            Some(i) => i,
            None => {
                gens.push(Generation::new(gen, groups));
                gens.len() - 1
            }
        };
        &mut gens[i].ticks
    }

    /// The group's filed tick, near `now` (`full` turns 32 bits into a tick).
    fn get(stored: u32, full: impl Fn(u32) -> u64) -> Option<u64> {
        (stored != 0).then(|| full(stored.wrapping_sub(1)))
    }

    fn encode(tick: u64) -> u32 {
        (tick as u32).wrapping_add(1)
    }

    /// A root of `group` was registered with its deadline at `tick`: whether an entry must
    /// be filed for it (then `filed` is that tick).
    pub(in crate::acker) fn cover(
        &mut self,
        at: GroupAt,
        tick: u64,
        full: impl Fn(u32) -> u64,
    ) -> File {
        let stored = &mut self.ticks(at.shard, at.gen, at.groups)[at.group];
        match Self::get(*stored, full) {
            Some(filed) if filed <= tick => File::Nothing,
            _ => {
                *stored = Self::encode(tick);
                File::At(tick)
            }
        }
    }

    /// An entry of `group` came due at `now` and the look found `earliest` the earliest
    /// deadline left (module docs): whether to file the group again, and where.
    pub(in crate::acker) fn refile(
        &mut self,
        at: GroupAt,
        now: u64,
        earliest: Option<u64>,
        full: impl Fn(u32) -> u64,
    ) -> File {
        let stored = &mut self.ticks(at.shard, at.gen, at.groups)[at.group];
        let filed = Self::get(*stored, full);
        // None, or due by now: this entry, or another due in this pass, is the one named.
        let named = !matches!(filed, Some(filed) if filed > now);
        match (earliest, filed) {
            (Some(m), _) if named => {
                *stored = Self::encode(m);
                File::At(m)
            }
            // A stale entry: files only a root the named entry would come too late for.
            (Some(m), Some(filed)) if m < filed => {
                *stored = Self::encode(m);
                File::At(m)
            }
            (None, _) if named => {
                *stored = 0;
                File::Nothing
            }
            _ => File::Nothing,
        }
    }

    /// The group of a dropped entry has no root left: nothing filed for it.
    pub(in crate::acker) fn clear(&mut self, shard: usize, gen: u32, group: usize) {
        if let Some(g) = self
            .tables
            .get_mut(shard)
            .and_then(|gens| gens.iter_mut().find(|g| g.gen == gen))
        {
            if let Some(stored) = g.ticks.get_mut(group) {
                *stored = 0;
            }
        }
    }

    /// The filed tick of a group, if it has one (for the tests' coverage count).
    pub(in crate::acker) fn filed(
        &self,
        shard: usize,
        gen: u32,
        group: usize,
        full: impl Fn(u32) -> u64,
    ) -> Option<u64> {
        let g = self.tables.get(shard)?.iter().find(|g| g.gen == gen)?;
        Self::get(*g.ticks.get(group)?, full)
    }

    /// Drops the ticks of `shard`'s generations that `keep` says have left its chain.
    pub(in crate::acker) fn prune(&mut self, shard: usize, keep: impl Fn(u32) -> bool) {
        if let Some(gens) = self.tables.get_mut(shard) {
            gens.retain(|g| keep(g.gen));
        }
    }

    pub(in crate::acker) fn heap_bytes(&self) -> usize {
        self.tables
            .iter()
            .map(|gens| {
                gens.capacity() * mem::size_of::<Generation>()
                    + gens
                        .iter()
                        .map(|g| g.ticks.len().max(1) * mem::size_of::<u32>())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + self.tables.capacity() * mem::size_of::<Vec<Generation>>()
    }

    /// Tables with filed ticks (for pruning).
    pub(in crate::acker) fn tables(&self) -> usize {
        self.tables.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Group 3 of generation 5 of table 1 (8 groups).
    const AT: GroupAt = GroupAt {
        shard: 1,
        gen: 5,
        groups: 8,
        group: 3,
    };

    fn full(t: u32) -> u64 {
        u64::from(t)
    }

    #[test]
    fn a_group_timer_lends_the_wheel_its_top_bits_and_keeps_its_group() {
        let timer = GroupTimer { first: 12, gen: 2 };
        assert_eq!(timer.spare(), 0);
        for bits in [0, 1, 0xABC, (1 << GroupTimer::SPARE_BITS) - 1] {
            let lent = timer.with_spare(bits);
            assert_eq!((lent.spare(), lent.first, lent.gen & 3), (bits, 12, 2));
            assert_eq!(lent.with_spare(0), timer, "given back as it was");
        }
    }

    #[test]
    fn a_registration_files_only_what_the_group_timer_does_not_cover() {
        let mut filed = Filed::default();
        assert_eq!(
            filed.cover(AT, 100, full),
            File::At(100),
            "the group's first"
        );
        assert_eq!(filed.cover(AT, 100, full), File::Nothing);
        assert_eq!(
            filed.cover(AT, 250, full),
            File::Nothing,
            "due later: looked at by 100"
        );
        assert_eq!(
            filed.cover(AT, 40, full),
            File::At(40),
            "due earlier: an entry of its own"
        );
        assert_eq!(filed.filed(1, 5, 3, full), Some(40));
        // Other groups, generations and tables have their own.
        assert_eq!(
            filed.cover(GroupAt { group: 4, ..AT }, 250, full),
            File::At(250)
        );
        assert_eq!(
            filed.cover(GroupAt { gen: 6, ..AT }, 250, full),
            File::At(250)
        );
        assert_eq!(
            filed.cover(GroupAt { shard: 0, ..AT }, 250, full),
            File::At(250)
        );
        assert_eq!(filed.filed(1, 5, 3, full), Some(40));
    }

    #[test]
    fn the_named_entry_files_the_group_again_and_a_stale_one_only_if_earlier() {
        let mut filed = Filed::default();
        filed.cover(AT, 100, full);
        filed.cover(AT, 40, full); // the entry at 100 is stale now
                                   // The named entry at 40, with roots left due at 70 and
                                   // later.
        assert_eq!(filed.refile(AT, 40, Some(70), full), File::At(70));
        // A stale entry comes due at 60 (say, a reset moved a root): the named one, at 70,
        // is still ahead, and files only a root it would come too late for.
        assert_eq!(filed.refile(AT, 60, Some(75), full), File::Nothing);
        assert_eq!(
            filed.refile(AT, 60, Some(65), full),
            File::At(65),
            "earlier than named"
        );
        assert_eq!(filed.filed(1, 5, 3, full), Some(65));
        // Named, and the group empty: nothing filed, and the next registration files.
        assert_eq!(filed.refile(AT, 65, None, full), File::Nothing);
        assert_eq!(filed.filed(1, 5, 3, full), None);
        assert_eq!(filed.cover(AT, 500, full), File::At(500));
        // A stale entry of an empty group leaves the named one alone.
        assert_eq!(filed.refile(AT, 70, None, full), File::Nothing);
        assert_eq!(filed.filed(1, 5, 3, full), Some(500));
        // A sweep's clear, and a generation pruned.
        filed.clear(1, 5, 3);
        assert_eq!(filed.filed(1, 5, 3, full), None);
        filed.cover(AT, 9, full);
        filed.prune(1, |gen| gen != 5);
        assert_eq!(filed.filed(1, 5, 3, full), None);
    }

    #[test]
    fn a_tick_that_reads_as_none_costs_a_spare_look_never_a_missed_one() {
        let mut filed = Filed::default();
        let odd = u64::from(u32::MAX); // stored as 0: none
        assert_eq!(filed.cover(AT, odd, full), File::At(odd));
        assert_eq!(filed.filed(1, 5, 3, full), None);
        // A root due later files an entry of its own rather than trusting the one at `odd`.
        assert_eq!(
            filed.cover(AT, odd + 5, |t| full(t) + (1 << 32)),
            File::At(odd + 5)
        );
        // The entry at `odd` comes due while the one at odd + 5 is named: stale, and the
        // roots it found due later than that stay with the named one.
        let near = |t: u32| {
            if t < 100 {
                full(t) + (1 << 32)
            } else {
                full(t)
            }
        };
        assert_eq!(filed.refile(AT, odd, Some(odd + 9), near), File::Nothing);
        // And had nothing been filed since, the entry at `odd` would be taken as named.
        filed.clear(1, 5, 3);
        assert_eq!(
            filed.refile(AT, odd, Some(odd + 9), near),
            File::At(odd + 9)
        );
    }
}
