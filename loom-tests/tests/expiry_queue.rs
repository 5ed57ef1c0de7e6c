//! Loom models of `ExpiryQueue`'s update/poll, poll/poll and remove/poll races, and of the
//! wake-up protocol of `wait` (a waiter on an empty queue racing an insert or `close`).
//!
//! Each model checks exactly-once delivery over every interleaving of the queue's locks and
//! atomics. The `ManualClock` is created inside each model (it uses std atomics on purpose:
//! time is an input here, not part of the protocol).
#![cfg(loom)]

use std::time::Duration;

use ackwheel::{ExpiryQueue, ManualClock};
use loom::sync::Arc;
use loom::thread;

const I: Duration = Duration::from_nanos(10);

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// A queue whose clock reads 0, with `elems` filed at the given timeouts.
fn queue(elems: &[(u32, u64)]) -> (ManualClock, Arc<ExpiryQueue<u32>>) {
    let clock = ManualClock::new(0);
    let q = ExpiryQueue::with_clock(I, clock.clone()).unwrap();
    for &(e, timeout) in elems {
        q.update(e, ns(timeout));
    }
    (clock, Arc::new(q))
}

/// Everything still in the queue, polled out by moving the clock to `until`.
fn drain(clock: &ManualClock, q: &ExpiryQueue<u32>, until: u64) -> Vec<u32> {
    clock.set(until);
    let mut out = Vec::new();
    while q.wait_time().is_zero() {
        out.extend(q.poll());
    }
    out.sort_unstable();
    out
}

/// `touch` moving an element to a later bucket races the poll of its current bucket:
/// exactly one of "polled" or "present at the new deadline".
#[test]
fn touch_vs_poll_is_exactly_once() {
    loom::model(|| {
        let (clock, q) = queue(&[(1, 5)]); // bucket 10
        clock.set(10); // bucket 10 is due; touching now files at round(10 + 25) = 40
        let toucher = {
            let q = q.clone();
            thread::spawn(move || q.touch(&1, ns(25)))
        };
        let polled = q.poll();
        let touched = toucher.join().unwrap();
        let was_polled = polled == vec![1];
        assert!(polled.is_empty() || was_polled, "{polled:?}");
        match touched {
            Some(d) => {
                assert_eq!(d, 40);
                assert!(!was_polled, "polled and moved: returned twice");
                assert_eq!(q.deadline(&1), Some(40));
                assert_eq!(drain(&clock, &q, 40), vec![1], "lost after the move");
            }
            None => {
                assert!(was_polled, "neither polled nor present: lost");
                assert_eq!(q.deadline(&1), None);
                assert!(drain(&clock, &q, 40).is_empty());
            }
        }
        assert_eq!(q.bucket_count(), 0, "bucket sets leaked");
    });
}

/// `update` (which inserts when absent) racing the poll: the element is polled at most once
/// from its old bucket and, either way, ends up at its new deadline exactly once.
#[test]
fn update_vs_poll_is_exactly_once_per_deadline() {
    loom::model(|| {
        let (clock, q) = queue(&[(1, 5)]);
        clock.set(10);
        let updater = {
            let q = q.clone();
            thread::spawn(move || q.update(1, ns(25)))
        };
        let polled = q.poll();
        assert_eq!(updater.join().unwrap(), Some(40));
        assert!(polled.is_empty() || polled == vec![1], "{polled:?}");
        assert_eq!(q.deadline(&1), Some(40), "never lost");
        assert_eq!(
            drain(&clock, &q, 40),
            vec![1],
            "returned exactly once at 40"
        );
        assert_eq!(q.bucket_count(), 0);
    });
}

/// Two pollers race with two due buckets: each bucket is taken by exactly one of them and
/// every element comes back exactly once.
#[test]
fn two_pollers_never_share_a_bucket() {
    loom::model(|| {
        let (clock, q) = queue(&[(1, 5), (2, 15), (3, 15)]); // buckets 10 and 20
        clock.set(20);
        let other = {
            let q = q.clone();
            thread::spawn(move || q.poll())
        };
        let mine = q.poll();
        let theirs = other.join().unwrap();
        let mut all: Vec<u32> = mine.iter().chain(&theirs).copied().collect();
        all.sort_unstable();
        // Each poll took one whole bucket: either {1} or {2, 3}.
        assert_eq!(mine.len() + theirs.len(), 3);
        assert!(mine.len() == 1 || theirs.len() == 1, "{mine:?} {theirs:?}");
        assert_eq!(all, vec![1, 2, 3]);
        assert_eq!(q.next_expiration(), 30);
        assert!(q.is_empty());
    });
}

/// Two pollers race for a single due bucket: one takes it, the other finds nothing due.
#[test]
fn two_pollers_one_bucket() {
    loom::model(|| {
        let (clock, q) = queue(&[(1, 5), (2, 5)]); // bucket 10
        clock.set(10);
        let other = {
            let q = q.clone();
            thread::spawn(move || q.poll())
        };
        let mine = q.poll();
        let theirs = other.join().unwrap();
        assert!(mine.is_empty() || theirs.is_empty(), "{mine:?} {theirs:?}");
        let mut all: Vec<u32> = mine.into_iter().chain(theirs).collect();
        all.sort_unstable();
        assert_eq!(all, vec![1, 2]);
        assert_eq!(q.next_expiration(), 20);
    });
}

/// `remove` racing the poll of the element's bucket: exactly one of them gets it.
#[test]
fn remove_vs_poll_is_exactly_once() {
    loom::model(|| {
        let (clock, q) = queue(&[(1, 5), (2, 5)]);
        clock.set(10);
        let remover = {
            let q = q.clone();
            thread::spawn(move || q.remove(&1))
        };
        let polled = q.poll();
        let removed = remover.join().unwrap();
        let polled_1 = polled.contains(&1);
        assert!(polled.contains(&2), "{polled:?}");
        assert_eq!(
            removed.is_some(),
            !polled_1,
            "removed {removed:?}, polled {polled:?}"
        );
        if let Some(d) = removed {
            assert_eq!(d, 10);
        }
        assert!(q.is_empty());
        assert_eq!(q.bucket_count(), 0);
    });
}

/// A clock loom can see: reading it is a modelled atomic load, so loom explores an updater
/// reading the time before or after the poller moves it. (`ManualClock` is std on purpose
/// and invisible to loom, which would treat the reading as independent of everything.)
#[derive(Clone)]
struct LoomClock(Arc<loom::sync::atomic::AtomicU64>);

impl ackwheel::Clock for LoomClock {
    fn now(&self) -> u64 {
        self.0.load(loom::sync::atomic::Ordering::SeqCst)
    }
}

impl LoomClock {
    fn set(&self, now: u64) {
        self.0.store(now, loom::sync::atomic::Ordering::SeqCst);
    }
}

/// An updater whose clock reading is older than the poller's computes a bucket the poller
/// may already have claimed. It must re-file the element under the next bucket to be polled
/// rather than strand it in a set nobody will take: the element comes back exactly once.
#[test]
fn stale_update_vs_poll_never_strands() {
    loom::model(|| {
        let clock = LoomClock(Arc::new(loom::sync::atomic::AtomicU64::new(15)));
        let q = Arc::new(ExpiryQueue::<u32>::with_clock(I, clock.clone()).unwrap());
        assert_eq!(q.next_expiration(), 20);
        let updater = {
            let q = q.clone();
            // Reads 15 (-> bucket 20) or, if it reads after the move, 20 (-> bucket 30).
            thread::spawn(move || q.update(1, ns(0)))
        };
        clock.set(20);
        let polled = q.poll(); // claims bucket 20
        let filed = updater.join().unwrap().unwrap();
        assert!(filed == 20 || filed == 30, "{filed}");
        assert_eq!(q.deadline(&1).is_none(), polled == vec![1]);
        clock.set(40);
        let mut drained = Vec::new();
        while q.wait_time().is_zero() {
            drained.extend(q.poll());
        }
        assert_eq!(
            polled.len() + drained.len(),
            1,
            "polled {polled:?}, drained {drained:?}"
        );
        assert_eq!(q.bucket_count(), 0, "a set was stranded");
    });
}

/// A waiter on an empty queue races the `update` that inserts an element. The waiter must
/// see the element or be woken by the insert: a lost wake-up leaves it in its condvar wait
/// (it has no timeout while the queue is empty) and loom reports the deadlock. The bucket
/// at next-expiration is due, so once it sees the element it returns without a timed
/// sleep (loom does not model timeouts).
#[test]
fn waiter_on_an_empty_queue_is_woken_by_an_insert() {
    loom::model(|| {
        let (clock, q) = queue(&[]);
        clock.set(10); // next-expiration, 10, is due
        let waiter = {
            let q = q.clone();
            thread::spawn(move || q.wait())
        };
        assert_eq!(q.update(1, ns(5)), Some(20));
        assert!(waiter.join().unwrap(), "the waiter saw the element");
        assert!(!q.is_closed());
    });
}

/// Two waiters on an empty queue, one insert: both must be woken (or see the element).
#[test]
fn one_insert_wakes_every_waiter() {
    loom::model(|| {
        let (clock, q) = queue(&[]);
        clock.set(10);
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                thread::spawn(move || q.wait())
            })
            .collect();
        q.update(1, ns(5));
        for w in waiters {
            assert!(w.join().unwrap());
        }
    });
}

/// A waiter on an empty queue races `close`: it returns `false`, never sleeps on.
#[test]
fn close_wakes_a_waiter() {
    loom::model(|| {
        let (_clock, q) = queue(&[]);
        let waiter = {
            let q = q.clone();
            thread::spawn(move || q.wait())
        };
        q.close();
        assert!(!waiter.join().unwrap());
        assert!(!q.wait(), "waits after close return at once");
    });
}

/// A waiter races both an insert and `close`: whichever it sees first, it returns.
#[test]
fn waiter_races_an_insert_and_close() {
    loom::model(|| {
        let (clock, q) = queue(&[]);
        clock.set(10);
        let waiter = {
            let q = q.clone();
            thread::spawn(move || q.wait())
        };
        let updater = {
            let q = q.clone();
            thread::spawn(move || q.update(1, ns(5)))
        };
        q.close();
        // `true` (it saw the element, and it is due) or `false` (closed) are both right;
        // returning at all is the property.
        waiter.join().unwrap();
        assert_eq!(updater.join().unwrap(), Some(20));
        assert!(q.is_closed());
        assert_eq!(q.deadline(&1), Some(20), "close does not stop updates");
    });
}
