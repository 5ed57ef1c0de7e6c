//! The Acker's semantics (the `Acker`'s rustdoc), checked on every contender before the
//! bench measures anything: one scenario of acks and fails before init, a held fail that
//! Acked beats, a lost ack that times out, an orphan that expires silently and a duplicate
//! init; any difference panics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::{Completion, InitError, Outcome};

use super::Tracker;

/// A completion as the semantics check records it: root, payload, outcome, elapsed.
type Seen = (u64, u32, Outcome, Duration);

/// The same scenario on every contender; panics unless it behaves as the Acker's contract
/// says (the `Acker`'s rustdoc).
pub(crate) fn check_semantics<T: Tracker>(name: &str) {
    let timeout = Duration::from_millis(100);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let t = T::build(
        timeout,
        16,
        Arc::new(move |c: Completion<u32>| {
            sink.lock()
                .unwrap()
                .push((c.root, c.payload, c.outcome, c.elapsed))
        }),
    );
    let (a, b) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64);
    let ok = |r: Result<(), InitError<u32>>| r.is_ok();
    // 1: a plain tree; the last ack completes it.
    assert!(ok(t.init(1, a ^ b, 1)), "{name}: init 1");
    assert!(!t.ack(1, a), "{name}: first ack completed tree 1");
    assert!(t.ack(1, b), "{name}: last ack did not complete tree 1");
    // 2: an ack before init is held.
    assert!(!t.ack(2, a), "{name}: orphan ack completed");
    assert!(ok(t.init(2, a ^ b, 2)), "{name}: init 2");
    assert!(t.ack(2, b), "{name}: tree 2");
    // 3: every ack before init: init completes it.
    assert!(
        !t.ack(3, a) && !t.ack(3, b),
        "{name}: orphan acks completed"
    );
    assert!(ok(t.init(3, a ^ b, 3)), "{name}: init 3");
    // 4: fail after init.
    assert!(ok(t.init(4, a ^ b, 4)), "{name}: init 4");
    assert!(t.fail(4), "{name}: fail did not complete tree 4");
    // 5: fail before init: init completes it Failed.
    assert!(!t.fail(5), "{name}: orphan fail completed");
    assert!(ok(t.init(5, a ^ b, 5)), "{name}: init 5");
    // 6: Acked wins over a held fail.
    assert!(
        !t.ack(6, a) && !t.ack(6, b) && !t.fail(6),
        "{name}: orphan 6"
    );
    assert!(ok(t.init(6, a ^ b, 6)), "{name}: init 6");
    // 7: a lost ack: times out.
    assert!(ok(t.init(7, a ^ b, 7)), "{name}: init 7");
    assert!(!t.ack(7, a), "{name}: tree 7");
    // 8: an orphan whose init never comes: dropped silently.
    assert!(!t.ack(8, a), "{name}: orphan 8");
    // 9: a duplicate init is refused and changes nothing.
    assert!(ok(t.init(9, a ^ b, 9)), "{name}: init 9");
    assert!(
        matches!(t.init(9, a ^ b, 99), Err(InitError::Duplicate(99))),
        "{name}: duplicate init accepted"
    );
    assert!(!t.ack(9, a) && t.ack(9, b), "{name}: tree 9");
    // 1 again: a late ack after completion is an orphan, not a resurrection.
    assert!(!t.ack(1, a), "{name}: late ack");

    let give_up = Instant::now() + Duration::from_secs(5);
    while !seen.lock().unwrap().iter().any(|c| c.0 == 7) {
        assert!(Instant::now() < give_up, "{name}: tree 7 never timed out");
        thread::sleep(Duration::from_millis(5));
    }
    // Long enough for the orphans (8, late 1) to expire and any duplicate to show up.
    thread::sleep(3 * timeout);
    drop(t);
    let seen = seen.lock().unwrap();
    let got: BTreeMap<u64, Vec<(u32, Outcome)>> =
        seen.iter()
            .fold(BTreeMap::new(), |mut m, &(root, p, o, _)| {
                m.entry(root).or_insert_with(Vec::new).push((p, o));
                m
            });
    use Outcome::*;
    let expected: BTreeMap<u64, Vec<(u32, Outcome)>> = [
        (1, Acked),
        (2, Acked),
        (3, Acked),
        (4, Failed),
        (5, Failed),
        (6, Acked),
        (7, TimedOut),
        (9, Acked),
    ]
    .into_iter()
    .map(|(root, o)| (root, vec![(root as u32, o)]))
    .collect();
    assert_eq!(
        got, expected,
        "{name}: completions differ from the contract"
    );
    let (.., late) = seen.iter().find(|c| c.0 == 7).copied().expect("tree 7");
    assert!(late >= timeout, "{name}: tree 7 timed out early ({late:?})");
}
