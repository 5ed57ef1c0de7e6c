//! ZooKeeper's `ExpiryQueue`, made exact under concurrency: [`ExpiryQueue`] (re-exported at
//! the crate root) and its longest timeout, [`MAX_TIMEOUT`].
//!
//! # Algorithm
//!
//! Time is cut into buckets of one `interval` (`I`). An element updated at `now` with a
//! `timeout` is filed under the deadline `round_to_next_interval(now + timeout)`,
//! ZooKeeper's `(t / I + 1) * I`: the first bucket boundary strictly after `t`. An atomic
//! *next-expiration* time names the oldest bucket not yet taken; a poller whose clock has
//! reached it claims that bucket by moving next-expiration on by one interval with a CAS,
//! then takes the bucket's elements. Two pollers never both win the CAS for one bucket.
//!
//! Two maps hold the state, each sharded over `crate::sync::Mutex`es (so loom models every
//! lock):
//!
//! * the **element map** `elem -> deadline` is the source of truth: an element is in the
//!   queue iff it has an entry there, with that deadline;
//! * the **bucket map** `deadline -> set of elems` is an index for the poller.
//!
//! # The wrapping timeline
//!
//! Deadlines lie on a grid `anchor + k * I` (mod 2^64). The anchor is any value
//! next-expiration has ever held: it starts at `round_to_next_interval(first clock
//! reading)` and only ever moves by `+I`, so every value it takes lies on the same grid.
//! Rounding is done relative to it with a *signed* offset, `d = t - (t -
//! anchor).rem_euclid(I) + I`, which is ZooKeeper's `(t / I + 1) * I` wherever `t` and the
//! first reading lie on the same side of the wrap, and continues the grid uniformly (every
//! bucket exactly `I` apart, so the poller's `+I` steps meet every one) when the clock
//! wraps past `u64::MAX`. A plain `(t / I + 1) * I` would not: `2^64` is rarely a multiple
//! of `I`, so buckets after the wrap would fall between the poller's steps and never be
//! taken. Timeouts are clamped to [`MAX_TIMEOUT`] and intervals limited to it so that all
//! offsets stay far inside `±2^63`.
//!
//! # Invariants
//!
//! 1. *Lock order.* An element-map shard lock may be held while a bucket-map shard lock is
//!    taken, never the reverse, and at most one lock of each kind is held at once.
//! 2. *Claimed buckets stay empty.* A bucket `d` is *claimed* once next-expiration has
//!    moved past it. `update` reads next-expiration while holding `d`'s bucket-shard lock
//!    and only inserts when `d` is unclaimed; otherwise it re-files the element under the
//!    current next-expiration (the next bucket any poll will take: the element is already
//!    due). A poller moves next-expiration *before* locking the bucket's shard, so the
//!    mutex orders the two: either the insert happens first and the poller's take sees it,
//!    or the updater's read sees the claim. An element is therefore never stranded in a
//!    bucket that was already taken, and no bucket older than next-expiration outlives its
//!    poll.
//! 3. *Compare-and-remove.* A poll that took bucket `b` returns an element only if, under
//!    the element's shard lock, its entry still says `b`; it removes that entry in the same
//!    critical section. `update`, `touch` and `remove` change an element's entry under the
//!    same lock, so each poll/update race has exactly one linearization: the poll first
//!    (the element is returned and leaves; a later `touch` finds nothing, a later `update`
//!    re-inserts it) or the update first (the entry says the new bucket; the poll skips it,
//!    and the element stays at its new deadline). An element is never returned twice for
//!    one deadline and never lost.
//! 4. *No empty-bucket leak.* `update` and `remove` delete a bucket set that they leave
//!    empty; `poll` deletes the set it takes. The bucket map holds at most one set per
//!    distinct deadline of an element in the queue (plus, transiently, one set per poll in
//!    flight) — unlike ZooKeeper's, where empty sets pile up until their time comes.
//!
//! Waiting (`wait`, `wait_async`, `close`) and its wake-up protocol live in the `wait` submodule.
//!
//! Catch-up is one bucket per `poll`: after a long pause the owner calls `poll` repeatedly,
//! and each call moves next-expiration by exactly one interval, as in ZooKeeper.
//!
//! ## Why not `dashmap`
//!
//! The invariants above are arguments about the queue's own locks (an element shard's lock
//! held while a bucket shard's is taken; next-expiration read under a bucket shard's lock;
//! a waiter's check of every element shard), and loom checks them because every lock is a
//! [`crate::sync::Mutex`] (the models in `loom-tests/tests/expiry_queue.rs`). `DashMap`'s
//! locks are its own, which loom cannot see. A poll also takes one element shard's lock per
//! run of its elements in that shard, which needs the shards themselves: `DashMap` exposes
//! them only behind its `raw-api` feature. Not measured: the two side by side
//! (`cargo bench --bench expiry_queue` runs the queue against a `Mutex` port of
//! ZooKeeper's only).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::PoisonError;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{duration_nanos, Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, RandomState};

use self::wait::Waiters;

#[cfg(test)]
mod tests;
mod wait;

/// The largest timeout (and interval) the queue represents: 2^62 ns, about 146 years.
///
/// Longer timeouts are clamped to it; it keeps every offset on the wrapping timeline well
/// inside `±2^63`, where "due" comparisons are meaningful.
pub const MAX_TIMEOUT: Duration = Duration::from_nanos(1 << 62);

/// Shards per map. Small under loom so models stay tractable yet still cross shards.
#[cfg(loom)]
const SHARDS: usize = 2;
#[cfg(not(loom))]
const SHARDS: usize = 32;

type ElemShard<E> = CachePadded<Mutex<HashMap<E, u64, RandomState>>>;
type BucketShard<E> = CachePadded<Mutex<HashMap<u64, HashSet<E, RandomState>, RandomState>>>;

/// Concurrent interval-bucket expiry queue with an atomic next-expiration time.
///
/// ZooKeeper's `ExpiryQueue` semantics, with stronger guarantees: a polled element leaves
/// the queue, an element moved to a later bucket before the poll took it is not returned,
/// no element is returned twice for one deadline and none is lost. Every method takes
/// `&self` and may be called from any number of threads.
///
/// # The rules
///
/// * **Buckets.** Time is cut into buckets of one `interval`. `update(elem, timeout)` files
///   the element under `(t / interval + 1) * interval` for `t = now + timeout`: the first
///   bucket boundary after `t`, so an element expires between `timeout` and
///   `timeout + interval` after its last update. Updating it again moves it, earlier or
///   later; `remove` takes it out.
/// * **Polling.** An atomic next-expiration time names the oldest bucket not yet taken.
///   `poll` takes exactly that bucket once the clock has reached it (and nothing before),
///   moving next-expiration on by one interval: after a pause, call it until
///   [`wait_time`](Self::wait_time) is non-zero (or use [`wait`](Self::wait)). Two pollers
///   never take one bucket; each element comes out once.
/// * **Time** is `u64` nanoseconds of the queue's [`Clock`] on a wrapping
///   timeline: any origin works; timeouts above [`MAX_TIMEOUT`] are clamped to it.
///
/// # Costs
///
/// Two hash-map entries per element (element to deadline, and the element in its bucket's
/// set), each map sharded over mutexes, so threads touching different elements rarely meet.
/// An `update` that keeps its bucket takes one lock; one that moves it, three. No thread is
/// started: the expirer is yours.
///
/// ```
/// use std::time::Duration;
/// use ackwheel::{ExpiryQueue, ManualClock};
///
/// let clock = ManualClock::new(0);
/// let q = ExpiryQueue::with_clock(Duration::from_nanos(10), clock.clone()).unwrap();
/// assert_eq!(q.update("session-1", Duration::from_nanos(25)), Some(30));
/// assert!(q.poll().is_empty());                 // nothing is due at 0
/// clock.set(30);
/// assert!(q.poll().is_empty());                 // the bucket at 10
/// assert!(q.poll().is_empty());                 // the bucket at 20
/// assert_eq!(q.poll(), vec!["session-1"]);      // the bucket at 30
/// assert!(q.is_empty());
/// ```
///
/// # Waiting
///
/// An expirer thread need not sleep on [`wait_time`](Self::wait_time) and re-poll:
/// [`wait`](Self::wait) blocks until a [`poll`](Self::poll) would take a bucket, sleeping
/// without any wake-up while the queue is empty (the `update` that inserts an element wakes
/// it) and until [`next_expiration`](Self::next_expiration) while it is not.
/// [`close`](Self::close) ends every wait with `false`, so the usual loop is
/// `while queue.wait() { for session in queue.poll() { /* expire it */ } }`.
/// `wait_async` is the same for tokio tasks (the `tokio` feature). Waits assume the clock
/// counts real nanoseconds (see `wait`).
pub struct ExpiryQueue<E> {
    /// The oldest bucket not yet claimed by a poll; only ever moves by `+interval`.
    next_expiration: CachePadded<AtomicU64>,
    /// `I` in nanoseconds, in `1..=2^62`.
    interval: u64,
    elems: Box<[ElemShard<E>]>,
    buckets: Box<[BucketShard<E>]>,
    clock: Box<dyn Clock>,
    /// Closed flag and sleeping waiters ([`wait`]).
    waiters: Waiters,
}

/// A fast multiply-rotate hash (FxHash's), used only to pick an element's shard.
///
/// The shard maps themselves keep std's keyed hasher, so a crafted key set can at worst
/// crowd one shard (degrading to one mutex), never degrade a map. Hashing every element
/// twice with SipHash cost more than the rest of a same-bucket `update`.
#[derive(Default)]
struct ShardHasher(u64);

impl std::hash::Hasher for ShardHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Locks `m`, ignoring poisoning: every critical section leaves its map consistent before
/// running code that can panic (user `Hash`/`Eq`), so a poisoned map is still valid.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The first grid point strictly after `t`, on the grid through `anchor` with spacing
/// `interval`, on the wrapping timeline (see the module docs).
#[inline]
fn round_to_next_interval(t: u64, anchor: u64, interval: u64) -> u64 {
    // Signed offset: `t` may lie before the anchor (a stale clock reading).
    let offset = t.wrapping_sub(anchor) as i64;
    // `interval <= 2^62` fits an i64; rem_euclid is in `0..interval`.
    let below = offset.rem_euclid(interval as i64) as u64;
    t.wrapping_sub(below).wrapping_add(interval)
}

/// `true` when bucket `deadline` has been claimed, i.e. next-expiration moved past it.
#[inline]
fn is_claimed(deadline: u64, next_expiration: u64) -> bool {
    (next_expiration.wrapping_sub(deadline) as i64) > 0
}

// === impl ExpiryQueue ===

impl<E: Eq + Hash + Clone + Send + Sync + 'static> ExpiryQueue<E> {
    /// A queue with buckets `interval` apart on the process's [`MonotonicClock`].
    ///
    /// # Errors
    /// [`ConfigError`] when `interval` is zero or above [`MAX_TIMEOUT`].
    pub fn new(interval: Duration) -> Result<Self, ConfigError> {
        Self::with_clock(interval, MonotonicClock::new())
    }

    /// A queue with buckets `interval` apart, reading time from `clock`.
    ///
    /// Next-expiration starts at `round_to_next_interval(clock.now())`, as in ZooKeeper.
    ///
    /// # Errors
    /// [`ConfigError`] when `interval` is zero or above [`MAX_TIMEOUT`].
    pub fn with_clock(interval: Duration, clock: impl Clock) -> Result<Self, ConfigError> {
        let nanos = duration_nanos(interval);
        if nanos == 0 {
            return Err(ConfigError::Zero { param: "interval" });
        }
        if interval > MAX_TIMEOUT {
            return Err(ConfigError::TooLarge {
                param: "interval",
                got: format!("{interval:?}"),
                max: format!("{MAX_TIMEOUT:?}"),
            });
        }
        let now = clock.now();
        // ZooKeeper's `(now / I + 1) * I`, written so it wraps instead of overflowing.
        let first = now - now % nanos;
        let first = first.wrapping_add(nanos);
        Ok(ExpiryQueue {
            next_expiration: CachePadded::new(AtomicU64::new(first)),
            interval: nanos,
            elems: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(HashMap::default())))
                .collect(),
            buckets: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(HashMap::default())))
                .collect(),
            clock: Box::new(clock),
            waiters: Waiters::new(),
        })
    }

    /// Adds `elem` or moves it (earlier or later) to the bucket
    /// `round_to_next_interval(now + timeout)`.
    ///
    /// Returns the new deadline, or `None` when the element was already in that bucket.
    /// Timeouts above [`MAX_TIMEOUT`] are clamped to it. If a poll has already claimed the
    /// computed bucket (possible only when this thread's clock reading is older than the
    /// poller's), the element goes into the next bucket to be polled instead, and that
    /// deadline is returned.
    ///
    /// An insertion (the element was absent) wakes the waiters sleeping on an empty queue
    /// in [`wait`](Self::wait) or `wait_async`: one atomic load, plus a mutex and a notify
    /// only when such a waiter exists.
    pub fn update(&self, elem: E, timeout: Duration) -> Option<u64> {
        let shard = &self.elems[self.elem_shard(&elem)];
        let mut entries = lock(shard);
        let previous = entries.get(&elem).copied();
        let deadline = self.deadline_for(timeout);
        if previous == Some(deadline) {
            return None;
        }
        let filed = self.file(&elem, deadline);
        // `file` may have re-filed it under the bucket it is already in: a set holds it
        // once.
        if previous == Some(filed) {
            return None;
        }
        entries.insert(elem.clone(), filed);
        if let Some(previous) = previous {
            self.unfile(&elem, previous);
        }
        drop(entries);
        if previous.is_none() {
            // After the shard unlock: waiters check emptiness under the shard locks while
            // holding the wait mutex, which `inserted` may take (wait.rs).
            self.waiters.inserted();
        }
        Some(filed)
    }

    /// Moves `elem` to `round_to_next_interval(now + timeout)` only if it is in the queue.
    ///
    /// Returns its deadline after the call (whether or not it changed), or `None` when the
    /// element is absent — for instance because a poll has already taken it. Unlike
    /// [`update`](Self::update), it never resurrects an element that expired: this is
    /// ZooKeeper's `touchSession`, where touching a session being closed fails.
    pub fn touch(&self, elem: &E, timeout: Duration) -> Option<u64> {
        let shard = &self.elems[self.elem_shard(elem)];
        let mut entries = lock(shard);
        let previous = *entries.get(elem)?;
        let deadline = self.deadline_for(timeout);
        if previous == deadline {
            return Some(deadline);
        }
        let filed = self.file(elem, deadline);
        if filed == previous {
            return Some(filed);
        }
        if let Some(slot) = entries.get_mut(elem) {
            *slot = filed;
        }
        self.unfile(elem, previous);
        drop(entries);
        Some(filed)
    }

    /// Removes `elem`; returns the deadline it had, or `None` when it was absent.
    pub fn remove(&self, elem: &E) -> Option<u64> {
        let shard = &self.elems[self.elem_shard(elem)];
        let mut entries = lock(shard);
        let deadline = entries.remove(elem)?;
        self.unfile(elem, deadline);
        drop(entries);
        Some(deadline)
    }

    /// Takes the bucket at [`next_expiration`](Self::next_expiration) if it is due.
    ///
    /// Empty before `next_expiration()`; otherwise claims exactly one bucket (the one at
    /// `next_expiration()`), moves `next_expiration()` on by one interval and returns the
    /// elements whose deadline is still that bucket, removing them from the queue. When
    /// another poller claims the bucket first, this one retries with the next bucket if
    /// that is due too, so an empty result means nothing was due.
    pub fn poll(&self) -> Vec<E> {
        let now = self.clock.now();
        // Relaxed: only a guess for the CAS below, which validates it.
        let mut bucket = self.next_expiration.load(Ordering::Relaxed);
        let claimed = loop {
            if !crate::clock::is_due(bucket, now) {
                return Vec::new();
            }
            // AcqRel on success: the claim is ordered before our lock of the bucket shard
            // (program order) and, through that mutex, before any updater's check of
            // next-expiration (invariant 2); Acquire pairs with earlier claims. Relaxed on
            // failure: the returned value is re-validated by the next CAS.
            match self.next_expiration.compare_exchange_weak(
                bucket,
                bucket.wrapping_add(self.interval),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break bucket,
                Err(current) => bucket = current,
            }
        };
        let taken = lock(&self.buckets[self.bucket_shard(claimed)]).remove(&claimed);
        let Some(taken) = taken else {
            return Vec::new();
        };
        // Compare-and-remove, one element-shard lock per run of elements in that shard.
        let mut by_shard: Vec<(usize, E)> = taken
            .into_iter()
            .map(|e| (self.elem_shard(&e), e))
            .collect();
        by_shard.sort_unstable_by_key(|(shard, _)| *shard);
        let mut expired = Vec::with_capacity(by_shard.len());
        let mut run = by_shard.into_iter().peekable();
        while let Some((shard, first)) = run.next() {
            let mut entries = lock(&self.elems[shard]);
            let mut take = |e: E| {
                if entries.get(&e) == Some(&claimed) {
                    entries.remove(&e);
                    expired.push(e);
                }
            };
            take(first);
            while let Some((_, e)) = run.next_if(|(s, _)| *s == shard) {
                take(e);
            }
        }
        expired
    }

    /// How long until [`next_expiration`](Self::next_expiration): `max(next - now, 0)`.
    pub fn wait_time(&self) -> Duration {
        let now = self.clock.now();
        let next = self.next_expiration();
        let ahead = next.wrapping_sub(now) as i64;
        Duration::from_nanos(ahead.max(0) as u64)
    }

    /// The deadline of the next bucket a poll will take.
    pub fn next_expiration(&self) -> u64 {
        // Acquire: a caller that sees a bucket claimed also sees the claim's effects that
        // preceded it; pairs with the AcqRel CAS in `poll`.
        self.next_expiration.load(Ordering::Acquire)
    }

    /// The deadline of `elem`, or `None` when it is not in the queue.
    pub fn deadline(&self, elem: &E) -> Option<u64> {
        lock(&self.elems[self.elem_shard(elem)]).get(elem).copied()
    }

    /// The bucket spacing.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// The number of elements in the queue (a sum over shards; exact when quiescent).
    pub fn len(&self) -> usize {
        self.elems.iter().map(|s| lock(s).len()).sum()
    }

    /// `true` when no element is in the queue (exact when quiescent).
    pub fn is_empty(&self) -> bool {
        self.elems.iter().all(|s| lock(s).is_empty())
    }

    /// The number of bucket sets currently held (for leak checks and diagnostics).
    pub fn bucket_count(&self) -> usize {
        self.buckets.iter().map(|s| lock(s).len()).sum()
    }

    // --- internals -------------------------------------------------------------------

    fn deadline_for(&self, timeout: Duration) -> u64 {
        let timeout = duration_nanos(timeout.min(MAX_TIMEOUT));
        let t = self.clock.now().wrapping_add(timeout);
        // Relaxed: any value next-expiration ever held is a grid point, so a stale one is
        // as good an anchor as the latest.
        let anchor = self.next_expiration.load(Ordering::Relaxed);
        round_to_next_interval(t, anchor, self.interval)
    }

    /// Inserts `elem` into bucket `deadline`, or into the oldest unclaimed bucket when
    /// `deadline` has been claimed (invariant 2). Returns the bucket used. The caller holds
    /// `elem`'s element-shard lock.
    fn file(&self, elem: &E, mut deadline: u64) -> u64 {
        loop {
            let mut buckets = lock(&self.buckets[self.bucket_shard(deadline)]);
            // Acquire: pairs with the AcqRel claim in `poll`. Correctness rests on the
            // shard mutex: a poller that claimed `deadline` and then took this lock before
            // us has its claim ordered before this load, so we see it (invariant 2).
            let next = self.next_expiration.load(Ordering::Acquire);
            if !is_claimed(deadline, next) {
                buckets.entry(deadline).or_default().insert(elem.clone());
                return deadline;
            }
            drop(buckets);
            deadline = next;
        }
    }

    /// Removes `elem` from bucket `deadline` if it is there (a poll may have taken the
    /// set), deleting the set if that leaves it empty (invariant 4). The caller holds
    /// `elem`'s element-shard lock.
    fn unfile(&self, elem: &E, deadline: u64) {
        let mut buckets = lock(&self.buckets[self.bucket_shard(deadline)]);
        if let Some(set) = buckets.get_mut(&deadline) {
            set.remove(elem);
            if set.is_empty() {
                buckets.remove(&deadline);
            }
        }
    }

    fn elem_shard(&self, elem: &E) -> usize {
        use std::hash::Hasher;
        let mut h = ShardHasher::default();
        elem.hash(&mut h);
        // The high bits are the best mixed ones of a multiplicative hash.
        (h.finish() >> 40) as usize % SHARDS
    }

    fn bucket_shard(&self, deadline: u64) -> usize {
        // Fibonacci hashing of the bucket's index: consecutive buckets land on different
        // shards, so pollers and updaters of neighbouring buckets rarely meet.
        let index = deadline / self.interval;
        (index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SHARDS
    }
}

impl<E> fmt::Debug for ExpiryQueue<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len: usize = self.elems.iter().map(|s| lock(s).len()).sum();
        f.debug_struct("ExpiryQueue")
            .field("interval_ns", &self.interval)
            .field(
                "next_expiration",
                // Relaxed: a snapshot for display; nothing is read through it.
                &self.next_expiration.load(Ordering::Relaxed),
            )
            .field("len", &len)
            .field("closed", &self.waiters.is_closed())
            .finish_non_exhaustive()
    }
}
