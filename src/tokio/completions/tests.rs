use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use ::tokio::time::timeout;

use super::*;
use crate::Outcome;

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
    let mut tree = acker.track(5, 0b01 ^ 0b10, "req").await.unwrap();
    assert_eq!(tree.root(), 5);
    assert_eq!(acker.room(), 3);
    assert!(!acker.ack(5, 0b01));
    assert!(still_waiting(&mut tree).await);
    assert!(acker.ack(5, 0b10));
    let done = timeout(BOUND, tree).await.unwrap().unwrap();
    assert_eq!(
        (done.root, done.payload, done.outcome),
        (5, "req", Outcome::Acked)
    );
    // Handed to its future: the permit is back and the stream saw nothing.
    assert_eq!(acker.room(), 4);
    assert!(matches!(completions.try_next(), Ok(None)));
    acker.shutdown();
    assert!(next(&mut completions).await.is_none());
}

#[::tokio::test]
async fn a_lost_edge_resolves_timed_out() {
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_millis(30))
        .build_async(4)
        .unwrap();
    let tree = acker.track(9, 0b11, 1).await.unwrap();
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
        .await
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
            tracked.push(acker.track(root, root, root).await.unwrap());
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
    assert!(acker.shutdown().is_empty());
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
    assert!(matches!(
        acker.try_track(3, 3, 30),
        Err(InitError::Full(30))
    ));
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

#[::tokio::test]
async fn shutdown_hands_back_ends_the_stream_and_closes_tracks() {
    let (acker, mut completions) = build::<u32>(4);
    acker.init(1, 1, 10).await.unwrap();
    let tree = acker.track(2, 2, 20).await.unwrap();
    acker.init(3, 3, 30).await.unwrap();
    assert!(acker.ack(3, 3)); // its completion waits in the stream
    acker.init(4, 4, 40).await.unwrap();
    let mut waiting = {
        let acker = acker.clone();
        ::tokio::spawn(async move { acker.init(5, 5, 50).await })
    };
    assert!(still_waiting(&mut waiting).await);

    let mut back = acker.shutdown();
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
        acker.try_track(6, 6, 60),
        Err(InitError::Shutdown(60))
    ));
    // What the stream held is still delivered, then it ends, and stays ended.
    assert_eq!(next(&mut completions).await.unwrap().root, 3);
    assert!(next(&mut completions).await.is_none());
    assert_eq!(completions.try_next().unwrap_err(), Closed);
    assert!(futures_core::FusedStream::is_terminated(&completions));
    assert!(acker.shutdown().is_empty());
}

#[::tokio::test]
async fn a_dropped_tree_completion_drops_its_completion_silently() {
    let (acker, mut completions) = build::<String>(1);
    let tree = acker.track(8, 1, "gone".to_owned()).await.unwrap();
    drop(tree);
    assert!(acker.ack(8, 1));
    assert_eq!(acker.room(), 1, "the permit came back");
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
    let tree = acker.track(1, 1, 10).await.unwrap();
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
    assert!(acker.shutdown().is_empty());
    let seen = timeout(BOUND, consumer).await.unwrap().unwrap();
    assert_eq!(seen.len() as u64, PRODUCERS * TREES);
    assert!(seen.values().all(|&n| n == 1));
}

#[test]
fn build_async_refuses_a_zero_buffer_and_a_callback() {
    let zero = Acker::<u32>::builder().build_async(0).unwrap_err();
    assert_eq!(zero, ConfigError::Zero { param: "buffer" });
    let callback = Acker::<u32>::builder()
        .on_complete(|_| {})
        .build_async(1)
        .unwrap_err();
    assert!(callback.to_string().contains("on_complete"), "{callback}");
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
