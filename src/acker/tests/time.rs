//! Time that never aliases: `elapsed` over any life of a tree, and deadlines judged on the
//! clock that stamped them, also when it steps back. Manual mode, through the public API.

use super::*;

/// Completions with their `elapsed`.
type Timed = Arc<StdMutex<Vec<(u64, Outcome, Duration)>>>;

fn timed(clock: &ManualClock, resolution: Duration, timeout: Duration) -> (Acker<u32>, Timed) {
    let log: Timed = Arc::default();
    let sink = Arc::clone(&log);
    let acker = Acker::builder()
        .timeout(timeout)
        .resolution(resolution)
        .clock(clock.clone())
        .shards(4)
        .max_pending(1024)
        .on_complete(move |c: Completion<u32>| {
            sink.lock().unwrap().push((c.root, c.outcome, c.elapsed))
        })
        .build_manual()
        .unwrap();
    (acker, log)
}

/// Within a tick (1024 ns at a resolution of 1 µs) or, past 2^29 ticks of life, within one
/// part in 2^23 of it; never short.
fn assert_close(elapsed: Duration, truth: Duration, tick: Duration) {
    let slack = tick * 2 + truth / (1 << 23);
    assert!(
        elapsed >= truth && elapsed <= truth + slack,
        "elapsed {elapsed:?}, lived {truth:?}"
    );
}

/// A tree kept alive by `reset_timeout` for 5,400 s at 1 µs (over 2^32 ticks), with a
/// healthy reaper pass at each step, reports the 5,400 s it lived, not 5,400 s modulo 2^32
/// ticks (1,002 s), whether it completes by an ack or by a timeout.
#[test]
fn elapsed_is_right_for_a_tree_reset_past_two_to_the_32_ticks() {
    for origin in [0, 1 << 63, u64::MAX - 3_000_000_000_000] {
        let clock = ManualClock::new(origin);
        let micro = Duration::from_micros(1);
        let (acker, log) = timed(&clock, micro, 300 * SEC);
        let edge = 0x5eed;
        acker.init(1, edge, 10).unwrap();
        acker.init(2, edge, 20).unwrap();
        for _ in 0..20 {
            clock.advance(270 * SEC);
            assert!(acker.reset_timeout(1) && acker.reset_timeout(2));
            acker.expire();
        }
        assert!(log.lock().unwrap().is_empty(), "reset trees timed out");
        assert!(acker.ack(1, edge));
        let (root, outcome, elapsed) = log.lock().unwrap().remove(0);
        assert_eq!((root, outcome), (1, Outcome::Acked));
        assert_close(elapsed, 5_400 * SEC, micro);
        // The other times out 300 s after its last reset.
        clock.advance(301 * SEC);
        acker.expire();
        let (root, outcome, elapsed) = log.lock().unwrap().remove(0);
        assert_eq!((root, outcome), (2, Outcome::TimedOut));
        assert_close(elapsed, 5_701 * SEC, micro);
    }
}

/// A clock set back after a pass: a tree initialized afterwards is not timed out before
/// its timeout has passed on that clock (it was timed out at the very next pass), and
/// reports what it lived on it.
#[test]
fn a_clock_that_steps_back_times_nothing_out_early() {
    let clock = ManualClock::new(1 << 50);
    let ms = Duration::from_millis(1);
    let (acker, log) = timed(&clock, ms, 30 * SEC);
    clock.advance(1_000 * SEC);
    acker.expire();
    clock.set((1 << 50) + 500_000_000_000); // back by 500 s
    acker.init(7, 0x77, 70).unwrap();
    clock.advance(29 * SEC);
    acker.expire();
    assert!(log.lock().unwrap().is_empty(), "timed out after 29 s of 30");
    clock.advance(2 * SEC);
    acker.expire();
    let (root, outcome, elapsed) = log.lock().unwrap().remove(0);
    assert_eq!((root, outcome), (7, Outcome::TimedOut));
    assert_close(elapsed, 31 * SEC, ms);
}
