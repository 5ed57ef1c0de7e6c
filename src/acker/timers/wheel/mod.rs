//! The reaper's compact wheel: entries filed under a tick, collected once the tick is due.
//!
//! The reaper keeps small `Copy` entries (the Acker's: a group of slots,
//! [`groups`](crate::acker::timers::groups)) filed under the tick they are due at. Entries
//! are never cancelled: when one comes due the reaper re-checks it against the table and
//! drops or re-files it. So this wheel offers only `push` and `advance`, and holds entries
//! in plain `Vec`s — no node, link or handle per entry.
//!
//! ## Algorithm
//!
//! A hierarchical timing wheel (Kafka's, Caffeine's) of [`LEVELS`] levels of 64 buckets:
//! level `k`'s buckets span 64^k ticks, so its 64 buckets span one bucket of level `k + 1`.
//! An entry for tick `t` after the wheel's time `T` goes to the level of the highest
//! base-64 digit in which `t` and `T` differ, into the bucket of `t`'s digit there. The two
//! agree on every higher digit and `t > T`, so `t`'s digit is the larger: a bucket is
//! always *after* the one `T` is in. Ticks that differ from `T` at bit [`HORIZON_BITS`] or
//! above (2^36 ticks: 2.2 years of 1 ms ticks) wait in an unsorted *overflow* vector; ticks
//! at or before `T` wait in *ready* for the next `advance`.
//!
//! `advance(now)` repeatedly takes the earliest occupied bucket, found with one
//! `trailing_zeros` per level: every entry of level `k` lies inside `T`'s level-`k + 1`
//! bucket and every entry of level `k + 1` after it, so the first occupied bucket of the
//! lowest occupied level is the earliest. If that bucket starts after `now`, nothing more
//! is due and `T` becomes `now`. Otherwise `T` moves to `min(now, the bucket's last tick)`
//! and the bucket is emptied: due entries go out, the rest *cascade* into finer levels
//! (they share `T`'s digit at the bucket's level now, so they land lower). The overflow is
//! taken the same way, as one bucket spanning the 2^36-tick span of its earliest tick.
//! Every step moves at least one entry and no step visits an empty bucket, so a jump over
//! any idle gap costs the entries moved, not the ticks passed, and an entry moves at most
//! once per level (the overflow excepted, see below).
//!
//! ## Invariants
//!
//! * A level-`k` entry agrees with `T` on every digit above `k`, and its bucket's digit is
//!   greater than `T`'s digit `k`. The occupancy bitmap of each level is exact.
//! * Overflow entries lie in a later 2^36-tick span than `T`; `overflow_min` is their
//!   earliest tick.
//! * Ready entries are due at `T`; every other entry is after `T`. Each entry is in exactly
//!   one place, so it comes out exactly once, and never before its tick.
//!
//! ## Memory
//!
//! An entry in a bucket of level 1 or above needs its tick's offset from the bucket's start
//! (a level-`k` bucket spans 2^(6k) ticks) to cascade. An entry type lends the wheel
//! [`WheelEntry::SPARE_BITS`] bits of its own for that: in a level whose offsets fit (every
//! level for the Acker's group timers, whose 30 spare bits cover a level-5 bucket's 2^30
//! ticks), the offset rides in the entry; in coarser levels it is kept beside the entries
//! as a `u32`. A level-0 bucket holds one tick and stores no offsets. Entries come out of
//! the wheel with their spare bits zero, as they went in. Each bucket also keeps its least
//! offset, which makes [`CompactWheel::next_due`] exact at no per-entry cost.
//!
//! | what | bytes |
//! |---|---|
//! | an entry in level 0, or in a level its spare bits cover | `size_of::<E>()` |
//! | an entry in a coarser level | `size_of::<E>()` + 4 |
//! | an entry in the overflow | `size_of::<(u64, E)>()` |
//! | growth slack | up to 1.5× the above in buckets (they grow by half), 2× in the rest |
//! | the fixed bucket table | 384 buckets × 56 B = 21 KiB per wheel |
//!
//! An emptied bucket's vectors are freed (entries cascade to other buckets, never back into
//! the bucket being emptied), so a burst gives its memory back once it has come due.
//!
//! ## Limits
//!
//! The overflow is rescanned whole each time the wheel's time enters the span of its
//! earliest tick, so entries spread over many distinct 2^36-tick spans cost a scan per
//! span: quadratic in the worst case, but each scan needs 2^36 ticks of wheel time.
//!
//! ## Why not [`TimerWheel`](crate::TimerWheel)
//!
//! The crate's public wheel is built for timers that are cancelled and rescheduled: a slab
//! node per timer in doubly-linked bucket lists, a `u64` deadline and a generation for the
//! key it hands back (a `Node<u32>` is 24 B), and its slab keeps its nodes after a burst.
//! The reaper never cancels: it re-checks an entry against its group when the entry comes
//! due and drops or re-files it. So this wheel keeps 8-byte `Copy` entries in `Vec`s, with
//! the tick's offset in the entry's spare bits, and frees emptied buckets. By the stress
//! harness's memory phase at 1M pending (`stress acker --memory-roots 1000000`): 12.1 B a
//! root with the offsets beside the entries, 8.1 B with them inside, 4.9 B
//! with one entry per group of slots; a burst's run shows 4.5 B a tree at 1M and
//! 32.4 KiB once it completed (README, `burst plain`). A node per group would cost more
//! than the whole wheel does now.

use std::fmt;
use std::mem;

/// log2 of the buckets per level: 64, so a level's occupancy is one `u64` bitmap.
const BITS: u32 = 6;

/// Buckets per level.
const BUCKETS: usize = 1 << BITS;

/// Levels of buckets. Level `k` spans 64^(k+1) ticks, so six levels reach 2^36 ticks.
const LEVELS: usize = 6;

/// Ticks that differ from the wheel's time in this bit or a higher one go to the overflow.
const HORIZON_BITS: u32 = BITS * LEVELS as u32;

// An entry's offset within its bucket is below the bucket's span, 2^(6k), and is stored in
// a `u32`: the coarsest level's span must fit.
const _: () = assert!(BITS * (LEVELS as u32 - 1) <= u32::BITS);
// The overflow's span must be a valid shift of a tick.
const _: () = assert!(HORIZON_BITS < u64::BITS);

/// log2 of the span of one of `level`'s buckets, in ticks.
#[inline]
fn shift(level: usize) -> u32 {
    BITS * level as u32
}

/// The mask of the ticks within one bucket of `level`.
#[inline]
fn low_mask(level: usize) -> u64 {
    (1u64 << shift(level)) - 1
}

/// Pushes `x`, growing a full vector by half rather than doubling it: a bucket's slack is
/// then at most a third of its capacity (a half with `Vec`'s doubling), and pushes stay
/// amortized O(1).
fn push_compact<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 2).max(4));
    }
    v.push(x);
}

/// After a retain: gives back a vector's room when what it kept is under half of it (a
/// sweep after a burst may leave a bucket of a million entries' room holding a few, and
/// one after a table's growth a bucket of several generations' entries holding the last
/// one's), keeping a quarter again what it kept. Each shrink copies what is kept, at
/// most once per sweep, which is itself O(entries).
fn shrink_kept<T>(v: &mut Vec<T>) {
    if v.len() < v.capacity() / 2 {
        v.shrink_to(v.len() + v.len() / 4);
    }
}

/// What the wheel files: a `Copy` value that may lend the wheel some of its bits (module
/// docs, "Memory").
pub(crate) trait WheelEntry: Copy {
    /// How many bits the wheel may use (at most 32): an entry with a spare of 0 must take
    /// any value below `1 << SPARE_BITS` through [`with_spare`](Self::with_spare) and give
    /// it back through [`spare`](Self::spare) unchanged.
    const SPARE_BITS: u32;
    /// The spare bits' value.
    fn spare(self) -> u32;
    /// The same entry with its spare bits set to `bits`.
    fn with_spare(self, bits: u32) -> Self;
}

/// Whether `level`'s offsets ride in `E`'s spare bits (rather than beside the entries).
#[inline]
fn inline_offsets<E: WheelEntry>(level: usize) -> bool {
    shift(level) <= E::SPARE_BITS
}

/// One bucket: its entries and, for levels above 0 whose offsets do not fit in the entries'
/// spare bits, each entry's tick as an offset from the bucket's start, in the same order.
struct Bucket<E> {
    entries: Vec<E>,
    offsets: Vec<u32>,
    /// The least of `offsets` (0 on level 0); meaningless while the bucket is empty.
    min_offset: u32,
    /// Where a bounded advance goes on looking for due entries in a bucket too large to
    /// cascade ([`CompactWheel::advance_within`]): it looks below this index, and from the
    /// end again once past the start.
    cursor: u32,
}

impl<E> Default for Bucket<E> {
    fn default() -> Self {
        Bucket {
            entries: Vec::new(),
            offsets: Vec::new(),
            min_offset: 0,
            cursor: 0,
        }
    }
}

impl<E> Bucket<E> {
    fn heap_bytes(&self) -> usize {
        self.entries.capacity() * mem::size_of::<E>()
            + self.offsets.capacity() * mem::size_of::<u32>()
    }
}

/// Where the earliest entries wait: a level's bucket, or the overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Earliest {
    /// `level`'s bucket `bucket`, whose first tick is `start`.
    Bucket {
        level: usize,
        bucket: usize,
        start: u64,
    },
    /// The overflow, whose earliest entry's 2^36-tick span begins at `start`.
    Overflow { start: u64 },
}

/// A hierarchical wheel of `Vec` buckets: `push` an entry under a tick, `advance` to
/// collect every entry whose tick has come. Ticks are `u64` and the wheel's time only moves
/// forward.
pub(crate) struct CompactWheel<E: WheelEntry> {
    /// The wheel's time: every entry filed at a tick up to it has been returned, or waits
    /// in `ready`.
    time: u64,
    /// Per level, bit `b` set iff bucket `b` of that level is non-empty.
    occupied: [u64; LEVELS],
    /// Level `k`'s bucket `b` is `buckets[k * BUCKETS + b]`.
    buckets: Box<[Bucket<E>]>,
    /// Entries pushed at or before `time`, returned by the next `advance`.
    ready: Vec<E>,
    /// Entries 2^36 ticks or more ahead, with their full ticks.
    overflow: Vec<(u64, E)>,
    /// The earliest tick in `overflow`; meaningless while it is empty.
    overflow_min: u64,
    /// Entries filed and not yet returned.
    len: usize,
}

// === impl CompactWheel ===

impl<E: WheelEntry> CompactWheel<E> {
    /// An empty wheel whose time is `now`.
    pub(crate) fn new(now: u64) -> Self {
        CompactWheel {
            time: now,
            occupied: [0; LEVELS],
            buckets: (0..LEVELS * BUCKETS).map(|_| Bucket::default()).collect(),
            ready: Vec::new(),
            overflow: Vec::new(),
            overflow_min: 0,
            len: 0,
        }
    }

    /// Files `entry` (its spare bits zero) under `tick`. A tick <= the wheel's time comes
    /// out at the next `advance`.
    pub(crate) fn push(&mut self, tick: u64, entry: E) {
        debug_assert_eq!(entry.spare(), 0, "an entry's spare bits are the wheel's");
        self.len += 1;
        if tick <= self.time {
            self.ready.push(entry);
        } else {
            self.place(tick, entry);
        }
    }

    /// Moves the wheel's time to `now` (>= its time) and appends to `due` every entry filed
    /// under a tick <= now (each exactly once; order within is unspecified).
    pub(crate) fn advance(&mut self, now: u64, due: &mut Vec<E>) {
        debug_assert!(now >= self.time, "time went back: {now} < {}", self.time);
        let now = now.max(self.time);
        let before = due.len();
        // Taken rather than drained, so that a burst of late pushes does not keep its
        // capacity.
        due.extend_from_slice(&mem::take(&mut self.ready));
        while let Some(earliest) = self.earliest() {
            match earliest {
                Earliest::Bucket { start, .. } | Earliest::Overflow { start } if start > now => {
                    break
                }
                Earliest::Bucket {
                    level,
                    bucket,
                    start,
                } => self.empty_bucket(level, bucket, start, now, due),
                Earliest::Overflow { start } => self.refile_overflow(start, now, due),
            }
        }
        // Nothing left starts at or before `now`, so every level's occupied buckets are
        // after `now`'s digit there, and the overflow after `now`'s span: the invariants
        // hold for the new time.
        self.time = now;
        self.len -= due.len() - before;
    }

    /// [`advance`](Self::advance) that returns at most `most` entries, and cascades or
    /// refiles no bucket of more than `cascade` entries (moving at most `cascade` in all),
    /// for a caller that must not run long: `true` when it reached `now`. It takes the
    /// ready entries and level-0 buckets a part at a time (their entries are all due at one
    /// tick, so the rest may wait where they are); a coarser bucket within `cascade` is
    /// cascaded, the due entries past `most` it yields waiting in `ready`; it stops at one
    /// larger than what is left of `cascade` (a cascade moves them all at once), taking
    /// only due entries out of it, or at such an overflow.
    /// The wheel's time then stays where the last bucket emptied left it, at most `now`:
    /// every entry is still before it only if due and waiting in `ready`, and the next
    /// advance goes on from there.
    pub(crate) fn advance_within(
        &mut self,
        now: u64,
        most: usize,
        cascade: usize,
        due: &mut Vec<E>,
    ) -> bool {
        debug_assert!(now >= self.time, "time went back: {now} < {}", self.time);
        let now = now.max(self.time);
        let before = due.len();
        let reached = self.advance_some(now, most, cascade, due);
        self.len -= due.len() - before;
        reached
    }

    fn advance_some(&mut self, now: u64, most: usize, cascade: usize, due: &mut Vec<E>) -> bool {
        let (mut left, mut moves) = (most, cascade);
        // From the end: what stays is not moved.
        let take = left.min(self.ready.len());
        due.extend(self.ready.drain(self.ready.len() - take..));
        left -= take;
        if !self.ready.is_empty() {
            return false;
        }
        while let Some(earliest) = self.earliest() {
            match earliest {
                Earliest::Bucket { start, .. } | Earliest::Overflow { start } if start > now => {
                    break
                }
                Earliest::Bucket {
                    level: 0,
                    bucket,
                    start,
                } => {
                    let entries = &mut self.buckets[bucket].entries;
                    if entries.len() > left {
                        // All due at `start`: a part now, the rest where it is (after the
                        // wheel's time, which stays before `start`).
                        due.extend(entries.drain(entries.len() - left..));
                        return false;
                    }
                    left -= entries.len();
                    self.empty_bucket(0, bucket, start, now, due);
                }
                Earliest::Bucket {
                    level,
                    bucket,
                    start,
                } => {
                    let len = self.buckets[level * BUCKETS + bucket].entries.len();
                    if len > moves {
                        self.take_due_from(level, bucket, start, now, left, due);
                        return false;
                    }
                    moves -= len;
                    let from = due.len();
                    self.empty_bucket(level, bucket, start, now, due);
                    if !self.keep_within(from, &mut left, due) {
                        return false;
                    }
                }
                Earliest::Overflow { start } => {
                    if self.overflow.len() > moves {
                        return false;
                    }
                    moves -= self.overflow.len();
                    let from = due.len();
                    self.refile_overflow(start, now, due);
                    if !self.keep_within(from, &mut left, due) {
                        return false;
                    }
                }
            }
        }
        // As in `advance`: nothing left starts at or before `now`.
        self.time = now;
        true
    }

    /// After a cascade that appended to `due` from index `from`: what `left` (of a bounded
    /// advance's budget) cannot take waits in `ready`, due (the wheel's time has passed
    /// it); `false` when some had to.
    fn keep_within(&mut self, from: usize, left: &mut usize, due: &mut Vec<E>) -> bool {
        let got = due.len() - from;
        if got <= *left {
            *left -= got;
            return true;
        }
        self.ready.extend(due.drain(from + *left..));
        *left = 0;
        false
    }

    /// From `level`'s bucket `b` (level 1 or above, starting at `start` <= `now`, too large
    /// to cascade within a bounded advance), at most `most` entries due by `now`, looked
    /// for among `4 * most` of them (below the bucket's cursor, going round: each call
    /// looks further, so every due entry comes out after a bounded number of calls),
    /// without moving the wheel's time: the rest stay after it. The bucket's least offset
    /// stays a lower bound, so `next_due` may come early (a look that finds nothing),
    /// never late.
    fn take_due_from(
        &mut self,
        level: usize,
        b: usize,
        start: u64,
        now: u64,
        most: usize,
        due: &mut Vec<E>,
    ) {
        let inline = inline_offsets::<E>(level);
        let bucket = &mut self.buckets[level * BUCKETS + b];
        let mut taken = 0;
        let mut at = (bucket.cursor as usize).min(bucket.entries.len());
        for _ in 0..4 * most {
            if taken == most {
                break;
            }
            if at == 0 {
                at = bucket.entries.len();
            }
            at -= 1;
            let offset = if inline {
                bucket.entries[at].spare()
            } else {
                bucket.offsets[at]
            };
            if start | u64::from(offset) > now {
                continue;
            }
            // Swapped in from the end: an entry looked at already.
            let entry = bucket.entries.swap_remove(at);
            if !inline {
                bucket.offsets.swap_remove(at);
            }
            due.push(entry.with_spare(0));
            taken += 1;
        }
        // Below 2^32 entries in a bucket: the acker's entries are numbered in `u32`.
        bucket.cursor = at as u32;
    }

    /// The earliest tick at which `advance` returns something: exact (the earliest filed
    /// tick, or the wheel's time when an entry filed at or before it waits); `None` when
    /// empty.
    pub(crate) fn next_due(&self) -> Option<u64> {
        if !self.ready.is_empty() {
            return Some(self.time);
        }
        Some(match self.earliest()? {
            Earliest::Bucket {
                level,
                bucket,
                start,
            } => start | u64::from(self.buckets[level * BUCKETS + bucket].min_offset),
            Earliest::Overflow { .. } => self.overflow_min,
        })
    }

    /// Keeps only the entries `keep` says to keep, wherever they wait, frees the vectors it
    /// empties and shrinks those left mostly empty. `keep` is given each entry's tick too
    /// (`None` for an entry filed at or before the wheel's time, which waits for the next
    /// `advance`). O(entries + buckets): for a caller that sweeps out dead entries once
    /// they outnumber the live ones, so that each costs O(1) amortized.
    pub(crate) fn retain_filed(&mut self, mut keep: impl FnMut(Option<u64>, &E) -> bool) {
        let time = self.time;
        for level in 0..LEVELS {
            let mut occupied = self.occupied[level];
            // A level-`k` bucket's entries share the time's digits above `k`, and `b` is
            // their digit `k` (module docs, "Invariants").
            let above = time & !low_mask(level + 1);
            while occupied != 0 {
                let b = occupied.trailing_zeros() as usize;
                occupied &= occupied - 1;
                let start = above | (b as u64) << shift(level);
                let bucket = &mut self.buckets[level * BUCKETS + b];
                if level == 0 {
                    bucket.entries.retain(|e| keep(Some(start), e));
                } else if inline_offsets::<E>(level) {
                    bucket
                        .entries
                        .retain(|e| keep(Some(start | u64::from(e.spare())), &e.with_spare(0)));
                    bucket.min_offset = bucket.entries.iter().map(|e| e.spare()).min().unwrap_or(0);
                } else {
                    let mut kept = 0;
                    for i in 0..bucket.entries.len() {
                        let tick = start | u64::from(bucket.offsets[i]);
                        if keep(Some(tick), &bucket.entries[i]) {
                            bucket.entries[kept] = bucket.entries[i];
                            bucket.offsets[kept] = bucket.offsets[i];
                            kept += 1;
                        }
                    }
                    bucket.entries.truncate(kept);
                    bucket.offsets.truncate(kept);
                    bucket.min_offset = bucket.offsets.iter().copied().min().unwrap_or(0);
                }
                if bucket.entries.is_empty() {
                    *bucket = Bucket::default();
                    self.occupied[level] &= !(1 << b);
                } else {
                    shrink_kept(&mut bucket.entries);
                    shrink_kept(&mut bucket.offsets);
                }
            }
        }
        self.ready.retain(|e| keep(None, e));
        shrink_kept(&mut self.ready);
        self.overflow.retain(|&(t, e)| keep(Some(t), &e));
        shrink_kept(&mut self.overflow);
        self.overflow_min = self.overflow.iter().map(|&(t, _)| t).min().unwrap_or(0);
        self.len = self.ready.len()
            + self.overflow.len()
            + self.buckets.iter().map(|b| b.entries.len()).sum::<usize>();
    }

    /// Entries filed and not yet returned.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held: the fixed bucket table and every vector's capacity. Vectors emptied
    /// by `advance` are freed, so this falls back to the empty wheel's once a burst is due.
    pub(crate) fn heap_bytes(&self) -> usize {
        mem::size_of_val::<[Bucket<E>]>(&self.buckets)
            + self.buckets.iter().map(Bucket::heap_bytes).sum::<usize>()
            + self.ready.capacity() * mem::size_of::<E>()
            + self.overflow.capacity() * mem::size_of::<(u64, E)>()
    }

    /// Files `entry` for `tick`, which is after the wheel's time, in its level's bucket or
    /// the overflow.
    fn place(&mut self, tick: u64, entry: E) {
        debug_assert!(tick > self.time);
        // The highest differing bit picks the level; `tick > time` makes `tick`'s digit
        // there the larger, so the bucket is after the one `time` is in.
        let top = u64::BITS - 1 - (tick ^ self.time).leading_zeros();
        let level = (top / BITS) as usize;
        if level >= LEVELS {
            if self.overflow.is_empty() || tick < self.overflow_min {
                self.overflow_min = tick;
            }
            self.overflow.push((tick, entry));
            return;
        }
        let b = ((tick >> shift(level)) as usize) & (BUCKETS - 1);
        let bucket = &mut self.buckets[level * BUCKETS + b];
        let mut entry = entry;
        if level > 0 {
            // Below 2^30: the bucket spans at most that many ticks (checked at compile
            // time).
            let offset = (tick & low_mask(level)) as u32;
            if bucket.entries.is_empty() || offset < bucket.min_offset {
                bucket.min_offset = offset;
            }
            if inline_offsets::<E>(level) {
                entry = entry.with_spare(offset);
            } else {
                push_compact(&mut bucket.offsets, offset);
            }
        }
        push_compact(&mut bucket.entries, entry);
        self.occupied[level] |= 1 << b;
    }

    /// The bucket (or overflow) holding the earliest entries, by the invariants: the first
    /// occupied bucket of the lowest occupied level, else the overflow. `ready` aside.
    fn earliest(&self) -> Option<Earliest> {
        for (level, &bits) in self.occupied.iter().enumerate() {
            if bits == 0 {
                continue;
            }
            let bucket = bits.trailing_zeros() as usize;
            let digit = (self.time >> shift(level)) as usize & (BUCKETS - 1);
            debug_assert!(
                bucket > digit,
                "level {level} bucket {bucket} not after {digit}"
            );
            // `time`'s digits above `level`, then the bucket's digit, then zeros. A shift
            // of at most HORIZON_BITS < 64, so never out of range.
            let above = shift(level + 1);
            let start = (self.time >> above << above) | ((bucket as u64) << shift(level));
            return Some(Earliest::Bucket {
                level,
                bucket,
                start,
            });
        }
        (!self.overflow.is_empty()).then_some(Earliest::Overflow {
            start: self.overflow_min >> HORIZON_BITS << HORIZON_BITS,
        })
    }

    /// Empties `level`'s bucket `b`, which starts at `start` <= `now` and is the earliest:
    /// moves the time into it, sends its due entries to `due` and cascades the rest.
    fn empty_bucket(&mut self, level: usize, b: usize, start: u64, now: u64, due: &mut Vec<E>) {
        // Forward: the bucket is after the one `time` was in. Every finer level is empty
        // (this is the lowest occupied one), and coarser levels' buckets start after this
        // one ends, so only this bucket's entries need placing relative to the new time.
        self.time = now.min(start | low_mask(level));
        self.occupied[level] &= !(1 << b);
        // Taken, so the vectors are freed once read: nothing cascades back into the bucket
        // being emptied.
        let bucket = mem::take(&mut self.buckets[level * BUCKETS + b]);
        if level == 0 {
            // One tick, `start`, which is <= now.
            due.extend_from_slice(&bucket.entries);
            return;
        }
        let mut file = |entry: E, offset: u32| {
            let tick = start | u64::from(offset);
            if tick <= self.time {
                due.push(entry);
            } else {
                // Same digits as `time` from `level` up, so it lands in a finer level.
                self.place(tick, entry);
            }
        };
        if inline_offsets::<E>(level) {
            for &entry in &bucket.entries {
                file(entry.with_spare(0), entry.spare());
            }
        } else {
            for (&entry, &offset) in bucket.entries.iter().zip(&bucket.offsets) {
                file(entry, offset);
            }
        }
    }

    /// Takes the overflow as one bucket spanning the 2^36 ticks from `start` <= `now`:
    /// moves the time into that span, sends due entries to `due`, files the rest of the
    /// span in the levels, and keeps entries of later spans.
    fn refile_overflow(&mut self, start: u64, now: u64, due: &mut Vec<E>) {
        self.time = now.min(start | ((1u64 << HORIZON_BITS) - 1));
        let mut far = mem::take(&mut self.overflow);
        let mut min = u64::MAX;
        far.retain(|&(tick, entry)| {
            if tick <= self.time {
                due.push(entry);
                false
            } else if (tick ^ self.time) >> HORIZON_BITS == 0 {
                self.place(tick, entry);
                false
            } else {
                min = min.min(tick);
                true
            }
        });
        // Give back what a burst of far entries left behind.
        if far.capacity() > 4 * far.len() {
            far.shrink_to(2 * far.len());
        }
        self.overflow = far;
        self.overflow_min = min;
    }
}

impl<E: WheelEntry> fmt::Debug for CompactWheel<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactWheel")
            .field("time", &self.time)
            .field("len", &self.len)
            .field("next_due", &self.next_due())
            .field("overflow", &self.overflow.len())
            .field("heap_bytes", &self.heap_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests;
