//! The `max_pending` bound, kept as credits in per-thread stripes.
//!
//! An entry (a tree or an orphan) needs one credit while it is held; there are
//! `max_pending` credits in all. They live in a few cache-padded counters, *stripes*, and a
//! thread takes from and gives back to the stripe its index picks. Two busy threads
//! therefore do not fight over one cache line for every new and every completed tree, as
//! they did over a single `pending` counter (that counter's `lock dec` was 76% of the
//! completion path's samples with two threads; counting nothing at all took 87 -> 72-77 ns
//! per operation). With stripes, 2 threads each running 1k trees in flight (init + 4 acks):
//! 87.1 -> 81.7 ns per operation, the mean of five alternating runs' medians; 1 thread
//! unchanged.
//!
//! ## Why the bound stays exact
//!
//! Every change is one atomic RMW on one stripe: a take is a CAS `c -> c - 1` made only
//! when `c > 0`, a give-back a `fetch_add(1)`. No credit is ever in a thread's hands
//! between two counters, so:
//!
//! * the credits held in all stripes plus the entries held is always `max_pending`, and
//!   since no stripe goes below zero, never more than `max_pending` entries are held;
//! * a take fails only after it found every stripe at zero, each at the moment it looked.
//!   On one thread that is exactly "`max_pending` entries held". With other threads
//!   taking and giving back during the scan, a credit given back to a stripe already
//!   looked at is missed, as the single counter missed the room a concurrent refuser held
//!   for an instant: a refusal can come one concurrent operation early, never for a
//!   credit that sat in a thread's hands.
//!
//! A thread whose own stripe is empty takes from the others (its index onwards), one credit
//! per take: moving many at once would put credits in its hands. When one thread starts
//! trees and another completes them (a spout and its bolts), the starter keeps taking from
//! the completer's stripe, which costs what the single counter did, no more.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicUsize, Ordering};

/// The credits of one acker.
#[derive(Debug)]
pub(super) struct Credits {
    stripes: Box<[CachePadded<AtomicUsize>]>,
    max: usize,
}

impl Credits {
    /// `max` credits spread over `stripes` (a power of two) stripes.
    pub(super) fn new(max: usize, stripes: usize) -> Self {
        debug_assert!(stripes.is_power_of_two());
        let (each, rest) = (max / stripes, max % stripes);
        Credits {
            stripes: (0..stripes)
                .map(|i| CachePadded::new(AtomicUsize::new(each + usize::from(i < rest))))
                .collect(),
            max,
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

    /// Takes one credit: `false` when every stripe was empty (`max_pending` entries held).
    #[inline]
    pub(super) fn take(&self) -> bool {
        let mask = self.stripes.len() - 1;
        let own = stripe_index();
        (0..=mask).any(|i| take_one(&self.stripes[(own + i) & mask]))
    }

    /// Gives one credit back (an entry was completed or dropped).
    #[inline]
    pub(super) fn give(&self) {
        self.give_many(1);
    }

    /// Gives `n` credits back at once (the reaper, for the entries one pass ended).
    #[inline]
    pub(super) fn give_many(&self, n: usize) {
        if n > 0 {
            own_stripe(&self.stripes).fetch_add(n, Ordering::SeqCst);
        }
    }

    /// Every stripe empty, as a take would find them.
    #[cfg(test)]
    pub(super) fn exhausted(&self) -> bool {
        self.stripes.iter().all(|s| s.load(Ordering::SeqCst) == 0)
    }

    /// Entries held: exact when no thread is taking or giving back, else within the credits
    /// that moved while the stripes were read.
    pub(super) fn held(&self) -> usize {
        let free: usize = self.stripes.iter().map(|s| s.load(Ordering::SeqCst)).sum();
        self.max.saturating_sub(free)
    }
}

/// The calling thread's element of `stripes`, whose length is a power of two: its credit
/// stripe, and (in the acker) its set of counters.
#[inline]
pub(super) fn own_stripe<S>(stripes: &[S]) -> &S {
    &stripes[stripe_index() & (stripes.len() - 1)]
}

/// Takes one credit from `stripe` if it has one. A CAS rather than a `fetch_sub` that is
/// undone on zero: the undo would leave the stripe at -1 for a moment, a credit missing
/// for every other thread that looks.
#[inline]
fn take_one(stripe: &AtomicUsize) -> bool {
    let mut credits = stripe.load(Ordering::SeqCst);
    while credits > 0 {
        match stripe.compare_exchange_weak(credits, credits - 1, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => return true,
            Err(now) => credits = now,
        }
    }
    false
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

    #[test]
    fn credits_are_exact_on_one_thread() {
        for (max, stripes) in [(1, 4), (5, 4), (8, 2), (1000, 16)] {
            let credits = Credits::new(max, stripes);
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
        let credits = Credits::new(3, 8);
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
        let credits = Credits::new(4, 2);
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
}
