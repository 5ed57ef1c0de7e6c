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

/// Within a tick (1024 ns at a resolution of 1 µs: times are whole ticks) or, past 2^29
/// ticks of life, long by at most one part in 2^23 of it.
fn assert_close(elapsed: Duration, truth: Duration, tick: Duration) {
    let slack = tick * 2 + truth / (1 << 23);
    assert!(
        elapsed + tick >= truth && elapsed <= truth + slack,
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

/// The example: resolution 1 ms, timeout 30 s, one init, the clock moves 400
/// days, one pass: the tree times out (it stayed pending for about another 2^31 ticks),
/// reporting the 400 days it lived.
#[test]
fn a_stall_of_400_days_times_the_tree_out_at_the_next_pass() {
    let clock = ManualClock::new(0);
    let ms = Duration::from_millis(1);
    let (acker, log) = timed(&clock, ms, 30 * SEC);
    acker.init(1, 0x11, 10).unwrap();
    let stall = Duration::from_secs(400 * 86_400);
    clock.advance(stall);
    assert_eq!(acker.expire(), 1);
    let (root, outcome, elapsed) = log.lock().unwrap().remove(0);
    assert_eq!((root, outcome), (1, Outcome::TimedOut));
    assert_close(elapsed, stall, ms);
    assert_eq!(acker.pending(), 0);
    assert_eq!(acker.reanchorings(), 1);
}

/// Jumps around 2^31, 2^32 (where a `u32` tick reads as no time at all) and up to 2^40
/// ticks at 1 µs, over every origin: a live tree times out at the first pass with its
/// whole life as `elapsed`, an orphan is dropped, a tree reset just before the jump too,
/// and what is written after the jump and before any pass (an init, a reset, an orphan,
/// an ack that completes a tree) keeps its own deadline and `elapsed`.
#[test]
fn any_gap_between_passes_judges_every_deadline_right() {
    let micro = Duration::from_micros(1);
    let tick: u64 = 1024; // 1 µs rounds up to 2^10 ns
    for origin in [0, 1 << 63, u64::MAX - 5_000_000_000] {
        for jump_ticks in [
            (1u64 << 31) - 5,
            1 << 31,
            (1 << 32) - 7,
            1 << 32,
            (1 << 32) + 30_000,
            3 << 31,
            1 << 36,
            1 << 40,
        ] {
            let clock = ManualClock::new(origin);
            let (acker, log) = timed(&clock, micro, 20 * SEC);
            acker.init(1, 0x11, 10).unwrap(); // will time out
            acker.init(2, 0x22, 20).unwrap(); // acked after the jump: completes then
            assert!(!acker.ack(3, 0x33)); // an orphan
            clock.advance(10 * SEC);
            assert!(acker.reset_timeout(1));
            acker.expire();
            let jump = Duration::from_nanos(jump_ticks * tick);
            clock.advance(jump);
            let at = format!("origin {origin:#x}, jump {jump_ticks:#x} ticks");
            // Written after the jump, before any pass.
            assert!(acker.ack(2, 0x22), "{at}");
            acker.init(4, 0x44, 40).unwrap();
            assert!(!acker.ack(5, 0x55)); // a new orphan
            let done = log.lock().unwrap().remove(0);
            assert_eq!((done.0, done.1), (2, Outcome::Acked), "{at}");
            assert_close(done.2, jump + 10 * SEC, micro);
            // The first pass: the old tree times out, the old orphan goes, the new stay.
            clock.advance(SEC);
            acker.expire();
            let done: Vec<_> = std::mem::take(&mut *log.lock().unwrap());
            assert_eq!(done.len(), 1, "{at}: {done:?}");
            assert_eq!((done[0].0, done[0].1), (1, Outcome::TimedOut), "{at}");
            assert_close(done[0].2, jump + 11 * SEC, micro);
            assert_eq!(acker.pending(), 2, "{at}: the new tree and the new orphan");
            assert_eq!(acker.orphans_held(), 1, "{at}");
            // The new tree's deadline is 20 s after its init, on the clock.
            clock.advance(18 * SEC);
            acker.expire();
            assert!(log.lock().unwrap().is_empty(), "{at}: early");
            clock.advance(2 * SEC);
            acker.expire();
            let done = log.lock().unwrap().remove(0);
            assert_eq!((done.0, done.1), (4, Outcome::TimedOut), "{at}");
            assert_close(done.2, 21 * SEC, micro);
            assert_eq!(acker.pending(), 0, "{at}");
            assert_eq!(acker.stats().orphans_expired, 2, "{at}");
        }
    }
}

/// A handle the callback reaches its own acker through (dropped at a test's end).
type Replay = Arc<StdMutex<Option<Acker<u32>>>>;

/// A manual acker (10 s timeout, 1 µs resolution) whose callback inits root 100 (a replay)
/// when root 1 completes, and logs every completion.
fn replaying(clock: &ManualClock) -> (Acker<u32>, Timed, Replay) {
    let log: Timed = Arc::default();
    let sink = Arc::clone(&log);
    let replay: Replay = Arc::default();
    let handle = Arc::clone(&replay);
    let acker = fine(clock, move |c: Completion<u32>| {
        if c.root == 1 {
            if let Some(acker) = handle.lock().unwrap().as_ref() {
                acker.init(100, 0x100, 100).unwrap();
            }
        }
        sink.lock().unwrap().push((c.root, c.outcome, c.elapsed));
    });
    *replay.lock().unwrap() = Some(acker.clone());
    (acker, log, replay)
}

/// A manual acker of 1 µs ticks (2^32 of them are 73 minutes) and 10 s timeouts on `clock`.
fn fine(
    clock: &ManualClock,
    on_complete: impl Fn(Completion<u32>) + Send + Sync + 'static,
) -> Acker<u32> {
    Acker::builder()
        .timeout(10 * SEC)
        .resolution(Duration::from_micros(1))
        .clock(clock.clone())
        .on_complete(on_complete)
        .build_manual()
        .unwrap()
}

/// Thread A acks tree 1 (root 1, xor 0x11), whose callback signals `callback_entered`; once
/// it has, the clock jumps 2^30 ticks and thread B inits tree 3, which re-anchors first.
/// Their handles: A's ack's and B's init's success.
fn ack_then_stall(
    acker: &Acker<u32>,
    clock: &ManualClock,
    callback_entered: &std::sync::mpsc::Receiver<()>,
) -> (std::thread::JoinHandle<bool>, std::thread::JoinHandle<bool>) {
    let a = {
        let acker = acker.clone();
        std::thread::spawn(move || acker.ack(1, 0x11))
    };
    callback_entered
        .recv_timeout(20 * SEC)
        .expect("the callback ran");
    clock.advance(Duration::from_nanos(1024 << 30));
    let b = {
        let acker = acker.clone();
        std::thread::spawn(move || acker.init(3, 0x33, 30).is_ok())
    };
    (a, b)
}

/// Waits (20 s at most) until a re-anchoring of `acker` is under way (its thread waits for
/// the busy ones, or sweeps) or done.
fn until_re_anchoring(acker: &Acker<u32>) {
    let waited = std::time::Instant::now();
    while !(acker.engine().reanchoring() || acker.reanchorings() > 0) && waited.elapsed() < 20 * SEC
    {
        std::thread::yield_now();
    }
}

/// A callback that inits a replay while the pass after a stall delivers: the replay's
/// deadline is its own (the pass re-anchored first).
#[test]
fn a_replay_inited_from_the_callback_after_a_stall_keeps_its_deadline() {
    let clock = ManualClock::new(7);
    let (acker, log, replay) = replaying(&clock);
    acker.init(1, 0x11, 10).unwrap();
    clock.advance(Duration::from_nanos(1024 << 33)); // 2^33 ticks
    assert_eq!(acker.expire(), 1);
    clock.advance(9 * SEC);
    acker.expire();
    assert_eq!(log.lock().unwrap().len(), 1, "the replay timed out early");
    clock.advance(2 * SEC);
    acker.expire();
    let done = log.lock().unwrap().remove(1);
    assert_eq!((done.0, done.1), (100, Outcome::TimedOut));
    assert_close(done.2, 11 * SEC, Duration::from_micros(1));
    replay.lock().unwrap().take();
}

/// The same with the reaper thread: after the clock jumps 2^33 ticks, an init from
/// another thread re-anchors (the reaper may be asleep), and the old tree times out.
#[test]
fn the_reaper_thread_times_out_a_tree_after_a_stall() {
    let clock = ManualClock::new(u64::MAX - 1_000);
    let log: Timed = Arc::default();
    let sink = Arc::clone(&log);
    let acker: Acker<u32> = Acker::builder()
        .timeout(SEC)
        .resolution(Duration::from_micros(1))
        .clock(clock.clone())
        .on_complete(move |c: Completion<u32>| {
            sink.lock().unwrap().push((c.root, c.outcome, c.elapsed))
        })
        .build()
        .unwrap();
    acker.init(1, 0x11, 10).unwrap();
    clock.advance(Duration::from_nanos(1024 << 33));
    acker.init(2, 0x22, 20).unwrap();
    let waited = std::time::Instant::now();
    while log.lock().unwrap().is_empty() {
        assert!(waited.elapsed() < 20 * SEC, "the old tree never timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
    let done = log.lock().unwrap().remove(0);
    assert_eq!((done.0, done.1), (1, Outcome::TimedOut));
    assert!(acker.reanchorings() >= 1);
    assert!(acker.ack(2, 0x22));
}

/// The first write after a stall comes from inside a callback (an ack completes a tree
/// and its callback inits a replay), with no pass in between: the nested call re-anchors
/// (its own operation paused in the callback), the replay keeps its own deadline and the
/// tree left from before the stall times out at the next pass.
#[test]
fn a_stall_first_seen_inside_a_callback_re_anchors_there() {
    let clock = ManualClock::new(1 << 62);
    let (acker, log, replay) = replaying(&clock);
    acker.init(1, 0x11, 10).unwrap();
    acker.init(2, 0x22, 20).unwrap();
    clock.advance(Duration::from_nanos(1024 << 32)); // 2^32 ticks: a u32 reads no time
    assert_eq!(acker.reanchorings(), 0);
    assert!(acker.ack(1, 0x11));
    assert_eq!(acker.reanchorings(), 1, "the callback's init re-anchored");
    let done = log.lock().unwrap().remove(0);
    assert_eq!((done.0, done.1), (1, Outcome::Acked));
    assert_close(
        done.2,
        Duration::from_nanos(1024 << 32),
        Duration::from_micros(1),
    );
    clock.advance(9 * SEC);
    assert_eq!(acker.expire(), 1, "the tree from before the stall");
    assert_eq!(log.lock().unwrap().remove(0).0, 2);
    clock.advance(2 * SEC);
    assert_eq!(acker.expire(), 1, "the replay, 11 s after its init");
    assert_eq!(log.lock().unwrap().remove(0).0, 100);
    replay.lock().unwrap().take();
}

/// Re-anchoring against a callback that calls the acker: thread A acks a tree whose
/// callback, once thread B has begun re-anchoring (an init after a stall of 2^30 ticks),
/// inits a replay. B waits for every thread busy in the acker; A's replay must neither
/// wait for B (which waits for A) nor run during B's sweep. Both calls return, the replay
/// keeps its own deadline and the tree left from before the stall times out at the next
/// pass. (Before callbacks ran paused and nested entries of unpaused operations went on,
/// A and B waited for each other forever.)
#[test]
fn a_callback_that_calls_the_acker_during_another_threads_re_anchoring_returns() {
    let clock = ManualClock::new(1 << 62);
    let log: Timed = Arc::default();
    let sink = Arc::clone(&log);
    let handle: Replay = Arc::default();
    let inner = Arc::clone(&handle);
    let (in_callback, callback_entered) = std::sync::mpsc::channel();
    let acker = fine(&clock, move |c: Completion<u32>| {
        if c.root == 1 {
            let acker = inner.lock().unwrap().clone().expect("the acker");
            in_callback.send(()).unwrap();
            until_re_anchoring(&acker);
            acker.init(100, 0x100, 100).unwrap();
        }
        sink.lock().unwrap().push((c.root, c.outcome, c.elapsed));
    });
    *handle.lock().unwrap() = Some(acker.clone());
    acker.init(1, 0x11, 10).unwrap();
    acker.init(2, 0x22, 20).unwrap();
    let (a, b) = ack_then_stall(&acker, &clock, &callback_entered);
    let waited = std::time::Instant::now();
    while !(a.is_finished() && b.is_finished()) {
        assert!(
            waited.elapsed() < 20 * SEC,
            "a callback's call and a re-anchoring waited for each other"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(a.join().unwrap(), "A's ack completed tree 1");
    assert!(b.join().unwrap(), "B's init");
    assert_eq!(acker.reanchorings(), 1);
    assert_eq!(acker.stats().callback_panics, 0);
    let done = log.lock().unwrap().remove(0);
    assert_eq!((done.0, done.1), (1, Outcome::Acked));
    // The tree from before the stall is due at the next pass; the replay and B's tree, 10 s
    // after their inits, are not.
    assert_eq!(acker.expire(), 1);
    assert_eq!(log.lock().unwrap().remove(0).0, 2);
    clock.advance(9 * SEC);
    assert_eq!(acker.expire(), 0);
    clock.advance(2 * SEC);
    assert_eq!(acker.expire(), 2, "the replay and B's tree");
    handle.lock().unwrap().take();
}

/// Thread C: once a re-anchoring is under way, acks tree 2 (root 2, xor 0x22) and sends
/// what the ack returned.
fn ack_once_re_anchoring(
    acker: &Acker<u32>,
    acked: std::sync::mpsc::Sender<bool>,
) -> std::thread::JoinHandle<()> {
    let acker = acker.clone();
    std::thread::spawn(move || {
        until_re_anchoring(&acker);
        let _ = acked.send(acker.ack(2, 0x22));
    })
}

/// A callback that waits for another thread's acker call (a bounded channel to a thread
/// that acks, say) while a third thread re-anchors: the callback runs paused, so the
/// re-anchorer does not wait for it, and the other thread's call, held at its entry while
/// the re-anchoring lasts, returns. (Had the re-anchorer waited for the thread in the
/// callback, the three would wait for each other.)
#[test]
fn a_callback_waiting_for_another_threads_call_does_not_hold_a_re_anchoring_up() {
    let clock = ManualClock::new(1 << 62);
    let (in_callback, callback_entered) = std::sync::mpsc::channel();
    let (acked, ack_returned) = std::sync::mpsc::channel::<bool>();
    let ack_returned = StdMutex::new(ack_returned);
    let (verdict, callback_saw) = std::sync::mpsc::channel();
    let acker = fine(&clock, move |c: Completion<u32>| {
        if c.root == 1 {
            in_callback.send(()).unwrap();
            let ack = ack_returned.lock().unwrap().recv_timeout(20 * SEC);
            verdict.send(ack).unwrap();
        }
    });
    acker.init(1, 0x11, 10).unwrap();
    acker.init(2, 0x22, 20).unwrap();
    let (a, b) = ack_then_stall(&acker, &clock, &callback_entered);
    let c = ack_once_re_anchoring(&acker, acked);
    let saw = callback_saw
        .recv_timeout(30 * SEC)
        .expect("the callback returned");
    assert_eq!(
        saw,
        Ok(true),
        "the ack the callback waited for never returned: the re-anchorer waited for the callback"
    );
    assert!(a.join().unwrap());
    assert!(b.join().unwrap());
    c.join().unwrap();
    assert_eq!(acker.reanchorings(), 1);
    assert_eq!(acker.pending(), 1, "B's tree");
}

/// The same with a callback that has itself completed a tree before it waits: thread A's
/// callback for tree 1 acks tree 4 (whose callback runs nested in A's and returns), then
/// waits for thread C's ack of tree 2 while thread B re-anchors. Once the nested call has
/// returned, A is paused in its outer callback again, so B does not wait for it and C's
/// ack, held at its entry while B works, returns. (When the nested callback's pause ended
/// by clearing A's pause, B waited for A, C for B and A for C: the callback's wait ran out.)
#[test]
fn a_callback_that_completed_a_tree_does_not_hold_a_re_anchoring_up() {
    let clock = ManualClock::new(1 << 62);
    let log: Timed = Arc::default();
    let sink = Arc::clone(&log);
    let handle: Replay = Arc::default();
    let inner = Arc::clone(&handle);
    let (in_callback, callback_entered) = std::sync::mpsc::channel();
    let (acked, ack_returned) = std::sync::mpsc::channel::<bool>();
    let ack_returned = StdMutex::new(ack_returned);
    let (verdict, callback_saw) = std::sync::mpsc::channel();
    let acker = fine(&clock, move |c: Completion<u32>| {
        sink.lock().unwrap().push((c.root, c.outcome, c.elapsed));
        if c.root == 1 {
            let acker = inner.lock().unwrap().clone().expect("the acker");
            let nested = acker.ack(4, 0x44);
            in_callback.send(nested).unwrap();
            // Bounded, so that the test fails instead of hanging.
            let ack = ack_returned.lock().unwrap().recv_timeout(12 * SEC);
            verdict.send(ack).unwrap();
        }
    });
    *handle.lock().unwrap() = Some(acker.clone());
    acker.init(1, 0x11, 10).unwrap();
    acker.init(2, 0x22, 20).unwrap();
    acker.init(4, 0x44, 40).unwrap();
    let a = {
        let acker = acker.clone();
        std::thread::spawn(move || acker.ack(1, 0x11))
    };
    let nested = callback_entered
        .recv_timeout(20 * SEC)
        .expect("the callback ran");
    assert!(nested, "the callback's ack completed tree 4");
    clock.advance(Duration::from_nanos(1024 << 31)); // 2^31 ticks
    let b = {
        let acker = acker.clone();
        std::thread::spawn(move || acker.reset_timeout(2))
    };
    let c = ack_once_re_anchoring(&acker, acked);
    let saw = callback_saw
        .recv_timeout(30 * SEC)
        .expect("the callback returned");
    assert!(a.join().unwrap(), "A's ack completed tree 1");
    assert!(b.join().unwrap(), "B's reset found tree 2");
    c.join().unwrap();
    assert_eq!(
        saw,
        Ok(true),
        "the ack the callback waited for never returned: the re-anchorer waited for the callback"
    );
    assert_eq!(acker.reanchorings(), 1);
    assert_eq!(acker.pending(), 0);
    let roots: Vec<u64> = log.lock().unwrap().iter().map(|d| d.0).collect();
    assert_eq!(roots, [1, 4, 2], "each tree completed once, by its acks");
    handle.lock().unwrap().take();
}
