//! One shard's ledger: a fixed-size, lock-free hash table of `root -> tree` slots.
//!
//! ## Layout
//!
//! Keys apart, the rest together: slot `i`'s key is at index `i` of a key array, so the keys
//! of one bucket ([`BUCKET_WIDTH`] slots) are contiguous and a probe reads one or two cache
//! lines; its XOR value, state, times, list link and payload sit together in one `Slot`, so
//! the operation on the slot it found touches one or two more. A root hashes (see [`Hashed`]) to a shard, a bucket
//! and a *stored key*: the hash bits not implied by the shard and bucket, shifted left with
//! the low bit set, so a stored key is never 0 and `0` means EMPTY. The key word is then
//! the slot's claim: one CAS `0 -> stored` takes an empty slot for a root, whatever the
//! root's value (0 and `u64::MAX` included).
//!
//! ## A slot's life
//!
//! ```text
//!  EMPTY --CAS key--> CLAIMED --set READY--> READY --set DONE--> DONE --(grace)--> EMPTY
//!                        \--back out (duplicate claim)--> EMPTY
//! ```
//!
//! * **CLAIMED**: the claimer owns the slot's fields and writes start, deadline and timeout.
//!   Anyone else who finds the key waits for READY (this happens only when two threads
//!   create the same root at the same instant).
//! * **READY**: live. Acks `fetch_xor` the value; `INIT`, `FAILED`, `INITING` and `INBOX`
//!   are flags in the state word beside READY and DONE.
//! * **DONE**: completion was claimed by one CAS that set DONE; exactly one thread does it,
//!   and only that thread reads the payload. The slot is a tombstone: lookups skip it.
//! * back to **EMPTY** only through [`Ledger::free`], which the reaper defers with
//!   crossbeam-epoch until every thread pinned when the slot was retired has unpinned. So
//!   no operation that found the slot can see it reused: a late ack never XORs into a newer
//!   tree, and the bucket does not change under a claimer's scan.
//!
//! ## One slot per root
//!
//! A claimer scans the whole bucket for the key first, then CASes the first EMPTY slot.
//! Two claimers of the same root can still both win a CAS (on different slots), when a
//! free ran between their scans. After its CAS a claimer therefore scans again (every
//! access SeqCst, so of two claimers at least one sees the other) and resolves:
//! a READY twin, or a CLAIMED twin at a lower index, makes it back out; a CLAIMED twin at a
//! higher index it waits out (it will back out or become READY, and then we back out).
//! Waits only go from lower to higher index, so they cannot form a cycle.
//!
//! ## Generations
//!
//! The state word's high bits count how often the slot was freed. The reaper's wheel holds
//! `(slot, generation)`, so a timer for a completed tree is recognised as stale even after
//! the slot holds another root.

use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::table::Table;

#[cfg(loom)]
use crate::sync::fence;
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// Slots per bucket: a root lives in one of the `BUCKET_WIDTH` slots of its bucket.
#[cfg(not(loom))]
pub(crate) const BUCKET_WIDTH: usize = 16;
/// Tiny under loom so models reach full buckets and reuse in a few steps.
#[cfg(loom)]
pub(crate) const BUCKET_WIDTH: usize = 2;

/// End of an intrusive list (inbox, retired).
pub(crate) const NIL: u32 = u32::MAX;

// The state word: flags in the low byte, the generation above.
/// The claimer has written start, deadline and timeout: the slot is live.
pub(crate) const READY: u32 = 1 << 0;
/// Init's payload is written and visible.
pub(crate) const INIT: u32 = 1 << 1;
/// An init has claimed the payload cell and is writing it.
pub(crate) const INITING: u32 = 1 << 2;
/// A fail arrived.
pub(crate) const FAILED: u32 = 1 << 3;
/// Completion has been claimed; the slot is a tombstone.
pub(crate) const DONE: u32 = 1 << 4;
/// The slot is on the inbox list (its link is in use).
pub(crate) const INBOX: u32 = 1 << 5;
/// A DONE slot has been handed to retirement (by its completer or by the inbox drain).
pub(crate) const RETIRED: u32 = 1 << 6;
const GENERATION_SHIFT: u32 = 8;

/// The generation part of a state word.
#[inline]
pub(crate) fn generation(state: u32) -> u32 {
    state >> GENERATION_SHIFT
}

/// Where a root lives: its shard, its bucket in that shard, and its stored key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hashed {
    pub(crate) shard: usize,
    pub(crate) bucket: usize,
    pub(crate) stored: u64,
}

/// The bit layout of the hash: `shard_bits` top bits pick the shard, the next
/// `bucket_bits` the bucket, the rest (shifted, low bit set) is the stored key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HashLayout {
    pub(crate) shard_bits: u32,
    pub(crate) bucket_bits: u32,
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
        let (sb, bb) = (self.shard_bits, self.bucket_bits);
        let shard = m.checked_shr(64 - sb).unwrap_or(0) as usize;
        let rest = m.checked_shl(sb).unwrap_or(0);
        let bucket = rest.checked_shr(64 - bb).unwrap_or(0) as usize;
        // The low 64 - sb - bb bits of m; sb + bb >= 1, so shifting in the tag bit loses nothing.
        let low = m & (u64::MAX >> (sb + bb));
        Hashed {
            shard,
            bucket,
            stored: (low << 1) | 1,
        }
    }

    /// The root whose hash is `h`.
    pub(crate) fn root(&self, h: Hashed) -> u64 {
        let (sb, bb) = (self.shard_bits, self.bucket_bits);
        let m = (h.shard as u64).checked_shl(64 - sb).unwrap_or(0)
            | (h.bucket as u64).checked_shl(64 - sb - bb).unwrap_or(0)
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
    /// the slot's fields.
    Claimed(usize),
    /// Every slot of the bucket is taken.
    Full,
}

/// A slot's fields other than its key.
struct Slot<T> {
    /// The XOR value.
    xor: AtomicU64,
    /// When the tree is due, as the clock reads (reaper compares; writers store).
    deadline: AtomicU64,
    /// First message seen, for `Completion::elapsed`.
    start: AtomicU64,
    /// The tree's timeout in ns, for `reset_timeout`.
    timeout: AtomicU64,
    /// Flags and generation (module docs).
    state: AtomicU32,
    /// Next slot on the inbox or retired list.
    link: AtomicU32,
    payload: UnsafeCell<MaybeUninit<T>>,
}

/// One shard's table. See the module docs for the protocol.
pub(crate) struct Ledger<T> {
    /// The stored keys, apart from the rest so that a bucket's keys share one or two cache
    /// lines and a probe reads only those.
    keys: Table<AtomicU64>,
    /// Everything else about a slot, together, so that an operation on a found slot touches
    /// one or two more cache lines rather than one per field.
    slots: Table<Slot<T>>,
    /// Slots whose deadline the reaper must (re)schedule.
    /// A counted list like `retired`.
    inbox: CachePadded<AtomicU64>,
    /// Completed slots waiting for the reaper to retire them: the list's head slot in the
    /// low 32 bits, its length in the high 32 (so a push learns the length for free).
    retired: CachePadded<AtomicU64>,
}

// Safety: the payload cells are the only non-Sync part. A cell is written by the one thread
// that set INITING on its slot and read (moved out) by the one thread that set DONE after
// INIT was published, or by `Drop` with exclusive access. `T: Send` because payloads move
// between threads; no `&T` is ever shared, so `T: Sync` is not needed.
unsafe impl<T: Send> Sync for Ledger<T> {}
// Safety: as above; the ledger owns its payloads.
unsafe impl<T: Send> Send for Ledger<T> {}

impl<T> Ledger<T> {
    /// A ledger of `buckets * BUCKET_WIDTH` empty slots.
    pub(crate) fn new(buckets: usize) -> Self {
        let n = buckets * BUCKET_WIDTH;
        Ledger {
            keys: Table::new(n, |_| AtomicU64::new(0)),
            slots: Table::new(n, |_| Slot {
                xor: AtomicU64::new(0),
                deadline: AtomicU64::new(0),
                start: AtomicU64::new(0),
                timeout: AtomicU64::new(0),
                state: AtomicU32::new(0),
                link: AtomicU32::new(NIL),
                payload: UnsafeCell::new(MaybeUninit::uninit()),
            }),
            inbox: CachePadded::new(AtomicU64::new(NIL as u64)),
            retired: CachePadded::new(AtomicU64::new(NIL as u64)),
        }
    }

    /// Slots in the table.
    pub(crate) fn capacity(&self) -> usize {
        self.keys.len()
    }

    #[inline]
    fn bucket_range(bucket: usize) -> std::ops::Range<usize> {
        bucket * BUCKET_WIDTH..(bucket + 1) * BUCKET_WIDTH
    }

    /// The stored key of a slot (0 when empty).
    pub(crate) fn key(&self, slot: usize) -> u64 {
        self.keys[slot].load(Ordering::SeqCst)
    }

    /// The root's live (READY, not DONE) slot, if any. Waits out a CLAIMED one.
    #[inline]
    pub(crate) fn find(&self, h: Hashed) -> Option<usize> {
        for slot in Self::bucket_range(h.bucket) {
            if self.keys[slot].load(Ordering::SeqCst) != h.stored {
                continue;
            }
            match self.await_claim(slot, h.stored) {
                Some(state) if state & DONE == 0 => return Some(slot),
                _ => continue,
            }
        }
        None
    }

    /// The root's live slot, or a newly CLAIMED one, or `Full`.
    pub(crate) fn find_or_claim(&self, h: Hashed) -> Claim {
        'scan: loop {
            let mut first_empty = None;
            for slot in Self::bucket_range(h.bucket) {
                let key = self.keys[slot].load(Ordering::SeqCst);
                if key == h.stored {
                    match self.await_claim(slot, h.stored) {
                        Some(state) if state & DONE == 0 => return Claim::Found(slot),
                        _ => continue,
                    }
                }
                if key == 0 && first_empty.is_none() {
                    first_empty = Some(slot);
                }
            }
            let Some(slot) = first_empty else {
                return Claim::Full;
            };
            if self.keys[slot]
                .compare_exchange(0, h.stored, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // Someone took it first; it may be our root. Look again.
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
            for other in Self::bucket_range(h.bucket) {
                if other == slot || self.keys[other].load(Ordering::SeqCst) != h.stored {
                    continue;
                }
                let state = self.slots[other].state.load(Ordering::SeqCst);
                let twin_ready = state & READY != 0 && state & DONE == 0;
                let twin_claimed = state & READY == 0;
                if twin_ready || (twin_claimed && other < slot) {
                    self.back_out(slot);
                    continue 'scan;
                }
                if twin_claimed {
                    // A higher twin: it backs out (it sees us) or turns READY; either way
                    // this resolves in a few of its steps.
                    if matches!(self.await_claim(other, h.stored), Some(s) if s & DONE == 0) {
                        self.back_out(slot);
                        continue 'scan;
                    }
                }
            }
            return Claim::Claimed(slot);
        }
    }

    /// Waits while `slot` is CLAIMED for `stored`; returns its state once READY, or `None`
    /// if the claim was backed out (or the slot now holds another key).
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
            let state = self.slots[slot].state.load(Ordering::SeqCst);
            if state & READY != 0 {
                return (self.keys[slot].load(Ordering::SeqCst) == stored).then_some(state);
            }
            if self.keys[slot].load(Ordering::SeqCst) != stored {
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
        self.keys[slot].store(0, Ordering::SeqCst);
    }

    /// Makes a CLAIMED slot live, with `flags` (READY is added) set.
    pub(crate) fn publish(&self, slot: usize, flags: u32) {
        // fetch_or keeps the generation bits the last free left.
        self.slots[slot]
            .state
            .fetch_or(READY | flags, Ordering::SeqCst);
    }

    /// [`publish`](Self::publish) and [`push_inbox`](Self::push_inbox) in one state RMW: a
    /// fresh slot is on no list, so INBOX is set with READY and the push follows. Until the
    /// push lands, INBOX already tells a completer to leave retirement to the inbox drain,
    /// which will find the slot. Returns the inbox's length after the push.
    pub(crate) fn publish_queued(&self, slot: usize, flags: u32) -> u32 {
        self.publish(slot, INBOX | flags);
        Self::push(&self.inbox, &self.slots, slot)
    }

    /// Writes a CLAIMED slot's times. Only the claimer calls this, before `publish`.
    pub(crate) fn set_times(&self, slot: usize, start: u64, deadline: u64, timeout: u64) {
        // Relaxed: published by `publish`'s SeqCst RMW on the state; every reader (finder,
        // completer, reaper) acquires that state (or the inbox push after it) first.
        self.slots[slot].start.store(start, Ordering::Relaxed);
        self.slots[slot].deadline.store(deadline, Ordering::Relaxed);
        self.slots[slot].timeout.store(timeout, Ordering::Relaxed);
    }

    /// Sets a CLAIMED slot's value. Only the claimer calls this, before `publish`.
    pub(crate) fn set_value(&self, slot: usize, value: u64) {
        // Relaxed: published by `publish`'s SeqCst RMW on the state, which every ack
        // acquires (it waits for READY) before its `fetch_xor`. The slot's last `free` stored
        // 0 before releasing the key our claim CAS acquired, so this store comes after it.
        self.slots[slot].xor.store(value, Ordering::Relaxed);
    }

    /// XORs into the slot's value; returns the value after.
    #[inline]
    pub(crate) fn xor(&self, slot: usize, xor: u64) -> u64 {
        self.slots[slot].xor.fetch_xor(xor, Ordering::SeqCst) ^ xor
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
        self.slots[slot].xor.fetch_or(0, Ordering::SeqCst)
    }

    /// The state, read with an RMW for the same reason as [`value`](Self::value): a scan
    /// that must see every INIT published before it (shutdown's) writes a flag then reads
    /// states, while init publishes INIT then reads that flag.
    pub(crate) fn state_rmw(&self, slot: usize) -> u32 {
        self.slots[slot].state.fetch_or(0, Ordering::SeqCst)
    }

    pub(crate) fn state(&self, slot: usize) -> u32 {
        self.slots[slot].state.load(Ordering::SeqCst)
    }

    /// Sets `flags`; returns the state before.
    pub(crate) fn set_flags(&self, slot: usize, flags: u32) -> u32 {
        self.slots[slot].state.fetch_or(flags, Ordering::SeqCst)
    }

    /// Sets `add` if the state is still `expected`; the state before on failure.
    pub(crate) fn transition(&self, slot: usize, expected: u32, add: u32) -> Result<u32, u32> {
        self.slots[slot].state.compare_exchange(
            expected,
            expected | add,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
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

    pub(crate) fn deadline(&self, slot: usize) -> u64 {
        self.slots[slot].deadline.load(Ordering::SeqCst)
    }

    pub(crate) fn set_deadline(&self, slot: usize, deadline: u64) {
        self.slots[slot].deadline.store(deadline, Ordering::SeqCst);
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

    /// Puts a live slot on the inbox so the reaper (re)schedules it, unless it is already
    /// there or DONE. Returns the inbox's length after the push (0 if not pushed).
    pub(crate) fn push_inbox(&self, slot: usize) -> u32 {
        let mut state = self.state(slot);
        loop {
            if state & (INBOX | DONE) != 0 {
                return 0;
            }
            match self.transition(slot, state, INBOX) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        // INBOX set by us: the link is ours until the reaper drains the inbox.
        Self::push(&self.inbox, &self.slots, slot)
    }

    /// Claims completion: sets DONE on a slot whose state is still `expected`, and RETIRED in
    /// the same CAS when the slot is off the inbox. `Ok(true)`: the caller must put the slot
    /// on the retired list ([`push_retired`](Self::push_retired)); `Ok(false)`: it is on the
    /// inbox, whose drain will find it DONE and retire it. `Err(state)` when the state moved.
    ///
    /// DONE forbids setting INBOX again, so a slot retired here never goes back on the inbox.
    pub(crate) fn claim_done(&self, slot: usize, expected: u32) -> Result<bool, u32> {
        let retire = expected & INBOX == 0;
        let add = if retire { DONE | RETIRED } else { DONE };
        self.transition(slot, expected, add).map(|_| retire)
    }

    /// Puts a slot whose RETIRED this thread set on the retired list; returns the list's
    /// length after the push.
    pub(crate) fn push_retired(&self, slot: usize) -> u32 {
        Self::push(&self.retired, &self.slots, slot)
    }

    /// For the inbox drain, after taking a DONE slot off the inbox: sets RETIRED unless the
    /// completer already did ([`claim_done`](Self::claim_done) sets it when the slot was off
    /// the inbox). `true`: the caller retires the slot.
    pub(crate) fn claim_retire(&self, slot: usize) -> bool {
        let mut state = self.state(slot);
        loop {
            if state & (RETIRED | INBOX) != 0 || state & DONE == 0 {
                return false;
            }
            match self.transition(slot, state, RETIRED) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    /// Pushes `slot` on a counted Treiber list (head slot in the low 32 bits of the head
    /// word, length in the high 32); returns the length after the push.
    fn push(head: &AtomicU64, slots: &[Slot<T>], slot: usize) -> u32 {
        let mut word = head.load(Ordering::SeqCst);
        loop {
            let (first, len) = (word as u32, (word >> 32) as u32);
            // Relaxed: published by the SeqCst CAS below; the drain acquires the head first.
            slots[slot].link.store(first, Ordering::Relaxed);
            let len = len.saturating_add(1);
            let new = (u64::from(len) << 32) | slot as u64;
            match head.compare_exchange(word, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return len,
                Err(now) => word = now,
            }
        }
    }

    /// Takes the whole inbox; each slot's INBOX flag is cleared (and its link read) before
    /// the slot is handed out with its state.
    pub(crate) fn drain_inbox(&self, mut each: impl FnMut(usize, u32)) {
        let mut slot = self.inbox.swap(NIL as u64, Ordering::SeqCst) as u32;
        while slot != NIL {
            let next = self.slots[slot as usize].link.load(Ordering::SeqCst);
            let state = self.slots[slot as usize]
                .state
                .fetch_and(!INBOX, Ordering::SeqCst)
                & !INBOX;
            each(slot as usize, state);
            slot = next;
        }
    }

    /// `true` when the inbox holds something.
    ///
    /// An RMW, not a load: the reaper publishes its next wake time and then reads the inbox,
    /// while a writer pushes on the inbox and then reads the wake time. As an RMW the read
    /// is ordered with every push on the head word; a push after it reads from it and so
    /// sees the wake time stored before it (acquire/release suffices, no store-load order).
    pub(crate) fn inbox_pending(&self) -> bool {
        self.inbox.fetch_or(0, Ordering::SeqCst) as u32 != NIL
    }

    /// Takes the whole retired list.
    pub(crate) fn drain_retired(&self, out: &mut Vec<u32>) {
        let mut slot = self.retired.swap(NIL as u64, Ordering::SeqCst) as u32;
        while slot != NIL {
            out.push(slot);
            slot = self.slots[slot as usize].link.load(Ordering::SeqCst);
        }
    }

    /// Returns a DONE slot to EMPTY with the next generation. Only after a grace period:
    /// no thread may still hold the slot from a lookup.
    pub(crate) fn free(&self, slot: usize) {
        let state = self.state(slot);
        debug_assert!(state & DONE != 0, "freeing a live slot");
        self.slots[slot].xor.store(0, Ordering::SeqCst);
        self.slots[slot].link.store(NIL, Ordering::SeqCst);
        let next_generation = generation(state).wrapping_add(1) & (u32::MAX >> GENERATION_SHIFT);
        self.slots[slot]
            .state
            .store(next_generation << GENERATION_SHIFT, Ordering::SeqCst);
        // Last: the key. A claimer's CAS on it then sees the clean fields above.
        self.keys[slot].store(0, Ordering::SeqCst);
    }
}

impl<T> Drop for Ledger<T> {
    fn drop(&mut self) {
        for slot in 0..self.capacity() {
            let state = self.slots[slot].state.load(Ordering::SeqCst);
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
            HashLayout {
                shard_bits: 0,
                bucket_bits: 1,
            },
            HashLayout {
                shard_bits: 3,
                bucket_bits: 10,
            },
        ] {
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
                assert!(h.shard < 1 << layout.shard_bits && h.bucket < 1 << layout.bucket_bits);
                assert_eq!(layout.root(h), root, "{layout:?}");
            }
        }
    }

    #[test]
    fn claim_find_and_free_cycle_through_generations() {
        let ledger: Ledger<u32> = Ledger::new(2);
        let layout = HashLayout {
            shard_bits: 0,
            bucket_bits: 1,
        };
        let h = layout.hash(7);
        assert_eq!(ledger.find(h), None);
        let Claim::Claimed(slot) = ledger.find_or_claim(h) else {
            panic!("no claim")
        };
        ledger.set_times(slot, 1, 2, 3);
        ledger.publish(slot, 0);
        assert_eq!(ledger.find(h), Some(slot));
        assert_eq!(ledger.find_or_claim(h), Claim::Found(slot));
        assert_eq!(ledger.xor(slot, 5), 5);
        assert_eq!(ledger.xor(slot, 5), 0);
        let state = ledger.state(slot);
        assert!(ledger.transition(slot, state, DONE).is_ok());
        assert_eq!(ledger.find(h), None, "a DONE slot is a tombstone");
        ledger.free(slot);
        assert_eq!(generation(ledger.state(slot)), 1);
        assert_eq!(ledger.key(slot), 0);
    }

    #[test]
    fn a_full_bucket_reports_full() {
        let ledger: Ledger<u32> = Ledger::new(1);
        let layout = HashLayout {
            shard_bits: 0,
            bucket_bits: 1,
        };
        // With one bucket in the table, every root maps to bucket 0 or 1; use a table of
        // one bucket by picking roots that land in bucket 0.
        let roots: Vec<u64> = (0..)
            .filter(|r| layout.hash(*r).bucket == 0)
            .take(BUCKET_WIDTH + 1)
            .collect();
        for r in &roots[..BUCKET_WIDTH] {
            assert!(matches!(
                ledger.find_or_claim(layout.hash(*r)),
                Claim::Claimed(_)
            ));
        }
        assert_eq!(
            ledger.find_or_claim(layout.hash(roots[BUCKET_WIDTH])),
            Claim::Full
        );
    }

    #[test]
    fn concurrent_claims_of_one_root_leave_one_slot() {
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        let layout = HashLayout {
            shard_bits: 0,
            bucket_bits: 1,
        };
        for round in 0..rounds {
            let ledger: Ledger<u32> = Ledger::new(2);
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
