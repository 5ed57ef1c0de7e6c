//! A single-owner hierarchical timer wheel after Caffeine's `TimerWheel`: [`TimerWheel`]
//! and what it hands out ([`TimerKey`], [`Expired`], the iterators [`Advance`] and
//! [`Iter`]). The crate root re-exports `TimerWheel` and `TimerKey`.
//!
//! ## Algorithm
//!
//! Five levels of buckets (the `geometry` submodule): a timer due `Δ` from now goes to the finest
//! level whose range covers `Δ`, into the bucket of its deadline's tick on that level
//! (`deadline >> shift`). Buckets are circular doubly-linked lists through a slab, so
//! schedule, reschedule and cancel are O(1).
//!
//! `advance(now)` walks, level by level from the finest, the ticks that `now` has crossed:
//!
//! * **level 0**: every bucket of a tick strictly before `now`'s tick holds only due timers
//!   (their deadlines are before that tick's end, which is not after `now`), so the whole
//!   bucket is spliced onto the *ready* list in O(1). The bucket of `now`'s own tick is
//!   sorted timer by timer: due ones to ready, the rest stay.
//! * **coarser levels**: each crossed bucket is emptied and its timers re-placed relative to
//!   the new time — due ones to ready, the rest *cascade* into finer levels. Which level a
//!   timer lands in is chosen afresh by its distance, so a bucket of level `l` never holds
//!   the tick `l` is currently in, and each level's full range is exactly one bucket of the
//!   next: a timer that does not fit level `l` lands in a *later* bucket of `l + 1`.
//! * **overflow**: the last level's single bucket holds timers 2^49 ns (scaled by the
//!   resolution) or more away; it is re-placed each time the top tick turns, which is always
//!   in time because levels 0–3 reach to the next turn.
//!
//! The iterator that `advance` returns then pops the ready list. All bucket work happens
//! before the first item is yielded and the ready list is part of the wheel, so dropping the
//! iterator early, or a consumer panicking, leaves every remaining timer in the wheel; the
//! next `advance` yields them first.
//!
//! ## Invariants
//!
//! * A timer is in exactly one list: a level-0 bucket within 63 ticks of now, a coarser
//!   bucket strictly after that level's current tick, the overflow, or ready.
//! * Everything on the ready list was due at the wheel's time when it got there; the wheel's
//!   time never moves backwards, so it stays due.
//! * A timer is never yielded before it is due; once the wheel's tick has passed the tick
//!   of its deadline it has been yielded or is on the ready list — at most one resolution
//!   late.
//!
//! ## Wrapping time
//!
//! Instants are compared only through differences: a deadline is due when
//! `(now - deadline) as i64 >= 0`, and tick distances are taken modulo the tick space
//! (`ticks_between`). Nothing depends on the origin, so clocks that start near 2^63 or
//! `u64::MAX` and wrap while running behave like any other. A forward move of 2^63 ns or
//! more is indistinguishable from a backward one and is treated as backward.

// A level number indexes several parallel tables (BUCKETS, shifts, sentinels, bitmaps);
// iterating one of them by `enumerate` would hide that.
#![allow(clippy::needless_range_loop)]

mod geometry;
mod iter;
mod slab;

use std::fmt;
use std::time::Duration;

use crate::clock::{duration_nanos, is_due};
pub(crate) use geometry::MAX_SHIFT;
use geometry::{Geometry, BUCKETS, DEFAULT_SHIFT, FIRST_SENTINEL, LEVELS, READY};
use slab::Slab;

pub use iter::{Advance, Iter};

/// Names one scheduled timer. Generational: once the timer fires or is cancelled its key is
/// stale forever, even after its slot holds another timer (a slot whose 32-bit generations
/// are used up is retired, never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

impl TimerKey {
    /// The node this key names: unique among live timers, reused after this one is gone.
    #[cfg(test)]
    pub(crate) fn index(self) -> u32 {
        self.index
    }
}

/// A timer yielded by [`TimerWheel::advance`]; its key is already stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key `schedule` returned.
    pub key: TimerKey,
    /// The deadline it was due at.
    pub deadline: u64,
    /// Its value.
    pub value: T,
}

/// Single-owner hierarchical timer wheel (Caffeine geometry by default).
///
/// ```
/// use ackwheel::TimerWheel;
/// use std::time::Duration;
///
/// let mut wheel = TimerWheel::with_resolution(0, Duration::from_millis(1));
/// let a = wheel.schedule(5_000_000, "five ms");
/// wheel.schedule(90_000_000, "ninety ms");
/// wheel.cancel(a);
/// let fired: Vec<_> = wheel.advance(100_000_000).map(|e| e.value).collect();
/// assert_eq!(fired, ["ninety ms"]);
/// assert!(wheel.is_empty());
/// ```
pub struct TimerWheel<T> {
    geometry: Geometry,
    /// The wheel's time: the `now` of the last forward `advance`.
    now: u64,
    slab: Slab<T>,
}

impl<T> TimerWheel<T> {
    /// Caffeine's geometry: wheels of 64, 64, 32, 4, 1 buckets whose buckets span
    /// 2^30, 2^36, 2^42, 2^47, 2^49 ns.
    pub fn new(now: u64) -> Self {
        Self::with_geometry(now, Geometry::with_finest_shift(DEFAULT_SHIFT))
    }

    /// Same shape with the finest bucket span = `resolution` rounded up to a power of two
    /// of nanoseconds (at least 1 ns, at most 2^43 ns ≈ 2.4 h). Timers beyond the top wheel
    /// wait in its overflow bucket, never lost.
    pub fn with_resolution(now: u64, resolution: Duration) -> Self {
        Self::with_geometry(
            now,
            Geometry::with_resolution_nanos(duration_nanos(resolution)),
        )
    }

    fn with_geometry(now: u64, geometry: Geometry) -> Self {
        TimerWheel {
            geometry,
            now,
            slab: Slab::new(),
        }
    }

    /// The wheel's time: the `now` of the latest forward [`advance`](Self::advance).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The finest bucket span in nanoseconds, a power of two.
    pub fn resolution(&self) -> u64 {
        self.geometry.resolution()
    }

    /// Scheduled timers, including those found due and not yet yielded.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// `true` when no timer is scheduled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Schedules `value` for `deadline`. O(1). A deadline already due goes into the current
    /// finest bucket and is yielded by the first `advance` into a later tick.
    pub fn schedule(&mut self, deadline: u64, value: T) -> TimerKey {
        let (index, generation) = self.slab.alloc(deadline, value);
        let current = self.current_bucket();
        self.place(index, current);
        TimerKey { index, generation }
    }

    /// Schedules `value` for `delay` after the wheel's time ([`now`](Self::now)): the
    /// same as `schedule(now + delay)`. A delay beyond the wrapping timeline's 2^63 ns
    /// horizon (292 years) is clamped to it.
    ///
    /// ```
    /// use ackwheel::TimerWheel;
    /// use std::time::Duration;
    ///
    /// let mut wheel = TimerWheel::with_resolution(0, Duration::from_millis(1));
    /// let key = wheel.schedule_after(Duration::from_millis(20), "retry");
    /// assert_eq!(wheel.deadline(key), Some(20_000_000));
    /// ```
    pub fn schedule_after(&mut self, delay: Duration, value: T) -> TimerKey {
        let deadline = self.now.wrapping_add(horizon_nanos(delay));
        self.schedule(deadline, value)
    }

    /// Moves a timer to `delay` after the wheel's time; `false` when the key is stale.
    pub fn reschedule_after(&mut self, key: TimerKey, delay: Duration) -> bool {
        self.reschedule(key, self.now.wrapping_add(horizon_nanos(delay)))
    }

    /// Moves a timer to `deadline`, earlier or later. O(1). `false` (and no change) when the
    /// key is stale.
    pub fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(node) = self.slab.live_mut(key.index, key.generation) else {
            return false;
        };
        node.deadline = deadline;
        self.slab.unlink(key.index);
        let current = self.current_bucket();
        self.place(key.index, current);
        true
    }

    /// Removes a timer and returns its value. O(1). `None` when the key is stale.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        self.slab.live(key.index, key.generation)?;
        self.slab.unlink(key.index);
        Some(self.slab.free(key.index))
    }

    /// The timer's deadline, `None` when the key is stale.
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.slab
            .live(key.index, key.generation)
            .map(|n| n.deadline)
    }

    /// The timer's value, `None` when the key is stale.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.slab.live(key.index, key.generation)?;
        Some(self.slab.value(key.index))
    }

    /// The timer's value, mutably; `None` when the key is stale.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.slab.live(key.index, key.generation)?;
        Some(self.slab.value_mut(key.index))
    }

    /// Moves the wheel's time to `now`, yielding (and removing) due timers and cascading the
    /// rest down.
    ///
    /// Never yields a timer that is not due at `now`. Time moves in ticks of the finest
    /// resolution: when `now` is in a later tick than the wheel's time, every timer due at
    /// `now` is yielded; an advance within the wheel's current tick yields only timers found
    /// due earlier and left over by a dropped iterator. So a timer is yielded at most one
    /// resolution after its deadline.
    ///
    /// Lazy: if the iterator is dropped (or its consumer panics) before it is exhausted, the
    /// wheel stays consistent, keeps every timer not yet yielded, and the next advance yields
    /// the rest; `advance(now).take(n)` is a bounded advance. Moving backwards (by 2^63 ns or
    /// more, on the wrapping timeline) yields nothing, loses nothing and leaves the wheel's
    /// time where it was.
    pub fn advance(&mut self, now: u64) -> Advance<'_, T> {
        if !is_due(self.now, now) {
            return Advance::new(self, false);
        }
        let previous = std::mem::replace(&mut self.now, now);
        for level in 0..LEVELS {
            let crossed = self.geometry.ticks_between(level, previous, now);
            if crossed == 0 {
                // A coarser tick can only turn when a finer one does.
                break;
            }
            let from = self.geometry.tick(level, previous);
            if level == 0 {
                self.expire_finest(from, crossed);
            } else {
                self.cascade(level, from, crossed);
            }
        }
        Advance::new(self, true)
    }

    /// Level 0 after its tick moved `crossed` ticks past `from`.
    fn expire_finest(&mut self, from: u64, crossed: u64) {
        // Buckets of ticks before now's are due wholesale: their deadlines end before now's
        // tick begins. That includes the old current bucket (and what was scheduled into it
        // already due). With 64 or more ticks crossed it is every bucket: a level-0 timer is
        // at most 63 ticks ahead of the old time.
        for step in 0..crossed.min(BUCKETS[0]) {
            self.slab
                .splice(Geometry::sentinel(0, from.wrapping_add(step)), READY);
        }
        if crossed < BUCKETS[0] {
            // Now's own tick: its timers may be due or not yet.
            let current = Geometry::sentinel(0, from.wrapping_add(crossed));
            self.replace_all(current, READY);
        }
    }

    /// A coarser level after its tick moved `crossed` ticks past `from`: every crossed
    /// bucket's timers are re-placed relative to the new time.
    fn cascade(&mut self, level: usize, from: u64, crossed: u64) {
        for step in 1..=crossed.min(BUCKETS[level]) {
            let bucket = Geometry::sentinel(level, from.wrapping_add(step));
            self.replace_all(bucket, READY);
        }
    }

    /// Empties `bucket` and places each of its timers afresh, due ones into `due`.
    fn replace_all(&mut self, bucket: u32, due: u32) {
        let Some((first, last)) = self.slab.detach(bucket) else {
            return;
        };
        let mut index = first;
        loop {
            // place() rewrites the links, so read the next one first.
            let next = self.slab.nodes[index as usize].next;
            self.place(index, due);
            if index == last {
                break;
            }
            index = next;
        }
    }

    /// Links an unlinked timer into the bucket its deadline calls for relative to the
    /// wheel's time, or into `due` when it is already due.
    #[inline]
    fn place(&mut self, index: u32, due: u32) {
        let deadline = self.slab.nodes[index as usize].deadline;
        let now = self.now;
        let bucket = if is_due(deadline, now) {
            due
        } else {
            self.bucket_for(deadline, now)
        };
        self.slab.push_back(bucket, index);
    }

    /// The bucket for a deadline after `now`: the finest level whose window still reaches
    /// the deadline's tick, else the overflow.
    #[inline]
    fn bucket_for(&self, deadline: u64, now: u64) -> u32 {
        for level in 0..LEVELS - 1 {
            if self.geometry.ticks_between(level, now, deadline) < BUCKETS[level] {
                return Geometry::sentinel(level, self.geometry.tick(level, deadline));
            }
        }
        FIRST_SENTINEL[LEVELS - 1]
    }

    /// The level-0 bucket of the wheel's current tick.
    #[inline]
    fn current_bucket(&self) -> u32 {
        Geometry::sentinel(0, self.geometry.tick(0, self.now))
    }

    /// `None` when empty. Otherwise `Some(d)`, `d >= 1`: how long the owner may sleep before
    /// the next advance could yield or cascade anything. A loop of `now += d; advance(now)`
    /// yields every timer at most one resolution after its deadline.
    ///
    /// O(1): one bitmap rotation per level (Caffeine's getExpirationDelay + peekAhead, made
    /// exact by the occupancy bitmaps).
    pub fn next_expiration_delay(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        if !self.slab.is_empty_list(READY) {
            return Some(1);
        }
        let now = self.now;
        let mut best = u64::MAX;
        for level in 0..LEVELS {
            let bits = self.slab.occupied[level];
            if bits == 0 {
                continue;
            }
            let tick = self.geometry.tick(level, now);
            let buckets = BUCKETS[level];
            // Distance, in buckets, from the current one to the first occupied one.
            let ahead = u64::from(
                rotate_right(bits, (tick & (buckets - 1)) as u32, buckets as u32).trailing_zeros(),
            );
            // Level 0: a bucket is done once its tick has ended (then all of it is due).
            // Coarser levels and the overflow: a bucket cascades when its tick begins; the
            // overflow's "bucket" is re-placed at every turn of the top tick.
            let wake_tick = if level == 0 || level == LEVELS - 1 {
                tick.wrapping_add(ahead + 1)
            } else {
                // A coarser level never holds its current tick, so `ahead >= 1`.
                tick.wrapping_add(ahead.max(1))
            };
            let delay = self.geometry.tick_start(level, wake_tick).wrapping_sub(now);
            best = best.min(delay.max(1));
        }
        Some(best)
    }

    /// [`next_expiration_delay`](Self::next_expiration_delay) as a `Duration`: how long an
    /// event loop may sleep before its next [`advance`](Self::advance); `None` when empty.
    ///
    /// ```
    /// use ackwheel::TimerWheel;
    /// use std::time::Duration;
    ///
    /// let mut wheel = TimerWheel::with_resolution(0, Duration::from_millis(1));
    /// assert_eq!(wheel.next_expiration(), None);
    /// wheel.schedule_after(Duration::from_millis(5), ());
    /// let sleep = wheel.next_expiration().unwrap();
    /// assert!(sleep <= Duration::from_millis(6));
    /// ```
    pub fn next_expiration(&self) -> Option<Duration> {
        self.next_expiration_delay().map(Duration::from_nanos)
    }

    /// Every timer once, in Caffeine's ascending order: timers found due but not yet
    /// yielded first; then wheels finest to coarsest; in each, buckets from the one after
    /// the current bucket round to the current one; each bucket in insertion order.
    /// `iter().rev()` is the descending order.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter::new(self)
    }
}

/// `bits`' lowest `width` bits rotated right by `by`, so bit `by` lands at bit 0.
#[inline]
fn rotate_right(bits: u64, by: u32, width: u32) -> u64 {
    if width == 64 {
        return bits.rotate_right(by);
    }
    let mask = (1u64 << width) - 1;
    ((bits >> by) | (bits << (width - by))) & mask
}

/// A delay as nanoseconds on the wrapping timeline: at most 2^63 - 1, the farthest a
/// deadline can be and still compare as later.
fn horizon_nanos(delay: Duration) -> u64 {
    duration_nanos(delay).min(i64::MAX as u64)
}

/// A wheel at time 0 with Caffeine's geometry: for a [`ManualClock`](crate::ManualClock)
/// that starts at 0 (`ManualClock::default()`). With a real clock start the wheel at its
/// reading: [`TimerWheel::new`]`(clock.now())`.
impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("now", &self.now)
            .field("resolution", &self.resolution())
            .field("len", &self.len())
            .finish()
    }
}

impl<'a, T> IntoIterator for &'a TimerWheel<T> {
    type Item = (TimerKey, u64, &'a T);
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

#[cfg(test)]
mod tests;
