//! An `scc::HashMap` tracker: the DashMap peer's design on the other concurrent map a Rust
//! developer would reach for, the one built for contention.
//!
//! `scc::HashMap<u64, Entry>` is one resizable array of small buckets (32 entries each, an
//! overflow list beyond), each with its own read-write lock, instead of DashMap's handful of
//! locked shards; resizing is incremental and never blocks other threads. So it is the
//! strongest off-the-shelf answer to "just use a concurrent map", and it belongs beside
//! DashMap so that the comparison is not against the slowest map at hand.
//!
//! The tracker is the DashMap peer's own code ([`super::entry_map`], generic over the map),
//! so the two differ only in the map: `Entry { val, payload, failed, deadline }`, and every
//! operation is one `entry_sync()` call, which holds the root's bucket lock until the entry
//! is dropped. The XOR, the check for 0 and `remove_entry` happen under that one lock;
//! `update_sync` followed by a separate `remove_if_sync` would take it twice and race exactly
//! as DashMap's `and_modify` + `remove` would (two acks both seeing 0, or an ack between the
//! XOR and the removal).
//!
//! Timeouts: as DashMap's, a sweeper thread runs every `timeout / 10` (at least 1 ms, at most
//! 1 s) and `retain_sync`s the map, locking one bucket at a time, dropping due entries and
//! delivering the initialized ones `TimedOut` after the scan, outside every lock (the sink is
//! user code). A tree times out at most a tenth of its timeout (and never more than 1 s)
//! late, and a scan is O(pending), as DashMap's.
//!
//! The map starts empty (`with_hasher`, like the DashMap peer) and grows as needed: neither
//! unbounded peer is given a size hint the other lacks.

use scc::hash_map::{Entry as SccEntry, OccupiedEntry, VacantEntry};
use scc::HashMap;

use super::entry_map::{Entry, EntryMap, EntryMapTracker, OccupiedSlot, Slot, VacantSlot};
use super::U64Hasher;

/// The `scc::HashMap` peer. See the module docs.
pub(crate) type SccTracker = EntryMapTracker<HashMap<u64, Entry, U64Hasher>>;

impl EntryMap for HashMap<u64, Entry, U64Hasher> {
    const SWEEPER: &'static str = "scc-sweep";

    type Occupied<'a> = OccupiedEntry<'a, u64, Entry, U64Hasher>;
    type Vacant<'a> = VacantEntry<'a, u64, Entry, U64Hasher>;

    fn empty() -> Self {
        HashMap::with_hasher(U64Hasher(0))
    }

    #[inline]
    fn lock(&self, root: u64) -> Slot<Self::Occupied<'_>, Self::Vacant<'_>> {
        match self.entry_sync(root) {
            SccEntry::Occupied(slot) => Slot::Occupied(slot),
            SccEntry::Vacant(slot) => Slot::Vacant(slot),
        }
    }

    fn retain_each(&self, keep: impl FnMut(&u64, &mut Entry) -> bool) {
        // `retain_sync` visits every entry present when it starts under its bucket's lock, so
        // a root cannot be acked between the deadline check and its removal. An entry may be
        // visited twice if a concurrent resize moves it, but only kept entries can be: a
        // removed one is gone, so no tree is delivered twice.
        self.retain_sync(keep);
    }
}

impl OccupiedSlot for OccupiedEntry<'_, u64, Entry, U64Hasher> {
    #[inline]
    fn entry_mut(&mut self) -> &mut Entry {
        self.get_mut()
    }

    #[inline]
    fn take(self) -> Entry {
        self.remove_entry().1
    }
}

impl VacantSlot for VacantEntry<'_, u64, Entry, U64Hasher> {
    #[inline]
    fn put(self, entry: Entry) {
        // The returned `OccupiedEntry` holds the bucket lock; dropping it here releases the
        // lock before returning.
        self.insert_entry(entry);
    }
}
