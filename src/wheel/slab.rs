//! The wheel's storage: one `Vec` of nodes threaded into circular doubly-linked lists.
//!
//! The first [`SENTINELS`] nodes are list heads, one per bucket plus the ready list; every
//! other node is a timer or free. A timer is in exactly one list at a time, so unlinking is
//! O(1) without knowing which bucket holds it, and a whole bucket moves to another list in
//! O(1) by splicing. Free nodes form a singly-linked free list through `next`, so a warm
//! wheel schedules without allocating.
//!
//! Each node carries a generation that grows every time it is freed; a [`TimerKey`] names a
//! node *and* a generation, so a stale key never touches the timer that reused its node.
//! Generations never wrap: a node whose generation reaches [`RETIRED`] is not put back on
//! the free list, so no generation of a node is ever issued twice. With the free list's
//! LIFO order one node can take every reuse (a schedule/cancel loop reaches 2^32 in about
//! 24 s), so a wrap is a real risk, and retiring costs one 24-byte node per 2^32 − 1 reuses.
//!
//! A node holds its value uninitialized while free: a free node's `prev` is [`NIL`], and
//! `prev != NIL` (for a node past the sentinels) means the value is initialized. A live
//! timer's `prev` is always a real index once `alloc`'s caller has linked it, and `free`
//! sets NIL as it moves the value out. Keeping liveness in `prev` rather than in an
//! `Option<T>` saves the option's tag: a `Node<u32>` is 24 bytes rather than 32, a quarter
//! of a wheel's memory per timer.
//!
//! A bitmap per level (`occupied`) mirrors which buckets are non-empty; it is kept exact on
//! every link, unlink, splice and detach, which lets `next_expiration_delay` find the next
//! non-empty bucket with one rotate and one `trailing_zeros`.
//!
//! [`TimerKey`]: super::TimerKey

use std::mem::MaybeUninit;

use super::geometry::{level_of_sentinel, LEVELS, SENTINELS};

/// Marks the end of the free list, and a free node's `prev`.
const NIL: u32 = u32::MAX;

/// The generation of a node that has been reused as often as its generations allow: it
/// stays free for good (module docs).
pub(crate) const RETIRED: u32 = u32::MAX;

#[derive(Debug)]
pub(crate) struct Node<T> {
    /// [`NIL`] exactly when the node is free (module docs).
    pub(crate) prev: u32,
    pub(crate) next: u32,
    pub(crate) generation: u32,
    pub(crate) deadline: u64,
    /// Initialized exactly when the node is a live timer: past the sentinels, `prev != NIL`.
    value: MaybeUninit<T>,
}

// A node per timer: its size is the wheel's memory per timer (module docs).
const _: () = assert!(std::mem::size_of::<Node<u32>>() == 24);

#[derive(Debug)]
pub(crate) struct Slab<T> {
    pub(crate) nodes: Vec<Node<T>>,
    free: u32,
    len: usize,
    /// Bit `b` of `occupied[l]` is set iff bucket `b` of level `l` holds a timer.
    pub(crate) occupied: [u64; LEVELS],
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        let nodes = (0..SENTINELS)
            .map(|i| Node {
                prev: i,
                next: i,
                generation: 0,
                deadline: 0,
                value: MaybeUninit::uninit(),
            })
            .collect();
        Slab {
            nodes,
            free: NIL,
            len: 0,
            occupied: [0; LEVELS],
        }
    }

    /// Live timers.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The value of the live timer in node `index`.
    ///
    /// # Panics
    /// On a free node or a sentinel: a bug in the wheel, never the caller's input.
    #[inline]
    pub(crate) fn value(&self, index: u32) -> &T {
        let node = &self.nodes[index as usize];
        assert!(
            index >= SENTINELS && node.prev != NIL,
            "read the value of a node that is not a live timer"
        );
        // Safety: past the sentinels, `prev != NIL` means a live timer, whose value is
        // initialized (module docs).
        unsafe { node.value.assume_init_ref() }
    }

    /// As [`value`](Self::value), mutably.
    #[inline]
    pub(crate) fn value_mut(&mut self, index: u32) -> &mut T {
        let node = &mut self.nodes[index as usize];
        assert!(
            index >= SENTINELS && node.prev != NIL,
            "wrote the value of a node that is not a live timer"
        );
        // Safety: as in `value`.
        unsafe { node.value.assume_init_mut() }
    }

    /// The node of a live timer of generation `generation`, if `index` still holds it.
    #[inline]
    pub(crate) fn live(&self, index: u32, generation: u32) -> Option<&Node<T>> {
        let node = self.nodes.get(index as usize)?;
        (index >= SENTINELS && node.generation == generation && node.prev != NIL).then_some(node)
    }

    #[inline]
    pub(crate) fn live_mut(&mut self, index: u32, generation: u32) -> Option<&mut Node<T>> {
        let node = self.nodes.get_mut(index as usize)?;
        (index >= SENTINELS && node.generation == generation && node.prev != NIL).then_some(node)
    }

    /// A node for a new timer, unlinked: the caller links it at once, which makes it live
    /// (`prev != NIL`). Reuses a freed node when there is one.
    ///
    /// # Panics
    /// When 2^32 − 167 timers are live at once (≈130 GiB of nodes): no index is left.
    #[inline]
    pub(crate) fn alloc(&mut self, deadline: u64, value: T) -> (u32, u32) {
        self.len += 1;
        if self.free != NIL {
            let index = self.free;
            let node = &mut self.nodes[index as usize];
            self.free = node.next;
            node.deadline = deadline;
            node.value.write(value);
            return (index, node.generation);
        }
        let index = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("TimerWheel: more than 2^32 timers");
        self.nodes.push(Node {
            prev: NIL,
            next: NIL,
            generation: 0,
            deadline,
            value: MaybeUninit::new(value),
        });
        (index, 0)
    }

    /// Retires an unlinked timer node, returning its value; its key goes stale.
    ///
    /// # Panics
    /// On a free node or a sentinel: a bug in the wheel, never the caller's input.
    #[inline]
    pub(crate) fn free(&mut self, index: u32) -> T {
        assert!(index >= SENTINELS, "freed a sentinel");
        let node = &mut self.nodes[index as usize];
        // `unlink` leaves the node's own links as they were, so a timer just taken out of
        // its list still has its (non-NIL) `prev` here.
        assert!(node.prev != NIL, "freed a node that was not a live timer");
        node.generation += 1; // never past RETIRED: such a node is never allocated again
        node.prev = NIL;
        if node.generation != RETIRED {
            node.next = self.free;
            self.free = index;
        }
        self.len -= 1;
        // Safety: the node was live (checked above, and it is past the sentinels), so its
        // value is initialized; `prev = NIL` marks it free, so it is never read again.
        unsafe { node.value.assume_init_read() }
    }

    #[inline]
    pub(crate) fn is_empty_list(&self, sentinel: u32) -> bool {
        self.nodes[sentinel as usize].next == sentinel
    }

    /// Appends `index` to the list headed by `sentinel`.
    #[inline]
    pub(crate) fn push_back(&mut self, sentinel: u32, index: u32) {
        self.append(sentinel, index, index);
    }

    /// Takes `index` out of whatever list holds it.
    #[inline]
    pub(crate) fn unlink(&mut self, index: u32) {
        let Node { prev, next, .. } = self.nodes[index as usize];
        self.nodes[prev as usize].next = next;
        self.nodes[next as usize].prev = prev;
        // Only the sentinel can be its own neighbour on both sides: the list is now empty.
        if prev == next && prev < SENTINELS {
            self.mark(prev, false);
        }
    }

    /// The first node of `sentinel`'s list, taken out of it.
    #[inline]
    pub(crate) fn pop_front(&mut self, sentinel: u32) -> Option<u32> {
        let first = self.nodes[sentinel as usize].next;
        if first == sentinel {
            return None;
        }
        self.unlink(first);
        Some(first)
    }

    /// Moves every node of `from`'s list to the end of `to`'s, in order. O(1).
    pub(crate) fn splice(&mut self, from: u32, to: u32) {
        if let Some((first, last)) = self.detach(from) {
            self.append(to, first, last);
        }
    }

    /// Links the chain `first` → … → `last` (already linked to each other) at the end of
    /// `sentinel`'s list.
    #[inline]
    fn append(&mut self, sentinel: u32, first: u32, last: u32) {
        let tail = self.nodes[sentinel as usize].prev;
        self.nodes[tail as usize].next = first;
        self.nodes[first as usize].prev = tail;
        self.nodes[last as usize].next = sentinel;
        self.nodes[sentinel as usize].prev = last;
        self.mark(sentinel, true);
    }

    /// Empties `sentinel`'s list and returns its first and last nodes; the nodes keep their
    /// links to each other, so the caller walks `first` → `last` by `next`.
    pub(crate) fn detach(&mut self, sentinel: u32) -> Option<(u32, u32)> {
        let head = &mut self.nodes[sentinel as usize];
        if head.next == sentinel {
            return None;
        }
        let span = (head.next, head.prev);
        head.next = sentinel;
        head.prev = sentinel;
        self.mark(sentinel, false);
        Some(span)
    }

    #[inline]
    fn mark(&mut self, sentinel: u32, occupied: bool) {
        if let Some((level, bucket)) = level_of_sentinel(sentinel) {
            if occupied {
                self.occupied[level] |= 1 << bucket;
            } else {
                self.occupied[level] &= !(1 << bucket);
            }
        }
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        for node in self.nodes.iter_mut().skip(SENTINELS as usize) {
            if node.prev != NIL {
                // Safety: a node past the sentinels with `prev != NIL` holds a live timer's
                // initialized value (module docs); `&mut self` in drop, so it is dropped once.
                unsafe { node.value.assume_init_drop() };
            }
        }
    }
}
