//! A DashMap tracker: what a Rust developer would write first with the usual concurrent map.
//!
//! `DashMap<u64, Entry>` (sharded `RwLock<HashMap>`s, default shard count: 4 x cores) with
//! `Entry { val, payload, failed, deadline }`. Every operation is one `entry()` call, so the
//! read-modify-write of a root (XOR, check for 0, remove) happens under that root's shard
//! lock in one go: `entry().and_modify(..)` followed by a separate `remove` would take the
//! lock twice and race (two acks could both see 0, or an ack could slip between the XOR and
//! the removal), so the bench uses the `Entry::Occupied` / `Entry::Vacant` form of the same
//! API, which does the XOR, the zero check and `remove_entry` under one lock.
//!
//! The tracker's logic (the acker's semantics, the deadline, the sweeper) is
//! [`super::entry_map`]'s, shared with the scc peer; this module is the map's side of it: the
//! `entry()` call and its `Occupied` / `Vacant` halves, and `retain` for the sweep.
//!
//! Timeouts: a sweeper thread runs every `timeout / 10` (at least 1 ms, at most 1 s) and
//! `retain`s the map, taking each shard's write lock in turn, dropping due entries and
//! delivering the initialized ones `TimedOut` after the scan. So a tree times out at most a
//! tenth of its timeout (and never more than 1 s) late; a scan is O(pending), which is why it
//! cannot run at the Acker's 1 ms resolution without costing a core at 1M pending.

use dashmap::mapref::entry::{Entry as DashEntry, OccupiedEntry, VacantEntry};
use dashmap::DashMap;

use super::entry_map::{Entry, EntryMap, EntryMapTracker, OccupiedSlot, Slot, VacantSlot};
use super::U64Hasher;

/// The DashMap peer. See the module docs.
pub(crate) type DashTracker = EntryMapTracker<DashMap<u64, Entry, U64Hasher>>;

impl EntryMap for DashMap<u64, Entry, U64Hasher> {
    const SWEEPER: &'static str = "dashmap-sweep";

    type Occupied<'a> = OccupiedEntry<'a, u64, Entry>;
    type Vacant<'a> = VacantEntry<'a, u64, Entry>;

    fn empty() -> Self {
        DashMap::with_hasher(U64Hasher(0))
    }

    #[inline]
    fn lock(&self, root: u64) -> Slot<Self::Occupied<'_>, Self::Vacant<'_>> {
        match self.entry(root) {
            DashEntry::Occupied(slot) => Slot::Occupied(slot),
            DashEntry::Vacant(slot) => Slot::Vacant(slot),
        }
    }

    fn retain_each(&self, keep: impl FnMut(&u64, &mut Entry) -> bool) {
        self.retain(keep);
    }
}

impl OccupiedSlot for OccupiedEntry<'_, u64, Entry> {
    #[inline]
    fn entry_mut(&mut self) -> &mut Entry {
        self.get_mut()
    }

    #[inline]
    fn take(self) -> Entry {
        self.remove_entry().1
    }
}

impl VacantSlot for VacantEntry<'_, u64, Entry> {
    #[inline]
    fn put(self, entry: Entry) {
        self.insert(entry);
    }
}
