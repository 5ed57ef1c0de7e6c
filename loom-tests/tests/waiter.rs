//! Loom models of a tracked tree's waiter cell (`src/future/waiter.rs`): the tree's side
//! ending the tree (completing it, closing it, handing its payload back) against the
//! caller's side polling (registering a waker, replacing it) or dropping its receiver.
//!
//! Every access to the cell's payload, elapsed time and waker slot goes through a loom
//! `UnsafeCell`, so two sides in one slot at once is reported; the models also check that
//! the payload is dropped exactly once, whoever ends up with it, that a completion is seen
//! whole (payload, outcome, elapsed), and that a task left pending is woken.
#![cfg(loom)]

use std::future::poll_fn;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ackwheel::future::waiter::{pair, Receiver};
use ackwheel::Outcome;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A payload that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that sets a flag.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: StdArc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn flag() -> (StdArc<Flag>, Waker) {
    let flag = StdArc::new(Flag(AtomicBool::new(false)));
    (StdArc::clone(&flag), Waker::from(flag))
}

/// The caller awaits (loom's `block_on` parks until woken) while another thread completes
/// the tree: the completion arrives whole, and the payload is dropped once.
#[test]
fn complete_vs_await_delivers_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
        let completer = thread::spawn(move || {
            waiter.complete(Outcome::TimedOut, Duration::from_nanos(42));
        });
        let resolved = loom::future::block_on(poll_fn(|cx| rx.poll(cx)));
        let (payload, outcome, elapsed) = resolved.expect("a completion, not closed");
        assert_eq!(
            (outcome, elapsed),
            (Outcome::TimedOut, Duration::from_nanos(42))
        );
        drop(payload);
        drop(rx);
        completer.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// The caller polls twice with two different wakers (a task moved), racing a completion:
/// whichever waker is registered last when the tree completes is woken, or the second poll
/// itself sees the completion.
#[test]
fn complete_vs_a_waker_replaced() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
        let (first, w1) = flag();
        let (second, w2) = flag();
        assert!(rx.poll(&mut Context::from_waker(&w1)).is_pending());
        let completer = thread::spawn(move || {
            waiter.complete(Outcome::Acked, Duration::ZERO);
        });
        let polled = rx.poll(&mut Context::from_waker(&w2));
        completer.join().unwrap();
        match polled {
            Poll::Ready(resolved) => drop(resolved.expect("completed")),
            Poll::Pending => {
                // The second waker was registered before the completion took it.
                assert!(
                    second.0.load(Ordering::SeqCst),
                    "the registered task was not woken"
                );
                assert!(
                    !first.0.load(Ordering::SeqCst),
                    "the replaced waker was woken"
                );
                match rx.poll(&mut Context::from_waker(&w2)) {
                    Poll::Ready(resolved) => drop(resolved.expect("completed")),
                    Poll::Pending => panic!("woken but not ready"),
                }
            }
        }
        drop(rx);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// The caller drops its receiver (after registering a waker) while the tree completes: the
/// payload is dropped once, by whichever side holds it, and the cell by the last side.
#[test]
fn complete_vs_receiver_dropped() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
        let (_, w) = flag();
        assert!(rx.poll(&mut Context::from_waker(&w)).is_pending());
        let completer = thread::spawn(move || {
            waiter.complete(Outcome::Failed, Duration::from_nanos(7));
        });
        drop(rx);
        completer.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// The tree's side hands the payload back (shutdown) or drops it (its entry dropped)
/// while the caller polls: the receiver resolves to closed, never to a completion.
#[test]
fn close_vs_poll_resolves_closed() {
    for hand_back in [false, true] {
        loom::model(move || {
            let drops = Arc::new(AtomicUsize::new(0));
            let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
            let closer = thread::spawn(move || {
                if hand_back {
                    drop(waiter.into_payload());
                } else {
                    drop(waiter);
                }
            });
            let (woken, w) = flag();
            let first = rx.poll(&mut Context::from_waker(&w));
            closer.join().unwrap();
            let resolved = match first {
                Poll::Ready(resolved) => resolved,
                Poll::Pending => {
                    assert!(woken.0.load(Ordering::SeqCst), "a pending task not woken");
                    match rx.poll(&mut Context::from_waker(&w)) {
                        Poll::Ready(resolved) => resolved,
                        Poll::Pending => panic!("woken but not ready"),
                    }
                }
            };
            assert!(resolved.is_err(), "a closed tree resolved to a completion");
            drop(rx);
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        });
    }
}

/// Both sides let go at once with nothing delivered: the receiver dropped unpolled while
/// the tree completes, so the cell is freed exactly once (loom reports a cell touched
/// after another side freed it as a causality violation on its `UnsafeCell`s).
#[test]
fn complete_vs_unpolled_receiver_dropped() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (waiter, rx): (_, Receiver<Counted>) = pair(Counted(Arc::clone(&drops)));
        let completer = thread::spawn(move || {
            waiter.complete(Outcome::Acked, Duration::ZERO);
        });
        drop(rx);
        completer.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}
