//! A bounded ring of non-zero words: many producers, one consumer (the reaper).
//!
//! Each shard hands the reaper its news through these: two *inbox* rings (a deadline to
//! schedule) and two *retired* rings (a completed slot to free). A writer starts at its own
//! lane's ring of each kind, so that two threads working in one shard do not share a tail
//! and its cells.
//! None runs through the ledger's slots, so the reaper reads and writes only ring cells and
//! its own state, never a slot's cache line, while the threads acking that slot keep the
//! line to themselves.
//!
//! ## Protocol
//!
//! `tail` counts the tickets handed out, `head` the cells consumed; only the consumer (the
//! holder of the acker's wheel lock) moves `head`. A producer takes ticket `t` (a CAS on
//! `tail`, refused when `t - head` would reach the capacity), then stores its word in
//! cell `t % capacity`. The consumer reads cells from `head` on, clears each one, and stops at
//! the first cell still 0: a ticket taken whose word is not stored yet. Everything behind it
//! waits for the next drain, so the ring stays FIFO by ticket. A drain clears a cell before
//! it publishes the `head` that frees it, so a producer whose ticket the new `head` admits
//! finds its cell empty.
//!
//! Tickets are 64-bit counters: they do not wrap in practice.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// A word a ring can carry: `u32` or `u64`, with 0 meaning "empty cell".
pub(crate) trait Word: Copy + Eq + std::fmt::Debug {
    type Cell;
    const EMPTY: Self;
    fn empty_cell() -> Self::Cell;
    fn load(cell: &Self::Cell) -> Self;
    fn store(cell: &Self::Cell, word: Self, order: Ordering);
    fn is_empty(self) -> bool {
        self == Self::EMPTY
    }
}

macro_rules! word {
    ($word:ty, $atomic:ty) => {
        impl Word for $word {
            type Cell = $atomic;
            const EMPTY: Self = 0;
            fn empty_cell() -> $atomic {
                <$atomic>::new(0)
            }
            #[inline]
            fn load(cell: &$atomic) -> Self {
                cell.load(Ordering::SeqCst)
            }
            #[inline]
            fn store(cell: &$atomic, word: Self, order: Ordering) {
                cell.store(word, order)
            }
        }
    };
}
word!(u32, AtomicU32);
word!(u64, AtomicU64);

/// See the module docs.
pub(crate) struct Ring<W: Word> {
    /// Exactly as many as asked for, not a power of two: these rings are sized by the
    /// shard's slot count, and rounding up would waste up to half of them (8 B per root). A
    /// producer pays one division per word (`put`); the consumer walks its cells without one.
    cells: Box<[W::Cell]>,
    /// Tickets handed out.
    tail: CachePadded<AtomicU64>,
    /// Cells consumed; written only by the consumer.
    head: CachePadded<AtomicU64>,
}

impl<W: Word> Ring<W> {
    /// A ring of `capacity` cells (at least 2).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        let cells: Box<[W::Cell]> = (0..capacity).map(|_| W::empty_cell()).collect();
        // Touch every cell now: the allocator may hand out fresh zero pages that become
        // resident only when first written, and tickets go round every cell, so a ring would
        // otherwise fault its pages in on the hot path and grow the process after the build.
        for cell in cells.iter() {
            // Relaxed: nothing else can see the ring yet.
            W::store(cell, W::EMPTY, Ordering::Relaxed);
        }
        Ring {
            cells,
            tail: CachePadded::new(AtomicU64::new(0)),
            head: CachePadded::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cells.len()
    }

    /// Takes a ticket unless the ring is full. The caller must [`put`](Self::put) a word with
    /// it, promptly: the consumer cannot read past an unwritten cell.
    #[inline]
    pub(crate) fn reserve(&self) -> Option<u64> {
        let capacity = self.capacity() as u64;
        let mut tail = self.tail.load(Ordering::SeqCst);
        loop {
            // Saturating: a stale `tail` may be behind a `head` read after it (then the CAS
            // below fails and we look again).
            if tail.saturating_sub(self.head.load(Ordering::SeqCst)) >= capacity {
                return None;
            }
            match self.tail.compare_exchange_weak(
                tail,
                tail + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(tail),
                Err(moved) => tail = moved,
            }
        }
    }

    /// Stores `word` (non-zero) under `ticket`. Returns how many tickets were unconsumed
    /// just before, this one included: roughly the ring's length.
    #[inline]
    pub(crate) fn put(&self, ticket: u64, word: W) -> u64 {
        debug_assert!(!word.is_empty());
        let cell = &self.cells[(ticket % self.capacity() as u64) as usize];
        // Never taken: a ticket is admitted only once the drain that emptied this cell has
        // published its head (`reserve`). Kept as a wait rather than trusted, so a broken
        // bound stalls, never loses.
        while !W::load(cell).is_empty() {
            crate::sync::thread::yield_now();
        }
        // Read before the store, after which the consumer may move past this ticket.
        let len = (ticket + 1).saturating_sub(self.head.load(Ordering::SeqCst));
        // The wake-up protocol rests on the ticket's RMW, not on this store; Release would
        // do for the word's contents. A Release store measured no faster: the wait for the
        // caller's slot line only moved to its next locked instruction.
        W::store(cell, word, Ordering::SeqCst);
        len
    }

    /// Consumer only: hands every word from `head` on to `each`, up to the first unwritten
    /// cell. Returns `true` if it stopped short of a ticket taken before the call.
    pub(crate) fn drain(&self, mut each: impl FnMut(W)) -> bool {
        let mut head = self.head.load(Ordering::SeqCst);
        let tail = self.tail.load(Ordering::SeqCst);
        let mut index = (head % self.capacity() as u64) as usize;
        loop {
            let cell = &self.cells[index];
            let word = W::load(cell);
            if word.is_empty() {
                break;
            }
            // Relaxed: the head store below (SeqCst) publishes the cleared cell to the
            // producer that reserves it next.
            W::store(cell, W::EMPTY, Ordering::Relaxed);
            head += 1;
            index += 1;
            if index == self.capacity() {
                index = 0;
            }
            each(word);
        }
        self.head.store(head, Ordering::SeqCst);
        head < tail
    }

    /// Consumer only: `true` when a ticket has been taken that the consumer has not read.
    /// `tail` is read with an RMW so that the read is ordered with every producer's ticket
    /// (see the reaper's wake-up protocol).
    pub(crate) fn pending(&self) -> bool {
        self.tail.fetch_add(0, Ordering::SeqCst) != self.head.load(Ordering::SeqCst)
    }
}

impl<W: Word> std::fmt::Debug for Ring<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn words_come_out_in_ticket_order_and_the_limit_holds() {
        let ring: Ring<u32> = Ring::new(3);
        assert_eq!(ring.capacity(), 3);
        let a = ring.reserve().unwrap();
        let b = ring.reserve().unwrap();
        assert_eq!(ring.put(b, 20), 2);
        // `a` is not written yet: the drain stops there and says so.
        let mut out = Vec::new();
        assert!(ring.drain(|w| out.push(w)));
        assert!(out.is_empty());
        ring.put(a, 10);
        let c = ring.reserve().unwrap();
        assert_eq!(ring.reserve(), None, "three words already reserved");
        ring.put(c, 30);
        assert!(!ring.drain(|w| out.push(w)));
        assert_eq!(out, [10, 20, 30]);
        assert!(!ring.pending());
        // Round the ring a few times.
        for round in 1..=10u32 {
            for i in 0..3 {
                let t = ring.reserve().unwrap();
                ring.put(t, round * 100 + i);
            }
            assert_eq!(ring.reserve(), None);
            out.clear();
            ring.drain(|w| out.push(w));
            assert_eq!(out, (0..3).map(|i| round * 100 + i).collect::<Vec<_>>());
        }
    }

    #[test]
    fn concurrent_producers_lose_nothing() {
        // 61 cells: tickets wrap round a capacity that is not a power of two.
        let ring: Ring<u64> = Ring::new(61);
        let per = if cfg!(miri) { 50 } else { 20_000 };
        let mut seen = Vec::new();
        std::thread::scope(|s| {
            for p in 0..3u64 {
                let ring = &ring;
                s.spawn(move || {
                    for i in 0..per {
                        let word = (p << 32) | (i + 1);
                        let ticket = loop {
                            match ring.reserve() {
                                Some(t) => break t,
                                None => std::thread::yield_now(),
                            }
                        };
                        ring.put(ticket, word);
                    }
                });
            }
            while seen.len() < 3 * per as usize {
                ring.drain(|w| seen.push(w));
                std::thread::yield_now();
            }
        });
        // Each producer's words arrive once each, in its own order.
        for p in 0..3u64 {
            let mine: Vec<u64> = seen.iter().filter(|w| *w >> 32 == p).copied().collect();
            assert_eq!(mine, (1..=per).map(|i| (p << 32) | i).collect::<Vec<_>>());
        }
    }
}
