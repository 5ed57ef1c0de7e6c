use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::tokio::time::timeout;

use super::AsyncAcker;
use crate::future::{Closed, Completions, TreeCompletion};
use crate::{Acker, Completion, ConfigError, InitError, Outcome};

/// Long enough that only a lost wake-up or a lost completion reaches it.
const BOUND: Duration = Duration::from_secs(10);

fn build<T: Send + 'static>(buffer: usize) -> (AsyncAcker<T>, Completions<T>) {
    Acker::<T>::builder()
        .timeout(Duration::from_secs(30))
        .build_async(buffer)
        .unwrap()
}

async fn next<T>(completions: &mut Completions<T>) -> Option<Completion<T>> {
    timeout(BOUND, completions.next())
        .await
        .expect("a completion, or the end of the stream")
}

/// Whether `fut` is still pending after the runtime had time to run everything else.
async fn still_waiting<F: Future + Unpin>(fut: &mut F) -> bool {
    timeout(Duration::from_millis(20), fut).await.is_err()
}

#[::tokio::test]
async fn track_resolves_acked_on_the_last_ack() {
    let (acker, mut completions) = build::<&str>(4);
    let mut tree = acker.track(5, 0b01 ^ 0b10, "req").unwrap();
    assert_eq!(tree.root(), 5);
    // A tracked tree takes no buffer permit.
    assert_eq!(acker.room(), 4);
    assert!(!acker.ack(5, 0b01));
    assert!(still_waiting(&mut tree).await);
    assert!(acker.ack(5, 0b10));
    let done = timeout(BOUND, tree).await.unwrap().unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (5, "req", Outcome::Acked)
    );
    // Handed to its future: the stream saw nothing.
    assert_eq!(acker.room(), 4);
    assert!(matches!(completions.try_next(), Ok(None)));
    acker.shutdown().await;
    assert!(next(&mut completions).await.is_none());
}

#[::tokio::test]
async fn apply_completes_tracked_and_streamed_trees_as_one_by_one() {
    let (acker, mut completions) = build::<u32>(8);
    let tracked = acker.track(1, 0b11, 10).unwrap();
    acker.init(2, 0b1, 20).await.unwrap();
    let frame = [
        crate::Message::Ack { root: 1, xor: 0b01 },
        crate::Message::ResetTimeout { root: 1 },
        crate::Message::Fail { root: 2 },
        crate::Message::Ack { root: 1, xor: 0b10 },
    ];
    let mut results = Vec::new();
    acker.apply_each(&frame, |i, result| results.push((i, result)));
    assert_eq!(results, [(0, false), (1, true), (2, true), (3, true)]);
    let done = timeout(BOUND, tracked).await.unwrap().unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (1, 10, Outcome::Acked)
    );
    let done = next(&mut completions).await.unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (2, 20, Outcome::Failed)
    );
    assert_eq!(acker.apply(&[crate::Message::Ack { root: 3, xor: 1 }]), 0);
    assert_eq!(acker.pending(), 1, "an orphan");
    acker.shutdown().await;
}

#[::tokio::test]
async fn a_lost_edge_resolves_timed_out() {
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_millis(30))
        .build_async(4)
        .unwrap();
    let tree = acker.track(9, 0b11, 1).unwrap();
    acker.ack(9, 0b01);
    let done = timeout(BOUND, tree).await.unwrap().unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (9, 1, Outcome::TimedOut)
    );
    assert!(
        done.elapsed >= Duration::from_millis(30),
        "{:?}",
        done.elapsed
    );
    // Its own timeout, through track_with_timeout.
    let tree = acker
        .track_with_timeout(10, 1, 2, Duration::from_millis(10))
        .unwrap();
    let done = timeout(BOUND, tree).await.unwrap().unwrap();
    assert_eq!((done.root, done.outcome), (10, Outcome::TimedOut));
}

#[::tokio::test]
async fn the_stream_yields_every_untracked_completion_once() {
    let (acker, mut completions) = Acker::<u64>::builder()
        .timeout(Duration::from_millis(20))
        .build_async(1000)
        .unwrap();
    let mut tracked = Vec::new();
    let mut expected = HashMap::new();
    for root in 1..=300u64 {
        let outcome = match root % 4 {
            0 | 1 => Outcome::Acked,
            2 => Outcome::Failed,
            _ => Outcome::TimedOut,
        };
        if root % 10 == 0 {
            tracked.push(acker.track(root, root, root).unwrap());
        } else {
            acker.init(root, root, root).await.unwrap();
            expected.insert(root, outcome);
        }
        match outcome {
            Outcome::Acked => assert!(acker.ack(root, root)),
            Outcome::Failed => assert!(acker.fail(root)),
            _ => {}
        }
    }
    let mut seen = HashMap::new();
    while seen.len() < expected.len() {
        let c = next(&mut completions).await.unwrap();
        assert_eq!(c.payload, c.root);
        assert!(
            seen.insert(c.root, c.outcome).is_none(),
            "root {} twice",
            c.root
        );
    }
    assert_eq!(seen, expected);
    for tree in tracked {
        let root = tree.root();
        let done = timeout(BOUND, tree).await.unwrap().unwrap();
        assert_eq!(done.root, root);
    }
    assert!(acker.shutdown().await.is_empty());
    assert!(
        next(&mut completions).await.is_none(),
        "tracked ones went to the stream"
    );
    assert_eq!(acker.room(), 1000);
}

#[::tokio::test]
async fn a_full_buffer_holds_inits_until_the_consumer_takes_one() {
    let (acker, mut completions) = build::<u32>(2);
    acker.init(1, 1, 10).await.unwrap();
    acker.init(2, 2, 20).await.unwrap();
    assert!(matches!(acker.try_init(3, 3, 30), Err(InitError::Full(30))));
    let mut waiting = {
        let acker = acker.clone();
        ::tokio::spawn(async move { acker.init(3, 3, 30).await })
    };
    assert!(still_waiting(&mut waiting).await);
    // Completed, but its completion still waits in the stream and holds its permit.
    assert!(acker.ack(1, 1));
    assert!(still_waiting(&mut waiting).await);
    assert_eq!(acker.room(), 0);
    let first = next(&mut completions).await.unwrap();
    assert_eq!((first.root, first.payload), (1, 10));
    timeout(BOUND, waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(acker.pending(), 2);
    // A refused init gives its permit back.
    assert!(matches!(acker.try_init(4, 4, 40), Err(InitError::Full(40))));
    assert!(acker.ack(2, 2));
    assert_eq!(next(&mut completions).await.unwrap().root, 2);
    assert!(matches!(
        acker.try_init(3, 3, 31),
        Err(InitError::Duplicate(31))
    ));
    assert_eq!(acker.room(), 1);
}

/// A tracked tree takes no buffer permit: with the buffer full of stream trees, `track`
/// inits at once, and its timeout counts from the call (a permit wait before the tree
/// exists would add to it). At `max_pending` it is refused `Full` at once.
#[::tokio::test]
async fn track_never_waits_for_the_buffer_and_its_deadline_counts_from_the_call() {
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_secs(30))
        .max_pending(4)
        .build_async(1)
        .unwrap();
    acker.init(1, 1, 10).await.unwrap();
    assert_eq!(acker.room(), 0);
    let called = std::time::Instant::now();
    let tree = acker
        .track_with_timeout(2, 0b11, 20, Duration::from_millis(100))
        .unwrap();
    acker.track(3, 3, 30).unwrap();
    acker.track(4, 4, 40).unwrap();
    // The bound: refused at once, the payload handed back.
    assert!(matches!(acker.track(5, 5, 50), Err(InitError::Full(50))));
    assert!(acker.ack(1, 1)); // the buffer's only tree completes meanwhile
    let done = timeout(BOUND, tree).await.unwrap().unwrap();
    let waited = called.elapsed();
    assert_eq!((done.outcome, done.payload), (Outcome::TimedOut, 20));
    assert!(done.elapsed >= Duration::from_millis(100), "{done:?}");
    // The reaper's lateness is at most a few ticks of the 1 ms resolution; a wait for the
    // buffer (held until the stream's consumer, which never comes, takes a completion)
    // would never have ended.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(acker.shutdown().await.len(), 2);
}

/// `shutdown` from async code leaves the runtime's only worker free while the reaper is
/// joined: a task spawned before it runs meanwhile (run in place, it could not: the
/// current-thread runtime polls it only when the caller yields). The join takes tens of
/// microseconds; a worker preempted for that long between handing the join to the blocking
/// pool and awaiting it finds it done without yielding, so the test tries a few ackers and
/// needs the task to have run during one shutdown (in place, it runs during none).
#[::tokio::test(flavor = "current_thread")]
async fn async_shutdown_does_not_block_the_worker() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut ran_during = Vec::new();
    for root in 1..=5 {
        let (acker, _completions) = build::<u32>(4);
        let tree = acker.track(root, 1, 10).unwrap();
        let ran = Arc::new(AtomicU64::new(0));
        let ticker = ::tokio::spawn({
            let ran = Arc::clone(&ran);
            async move {
                loop {
                    ran.fetch_add(1, Ordering::Relaxed); // Relaxed: one thread
                    ::tokio::task::yield_now().await;
                }
            }
        });
        assert_eq!(acker.shutdown().await, [(root, 10)]);
        ran_during.push(ran.load(Ordering::Relaxed));
        ticker.abort();
        assert_eq!(timeout(BOUND, tree).await.unwrap().unwrap_err(), Closed);
        assert!(acker.shutdown_blocking().is_empty());
        if ran_during[ran_during.len() - 1] > 0 {
            return;
        }
    }
    panic!("the worker was blocked in every shutdown: the task ran {ran_during:?} times");
}

#[::tokio::test]
async fn shutdown_hands_back_ends_the_stream_and_closes_tracks() {
    // Three permits: the three stream trees' (the tracked one takes none).
    let (acker, mut completions) = build::<u32>(3);
    acker.init(1, 1, 10).await.unwrap();
    let tree = acker.track(2, 2, 20).unwrap();
    acker.init(3, 3, 30).await.unwrap();
    assert!(acker.ack(3, 3)); // its completion waits in the stream
    acker.init(4, 4, 40).await.unwrap();
    let mut waiting = {
        let acker = acker.clone();
        ::tokio::spawn(async move { acker.init(5, 5, 50).await })
    };
    assert!(still_waiting(&mut waiting).await);

    let mut back = acker.shutdown().await;
    back.sort_unstable();
    assert_eq!(back, [(1, 10), (2, 20), (4, 40)]);
    let refused = timeout(BOUND, waiting).await.unwrap().unwrap();
    assert!(matches!(refused, Err(InitError::Shutdown(50))));
    assert_eq!(timeout(BOUND, tree).await.unwrap().unwrap_err(), Closed);
    assert!(matches!(
        acker.init(6, 6, 60).await,
        Err(InitError::Shutdown(60))
    ));
    assert!(matches!(
        acker.track(6, 6, 60),
        Err(InitError::Shutdown(60))
    ));
    // What the stream held is still delivered, then it ends, and stays ended.
    assert_eq!(next(&mut completions).await.unwrap().root, 3);
    assert!(next(&mut completions).await.is_none());
    assert_eq!(completions.try_next().unwrap_err(), Closed);
    assert!(futures_core::FusedStream::is_terminated(&completions));
    assert!(acker.shutdown().await.is_empty());
}

#[::tokio::test]
async fn a_dropped_tree_completion_drops_its_completion_silently() {
    let (acker, mut completions) = build::<String>(1);
    let tree = acker.track(8, 1, "gone".to_owned()).unwrap();
    drop(tree);
    assert!(acker.ack(8, 1));
    assert_eq!(acker.room(), 1, "a tracked tree holds no permit");
    assert!(matches!(completions.try_next(), Ok(None)));
    let stats = acker.stats();
    assert_eq!(
        (stats.acked, stats.callback_panics, stats.pending),
        (1, 0, 0)
    );
    // Room for the next one: nothing was left holding the only permit.
    acker.try_init(9, 1, "next".to_owned()).unwrap();
    assert!(acker.fail(9));
    assert_eq!(next(&mut completions).await.unwrap().payload, "next");
}

#[::tokio::test]
async fn orphans_take_no_permit() {
    let (acker, mut completions) = build::<u32>(1);
    assert!(!acker.ack(4, 0b10));
    assert!(!acker.ack(7, 0b1));
    assert_eq!((acker.room(), acker.pending()), (1, 2));
    // Its init completes it at once (Acked wins), on this thread.
    acker.try_init(4, 0b10, 40).unwrap();
    let c = next(&mut completions).await.unwrap();
    assert_eq!((c.root, c.outcome, c.payload), (4, Outcome::Acked, 40));
    assert_eq!(acker.room(), 1);
}

#[::tokio::test]
async fn the_stream_polls_as_a_stream_and_ends_when_every_handle_is_dropped() {
    let (acker, mut completions) = build::<u32>(2);
    let tree = acker.track(1, 1, 10).unwrap();
    acker.init(2, 2, 20).await.unwrap();
    acker.fail(2);
    let polled =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut completions), cx));
    assert_eq!(timeout(BOUND, polled).await.unwrap().unwrap().root, 2);
    drop(acker);
    assert_eq!(timeout(BOUND, tree).await.unwrap().unwrap_err(), Closed);
    assert!(next(&mut completions).await.is_none());
}

#[::tokio::test]
async fn a_dropped_stream_gives_its_permits_back() {
    let (acker, completions) = build::<u32>(1);
    acker.init(1, 1, 10).await.unwrap();
    drop(completions);
    assert!(acker.ack(1, 1));
    assert_eq!(acker.room(), 1);
    acker.try_init(2, 2, 20).unwrap();
}

#[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_and_one_consumer_lose_nothing() {
    const PRODUCERS: u64 = 4;
    const TREES: u64 = 500;
    let (acker, mut completions) = build::<u64>(8);
    let consumer = ::tokio::spawn(async move {
        let mut seen = HashMap::new();
        while let Some(c) = completions.next().await {
            *seen.entry(c.root).or_insert(0u32) += 1;
        }
        seen
    });
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let acker = acker.clone();
            ::tokio::spawn(async move {
                for i in 0..TREES {
                    let root = p << 32 | i;
                    let edge = root.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    acker.init(root, edge, root).await.unwrap();
                    let acker = acker.clone();
                    ::tokio::spawn(async move {
                        ::tokio::task::yield_now().await;
                        assert!(acker.ack(root, edge));
                    });
                }
            })
        })
        .collect();
    for p in producers {
        timeout(BOUND, p).await.unwrap().unwrap();
    }
    timeout(BOUND, async {
        while acker.stats().acked < PRODUCERS * TREES {
            ::tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("every tree acked");
    assert!(acker.shutdown().await.is_empty());
    let seen = timeout(BOUND, consumer).await.unwrap().unwrap();
    assert_eq!(seen.len() as u64, PRODUCERS * TREES);
    assert!(seen.values().all(|&n| n == 1));
}

#[::tokio::test]
async fn build_async_ticks_at_262_us_unless_told_otherwise() {
    // A tree acked 300 µs after its init: one tick of 2^18 ns later, within the same tick
    // of 2^20 ns (the tick is 0 to 2^18 ns at the start, the elapsed time is in ticks).
    for (resolution, elapsed) in [(None, 1 << 18), (Some(Duration::from_millis(1)), 0)] {
        let clock = crate::ManualClock::new(0);
        let mut builder = Acker::<u32>::builder().clock(clock.clone());
        if let Some(resolution) = resolution {
            builder = builder.resolution(resolution);
        }
        let (acker, _completions) = builder.build_async(4).unwrap();
        let tree = acker.track(1, 0b1, 7).unwrap();
        clock.advance(Duration::from_micros(300));
        assert!(acker.ack(1, 0b1));
        let done = timeout(BOUND, tree).await.unwrap().unwrap();
        assert_eq!(
            (done.outcome, done.elapsed),
            (Outcome::Acked, Duration::from_nanos(elapsed)),
            "resolution {resolution:?}"
        );
        acker.shutdown().await;
    }
}

/// The async acker's tables start at 64 to 128 groups, an eighth of the plain acker's
/// 512 to 1,024 (`ASYNC_SMALLEST_GROUPS`).
#[::tokio::test]
#[cfg(not(miri))] // Miri's tables are smaller still, for both
async fn the_async_ackers_tables_start_at_an_eighth_of_the_plain_ones() {
    const LINE: usize = 128; // a group's line, its payload a `u32` cell number
    let plain: Acker<u32> = Acker::builder().shards(16).build().unwrap();
    let (acker, _completions) = Acker::<u32>::builder().shards(16).build_async(4).unwrap();
    let groups = |bytes: usize| bytes / LINE;
    // 16 tables staggered over a doubling: about 16 x 1.44 times the smallest.
    let (async_groups, plain_groups) = (
        groups(acker.memory_parts()[0]),
        groups(plain.memory_parts()[0]),
    );
    assert!(
        (16 * 64..16 * 128).contains(&async_groups),
        "the async acker's tables: {async_groups} groups"
    );
    assert!(
        (16 * 512..16 * 1024).contains(&plain_groups),
        "the plain acker's tables: {plain_groups} groups"
    );
    acker.shutdown().await;
}

#[test]
fn build_async_refuses_a_zero_buffer_and_a_callback() {
    let zero = Acker::<u32>::builder().build_async(0).unwrap_err();
    assert_eq!(zero, ConfigError::Zero { param: "buffer" });
    let callback = Acker::<u32>::builder()
        .on_complete(|_| {})
        .build_async(1)
        .unwrap_err();
    assert!(
        matches!(
            callback,
            ConfigError::Conflict {
                param: "on_complete",
                with: "build_async",
                ..
            }
        ),
        "{callback}"
    );
    let other = Acker::<u32>::builder()
        .shards(0)
        .build_async(1)
        .unwrap_err();
    assert_eq!(other, ConfigError::Zero { param: "shards" });
}

#[test]
fn handles_are_send_sync_and_the_futures_unpin() {
    fn send_sync<T: Send + Sync + Clone + fmt::Debug>() {}
    fn send_unpin<T: Send + Unpin + fmt::Debug>() {}
    send_sync::<AsyncAcker<String>>();
    send_unpin::<Completions<String>>();
    send_unpin::<TreeCompletion<String>>();
}

/// Every payload goes back to the caller with a refused init or track, or is dropped once
/// when the last handle goes with trees still pending (the table holds only cell numbers,
/// so nothing else would drop them).
#[::tokio::test]
async fn refused_and_abandoned_payloads_go_back_or_are_dropped_once() {
    let witness = Arc::new(());
    let (acker, _completions) = Acker::<Arc<()>>::builder()
        .timeout(Duration::from_secs(30))
        .max_pending(3)
        .build_async(4)
        .unwrap();
    let tracked = acker.track(1, 1, Arc::clone(&witness)).unwrap();
    acker.try_init(2, 1, Arc::clone(&witness)).unwrap();
    let refused = [
        acker.track(1, 1, Arc::clone(&witness)).map(drop),
        acker.try_init(2, 1, Arc::clone(&witness)),
    ];
    for refused in refused {
        let Err(InitError::Duplicate(payload)) = refused else {
            panic!("a second init of a pending root is a duplicate");
        };
        assert!(Arc::ptr_eq(&payload, &witness));
    }
    let _pending = acker.track(3, 1, Arc::clone(&witness)).unwrap();
    assert!(matches!(
        acker.track(4, 1, Arc::clone(&witness)),
        Err(InitError::Full(_))
    ));
    assert!(matches!(
        acker.try_init(5, 1, Arc::clone(&witness)),
        Err(InitError::Full(_))
    ));
    assert_eq!(Arc::strong_count(&witness), 4, "three pending, and ours");
    drop(acker);
    assert_eq!(
        Arc::strong_count(&witness),
        1,
        "the pending payloads dropped once"
    );
    assert_eq!(timeout(BOUND, tracked).await.unwrap().unwrap_err(), Closed);
}

/// A payload whose drop panics, among those the last handle drops: every other tree still
/// resolves `Closed` and every other payload is dropped (the cells are ended before any
/// payload is).
#[::tokio::test]
async fn a_panicking_payload_drop_leaves_no_tree_behind() {
    #[derive(Debug)]
    struct Loud(bool, #[allow(dead_code)] Arc<()>);
    impl Drop for Loud {
        fn drop(&mut self) {
            if self.0 {
                panic!("a payload's drop panics");
            }
        }
    }
    let witness = Arc::new(());
    let (acker, _completions) = build::<Loud>(4);
    let trees: Vec<_> = (0..4)
        .map(|root| {
            acker
                .track(root + 1, 1, Loud(root == 1, Arc::clone(&witness)))
                .unwrap()
        })
        .collect();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(acker)));
    assert!(
        dropped.is_err(),
        "the payload's panic reaches the dropping thread"
    );
    for tree in trees {
        assert_eq!(timeout(BOUND, tree).await.unwrap().unwrap_err(), Closed);
    }
    assert_eq!(Arc::strong_count(&witness), 1, "every payload dropped");
}

/// Trees completed by an ack from a thread-local's destructor (a guard that acks when its
/// thread exits) resolve their future and reach the stream, and give their permit back.
/// (The completions were dropped there: the future never resolved and its cell leaked.)
#[::tokio::test]
async fn acks_from_an_exiting_thread_resolve_tracked_and_streamed_trees() {
    struct AckOnExit(Vec<(AsyncAcker<u32>, u64)>);
    impl Drop for AckOnExit {
        fn drop(&mut self) {
            for (acker, root) in self.0.drain(..) {
                assert!(
                    acker.ack(root, 0b10),
                    "the exiting thread's ack completes it"
                );
            }
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<AckOnExit> =
            const { std::cell::RefCell::new(AckOnExit(Vec::new())) };
    }
    let (acker, mut completions) = build::<u32>(4);
    let tracked = acker.track(1, 0b11, 10).unwrap();
    acker.init(2, 0b11, 20).await.unwrap();
    assert_eq!(acker.room(), 3);
    let sender = acker.clone();
    std::thread::spawn(move || {
        // Registered before the acker's own thread-locals: destroyed after them.
        ON_EXIT.with(|on_exit| {
            on_exit.borrow_mut().0 = vec![(sender.clone(), 1), (sender.clone(), 2)];
        });
        assert!(!sender.ack(1, 0b01) && !sender.ack(2, 0b01));
    })
    .join()
    .unwrap();
    let done = timeout(BOUND, tracked).await.unwrap().unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (1, 10, Outcome::Acked)
    );
    let streamed = next(&mut completions).await.unwrap();
    assert_eq!((streamed.root, streamed.payload), (2, 20));
    assert_eq!(acker.room(), 4);
    assert!(acker.shutdown().await.is_empty());
}

/// A waker that counts its wake-ups by who woke it: a runtime's worker, or the name of the
/// thread.
#[derive(Default)]
struct Witness {
    /// Wake-ups by who woke: [`WORKER`], or a thread's name.
    by: std::sync::Mutex<HashMap<String, usize>>,
}

/// [`Witness`]'s name for a runtime's worker.
const WORKER: &str = "a runtime's worker";

impl std::task::Wake for Witness {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let by = match ::tokio::runtime::Handle::try_current() {
            Ok(_) => WORKER.to_string(),
            Err(_) => std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string(),
        };
        *self.by.lock().unwrap().entry(by).or_default() += 1;
    }
}

/// `trees` tracked trees (payloads 0.., roots 1..) on `clock`, each polled once with
/// `waker`, so that its waiter holds it.
fn track_polled(
    acker: &AsyncAcker<u32>,
    trees: u32,
    waker: &std::task::Waker,
) -> Vec<TreeCompletion<u32>> {
    (0..trees)
        .map(|i| {
            let mut tree = acker.track(u64::from(i) + 1, 0b1, i).unwrap();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(Pin::new(&mut tree).poll(&mut cx).is_pending());
            tree
        })
        .collect()
}

/// A burst of timeouts found by the reaper thread (here 4,096 trees sharing one deadline
/// on a manual clock) wakes its tasks from the runtime's workers, where they join the
/// worker's own queue, and not from the reaper thread, whose wake-ups go to the runtime's
/// shared queue. (Before the burst's hand-over, every wake-up came from `ackwheel-reaper`.)
#[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(not(miri))] // 4,096 trees
async fn a_burst_of_timeouts_wakes_its_tasks_from_the_runtimes_workers() {
    const TREES: u32 = 4_096;
    let clock = crate::ManualClock::new(0);
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_millis(100))
        .clock(clock.clone())
        .build_async(4)
        .unwrap();
    let witness = Arc::new(Witness::default());
    let waker = std::task::Waker::from(Arc::clone(&witness));
    let trees = track_polled(&acker, TREES, &waker);
    clock.advance(Duration::from_millis(200));
    let woken = || witness.by.lock().unwrap().values().sum::<usize>();
    let waited = std::time::Instant::now();
    while woken() < TREES as usize && waited.elapsed() < BOUND {
        ::tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let by = witness.by.lock().unwrap().clone();
    assert_eq!(by.values().sum::<usize>(), TREES as usize, "{by:?}");
    assert!(by.keys().all(|name| name == WORKER), "woken by {by:?}");
    for (i, tree) in trees.into_iter().enumerate() {
        let done = timeout(BOUND, tree).await.unwrap().unwrap();
        assert_eq!((done.payload, done.outcome), (i as u32, Outcome::TimedOut));
    }
    assert!(acker.shutdown().await.is_empty());
}

/// A runtime: multi-thread (one worker) or current-thread, its time enabled.
fn runtime(multi_thread: bool) -> ::tokio::runtime::Runtime {
    let mut builder = if multi_thread {
        let mut builder = ::tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(1);
        builder
    } else {
        ::tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().unwrap()
}

/// An async acker built inside `runtime` (whose handle it keeps for its bursts), on a
/// manual clock, with a timeout of 100 ms and `buffer`.
fn built_in<T: Send + 'static>(
    runtime: &::tokio::runtime::Runtime,
    buffer: usize,
) -> (AsyncAcker<T>, Completions<T>, crate::ManualClock) {
    let clock = crate::ManualClock::new(0);
    let (acker, completions) = runtime
        .block_on(async {
            Acker::<T>::builder()
                .timeout(Duration::from_millis(100))
                .clock(clock.clone())
                .build_async(buffer)
        })
        .unwrap();
    (acker, completions, clock)
}

/// A burst whose hand-over finds the runtime it was built on shut down (its task dropped
/// unpolled) is delivered all the same, from the batch's drop: every tree resolves, every
/// streamed completion reaches the stream, before it ends.
#[test]
#[cfg(not(miri))] // 4,096 trees
fn a_burst_handed_to_a_runtime_shut_down_is_delivered_all_the_same() {
    const TRACKED: u32 = 3_072;
    const STREAMED: u32 = 1_024;
    let first = runtime(true);
    let (acker, mut completions, clock) = built_in::<u32>(&first, STREAMED as usize);
    drop(first);
    runtime(false).block_on(async {
        let witness = Arc::new(Witness::default());
        let waker = std::task::Waker::from(Arc::clone(&witness));
        let trees = track_polled(&acker, TRACKED, &waker);
        for i in 0..STREAMED {
            let root = u64::from(TRACKED + i) + 1;
            acker.try_init(root, 0b1, TRACKED + i).unwrap();
        }
        clock.advance(Duration::from_millis(200));
        for (i, tree) in trees.into_iter().enumerate() {
            let done = timeout(BOUND, tree).await.unwrap().unwrap();
            assert_eq!((done.payload, done.outcome), (i as u32, Outcome::TimedOut));
        }
        let mut streamed = Vec::new();
        for _ in 0..STREAMED {
            let done = next(&mut completions).await.unwrap();
            assert_eq!(done.outcome, Outcome::TimedOut);
            streamed.push(done.payload);
        }
        streamed.sort_unstable();
        assert_eq!(streamed, (TRACKED..TRACKED + STREAMED).collect::<Vec<_>>());
        assert!(acker.shutdown().await.is_empty());
        assert!(next(&mut completions).await.is_none(), "the stream ends");
    });
}

/// An acker built on a current-thread runtime hands it no burst: that runtime runs tasks
/// only while a caller drives it, and here nobody does while the trees, awaited on another
/// runtime, time out. (Handed over, they waited there for ever.)
#[test]
#[cfg(not(miri))] // 2,048 trees
fn a_burst_is_not_handed_to_a_current_thread_runtime() {
    const TREES: u32 = 2_048;
    let built_on = runtime(false);
    let (acker, _completions, clock) = built_in::<u32>(&built_on, 4);
    runtime(false).block_on(async {
        let waker = std::task::Waker::from(Arc::new(Witness::default()));
        let trees = track_polled(&acker, TREES, &waker);
        clock.advance(Duration::from_millis(200));
        for (i, tree) in trees.into_iter().enumerate() {
            let done = timeout(BOUND, tree).await.unwrap().unwrap();
            assert_eq!((done.payload, done.outcome), (i as u32, Outcome::TimedOut));
        }
        assert!(acker.shutdown().await.is_empty());
    });
    drop(built_on);
}

/// A burst whose batch holds payloads that nobody awaits and whose drop panics (here, on a
/// runtime shut down: the batch's drop delivers it) delivers every other completion all
/// the same: each payload's panic is caught on its own. (Without that, the first panic
/// left the rest of the batch undelivered, their trees pending for ever.)
#[test]
#[cfg(not(miri))] // 2,048 trees
fn a_burst_delivers_past_payloads_whose_drop_panics() {
    const TREES: u64 = 2_048;
    #[derive(Debug)]
    struct Loud(bool);
    impl Drop for Loud {
        fn drop(&mut self) {
            if self.0 {
                panic!("a payload's drop panics");
            }
        }
    }
    let first = runtime(true);
    let (acker, _completions, clock) = built_in::<Loud>(&first, 4);
    drop(first);
    let loud = |root: u64| root == 100 || root == 1_000;
    let kept: Vec<_> = (1..=TREES)
        .filter_map(|root| {
            let tree = acker.track(root, 0b1, Loud(loud(root))).unwrap();
            (!loud(root)).then_some((root, tree))
        })
        .collect();
    clock.advance(Duration::from_millis(200));
    runtime(false).block_on(async {
        for (root, tree) in kept {
            let done = timeout(BOUND, tree).await.unwrap().unwrap();
            assert_eq!((done.root, done.outcome), (root, Outcome::TimedOut));
        }
    });
    assert!(acker.shutdown_blocking().is_empty());
}
