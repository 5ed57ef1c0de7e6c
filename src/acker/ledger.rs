//! One shard's ledger: a fixed-size, lock-free hash table of `root -> tree` slots.
//!
//! ## Layout
//!
//! What every operation touches apart from the rest. The table is `buckets` buckets of
//! [`SLOTS_PER_BUCKET`] slots. A bucket is two cache lines: the first holds its *overflow
//! count* (below) and its slots' keys, which a probe reads; the second its slots' XOR values
//! and states, which an ack reads and writes. A slot's other fields (times and payload, 32
//! bytes with a `u32` payload) sit together in a `Slot` of their own, which only init, a
//! reset, completion and the reaper touch. So the common ack reads and writes its home
//! bucket's two lines and nothing else, and both are prefetched as soon as the root is
//! hashed: they arrive together rather than one miss after the other, and at 64k pending
//! roots the buckets (18 B per slot) stay in a core's L2 where keys and slots together (48
//! B) did not (1 thread: 48 -> 38 ns per ack at 64k pending, 150 -> 114 ns at 1M).
//! Nothing the reaper keeps (timers, queues) lives in a bucket or slot: the reaper writes
//! them only to time a tree out or to free a slot.
//!
//! In a large table every new entry misses twice: on its home bucket and on the slot it
//! claims. Both are prefetched as soon as their address is known (the bucket before the
//! caller reads the clock and pins, the slot when the scan sees it empty), so the misses
//! overlap the work before the first write rather than stalling it.
//!
//! A root hashes (see [`HashLayout`]) to a shard, a *home* bucket and a *stored key*: the
//! hash bits not implied by the shard and home bucket, shifted left with the low bit set, so
//! a stored key is never 0 and `0` means EMPTY. A slot's key word is the stored key with the
//! slot's *distance* from the home bucket in its top bits: the stored key names the root
//! only together with its home, and two roots with the same stored key have different
//! homes, so the word a root has in a given bucket is its own. The key word is the slot's
//! claim: one CAS `0 -> key` takes an empty slot for a root, whatever the root's value (0 and
//! `u64::MAX` included). The bucket count need not be a power of two (the bucket is the
//! hash's top bits scaled by the count), so a table is sized at about 1.25× its share of
//! `max_pending` rather than rounded up to twice it.
//!
//! ## Overflow
//!
//! A root lives in its home bucket or, when that was full, in one of the next
//! [`MAX_PROBE`] buckets (wrapping): the first with an empty slot. Before it claims a slot
//! `d` buckets past home, a claimer adds one to the overflow counts of the `d` buckets it
//! passed; `free` (or a back-out) takes them off again. A search for a root therefore walks
//! on from a bucket only while that bucket's count is non-zero, and an entry that exists
//! when the search starts is always reached: its counts were raised before its key was
//! written. The distance `d` is in the key word, so the home bucket of any slot is known
//! (for `free`, and to recover the root from the slot). (A first version kept `d` in the
//! state word and matched the stored key alone; a review found two roots whose stored keys
//! agree and whose homes are `k` buckets apart, which then matched each other's entries.)
//!
//! ## A slot's life
//!
//! ```text
//!  EMPTY --CAS key--> CLAIMED --set READY--> READY --set DONE--> DONE --(grace)--> EMPTY
//!                        \--back out (duplicate claim)--> EMPTY
//! ```
//!
//! * **CLAIMED**: the claimer owns the slot's fields and writes start, base and timeout.
//!   Anyone else who finds the key waits for READY (this happens only when two threads
//!   create the same root at the same instant).
//! * **READY**: live. Acks `fetch_xor` the value; `INIT`, `FAILED`, `INITING` and `RESET`
//!   are flags in the state word beside READY and DONE.
//! * **DONE**: completion was claimed by one CAS that set DONE; exactly one thread does it,
//!   and only that thread reads the payload. The slot is a tombstone: lookups skip it.
//! * back to **EMPTY** only through [`Ledger::free`], which the reaper defers (the acker's
//!   `grace` module) until every thread pinned when the slot was retired has unpinned. So
//!   no operation that found the slot can see it reused: a late ack never XORs into a newer
//!   tree, a completion CAS never lands on a newer occupant's state, and the probe sequence
//!   does not change under a claimer's scan.
//!
//! ## One slot per root
//!
//! A claimer searches the root's probe sequence for the key first, then CASes the first
//! EMPTY slot in it. Two claimers of the same root can still both win a CAS (on different
//! slots), when a free ran between their scans. After its CAS a claimer therefore searches
//! again (every access SeqCst, so of two claimers at least one sees the other: each raised
//! its overflow counts and wrote its key before its search, and a search compares each
//! bucket's keys with the key word the root would have at that distance) and resolves:
//! a READY twin, or a CLAIMED twin at a lower index, makes it back out; a CLAIMED twin at a
//! higher index it waits out (it will back out or become READY, and then we back out).
//! Waits only go from lower to higher index, so they cannot form a cycle.

use std::mem::MaybeUninit;

use super::table::{Part, Table};
use crate::clock::is_due;

#[cfg(loom)]
use crate::sync::fence;
use crate::sync::{AtomicU64, AtomicU8, Ordering, UnsafeCell};

/// Slots per bucket: a bucket's overflow count, keys, XOR values and states fill 128 bytes,
/// two cache lines.
#[cfg(not(loom))]
pub(crate) const SLOTS_PER_BUCKET: usize = 7;
/// Tiny under loom so models reach full buckets, overflow and reuse in a few steps.
#[cfg(loom)]
pub(crate) const SLOTS_PER_BUCKET: usize = 2;

/// How many buckets past its home a root may live (capped at `buckets - 1`): a window of
/// 448 slots, which random roots filling a table to `max_pending` never overrun (test
/// `random_roots_fill_max_pending_without_a_refusal`; 32 buckets did, at 97.6 %).
#[cfg(not(any(loom, miri)))]
pub(crate) const MAX_PROBE: usize = 63;
/// Under Miri 15: its tests fill a root's whole window slot by slot, and Miri interprets
/// every probe of every one of those claims (32 buckets of 15 slots took it over ten
/// minutes).
#[cfg(all(miri, not(loom)))]
pub(crate) const MAX_PROBE: usize = 15;
/// Under loom one bucket past home, so models overflow in few steps.
#[cfg(loom)]
pub(crate) const MAX_PROBE: usize = 1;

/// Top bits of a key word that hold the slot's distance from its home bucket.
#[cfg(not(any(loom, miri)))]
const DISTANCE_BITS: u32 = 6;
#[cfg(all(miri, not(loom)))]
const DISTANCE_BITS: u32 = 4;
#[cfg(loom)]
const DISTANCE_BITS: u32 = 1;
const DISTANCE_SHIFT: u32 = 64 - DISTANCE_BITS;
const _: () = assert!(MAX_PROBE < 1 << DISTANCE_BITS);

/// The key word of a root with stored key `stored` in a slot `d` buckets past its home.
#[inline]
fn key_at(stored: u64, d: usize) -> u64 {
    stored | (d as u64) << DISTANCE_SHIFT
}

/// The distance part of a key word.
#[inline]
fn distance(key: u64) -> usize {
    (key >> DISTANCE_SHIFT) as usize
}

/// A hint to bring the line holding `p` into this core's cache, in a state fit for writing
/// if `WRITE`. It never faults and changes no memory, so any address will do.
#[inline]
pub(crate) fn prefetch<const WRITE: bool>(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    // Safety: PREFETCHW and PREFETCHT0 are hints; they do not access memory architecturally
    // and cannot fault. Where the CPU lacks PREFETCHW, its encoding executes as a no-op.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        if WRITE {
            _mm_prefetch::<_MM_HINT_ET0>(p.cast());
        } else {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    let _ = p;
}

// The state word's flags.
/// The claimer has written start, base and timeout: the slot is live.
pub(crate) const READY: u32 = 1 << 0;
/// Init's payload is written and visible.
pub(crate) const INIT: u32 = 1 << 1;
/// An init has claimed the payload cell and is writing it.
pub(crate) const INITING: u32 = 1 << 2;
/// A fail arrived.
pub(crate) const FAILED: u32 = 1 << 3;
/// Completion has been claimed; the slot is a tombstone.
pub(crate) const DONE: u32 = 1 << 4;
/// A `reset_timeout` moved the base since the reaper last cleared this. The reaper clears
/// it before it reads the deadline, so its DONE CAS (from a state without RESET) fails if a
/// reset lands between that read and the CAS, and it reads the deadline again.
pub(crate) const RESET: u32 = 1 << 5;
/// The slot's open word went on inbox lane 1 (else lane 0): where an adjust word for it
/// must go, so that the reaper reads the two in order. Set by `publish`, with READY.
pub(crate) const LANE: u32 = 1 << 6;
/// A slot's state is one byte of its bucket's second line.
const _: () = assert!((READY | INIT | INITING | FAILED | DONE | RESET | LANE) <= u8::MAX as u32);

/// Where a root lives: its shard, its home bucket in that shard, and its stored key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hashed {
    pub(crate) shard: usize,
    pub(crate) bucket: usize,
    pub(crate) stored: u64,
}

/// How a root's hash splits: the top `shard_bits` pick the shard; the remaining bits, read
/// as a fraction, times `buckets` pick the home bucket; the bits below the top
/// `implied_bits` of the remainder (which the bucket determines) are the stored key.
///
/// `buckets` is `k << implied_bits`. Write `r` for the remaining bits as a 64-bit fraction
/// and `t` for its top `implied_bits`: `bucket = floor(r * buckets / 2^64)
/// = floor(k * r / 2^(64 - implied_bits))`, which is `k * t` plus something below `k`, so
/// `t = bucket / k`. That is what lets [`root`](Self::root) invert the hash exactly.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HashLayout {
    shard_bits: u32,
    buckets: usize,
    implied_bits: u32,
}

const MIX: u64 = 0xff51_afd7_ed55_8ccd;
/// The multiplicative inverse of [`MIX`] modulo 2^64.
const MIX_INVERSE: u64 = {
    // Newton's iteration doubles the correct low bits each round: 3 → 6 → … → 96 ≥ 64.
    let mut inv = MIX;
    let mut i = 0;
    while i < 5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(MIX.wrapping_mul(inv)));
        i += 1;
    }
    inv
};

impl HashLayout {
    /// A layout for `2^shard_bits` shards of at least `min_buckets` buckets each. The count
    /// is rounded up to `k << j` with `k` in 64..128, so by at most a 64th; and to at least
    /// `2^j` with `shard_bits + j` of `1 +` [`DISTANCE_BITS`], so that a stored key (64 -
    /// `shard_bits` - `j` hash bits and the tag bit) leaves the key word's top bits free for
    /// the distance.
    pub(crate) fn new(shard_bits: u32, min_buckets: usize) -> Self {
        let min = min_buckets.max(2);
        let log = usize::BITS - 1 - min.leading_zeros();
        let implied_bits = log
            .saturating_sub(6)
            .max((1 + DISTANCE_BITS).saturating_sub(shard_bits))
            .max(1);
        let k = min.div_ceil(1 << implied_bits);
        HashLayout {
            shard_bits,
            buckets: k << implied_bits,
            implied_bits,
        }
    }

    /// Buckets per shard.
    pub(crate) fn buckets(&self) -> usize {
        self.buckets
    }

    /// A bijective mix: a xor-shift (an involution for shifts ≥ 32) then an odd multiply,
    /// whose top bits depend on every input bit.
    #[inline]
    fn mix(root: u64) -> u64 {
        (root ^ (root >> 32)).wrapping_mul(MIX)
    }

    #[inline]
    fn unmix(mixed: u64) -> u64 {
        let x = mixed.wrapping_mul(MIX_INVERSE);
        x ^ (x >> 32)
    }

    #[inline]
    pub(crate) fn hash(&self, root: u64) -> Hashed {
        let m = Self::mix(root);
        let (sb, ib) = (self.shard_bits, self.implied_bits);
        let shard = m.checked_shr(64 - sb).unwrap_or(0) as usize;
        let rest = m.checked_shl(sb).unwrap_or(0);
        let bucket = ((u128::from(rest) * self.buckets as u128) >> 64) as usize;
        // The low 64 - sb - ib bits of m; ib >= 1, so shifting in the tag bit loses nothing.
        let low = m & (u64::MAX >> (sb + ib));
        Hashed {
            shard,
            bucket,
            stored: (low << 1) | 1,
        }
    }

    /// The root whose hash is `h`.
    pub(crate) fn root(&self, h: Hashed) -> u64 {
        let (sb, ib) = (self.shard_bits, self.implied_bits);
        let top = (h.bucket / (self.buckets >> ib)) as u64;
        let m = (h.shard as u64).checked_shl(64 - sb).unwrap_or(0)
            | top << (64 - sb - ib)
            | (h.stored >> 1);
        Self::unmix(m)
    }
}

/// The outcome of [`Ledger::find_or_claim`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The root's live slot.
    Found(usize),
    /// A new slot, CLAIMED by this thread: it must call [`Ledger::publish`] after writing
    /// the slot's fields, or give it back with [`Ledger::back_out`].
    Claimed(usize),
    /// Every slot of the root's probe sequence is taken.
    Full,
}

/// A bucket's words that every operation touches: its overflow count and keys (the first
/// cache line, which a probe reads), then its slots' XOR values and states (the second,
/// which an ack writes). `align(64)`, so the two halves are the two lines.
#[repr(C, align(64))]
struct Bucket {
    /// How many roots live past this bucket with their home at or before it (module docs).
    overflow: AtomicU64,
    /// Stored keys with distances; 0 is EMPTY.
    keys: [AtomicU64; SLOTS_PER_BUCKET],
    /// The XOR values.
    xors: [AtomicU64; SLOTS_PER_BUCKET],
    /// Flags (module docs).
    states: [AtomicU8; SLOTS_PER_BUCKET],
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Bucket>() == 128);

impl Bucket {
    fn new() -> Self {
        Bucket {
            overflow: AtomicU64::new(0),
            keys: std::array::from_fn(|_| AtomicU64::new(0)),
            xors: std::array::from_fn(|_| AtomicU64::new(0)),
            states: std::array::from_fn(|_| AtomicU8::new(0)),
        }
    }
}

/// A slot's fields that only init, a reset, completion and the reaper touch.
struct Slot<T> {
    /// When the timeout counts from: the first message, or the latest `reset_timeout`. The
    /// tree is due at `base + timeout`. Kept apart from the timeout (rather than one
    /// deadline word) so that a reset and the init that sets the tree's own timeout each
    /// write one field and neither can undo the other.
    base: AtomicU64,
    /// First message seen, for `Completion::elapsed`.
    start: AtomicU64,
    /// The tree's timeout in ns, for `reset_timeout`.
    timeout: AtomicU64,
    payload: UnsafeCell<MaybeUninit<T>>,
}

/// One shard's table. See the module docs for the protocol.
pub(crate) struct Ledger<T> {
    /// The buckets' overflow counts, keys, values and states: all that an ack touches.
    table: Part<Bucket>,
    /// The rest of each slot, together, apart from the buckets so that they stay small.
    slots: Part<Slot<T>>,
    buckets: usize,
    /// Buckets past home a root may live: `MAX_PROBE`, or fewer in a small table.
    max_probe: usize,
}

// Safety: the payload cells are the only non-Sync part. A payload cell is written by the one
// thread that set INITING on its slot and read (moved out) by the one thread that set DONE
// after INIT was published, or by `Drop` with exclusive access. `T: Send` because payloads move
// between threads; no `&T` is ever shared, so `T: Sync` is not needed.
unsafe impl<T: Send> Sync for Ledger<T> {}
// Safety: as above; the ledger owns its payloads.
unsafe impl<T: Send> Send for Ledger<T> {}

impl<T> Ledger<T> {
    /// A ledger of `buckets * SLOTS_PER_BUCKET` empty slots.
    #[cfg(test)]
    pub(crate) fn new(buckets: usize) -> Self {
        Self::shards(1, buckets).pop().expect("one ledger")
    }

    /// `shards` ledgers of `buckets * SLOTS_PER_BUCKET` empty slots each, sharing one key
    /// array and one slot array ([`Table::split`]).
    pub(crate) fn shards(shards: usize, buckets: usize) -> Vec<Self> {
        let table = Table::split(shards, buckets, |_| Bucket::new());
        let slots = Table::split(shards, buckets * SLOTS_PER_BUCKET, |_| Slot {
            base: AtomicU64::new(0),
            start: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
            payload: UnsafeCell::new(MaybeUninit::uninit()),
        });
        table
            .into_iter()
            .zip(slots)
            .map(|(table, slots)| Ledger {
                table,
                slots,
                buckets,
                max_probe: MAX_PROBE.min(buckets - 1),
            })
            .collect()
    }

    /// Slots in the table.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The bucket `d` past `home`.
    #[inline]
    fn probe(&self, home: usize, d: usize) -> usize {
        let b = home + d;
        if b >= self.buckets {
            b - self.buckets
        } else {
            b
        }
    }

    #[inline]
    fn bucket_slots(bucket: usize) -> std::ops::Range<usize> {
        bucket * SLOTS_PER_BUCKET..(bucket + 1) * SLOTS_PER_BUCKET
    }

    #[inline]
    fn key_word(&self, slot: usize) -> &AtomicU64 {
        &self.table[slot / SLOTS_PER_BUCKET].keys[slot % SLOTS_PER_BUCKET]
    }

    #[inline]
    fn xor_word(&self, slot: usize) -> &AtomicU64 {
        &self.table[slot / SLOTS_PER_BUCKET].xors[slot % SLOTS_PER_BUCKET]
    }

    #[inline]
    fn state_word(&self, slot: usize) -> &AtomicU8 {
        &self.table[slot / SLOTS_PER_BUCKET].states[slot % SLOTS_PER_BUCKET]
    }

    /// How many roots live past `bucket` with their home at or before it (module docs).
    #[inline]
    fn overflow(&self, bucket: usize) -> &AtomicU64 {
        &self.table[bucket].overflow
    }

    /// Adds `delta` (wrapping, so -1 works) to the overflow counts of the `d` buckets from
    /// `home` on.
    fn count_overflow(&self, home: usize, d: usize, delta: u64) {
        for step in 0..d {
            self.overflow(self.probe(home, step))
                .fetch_add(delta, Ordering::SeqCst);
        }
    }

    /// A slot's key word (0 when empty).
    pub(crate) fn key(&self, slot: usize) -> u64 {
        self.key_word(slot).load(Ordering::SeqCst)
    }

    /// The home bucket of a slot with key word `key`: its bucket less its distance.
    fn home_of(&self, slot: usize, key: u64) -> usize {
        self.probe(slot / SLOTS_PER_BUCKET, self.buckets - distance(key))
    }

    /// An occupied slot's home bucket and stored key, from which its root is recovered.
    pub(crate) fn placed(&self, slot: usize) -> (usize, u64) {
        let key = self.key(slot);
        (self.home_of(slot, key), key & ((1 << DISTANCE_SHIFT) - 1))
    }

    /// The root's live (READY, not DONE) slot, if any. Waits out a CLAIMED one.
    #[inline]
    pub(crate) fn find(&self, h: Hashed) -> Option<usize> {
        for d in 0..=self.max_probe {
            let bucket = self.probe(h.bucket, d);
            if let Some(slot) = self.find_in(bucket, key_at(h.stored, d)) {
                return Some(slot);
            }
            if self.overflow(bucket).load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        None
    }

    /// Whether a tombstone (a DONE slot not yet freed) holds a place in the root's probe
    /// window: after `Claim::Full`, whether waiting for frees can make room.
    pub(crate) fn window_has_tombstones(&self, h: Hashed) -> bool {
        (0..=self.max_probe).any(|d| {
            Self::bucket_slots(self.probe(h.bucket, d))
                .any(|slot| self.key(slot) != 0 && self.state(slot) & DONE != 0)
        })
    }

    /// A live slot in `bucket` whose key word is `key`.
    #[inline]
    fn find_in(&self, bucket: usize, key: u64) -> Option<usize> {
        for (i, word) in self.table[bucket].keys.iter().enumerate() {
            if word.load(Ordering::SeqCst) != key {
                continue;
            }
            let slot = bucket * SLOTS_PER_BUCKET + i;
            if matches!(self.await_claim(slot, key), Some(state) if state & DONE == 0) {
                return Some(slot);
            }
        }
        None
    }

    /// The root's live slot, or a newly CLAIMED one, or `Full`.
    pub(crate) fn find_or_claim(&self, h: Hashed) -> Claim {
        'scan: loop {
            // Search on while the key may be further, and until an empty slot is seen.
            let mut empty = None;
            for d in 0..=self.max_probe {
                let bucket = self.probe(h.bucket, d);
                let keys = &self.table[bucket].keys;
                let ours = key_at(h.stored, d);
                for (i, key) in keys.iter().enumerate() {
                    let key = key.load(Ordering::SeqCst);
                    let slot = bucket * SLOTS_PER_BUCKET + i;
                    if key == ours {
                        match self.await_claim(slot, ours) {
                            Some(state) if state & DONE == 0 => return Claim::Found(slot),
                            _ => continue,
                        }
                    }
                    if key == 0 && empty.is_none() {
                        empty = Some((slot, d));
                        self.prefetch_slot(slot);
                    }
                }
                if empty.is_some() && self.overflow(bucket).load(Ordering::SeqCst) == 0 {
                    break;
                }
            }
            let Some((slot, d)) = empty else {
                return Claim::Full;
            };
            // Raise the counts first, so that whoever can see our key can follow to it.
            self.count_overflow(h.bucket, d, 1);
            if self
                .key_word(slot)
                .compare_exchange(0, key_at(h.stored, d), Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // Someone took it first; it may be our root. Look again.
                self.count_overflow(h.bucket, d, u64::MAX);
                continue 'scan;
            }
            // We own `slot`. Make sure no twin claim for the same root survives beside it.
            // Two claimers each wrote their own key and now read the other's (store
            // buffering): at least one must see the other. The CAS above and the loads below
            // are all SeqCst, and C++20's single total order over SeqCst operations forbids
            // both loads missing the other's CAS (and on x86 the locked CAS is a full barrier
            // anyway). Loom does not model that store-load order of SeqCst accesses, so the
            // models get it from an explicit fence, which costs a real machine a second
            // barrier per new entry for nothing.
            #[cfg(loom)]
            fence(Ordering::SeqCst);
            for step in 0..=self.max_probe {
                let bucket = self.probe(h.bucket, step);
                let twin = key_at(h.stored, step);
                for other in Self::bucket_slots(bucket) {
                    if other == slot || self.key(other) != twin {
                        continue;
                    }
                    let state = self.state(other);
                    let twin_ready = state & READY != 0 && state & DONE == 0;
                    let twin_claimed = state & READY == 0;
                    if twin_ready || (twin_claimed && other < slot) {
                        self.back_out(slot);
                        continue 'scan;
                    }
                    if twin_claimed {
                        // A higher twin: it backs out (it sees us) or turns READY; either way
                        // this resolves in a few of its steps.
                        if matches!(self.await_claim(other, twin), Some(s) if s & DONE == 0) {
                            self.back_out(slot);
                            continue 'scan;
                        }
                    }
                }
                if self.overflow(bucket).load(Ordering::SeqCst) == 0 {
                    break;
                }
            }
            return Claim::Claimed(slot);
        }
    }

    /// Starts loading a slot's other fields for writing: a new entry's slot is a cache miss
    /// in a large table, and its fields are written a few steps later (`set_times`,
    /// `write_payload`); so is a due timer's slot, which the reaper is about to complete.
    #[inline]
    pub(crate) fn prefetch_slot(&self, slot: usize) {
        let first = std::ptr::from_ref(&self.slots[slot]).cast::<u8>();
        // A slot may straddle two lines.
        prefetch::<true>(first);
        prefetch::<true>(first.wrapping_add(std::mem::size_of::<Slot<T>>() - 1));
    }

    /// Starts loading a bucket's two lines: its keys, and its values and states.
    #[inline]
    fn prefetch_bucket<const WRITE: bool>(&self, bucket: usize) {
        let first = std::ptr::from_ref(&self.table[bucket]).cast::<u8>();
        prefetch::<WRITE>(first);
        prefetch::<WRITE>(first.wrapping_add(std::mem::size_of::<Bucket>() - 1));
    }

    /// Starts loading the root's home bucket (its keys, values and states: two lines), so
    /// that the miss overlaps the caller's clock read and pin rather than following them.
    /// `WRITE` when the caller will likely claim a slot there (init), so the lines come
    /// ready for the CAS.
    #[inline]
    pub(crate) fn prefetch_home<const WRITE: bool>(&self, h: Hashed) {
        self.prefetch_bucket::<WRITE>(h.bucket);
    }

    /// Waits while `slot` is CLAIMED with key word `stored`; returns its state once READY, or
    /// `None` if the claim was backed out (or the slot now holds another key).
    ///
    /// The caller read the key before this reads the state, and the slot may have been freed
    /// and taken by another root in between: an operation that pinned after the slot was
    /// retired is not covered by the grace period, so it can read the old occupant's key
    /// and then the new occupant's state. Reading the key again after the state closes that
    /// gap: `free` clears the state before the key and a claimer writes the key before the
    /// state, so a state written for a new occupant comes with that occupant's key. (Found
    /// by the slot-reuse loom model.)
    fn await_claim(&self, slot: usize, stored: u64) -> Option<u32> {
        let mut spins = 0u32;
        loop {
            let state = self.state(slot);
            if state & READY != 0 {
                return (self.key(slot) == stored).then_some(state);
            }
            if self.key(slot) != stored {
                return None;
            }
            spins += 1;
            // Under loom every spin must yield, or the checker explores the loop forever.
            if spins < 64 && !cfg!(loom) {
                std::hint::spin_loop();
            } else {
                crate::sync::thread::yield_now();
            }
        }
    }

    /// Gives back a CLAIMED slot nobody else has used (they wait for READY).
    pub(crate) fn back_out(&self, slot: usize) {
        self.release_key(slot);
    }

    /// Empties a slot's key word, then lowers the overflow counts its root raised: a search
    /// that still walks past here meets an empty or newer key, which it skips.
    fn release_key(&self, slot: usize) {
        let key = self.key(slot);
        let home = self.home_of(slot, key);
        self.key_word(slot).store(0, Ordering::SeqCst);
        self.count_overflow(home, distance(key), u64::MAX);
    }

    /// Makes a CLAIMED slot live, with `flags` (READY is added) set.
    pub(crate) fn publish(&self, slot: usize, flags: u32) {
        // An RMW rather than a store: acks that find the CLAIMED slot wait on this word.
        self.set_flags(slot, READY | flags);
    }

    /// Writes a CLAIMED slot's times. Only the claimer calls this, before `publish`.
    pub(crate) fn set_times(&self, slot: usize, start: u64, timeout: u64) {
        // Relaxed: published by the inbox push and by `publish` (both SeqCst, after these);
        // every reader (finder, completer, reaper) acquires the state or the push first.
        self.slots[slot].start.store(start, Ordering::Relaxed);
        self.slots[slot].base.store(start, Ordering::Relaxed);
        self.slots[slot].timeout.store(timeout, Ordering::Relaxed);
    }

    /// Sets a CLAIMED slot's value. Only the claimer calls this, before `publish`.
    pub(crate) fn set_value(&self, slot: usize, value: u64) {
        // Relaxed: published by `publish`'s SeqCst RMW on the state, which every ack
        // acquires (it waits for READY) before its `fetch_xor`. The slot's last `free` stored
        // 0 before releasing the key our claim CAS acquired, so this store comes after it.
        self.xor_word(slot).store(value, Ordering::Relaxed);
    }

    /// XORs into the slot's value; returns the value after.
    #[inline]
    pub(crate) fn xor(&self, slot: usize, xor: u64) -> u64 {
        self.xor_word(slot).fetch_xor(xor, Ordering::SeqCst) ^ xor
    }

    /// The value, read with a read-modify-write (`fetch_or(0)`), not a load.
    ///
    /// Init reads the value after publishing INIT, while the last ack XORs the value and then
    /// reads the state: each side writes one word and reads the other. Reading with an RMW
    /// puts init's read in the value's modification order with every ack's `fetch_xor`: if
    /// it comes first, the ack's `fetch_xor` reads from it and so sees INIT; if it comes
    /// later, it sees the ack. This holds with acquire/release alone, so it does not rest on
    /// SeqCst's store-load ordering (which loom does not model).
    pub(crate) fn value(&self, slot: usize) -> u64 {
        self.xor_word(slot).fetch_or(0, Ordering::SeqCst)
    }

    /// The state, read with an RMW for the same reason as [`value`](Self::value): a scan
    /// that must see every INIT published before it (shutdown's) writes a flag then reads
    /// states, while init publishes INIT then reads that flag.
    pub(crate) fn state_rmw(&self, slot: usize) -> u32 {
        self.set_flags(slot, 0)
    }

    pub(crate) fn state(&self, slot: usize) -> u32 {
        u32::from(self.state_word(slot).load(Ordering::SeqCst))
    }

    /// Sets `flags`; returns the state before.
    pub(crate) fn set_flags(&self, slot: usize, flags: u32) -> u32 {
        // The flags fit a byte (asserted with their definitions).
        u32::from(
            self.state_word(slot)
                .fetch_or(flags as u8, Ordering::SeqCst),
        )
    }

    /// Sets `add` if the state is still `expected`; the state before on failure.
    pub(crate) fn transition(&self, slot: usize, expected: u32, add: u32) -> Result<u32, u32> {
        self.state_word(slot)
            .compare_exchange(
                expected as u8,
                (expected | add) as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .map(u32::from)
            .map_err(u32::from)
    }

    /// Claims the right to write the payload: sets INITING unless an init came first.
    /// `Err(state)` when INIT/INITING was already set or the slot is DONE.
    pub(crate) fn claim_init(&self, slot: usize) -> Result<u32, u32> {
        let mut state = self.state(slot);
        loop {
            if state & (INIT | INITING | DONE) != 0 {
                return Err(state);
            }
            match self.transition(slot, state, INITING) {
                Ok(before) => return Ok(before | INITING),
                Err(now) => state = now,
            }
        }
    }

    /// Writes the payload. Only the thread whose `claim_init` succeeded calls this, once.
    pub(crate) fn write_payload(&self, slot: usize, payload: T) {
        let payload_cell = &self.slots[slot].payload;
        // Safety: INITING gives this thread exclusive write access to the cell (module docs);
        // nobody reads it before INIT, which the caller sets after this returns.
        payload_cell.with_mut(|cell| unsafe { (*cell).write(payload) });
    }

    /// Moves the payload out. Only the thread that set DONE on a slot with INIT calls this.
    pub(crate) fn take_payload(&self, slot: usize) -> T {
        let payload_cell = &self.slots[slot].payload;
        // Safety: INIT (observed by the caller's SeqCst CAS that set DONE) means the payload
        // was written and published; DONE makes the caller its only reader, once.
        payload_cell.with(|cell| unsafe { (*cell).assume_init_read() })
    }

    /// When the tree is due: its base plus its timeout.
    pub(crate) fn deadline(&self, slot: usize) -> u64 {
        let base = self.slots[slot].base.load(Ordering::SeqCst);
        base.wrapping_add(self.timeout(slot))
    }

    /// Moves the base to `now` unless it is already later (two racing resets leave the
    /// later one's time, whichever stores last).
    pub(crate) fn reset_base(&self, slot: usize, now: u64) {
        let base = &self.slots[slot].base;
        let mut current = base.load(Ordering::SeqCst);
        // `is_due(now, current)`: the base is already at or after `now`.
        while !is_due(now, current) {
            match base.compare_exchange(current, now, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return,
                Err(moved) => current = moved,
            }
        }
    }

    /// Marks a reset of the base (after [`reset_base`](Self::reset_base)); returns the
    /// state before. One RMW, so that it is ordered against the reaper's DONE CAS: a reset
    /// before that CAS makes it fail, a reset after it finds DONE.
    pub(crate) fn mark_reset(&self, slot: usize) -> u32 {
        self.set_flags(slot, RESET)
    }

    /// For the reaper, before it reads the deadline: clears RESET if the state is still
    /// `expected`. `Ok(state after)`, or `Err(state)` when the state moved.
    pub(crate) fn clear_reset(&self, slot: usize, expected: u32) -> Result<u32, u32> {
        self.state_word(slot)
            .compare_exchange(
                expected as u8,
                (expected & !RESET) as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .map(|_| expected & !RESET)
            .map_err(u32::from)
    }

    pub(crate) fn start(&self, slot: usize) -> u64 {
        self.slots[slot].start.load(Ordering::SeqCst)
    }

    pub(crate) fn timeout(&self, slot: usize) -> u64 {
        self.slots[slot].timeout.load(Ordering::SeqCst)
    }

    pub(crate) fn set_timeout(&self, slot: usize, timeout: u64) {
        self.slots[slot].timeout.store(timeout, Ordering::SeqCst);
    }

    /// Claims completion: sets DONE on a slot whose state is still `expected`. `Err(state)`
    /// when the state moved. The caller then owns the payload (if INIT) and must retire the
    /// slot.
    pub(crate) fn claim_done(&self, slot: usize, expected: u32) -> Result<(), u32> {
        self.transition(slot, expected, DONE).map(|_| ())
    }

    /// Starts loading, for writing, the lines the reaper reads and writes to time a tree
    /// out: its bucket's (the key names the root; the state takes DONE) and its slot's
    /// (times and payload).
    #[inline]
    pub(crate) fn prefetch_entry(&self, slot: usize) {
        self.prefetch_bucket::<true>(slot / SLOTS_PER_BUCKET);
        self.prefetch_slot(slot);
    }

    /// Starts loading, for writing, the lines [`free`](Self::free) writes: the slot's
    /// bucket (key, XOR and state; not the slot's other fields, which the next claimer
    /// writes).
    #[inline]
    pub(crate) fn prefetch_for_free(&self, slot: usize) {
        self.prefetch_bucket::<true>(slot / SLOTS_PER_BUCKET);
    }

    /// Returns a DONE slot to EMPTY. Only after a grace period: no thread may still hold the
    /// slot from a lookup.
    pub(crate) fn free(&self, slot: usize) {
        debug_assert!(self.state(slot) & DONE != 0, "freeing a live slot");
        // Release, not SeqCst: what publishes these is the key's SeqCst store below, which
        // a claimer's CAS acquires, so the claimer and whoever finds its key see them. A
        // reader that found the old key may see them early: a 0 state is not READY, so it
        // waits on the key and leaves (`await_claim`), as it could between SeqCst stores.
        self.xor_word(slot).store(0, Ordering::Release);
        self.state_word(slot).store(0, Ordering::Release);
        // Last the key (and the counts). A claimer's CAS on it then sees the clean fields above.
        self.release_key(slot);
    }
}

impl<T> Drop for Ledger<T> {
    fn drop(&mut self) {
        for slot in 0..self.capacity() {
            let state = self.state(slot);
            if state & INIT != 0 && state & DONE == 0 {
                let payload_cell = &self.slots[slot].payload;
                // Safety: INIT without DONE: the payload is written and was never taken;
                // `&mut self` means no other thread can touch it.
                payload_cell.with_mut(|cell| unsafe { (*cell).assume_init_drop() });
            }
        }
    }
}

impl<T> std::fmt::Debug for Ledger<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn mix_is_a_bijection_and_hash_round_trips() {
        assert_eq!(MIX.wrapping_mul(MIX_INVERSE), 1);
        for layout in [
            HashLayout::new(0, 1),
            HashLayout::new(0, 3),
            HashLayout::new(3, 10),
            HashLayout::new(3, 1000),
            HashLayout::new(16, 11_000),
            HashLayout::new(1, 5),
            HashLayout::new(0, 1 << 20),
            HashLayout::new(7, 123_457),
        ] {
            assert!(layout.buckets >= 2);
            // Room for the distance above every stored key.
            assert!(layout.shard_bits + layout.implied_bits > DISTANCE_BITS);
            for root in [
                0,
                1,
                2,
                42,
                u64::MAX,
                u64::MAX - 1,
                1 << 63,
                0xdead_beef_cafe_f00d,
            ] {
                let h = layout.hash(root);
                assert_ne!(h.stored, 0);
                assert!(h.shard < 1 << layout.shard_bits && h.bucket < layout.buckets);
                assert_eq!(layout.root(h), root, "{layout:?}");
            }
        }
    }

    #[test]
    fn claim_find_and_free() {
        let layout = HashLayout::new(0, 2);
        let ledger: Ledger<u32> = Ledger::new(layout.buckets());
        let h = layout.hash(7);
        assert_eq!(ledger.find(h), None);
        let Claim::Claimed(slot) = ledger.find_or_claim(h) else {
            panic!("no claim")
        };
        ledger.set_times(slot, 1, 3);
        assert_eq!(ledger.deadline(slot), 4);
        ledger.publish(slot, 0);
        assert_eq!(ledger.find(h), Some(slot));
        assert_eq!(ledger.find_or_claim(h), Claim::Found(slot));
        assert_eq!(ledger.xor(slot, 5), 5);
        assert_eq!(ledger.xor(slot, 5), 0);
        let state = ledger.state(slot);
        assert!(ledger.transition(slot, state, DONE).is_ok());
        assert_eq!(ledger.find(h), None, "a DONE slot is a tombstone");
        ledger.free(slot);
        assert_eq!(ledger.state(slot), 0);
        assert_eq!(ledger.key(slot), 0);
    }

    /// Claims `root` as a new live entry (times and flags do not matter here).
    fn open(ledger: &Ledger<u32>, h: Hashed) -> usize {
        let Claim::Claimed(slot) = ledger.find_or_claim(h) else {
            panic!("no new claim for {h:?}")
        };
        ledger.publish(slot, 0);
        slot
    }

    fn complete_and_free(ledger: &Ledger<u32>, slot: usize) {
        let state = ledger.state(slot);
        assert!(ledger.transition(slot, state, DONE).is_ok());
        ledger.free(slot);
    }

    fn overflow_counts(ledger: &Ledger<u32>) -> Vec<u64> {
        (0..ledger.buckets)
            .map(|b| ledger.overflow(b).load(Ordering::SeqCst))
            .collect()
    }

    #[test]
    fn a_full_bucket_overflows_into_the_next_and_a_full_probe_reports_full() {
        let layout = HashLayout::new(0, 2);
        let ledger: Ledger<u32> = Ledger::new(layout.buckets());
        let s = SLOTS_PER_BUCKET;
        // Home is the last bucket, so overflow wraps round to bucket 0.
        let home = layout.buckets() - 1;
        let window = ledger.max_probe + 1;
        let roots: Vec<u64> = (0..)
            .filter(|r| layout.hash(*r).bucket == home)
            .take(window * s + 1)
            .collect();
        let slots: Vec<usize> = roots[..window * s]
            .iter()
            .map(|r| open(&ledger, layout.hash(*r)))
            .collect();
        for (i, (&root, &slot)) in roots.iter().zip(&slots).enumerate() {
            assert_eq!(slot / s, ledger.probe(home, i / s), "root {root}");
            let (bucket, stored) = ledger.placed(slot);
            assert_eq!(bucket, home, "root {root}");
            assert_eq!(ledger.find(layout.hash(root)), Some(slot), "root {root}");
            let h = Hashed {
                shard: 0,
                bucket,
                stored,
            };
            assert_eq!(layout.root(h), root);
        }
        let mut expected = vec![0; ledger.buckets];
        for step in 0..window - 1 {
            expected[ledger.probe(home, step)] = ((window - 1 - step) * s) as u64;
        }
        assert_eq!(overflow_counts(&ledger), expected);
        let last = layout.hash(roots[window * s]);
        assert_eq!(ledger.find_or_claim(last), Claim::Full);
        assert_eq!(ledger.find(last), None);
        // Free one slot of the home bucket: a new root takes it, at distance 0.
        complete_and_free(&ledger, slots[3]);
        let slot = open(&ledger, last);
        assert_eq!(slot, slots[3]);
        assert_eq!(ledger.placed(slot).0, home);
        // Freeing the overflowed entries brings every count back to zero, and a backed-out
        // overflow claim leaves them there.
        for &slot in &slots[s..] {
            complete_and_free(&ledger, slot);
        }
        assert!(overflow_counts(&ledger).iter().all(|c| *c == 0));
        complete_and_free(&ledger, slots[4]);
        let Claim::Claimed(slot) = ledger.find_or_claim(layout.hash(roots[4])) else {
            panic!("no claim")
        };
        assert_eq!(slot, slots[4]);
        let extra = (0..).find(|r| layout.hash(*r).bucket == home && !roots.contains(r));
        let Claim::Claimed(far) = ledger.find_or_claim(layout.hash(extra.unwrap())) else {
            panic!("no claim")
        };
        assert_eq!(far / s, ledger.probe(home, 1));
        assert_eq!(overflow_counts(&ledger)[home], 1);
        ledger.back_out(far);
        ledger.back_out(slot);
        assert!(overflow_counts(&ledger).iter().all(|c| *c == 0));
        assert_eq!(ledger.key(far), 0);
    }

    /// Two roots of one shard with the same stored key have homes `k` buckets apart (found
    /// in review): with the home run full, the first lands in the second's home bucket. Each
    /// must still find only its own entry.
    #[test]
    fn roots_sharing_a_stored_key_stay_apart_across_homes() {
        let layout = HashLayout::new(0, 40);
        let ledger: Ledger<u32> = Ledger::new(layout.buckets());
        let k = layout.buckets >> layout.implied_bits;
        assert!(
            k <= ledger.max_probe,
            "the homes are within one probe window"
        );
        let low_bits = 64 - layout.shard_bits - layout.implied_bits;
        let r1 = (0..)
            .find(|r| layout.hash(*r).bucket + k < layout.buckets)
            .unwrap();
        let h1 = layout.hash(r1);
        let r2 = HashLayout::unmix(HashLayout::mix(r1).wrapping_add(1 << low_bits));
        let h2 = layout.hash(r2);
        assert_eq!((h1.stored, h2.bucket), (h2.stored, h1.bucket + k));
        // Fill r1's home and the k - 1 buckets after it, so r1 lands in r2's home.
        let mut filler = 1u64 << 40;
        for d in 0..k {
            let mut placed = 0;
            while placed < SLOTS_PER_BUCKET {
                filler += 1;
                let h = layout.hash(filler);
                if h.bucket == h1.bucket + d {
                    open(&ledger, h);
                    placed += 1;
                }
            }
        }
        let s1 = open(&ledger, h1);
        assert_eq!(s1 / SLOTS_PER_BUCKET, h2.bucket);
        assert_eq!(ledger.find(h2), None, "r2 is absent");
        let s2 = open(&ledger, h2);
        assert_ne!(s1, s2);
        assert_eq!(ledger.find(h1), Some(s1));
        assert_eq!(ledger.find(h2), Some(s2));
        for (slot, root) in [(s1, r1), (s2, r2)] {
            let (bucket, stored) = ledger.placed(slot);
            let h = Hashed {
                shard: 0,
                bucket,
                stored,
            };
            assert_eq!(layout.root(h), root);
        }
    }

    /// Random opens and frees on a crowded table against a set: every live root is found
    /// where it was put, no absent root is found, and the overflow counts always equal the
    /// number of live roots that passed each bucket.
    #[test]
    fn probing_matches_a_reference_set() {
        let layout = HashLayout::new(0, 8);
        let ledger: Ledger<u32> = Ledger::new(layout.buckets());
        let capacity = ledger.capacity();
        let mut live: std::collections::HashMap<u64, usize> = Default::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let steps = if cfg!(miri) { 300 } else { 20_000 };
        for _ in 0..steps {
            let root = next() % (2 * capacity as u64);
            let h = layout.hash(root);
            match live.get(&root) {
                Some(&slot) => {
                    assert_eq!(ledger.find(h), Some(slot));
                    if next() % 2 == 0 {
                        complete_and_free(&ledger, slot);
                        live.remove(&root);
                        assert_eq!(ledger.find(h), None);
                    } else {
                        assert_eq!(ledger.find_or_claim(h), Claim::Found(slot));
                    }
                }
                None => {
                    assert_eq!(ledger.find(h), None);
                    match ledger.find_or_claim(h) {
                        Claim::Claimed(slot) => {
                            ledger.publish(slot, 0);
                            live.insert(root, slot);
                        }
                        Claim::Full => {
                            // Only when every bucket it may use is full.
                            for d in 0..=ledger.max_probe {
                                let b = ledger.probe(h.bucket, d);
                                assert!(Ledger::<u32>::bucket_slots(b).all(|s| ledger.key(s) != 0));
                            }
                        }
                        Claim::Found(slot) => panic!("found absent root {root} at {slot}"),
                    }
                }
            }
            let mut expected = vec![0u64; ledger.buckets];
            for &slot in live.values() {
                let home = ledger.placed(slot).0;
                let d = (slot / SLOTS_PER_BUCKET + ledger.buckets - home) % ledger.buckets;
                for step in 0..d {
                    expected[ledger.probe(home, step)] += 1;
                }
            }
            assert_eq!(overflow_counts(&ledger), expected);
        }
        assert!(live.len() > capacity / 2, "the table never got crowded");
    }

    #[test]
    fn concurrent_claims_of_one_root_leave_one_slot() {
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        let layout = HashLayout::new(0, 2);
        for round in 0..rounds {
            let ledger: Ledger<u32> = Ledger::new(layout.buckets());
            let h = layout.hash(round);
            let slots: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..3)
                    .map(|_| {
                        s.spawn(|| match ledger.find_or_claim(h) {
                            Claim::Claimed(slot) => {
                                ledger.publish(slot, 0);
                                slot
                            }
                            Claim::Found(slot) => slot,
                            Claim::Full => panic!("full"),
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(
                slots.iter().all(|s| *s == slots[0]),
                "round {round}: {slots:?}"
            );
        }
    }
}
