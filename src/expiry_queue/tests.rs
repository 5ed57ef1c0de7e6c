use super::*;
use crate::clock::ManualClock;

const I: u64 = 1_000;

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

fn queue(start: u64) -> (ManualClock, ExpiryQueue<u32>) {
    let clock = ManualClock::new(start);
    let q = ExpiryQueue::with_clock(ns(I), clock.clone()).unwrap();
    (clock, q)
}

/// Polls until next-expiration passes `now`, collecting everything.
fn drain(q: &ExpiryQueue<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    while q.wait_time().is_zero() {
        out.extend(q.poll());
    }
    out.sort_unstable();
    out
}

#[test]
fn zero_and_huge_interval_are_config_errors() {
    let e = ExpiryQueue::<u32>::new(Duration::ZERO).unwrap_err();
    assert_eq!(e, ConfigError::Zero { param: "interval" });
    let e = ExpiryQueue::<u32>::new(MAX_TIMEOUT + ns(1)).unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::TooLarge {
                param: "interval",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(ExpiryQueue::<u32>::new(MAX_TIMEOUT).is_ok());
    assert!(ExpiryQueue::<u32>::new(Duration::from_millis(10)).is_ok());
}

#[test]
fn rounding_is_zookeepers_formula() {
    let (clock, q) = queue(12_345);
    // ZooKeeper initializes next-expiration to round_to_next_interval(now).
    assert_eq!(q.next_expiration(), 13_000);
    for timeout in [0, 1, 654, 655, 999, 1_000, 1_655, 10_000] {
        let t = 12_345 + timeout;
        let want = (t / I + 1) * I;
        q.remove(&1);
        assert_eq!(q.update(1, ns(timeout)), Some(want), "timeout {timeout}");
        assert_eq!(q.deadline(&1), Some(want));
    }
    // An exact multiple goes to the *next* boundary.
    clock.set(20_000);
    q.remove(&1);
    assert_eq!(q.update(1, ns(0)), Some(21_000));
}

#[test]
fn unchanged_update_returns_none_and_moves_both_ways() {
    let (clock, q) = queue(0);
    assert_eq!(q.update(7, ns(5_500)), Some(6_000));
    assert_eq!(q.update(7, ns(5_100)), None, "same bucket");
    clock.set(400);
    assert_eq!(
        q.update(7, ns(5_500)),
        None,
        "5_900 is still in the 6_000 bucket"
    );
    assert_eq!(q.update(7, ns(9_000)), Some(10_000), "later");
    assert_eq!(q.update(7, ns(1_000)), Some(2_000), "earlier");
    assert_eq!(q.deadline(&7), Some(2_000));
    assert_eq!(q.len(), 1);
    assert_eq!(q.bucket_count(), 1, "the buckets it left were deleted");
    clock.set(2_000);
    assert_eq!(drain(&q), vec![7]);
    assert!(q.is_empty());
    assert_eq!(q.bucket_count(), 0);
}

#[test]
fn wait_time_before_at_and_after() {
    let (clock, q) = queue(100);
    assert_eq!(q.next_expiration(), 1_000);
    assert_eq!(q.wait_time(), ns(900));
    clock.set(999);
    assert_eq!(q.wait_time(), ns(1));
    assert!(q.poll().is_empty());
    assert_eq!(
        q.next_expiration(),
        1_000,
        "a poll before the time moves nothing"
    );
    clock.set(1_000);
    assert_eq!(q.wait_time(), Duration::ZERO);
    clock.set(5_000);
    assert_eq!(q.wait_time(), Duration::ZERO);
}

#[test]
fn poll_takes_one_bucket_per_call_when_far_behind() {
    let (clock, q) = queue(0);
    q.update(1, ns(500)); // 1_000
    q.update(2, ns(2_500)); // 3_000
    q.update(3, ns(2_999)); // 3_000
    q.update(4, ns(4_000)); // 5_000
    clock.set(10_000);
    assert_eq!(q.poll(), vec![1]);
    assert_eq!(q.next_expiration(), 2_000);
    assert!(q.poll().is_empty(), "bucket 2_000 is empty");
    assert_eq!(q.next_expiration(), 3_000);
    let mut third = q.poll();
    third.sort_unstable();
    assert_eq!(third, vec![2, 3]);
    assert_eq!(q.next_expiration(), 4_000);
    assert!(q.poll().is_empty());
    assert_eq!(q.poll(), vec![4]);
    for _ in 0..5 {
        assert!(q.poll().is_empty());
    }
    assert_eq!(q.next_expiration(), 11_000);
    assert!(q.poll().is_empty(), "not due");
    assert_eq!(q.next_expiration(), 11_000);
    assert!(q.is_empty());
}

#[test]
fn polled_elements_leave_the_queue() {
    let (clock, q) = queue(0);
    q.update(1, ns(10));
    clock.set(1_000);
    assert_eq!(q.poll(), vec![1]);
    assert_eq!(q.deadline(&1), None);
    assert_eq!(q.remove(&1), None);
    assert_eq!(q.touch(&1, ns(10)), None, "touch does not resurrect");
    assert_eq!(q.update(1, ns(10)), Some(2_000), "update re-inserts");
}

#[test]
fn remove_returns_old_deadline_or_none() {
    let (_clock, q) = queue(0);
    assert_eq!(q.remove(&9), None);
    q.update(9, ns(2_000));
    q.update(8, ns(2_000));
    assert_eq!(q.remove(&9), Some(3_000));
    assert_eq!(q.remove(&9), None);
    assert_eq!(q.bucket_count(), 1);
    assert_eq!(q.remove(&8), Some(3_000));
    assert_eq!(q.bucket_count(), 0, "empty bucket set deleted");
}

#[test]
fn moved_element_is_not_returned_by_its_old_bucket() {
    let (clock, q) = queue(0);
    q.update(1, ns(100)); // 1_000
    q.update(2, ns(100)); // 1_000
    q.update(2, ns(3_000)); // moved to 4_000
    clock.set(1_000);
    assert_eq!(q.poll(), vec![1]);
    assert_eq!(q.deadline(&2), Some(4_000));
    clock.set(4_000);
    assert_eq!(drain(&q), vec![2]);
}

#[test]
fn touch_moves_only_present_elements() {
    let (clock, q) = queue(0);
    assert_eq!(q.touch(&5, ns(100)), None);
    assert!(q.is_empty());
    q.update(5, ns(100));
    assert_eq!(q.touch(&5, ns(200)), Some(1_000), "unchanged but present");
    assert_eq!(q.touch(&5, ns(5_000)), Some(6_000));
    assert_eq!(q.bucket_count(), 1);
    clock.set(6_000);
    assert_eq!(drain(&q), vec![5]);
}

#[test]
fn update_into_a_claimed_bucket_goes_to_the_next_poll() {
    // A stale clock reading: simulate by polling past a bucket and then updating with a
    // clock set back before it (ManualClock may move backwards).
    let (clock, q) = queue(0);
    clock.set(3_000);
    assert!(q.poll().is_empty()); // claims 1_000
    assert!(q.poll().is_empty()); // claims 2_000
    assert_eq!(q.next_expiration(), 3_000);
    clock.set(1_500);
    // Computed 2_000 is claimed: filed under 3_000, the next bucket a poll takes.
    assert_eq!(q.update(1, ns(0)), Some(3_000));
    clock.set(3_000);
    assert_eq!(q.poll(), vec![1]);
    assert!(q.is_empty());
    assert_eq!(q.bucket_count(), 0);
}

#[test]
fn huge_timeouts_are_clamped_not_wrapped() {
    let (_clock, q) = queue(0);
    let d = q.update(1, Duration::MAX).unwrap();
    assert!(d > (1 << 62) && d <= (1 << 62) + I, "{d}");
    assert!(q.poll().is_empty());
}

/// The same scenario from three origins: the results relative to the origin match.
#[test]
fn wrap_origins_behave_alike() {
    for start in [0, 5, 1 << 63, (1 << 63) - 2_500, u64::MAX - 2_500, u64::MAX] {
        let base = start - start % I; // a grid point at or before start
        let (clock, q) = queue(start);
        assert_eq!(q.next_expiration(), base.wrapping_add(I), "start {start}");
        let rel = |d: Option<u64>| d.map(|d| d.wrapping_sub(base));
        let off = start - base;
        // Deadlines land every I apart, across the wrap too.
        assert_eq!(
            rel(q.update(1, ns(1_000 - off))),
            Some(2_000),
            "start {start}"
        );
        assert_eq!(rel(q.update(2, ns(2_000 - off))), Some(3_000));
        assert_eq!(rel(q.update(3, ns(5_000 - off + 1))), Some(6_000));
        assert_eq!(rel(q.update(4, ns(9_999 - off))), Some(10_000));
        assert_eq!(rel(q.update(1, ns(1_999 - off))), None);
        let mut seen = Vec::new();
        for step in 1..=12u64 {
            clock.set(base.wrapping_add(step * I));
            let got = q.poll();
            if !got.is_empty() {
                seen.push((step, got));
            }
            assert!(q.poll().is_empty(), "one bucket per due step");
        }
        assert_eq!(
            seen,
            vec![(2, vec![1]), (3, vec![2]), (6, vec![3]), (10, vec![4])],
            "start {start}"
        );
        assert!(q.is_empty());
        assert_eq!(q.bucket_count(), 0);
    }
}

#[test]
fn zookeeper_formula_holds_near_the_top_when_the_interval_divides_2_64() {
    // With a power-of-two interval the grid is the same as ZooKeeper's everywhere.
    let clock = ManualClock::new(u64::MAX - 100);
    let q = ExpiryQueue::with_clock(ns(64), clock.clone()).unwrap();
    for timeout in [0u64, 50, 99, 100, 101, 500] {
        let t = (u64::MAX - 100).wrapping_add(timeout);
        let want = (t / 64).wrapping_add(1).wrapping_mul(64);
        q.remove(&0);
        assert_eq!(q.update(0, ns(timeout)), Some(want), "timeout {timeout}");
    }
}

#[test]
fn threads_insert_while_a_poller_drains_each_element_exactly_once() {
    use std::sync::atomic::{AtomicBool, Ordering as O};
    use std::sync::{Arc, Barrier};

    let writers = 3;
    let per_writer: u32 = if cfg!(miri) { 50 } else { 5_000 };
    let clock = ManualClock::new(u64::MAX - 50_000); // wraps during the run
    let q = Arc::new(ExpiryQueue::with_clock(ns(I), clock.clone()).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(writers + 1));
    let poller = {
        let (q, done, clock, start) = (q.clone(), done.clone(), clock.clone(), start.clone());
        std::thread::spawn(move || {
            let mut got = Vec::new();
            start.wait();
            loop {
                let finished = done.load(O::SeqCst);
                clock.advance(ns(97));
                got.extend(q.poll());
                if finished && q.is_empty() {
                    break got;
                }
            }
        })
    };
    let handles: Vec<_> = (0..writers as u32)
        .map(|w| {
            let (q, start) = (q.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..per_writer {
                    let e = w * per_writer + i;
                    q.update(e, ns(u64::from(i % 7) * 300));
                    // Touch some again, moving them around (possibly after expiry).
                    if i % 3 == 0 {
                        q.touch(&e, ns(u64::from(i % 5) * 700));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    done.store(true, O::SeqCst);
    let mut got = poller.join().unwrap();
    got.sort_unstable();
    let want: Vec<u32> = (0..writers as u32 * per_writer).collect();
    assert_eq!(got.len(), want.len(), "lost or duplicated elements");
    assert_eq!(got, want);
    assert_eq!(q.bucket_count(), 0);
}

#[test]
fn racing_pollers_never_share_a_bucket() {
    use std::sync::{Arc, Barrier};

    let n: u32 = if cfg!(miri) { 40 } else { 4_000 };
    let clock = ManualClock::new(0);
    let q = Arc::new(ExpiryQueue::with_clock(ns(I), clock.clone()).unwrap());
    for e in 0..n {
        q.update(e, ns(u64::from(e) * 10));
    }
    clock.set(u64::from(n) * 10 + 2 * I);
    let start = Arc::new(Barrier::new(2));
    let pollers: Vec<_> = (0..2)
        .map(|_| {
            let (q, start) = (q.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut got = Vec::new();
                while q.wait_time().is_zero() {
                    got.extend(q.poll());
                }
                got
            })
        })
        .collect();
    let mut all: Vec<u32> = pollers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
}

#[test]
fn debug_shows_len() {
    let (_clock, q) = queue(0);
    q.update(1, ns(1));
    let s = format!("{q:?}");
    assert!(s.contains("len: 1"), "{s}");
}

// --- waiting ---------------------------------------------------------------------------

/// Polls `cond` every millisecond for up to ten seconds; panics with `what` if it never holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out waiting until {what}");
}

/// A queue whose next-expiration (1_000) is already due, shared with a waiter thread.
fn due_queue() -> (ManualClock, std::sync::Arc<ExpiryQueue<u32>>) {
    let (clock, q) = queue(0);
    clock.set(1_000);
    (clock, std::sync::Arc::new(q))
}

/// Joins `waiter`, failing (rather than hanging) if it does not return within ten seconds.
fn join<T>(waiter: std::thread::JoinHandle<T>) -> T {
    eventually("the waiter returns", || waiter.is_finished());
    waiter.join().unwrap()
}

fn spawn_waiter(q: &std::sync::Arc<ExpiryQueue<u32>>) -> std::thread::JoinHandle<bool> {
    let q = q.clone();
    std::thread::spawn(move || q.wait())
}

#[test]
fn waiter_on_an_empty_queue_sleeps_until_an_update_inserts() {
    let (_clock, q) = due_queue();
    let waiter = spawn_waiter(&q);
    eventually("the waiter sleeps", || q.waiters.idle() == 1);
    // Due but empty: a wait with periodic wake-ups would have come back by now.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished(), "returned on an empty queue");
    assert_eq!(q.wakeups(), 0, "woke while the queue was empty");
    // A touch of an absent element inserts nothing and must not wake it either.
    assert_eq!(q.touch(&1, ns(10)), None);
    q.update(1, ns(10));
    assert!(join(waiter), "woken by the insert, and due");
    assert_eq!(q.wakeups(), 1);
    assert_eq!(q.waiters.idle(), 0, "the announcement was withdrawn");
    assert_eq!(
        q.poll(),
        Vec::<u32>::new(),
        "the due bucket (1_000) is empty"
    );
}

#[test]
fn every_sleeping_waiter_is_woken_by_one_insert() {
    let (_clock, q) = due_queue();
    let waiters: Vec<_> = (0..3).map(|_| spawn_waiter(&q)).collect();
    eventually("three waiters sleep", || q.waiters.idle() == 3);
    q.update(1, ns(10));
    for w in waiters {
        assert!(join(w));
    }
}

#[test]
fn close_wakes_a_waiter_on_an_empty_queue_with_false() {
    let (_clock, q) = due_queue();
    let waiter = spawn_waiter(&q);
    eventually("the waiter sleeps", || q.waiters.idle() == 1);
    assert!(!q.is_closed());
    q.close();
    assert!(q.is_closed());
    assert!(!join(waiter));
    assert!(!q.wait(), "a wait after close returns false at once");
}

#[test]
fn close_wakes_a_waiter_sleeping_towards_next_expiration() {
    // A real clock and an hour-long interval: the waiter would sleep for up to an hour.
    let q = std::sync::Arc::new(ExpiryQueue::new(Duration::from_secs(3_600)).unwrap());
    q.update(1, Duration::from_secs(60));
    let waiter = spawn_waiter(&q);
    std::thread::sleep(Duration::from_millis(20));
    q.close();
    assert!(!join(waiter));
    assert!(
        q.wait_time() > Duration::ZERO,
        "it returned because of close, not time"
    );
}

#[test]
fn close_ends_waiting_only() {
    let (clock, q) = queue(0);
    q.close();
    q.close(); // idempotent
    assert!(!q.wait());
    assert_eq!(q.update(1, ns(10)), Some(1_000));
    assert_eq!(q.update(2, ns(10)), Some(1_000));
    assert_eq!(q.remove(&2), Some(1_000));
    clock.set(1_000);
    assert_eq!(q.poll(), vec![1]);
    assert!(format!("{q:?}").contains("closed: true"));
}

#[test]
fn wait_returns_true_at_once_when_a_bucket_is_due() {
    let (clock, q) = queue(0);
    q.update(1, ns(2_500)); // 3_000
    q.update(2, ns(9_500)); // 10_000: keeps the queue non-empty, so no wait sleeps
    clock.set(5_000);
    // ZooKeeper's catch-up: one due bucket per poll, and the wait says so each time.
    let mut got = Vec::new();
    while q.next_expiration() <= 5_000 {
        assert!(q.wait());
        got.extend(q.poll());
    }
    assert_eq!(got, vec![1]);
    assert_eq!(q.wakeups(), 0, "nothing slept");
}

#[test]
fn wait_on_a_manual_clock_rechecks_every_interval() {
    // Not due: the waiter cannot see manual time move, so it sleeps an interval (1 µs) of
    // real time at a time and returns once the clock is moved.
    let (clock, q) = queue(0);
    let q = std::sync::Arc::new(q);
    q.update(1, ns(10));
    let waiter = spawn_waiter(&q);
    std::thread::sleep(Duration::from_millis(5));
    clock.set(1_000);
    assert!(join(waiter));
    assert_eq!(q.poll(), vec![1]);
}

#[test]
fn wait_and_poll_loop_expires_on_a_real_clock() {
    let q = std::sync::Arc::new(ExpiryQueue::new(Duration::from_millis(2)).unwrap());
    let expirer = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            while q.wait() {
                got.extend(q.poll());
                if got.len() == 3 {
                    q.close();
                }
            }
            got
        })
    };
    for (e, ms) in [(1, 1), (2, 5), (3, 9)] {
        q.update(e, Duration::from_millis(ms));
        std::thread::sleep(Duration::from_millis(3));
    }
    let mut got = join(expirer);
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3]);
    assert!(q.is_empty());
}

#[cfg(feature = "tokio")]
mod wait_async {
    use super::*;
    use std::sync::Arc;

    /// Awaits `waiter`, failing (rather than hanging) if it does not finish within ten
    /// seconds.
    async fn join<T>(waiter: ::tokio::task::JoinHandle<T>) -> T {
        ::tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter returns")
            .unwrap()
    }

    /// Yields to the runtime (and sleeps a little of real time) until `cond` holds.
    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if cond() {
                return;
            }
            ::tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("timed out waiting until {what}");
    }

    #[::tokio::test]
    async fn an_async_waiter_on_an_empty_queue_sleeps_until_an_update_inserts() {
        let (_clock, q) = due_queue();
        let waiter = ::tokio::spawn({
            let q = q.clone();
            async move { q.wait_async().await }
        });
        eventually("the waiter sleeps", || q.waiters.idle() == 1).await;
        ::tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "returned on an empty queue");
        assert_eq!(q.wakeups(), 0, "woke while the queue was empty");
        q.update(1, ns(10));
        assert!(join(waiter).await);
        assert_eq!(q.wakeups(), 1);
        assert_eq!(q.waiters.idle(), 0);
    }

    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_wakes_async_waiters_with_false() {
        let (_clock, q) = due_queue();
        let on_empty = ::tokio::spawn({
            let q = q.clone();
            async move { q.wait_async().await }
        });
        let real = Arc::new(ExpiryQueue::new(Duration::from_secs(3_600)).unwrap());
        real.update(1, Duration::from_secs(60));
        let on_timer = ::tokio::spawn({
            let real = real.clone();
            async move { real.wait_async().await }
        });
        eventually("the waiter sleeps", || q.waiters.idle() == 1).await;
        ::tokio::time::sleep(Duration::from_millis(20)).await;
        q.close();
        real.close();
        assert!(!join(on_empty).await);
        assert!(!join(on_timer).await);
        assert!(!q.wait_async().await, "after close: false at once");
    }

    #[::tokio::test]
    async fn a_cancelled_async_wait_withdraws_its_announcement() {
        let (_clock, q) = due_queue();
        let timed_out = ::tokio::time::timeout(Duration::from_millis(10), q.wait_async()).await;
        assert!(timed_out.is_err(), "an empty queue is never due");
        assert_eq!(q.waiters.idle(), 0);
        q.update(1, ns(10));
        assert!(q.wait_async().await);
    }

    #[::tokio::test]
    async fn async_wait_and_poll_loop_expires_on_a_real_clock() {
        let q = Arc::new(ExpiryQueue::new(Duration::from_millis(2)).unwrap());
        let expirer = ::tokio::spawn({
            let q = q.clone();
            async move {
                let mut got = Vec::new();
                while q.wait_async().await {
                    got.extend(q.poll());
                    if got.len() == 2 {
                        q.close();
                    }
                }
                got
            }
        });
        q.update(1, Duration::from_millis(1));
        ::tokio::time::sleep(Duration::from_millis(3)).await;
        q.update(2, Duration::from_millis(5));
        let mut got = join(expirer).await;
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
    }
}
