//! The `max_pending` bound, kept as credits in per-thread stripes and hands.
//!
//! An entry (a tree or an orphan) needs one credit while it is held; there are
//! `max_pending` credits in all. They live in a few cache-padded counters, *stripes*, and
//! in the *hands* of the threads that operate on the acker. Two busy threads therefore do
//! not fight over one cache line for every new and every completed tree, as they did over a
//! single `pending` counter (that counter's `lock dec` was 76% of the completion path's
//! samples with two threads; counting nothing at all took 87 -> 72-77 ns per operation).
//!
//! ## Hands
//!
//! A thread takes credits from the stripes a *chunk* at a time into its hand (a counter in
//! its record for the acker, [`threads`](crate::acker::threads)), and a claim takes one
//! from the hand; a completion gives its credit back to the hand, and a hand that holds
//! more than two chunks gives one back to the thread's stripe. Only the owner writes its
//! hand, with plain loads and stores: a tree's credit costs no locked instruction, where a
//! stripe's take (a CAS) and give-back (a `lock xadd`) cost two (`python3
//! benches/instructions/count.py acker`: 10 locked instructions a tree before hands, 8
//! with them). When
//! a thread ends, its record is abandoned with its hand; the reaper's pass (and a take that
//! finds no credit anywhere else) moves an abandoned hand back to the stripes before the
//! record goes.
//!
//! The chunk is at most 32 and at most `max_pending / (64 * stripes)`: an acker bounded
//! below 128 credits a stripe has no hands (a chunk of 1), and takes and gives back on the
//! stripes alone; so do threads with no record (an exiting thread's operations).
//!
//! ## What the bound promises
//!
//! Every change moves credits between a stripe, a hand and the entries, and no credit is
//! ever anywhere else, so:
//!
//! * the credits in all stripes and hands plus the entries held is always `max_pending`,
//!   and since neither goes below zero, never more than `max_pending` entries are held;
//! * a take fails only after it found its hand empty and every stripe at zero, each at the
//!   moment it looked. With a chunk of 1 on one thread that is exactly "`max_pending`
//!   entries held". With hands, a refusal can come while other threads' hands hold credits:
//!   at most two chunks each (their owners keep them for their next claims), so early by at
//!   most `2 * chunk` a thread, 1/32 of `max_pending` with 16 threads. With other threads
//!   taking and giving back during the scan, a credit given back to a stripe already looked
//!   at is missed too: a refusal can come one concurrent operation early.
//!
//! A thread whose own stripe is empty takes from the others (its index onwards). When one
//! thread starts trees and another completes them (a spout and its bolts), the starter
//! keeps taking chunks from the completer's stripe, and the completer gives a chunk back
//! each `chunk` completions.

use crossbeam_utils::CachePadded;

use crate::acker::threads::Threads;
use crate::sync::{Arc, AtomicUsize, Ordering};

/// The most credits a hand takes at once ("Hands").
const MAX_CHUNK: usize = 32;

/// The credits of one acker.
#[derive(Debug)]
pub struct Credits {
    stripes: Box<[CachePadded<AtomicUsize>]>,
    max: usize,
    /// Credits a hand takes from the stripes at once; 1: no hands ("Hands").
    chunk: usize,
    /// The records whose hands hold credits.
    threads: Arc<Threads>,
}

impl Credits {
    /// `max` credits spread over `stripes` (a power of two) stripes, and the hands of
    /// `threads`' records.
    pub fn new(max: usize, stripes: usize, threads: Arc<Threads>) -> Self {
        debug_assert!(stripes.is_power_of_two());
        let (each, rest) = (max / stripes, max % stripes);
        Credits {
            stripes: (0..stripes)
                .map(|i| CachePadded::new(AtomicUsize::new(each + usize::from(i < rest))))
                .collect(),
            max,
            chunk: (max / (64 * stripes)).clamp(1, MAX_CHUNK),
            threads,
        }
    }

    /// The stripe count for `cores` cores: one per thread that can run at once, and some
    /// to spare so that a few more threads (the reaper, a spout) rarely share one.
    pub(super) fn stripes_for(cores: usize) -> usize {
        if cfg!(loom) {
            return 2;
        }
        (2 * cores).next_power_of_two().clamp(2, 64)
    }

    /// [`new`](Self::new) with hands of `chunk` credits, for the loom models, whose
    /// bounds are too small for hands.
    #[cfg(loom)]
    pub fn with_chunk(max: usize, stripes: usize, chunk: usize, threads: Arc<Threads>) -> Self {
        Credits {
            chunk,
            ..Self::new(max, stripes, threads)
        }
    }

    /// Takes one credit from the calling thread's hand (looked up): the tests'.
    #[cfg(test)]
    fn take(&self) -> bool {
        self.take_with(self.threads.own_hand())
    }

    /// Gives one credit back to the calling thread's hand (looked up): the tests'.
    #[cfg(test)]
    fn give(&self) {
        self.give_with(self.threads.own_hand());
    }

    /// Takes one credit, from `hand` (the calling thread's, which the operation's record
    /// has at hand), or from the stripes when `None` or the acker has no hands: `false`
    /// when the hand and every stripe were empty (module docs, "What the bound promises").
    #[inline]
    pub fn take_with(&self, hand: Option<&AtomicUsize>) -> bool {
        match hand {
            Some(hand) if self.chunk > 1 => self.take_in(hand),
            _ => self.take_one(),
        }
    }

    /// Gives one credit back (an entry was completed or dropped): to `hand`, the calling
    /// thread's, or to its stripe when `None` or the acker has no hands.
    #[inline]
    pub fn give_with(&self, hand: Option<&AtomicUsize>) {
        match hand {
            Some(hand) if self.chunk > 1 => self.give_in(hand, 1),
            _ => self.give_many(1),
        }
    }

    /// [`take_with`](Self::take_with) from `hand`, which only the calling thread writes.
    #[inline]
    pub fn take_in(&self, hand: &AtomicUsize) -> bool {
        // Relaxed (load and store): the owner's own counter; another thread reads it only
        // as a hint (`held`), or once the owner is gone (`Threads::reclaim_hands`).
        let have = hand.load(Ordering::Relaxed);
        if have > 0 {
            hand.store(have - 1, Ordering::Relaxed);
            return true;
        }
        self.refill(hand)
    }

    /// [`give_with`](Self::give_with) to `hand`, which only the calling thread writes:
    /// past two chunks, one goes back to the thread's stripe.
    #[inline]
    pub fn give_in(&self, hand: &AtomicUsize, n: usize) {
        // Relaxed: as in `take_in`.
        let have = hand.load(Ordering::Relaxed) + n;
        if have <= 2 * self.chunk {
            hand.store(have, Ordering::Relaxed); // Relaxed: as in `take_in`.
        } else {
            self.spill(hand, have);
        }
    }

    /// A hand that would hold `have`, more than two chunks, keeps one and gives the rest
    /// back to the thread's stripe.
    #[cold]
    fn spill(&self, hand: &AtomicUsize, have: usize) {
        self.give_many(have - self.chunk);
        hand.store(self.chunk, Ordering::Relaxed); // Relaxed: as in `take_in`.
    }

    /// One credit from the stripes (no hands).
    #[inline(never)]
    fn take_one(&self) -> bool {
        self.take_from_stripes(1) == 1
    }

    /// An empty hand takes a chunk (or what is left) from the stripes, and one of it:
    /// `false` when none was left, not even in abandoned hands.
    #[cold]
    fn refill(&self, hand: &AtomicUsize) -> bool {
        let mut took = self.take_from_stripes(self.chunk);
        if took == 0 {
            self.reclaim();
            took = self.take_from_stripes(self.chunk);
        }
        if took == 0 {
            return false;
        }
        hand.store(took - 1, Ordering::Relaxed); // Relaxed: as in `take_in`.
        true
    }

    /// Takes up to `most` credits from the first stripe that has any, from the calling
    /// thread's onwards: how many.
    fn take_from_stripes(&self, most: usize) -> usize {
        let mask = self.stripes.len() - 1;
        let own = stripe_index();
        (0..=mask)
            .map(|i| take_some(&self.stripes[(own + i) & mask], most))
            .find(|&took| took > 0)
            .unwrap_or(0)
    }

    /// Gives `n` credits back at once to the calling thread's stripe (the reaper, for the
    /// entries one pass ended; a hand's surplus).
    #[inline(never)]
    pub fn give_many(&self, n: usize) {
        if n > 0 {
            own_stripe(&self.stripes).fetch_add(n, Ordering::SeqCst);
        }
    }

    /// Moves the hands of abandoned records (threads that ended) back to the stripes, so
    /// that their records can go: the reaper, each pass.
    pub fn reclaim(&self) {
        self.give_many(self.threads.reclaim_hands());
    }

    /// Every stripe empty, as a take would find them.
    #[cfg(test)]
    pub(super) fn exhausted(&self) -> bool {
        self.stripes.iter().all(|s| s.load(Ordering::SeqCst) == 0)
    }

    /// The credits in the stripes and the hands, summed without the saturation of
    /// [`held`](Self::held): with no entry held and no thread taking or giving, exactly
    /// `max_pending` (more would be credits made, fewer credits lost). For the tests and
    /// loom models.
    #[cfg(any(test, loom))]
    pub fn free(&self) -> usize {
        self.in_stripes() + self.threads.in_hands()
    }

    /// The credits a hand takes at once ("Hands").
    #[cfg(any(test, loom))]
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Entries held: exact when no thread is taking or giving back, else within the credits
    /// that moved while the stripes were read.
    pub fn held(&self) -> usize {
        self.held_without_hands()
            .saturating_sub(self.threads.in_hands())
    }

    /// [`held`](Self::held) with the hands' credits counted as held: high by what the
    /// hands hold (at most two chunks a thread), and read without a lock.
    pub fn held_without_hands(&self) -> usize {
        self.max.saturating_sub(self.in_stripes())
    }

    /// The credits in the stripes.
    fn in_stripes(&self) -> usize {
        self.stripes.iter().map(|s| s.load(Ordering::SeqCst)).sum()
    }
}

/// The calling thread's element of `stripes`, whose length is a power of two: its credit
/// stripe, and (in the acker) its set of counters.
#[inline]
pub(super) fn own_stripe<S>(stripes: &[S]) -> &S {
    &stripes[stripe_index() & (stripes.len() - 1)]
}

/// Takes up to `most` credits from `stripe`, as many as it has: how many. A CAS rather than
/// a `fetch_sub` that is undone past zero: the undo would leave the stripe below zero for a
/// moment, credits missing for every other thread that looks.
#[inline]
fn take_some(stripe: &AtomicUsize, most: usize) -> usize {
    let mut credits = stripe.load(Ordering::SeqCst);
    while credits > 0 {
        let took = credits.min(most);
        match stripe.compare_exchange_weak(
            credits,
            credits - took,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => return took,
            Err(now) => credits = now,
        }
    }
    0
}

#[cfg(not(loom))]
thread_local! {
    /// This thread's stripe index, `usize::MAX` until it first needs one.
    static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Gives this thread the stripe index `index`: for tests that need two threads on given
/// stripes (and so on given lanes).
#[cfg(all(test, not(loom)))]
pub(super) fn set_stripe_index(index: usize) {
    INDEX.with(|own| own.set(index));
}

/// This thread's stripe index (before masking): threads are numbered in the order they
/// first take or give back, so the first threads each get a stripe of their own.
#[cfg(not(loom))]
#[inline]
pub(crate) fn stripe_index() -> usize {
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    static NEXT: StdAtomicUsize = StdAtomicUsize::new(0);
    INDEX
        .try_with(|index| {
            if index.get() == usize::MAX {
                // Relaxed: the number only spreads threads over stripes; any value is
                // correct.
                index.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            }
            index.get()
        })
        // During thread-local teardown: any stripe is correct.
        .unwrap_or(0)
}

/// Under loom: the model thread's number, which is the same in every execution (loom's
/// `ThreadId` hashes an execution id too, and shows only the number).
#[cfg(loom)]
pub(crate) fn stripe_index() -> usize {
    let id = format!("{:?}", crate::sync::thread::current().id());
    id.trim_start_matches("ThreadId(")
        .trim_end_matches(')')
        .parse()
        .unwrap_or(0)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::fences::Fences;

    fn credits(max: usize, stripes: usize) -> Credits {
        Credits::new(max, stripes, Arc::new(Threads::new(Fences::Symmetric)))
    }

    #[test]
    fn credits_are_exact_on_one_thread() {
        for (max, stripes) in [(1, 4), (5, 4), (8, 2), (1000, 16)] {
            let credits = credits(max, stripes);
            for held in 0..max {
                assert_eq!(credits.held(), held);
                assert!(credits.take(), "take {held} of {max}");
            }
            assert!(credits.exhausted());
            assert!(!credits.take(), "max {max}: one past the bound");
            assert_eq!(credits.held(), max);
            credits.give();
            assert!(!credits.exhausted());
            assert!(credits.take(), "max {max}: the credit given back");
            assert!(!credits.take());
        }
    }

    #[test]
    fn credits_given_back_on_another_thread_are_found() {
        let credits = credits(3, 8);
        for _ in 0..3 {
            assert!(credits.take());
        }
        // Another thread completes the entries: its stripe gets the credits.
        std::thread::scope(|s| {
            s.spawn(|| (0..3).for_each(|_| credits.give()));
        });
        for _ in 0..3 {
            assert!(credits.take());
        }
        assert!(!credits.take());
    }

    #[test]
    fn threads_taking_and_giving_never_exceed_the_bound() {
        let credits = credits(4, 2);
        let held = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if credits.take() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= 4, "{now} entries held of 4");
                            held.fetch_sub(1, Ordering::SeqCst);
                            credits.give();
                        }
                    }
                });
            }
        });
        assert_eq!(credits.held(), 0);
        assert!((0..4).all(|_| credits.take()));
        assert!(!credits.take());
    }

    /// 512 credits over 2 stripes: hands of 4.
    fn with_hands() -> Credits {
        let credits = credits(512, 2);
        assert_eq!(credits.chunk(), 4);
        credits
    }

    #[test]
    fn a_hand_takes_a_chunk_and_its_spare_credits_count_as_free() {
        let credits = with_hands();
        assert!(credits.take());
        let stripes = credits.in_stripes();
        assert_eq!(stripes, 512 - 4, "one chunk taken from the stripes");
        assert_eq!((credits.held(), credits.free()), (1, 511));
        for held in 2..=4 {
            assert!(credits.take());
            assert_eq!(credits.held(), held, "taken from the hand");
        }
        let stripes = credits.in_stripes();
        assert_eq!(stripes, 512 - 4, "the chunk's four, then nothing more");
        for _ in 0..4 {
            credits.give();
        }
        assert_eq!((credits.held(), credits.free()), (0, 512));
    }

    #[test]
    fn a_hand_past_two_chunks_gives_one_back() {
        let credits = with_hands();
        // Another thread takes ten: its hand is empty again after the third chunk.
        std::thread::scope(|s| {
            s.spawn(|| (0..12).for_each(|_| assert!(credits.take())));
        });
        // This one completes them: its hand grows to 8, then gives 5 back at the ninth.
        for given in 1..=12 {
            credits.give();
            let hand = credits.threads.own_hand().unwrap().load(Ordering::SeqCst);
            assert!(hand <= 8, "{hand} credits in hand after {given} given back");
        }
        assert_eq!((credits.held(), credits.free()), (0, 512));
    }

    #[test]
    fn one_thread_with_hands_takes_exactly_max() {
        let credits = with_hands();
        for held in 0..512 {
            assert!(credits.take(), "take {held} of 512");
        }
        assert!(!credits.take(), "one past the bound");
        assert_eq!((credits.held(), credits.free()), (512, 0));
        credits.give();
        assert!(credits.take(), "the credit given back");
        assert!(!credits.take());
    }

    #[test]
    fn an_ended_threads_hand_is_reclaimed() {
        let credits = Arc::new(with_hands());
        // A thread that takes one credit (a chunk of four into its hand) and ends: joined,
        // so its thread-locals, which abandon its record, are gone too.
        let one_and_end = |credits: &Arc<Credits>| {
            let credits = Arc::clone(credits);
            std::thread::spawn(move || assert!(credits.take()))
                .join()
                .unwrap();
        };
        one_and_end(&credits);
        assert_eq!(
            (credits.held(), credits.free()),
            (1, 511),
            "its hand counts as free"
        );
        // Every credit but its entry's can be taken: the last three from its hand.
        for held in 1..512 {
            assert!(credits.take(), "take {held} of 511");
        }
        assert!(!credits.take());
        assert_eq!(
            credits.threads.reclaim_hands(),
            0,
            "reclaimed when the stripes ran out"
        );
        // A second one ends with three in hand; the reaper's reclaim gives them back.
        credits.give_many(8);
        one_and_end(&credits);
        credits.reclaim();
        assert_eq!(credits.threads.reclaim_hands(), 0);
        let stripes = credits.in_stripes();
        assert_eq!(
            stripes,
            8 - 1,
            "its hand's three back, its entry's credit held"
        );
        assert_eq!(credits.free(), 8 - 1);
    }

    #[test]
    fn a_refusal_comes_early_by_other_hands_at_most() {
        let credits = with_hands();
        let (taken, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            // A live thread keeps three credits in its hand.
            s.spawn(|| {
                assert!(credits.take());
                taken.wait();
                release.wait();
            });
            taken.wait();
            let took = (0..512).take_while(|_| credits.take()).count();
            assert_eq!(
                took,
                512 - 1 - 3,
                "refused with the other thread's spare three"
            );
            assert!(took + 1 + 2 * credits.chunk() >= 512);
            release.wait();
        });
    }
}
