//! The loose ends of a tree's life and of the acker's: messages after `shutdown`, waiting
//! for completions to be delivered, and a root reused while a message of its earlier use
//! was still on its way.

use super::*;

/// After `shutdown` has returned, acks and fails change nothing and return `false`, the
/// orphans it found are dropped (and counted), and nothing is pending or counts against
/// `max_pending`. (They were held for good: `pending()` never came back to 0.)
#[test]
fn after_shutdown_messages_hold_nothing_and_nothing_is_pending() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.max_pending(2));
    acker.init(1, 0b11, 10).unwrap();
    assert!(!acker.ack(2, 0b1)); // an orphan
    assert_eq!(acker.shutdown(), [(1, 10)]);
    assert_eq!((acker.pending(), acker.orphans_held()), (0, 0));
    assert_eq!(acker.stats().orphans_expired, 1);
    assert!(!acker.ack(3, 0b1));
    assert!(!acker.fail(4));
    assert!(!acker.ack(1, 0b11));
    assert_eq!((acker.pending(), acker.orphans_held()), (0, 0));
    clock.advance(60 * SEC);
    assert_eq!(acker.expire(), 0);
    assert!(take(&log).is_empty());
    assert!(matches!(acker.init(5, 1, 50), Err(InitError::Shutdown(50))));
}

/// Orphans that arrive while shutdown scans (from another thread) are gone too once it
/// returns.
#[test]
fn orphans_racing_shutdown_are_dropped_by_the_time_it_returns() {
    for round in 0..20u64 {
        let acker: Acker<u32> = Acker::builder().max_pending(1 << 16).build().unwrap();
        let sender = acker.clone();
        let go = Arc::new(std::sync::Barrier::new(2));
        let ready = Arc::clone(&go);
        let acks = std::thread::spawn(move || {
            ready.wait();
            for i in 0..20_000u64 {
                sender.ack(round << 32 | i, i | 1);
            }
        });
        go.wait();
        acker.shutdown();
        assert_eq!(acker.pending(), 0, "round {round}");
        acks.join().unwrap();
        assert_eq!(acker.pending(), 0, "round {round}, after the sender");
    }
}

/// `pending()` reaches 0 when a completion is decided, before its callback has run;
/// `wait_delivered` returns only once the callback has. (Without it a caller that waited
/// for `pending() == 0` saw no callback yet.)
#[test]
fn wait_delivered_returns_after_the_callbacks_of_what_completed() {
    let delivered = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&delivered);
    let acker: Acker<u32> = Acker::builder()
        .on_complete(move |_| {
            // A slow callback: the window in which pending() is 0 and it has not returned.
            std::thread::sleep(Duration::from_millis(50));
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    acker.init(1, 0b1, 0).unwrap();
    let worker = {
        let acker = acker.clone();
        std::thread::spawn(move || acker.ack(1, 0b1))
    };
    while acker.pending() > 0 {
        std::thread::yield_now();
    }
    acker.wait_delivered();
    assert_eq!(delivered.load(Ordering::SeqCst), 1);
    assert!(worker.join().unwrap());
}

/// A late duplicate of a finished tree's ack is held as an orphan and merges into the next
/// init of the same root, which then cannot be acked to 0: the acker cannot tell it from an
/// ack that overtook its init, so it merges it (by design), and counts the merge in
/// `orphans_joined`, where a reused root becomes visible.
#[test]
fn a_reused_root_merges_a_late_ack_and_the_merge_is_counted() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    let (a, b) = (0xa11ce, 0xb0b);
    acker.init(5, a, 1).unwrap();
    assert!(acker.ack(5, a));
    assert!(!acker.ack(5, a)); // the same ack, delivered twice
    assert_eq!(acker.stats().orphans_joined, 0);
    acker.init(5, b, 2).unwrap(); // the root reused for a new request
    assert_eq!(acker.stats().orphans_joined, 1);
    assert!(!acker.ack(5, b), "its own edge does not bring it to 0");
    clock.advance(31 * SEC);
    acker.expire();
    assert_eq!(
        take(&log),
        [(5, 1, Outcome::Acked), (5, 2, Outcome::TimedOut)]
    );
    // An ack that overtook its own init is counted the same way.
    assert!(!acker.ack(6, a));
    acker.init(6, a, 3).unwrap();
    assert_eq!(take(&log), [(6, 3, Outcome::Acked)]);
    assert_eq!(acker.stats().orphans_joined, 2);
}
