//! The wheel's iterators: [`Advance`] drains the ready list; [`Iter`] walks every timer.

use std::fmt;
use std::iter::FusedIterator;

use super::geometry::{Geometry, BUCKETS, FIRST_SENTINEL, LEVELS, READY, SENTINELS};
use super::{Expired, TimerKey, TimerWheel};

/// The due timers of one [`TimerWheel::advance`], yielded lazily.
///
/// Dropping it early leaves the rest in the wheel for the next advance.
pub struct Advance<'a, T> {
    wheel: &'a mut TimerWheel<T>,
    /// `false` for a backward move: nothing may be yielded, not even leftovers, because
    /// they were due at a later time than the one asked about.
    forward: bool,
}

impl<'a, T> Advance<'a, T> {
    pub(super) fn new(wheel: &'a mut TimerWheel<T>, forward: bool) -> Self {
        Advance { wheel, forward }
    }
}

impl<T> Iterator for Advance<'_, T> {
    type Item = Expired<T>;

    #[inline]
    fn next(&mut self) -> Option<Expired<T>> {
        if !self.forward {
            return None;
        }
        let slab = &mut self.wheel.slab;
        let index = slab.pop_front(READY)?;
        let node = &slab.nodes[index as usize];
        let key = TimerKey {
            index,
            generation: node.generation,
        };
        let deadline = node.deadline;
        let value = slab.free(index);
        Some(Expired {
            key,
            deadline,
            value,
        })
    }
}

impl<T> FusedIterator for Advance<'_, T> {}

impl<T> fmt::Debug for Advance<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Advance")
            .field("now", &self.wheel.now)
            .field("forward", &self.forward)
            .finish_non_exhaustive()
    }
}

/// Every timer of a wheel once, as `(key, deadline, &value)`; see [`TimerWheel::iter`].
pub struct Iter<'a, T> {
    wheel: &'a TimerWheel<T>,
    /// Position in the list order (see `list_at`) and node of each end.
    front: (u32, u32),
    back: (u32, u32),
    /// Timers not yet yielded from either end; the ends stop when it reaches zero, which is
    /// exactly when they meet.
    remaining: usize,
}

impl<'a, T> Iter<'a, T> {
    pub(super) fn new(wheel: &'a TimerWheel<T>) -> Self {
        let front = (0, Self::list_at(wheel, 0));
        let back = (SENTINELS - 1, Self::list_at(wheel, SENTINELS - 1));
        Iter {
            wheel,
            front,
            back,
            remaining: wheel.len(),
        }
    }

    /// The sentinel of the `position`-th list in ascending order: ready first, then each
    /// level from the bucket after its current one round to the current one.
    fn list_at(wheel: &TimerWheel<T>, position: u32) -> u32 {
        if position == 0 {
            return READY;
        }
        let mut offset = u64::from(position - 1);
        for level in 0..LEVELS {
            if offset < BUCKETS[level] {
                let current = wheel.geometry.tick(level, wheel.now);
                return Geometry::sentinel(level, current.wrapping_add(1 + offset));
            }
            offset -= BUCKETS[level];
        }
        unreachable!(
            "position {position} beyond the last list (levels start at {FIRST_SENTINEL:?})"
        )
    }

    fn item(&self, index: u32) -> (TimerKey, u64, &'a T) {
        let node = &self.wheel.slab.nodes[index as usize];
        let value = self.wheel.slab.value(index);
        (
            TimerKey {
                index,
                generation: node.generation,
            },
            node.deadline,
            value,
        )
    }
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = (TimerKey, u64, &'a T);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let nodes = &self.wheel.slab.nodes;
        loop {
            // The cursor is a list's sentinel (nothing yielded from it yet) or the node last
            // yielded; either way the next node follows it.
            let (position, cursor) = &mut self.front;
            let next = nodes[*cursor as usize].next;
            if next < SENTINELS {
                // End of this list: on to the next one.
                *position += 1;
                *cursor = Self::list_at(self.wheel, *position);
                continue;
            }
            *cursor = next;
            self.remaining -= 1;
            return Some(self.item(next));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let nodes = &self.wheel.slab.nodes;
        loop {
            let (position, cursor) = &mut self.back;
            let prev = nodes[*cursor as usize].prev;
            if prev < SENTINELS {
                *position -= 1;
                *cursor = Self::list_at(self.wheel, *position);
                continue;
            }
            *cursor = prev;
            self.remaining -= 1;
            return Some(self.item(prev));
        }
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}
impl<T> FusedIterator for Iter<'_, T> {}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}
