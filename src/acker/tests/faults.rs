//! Faults around the edges: the reaper survives panics, every shutdown joins,
//! clocks that step back or jump, a callback that holds its own acker.

use super::*;

/// A `Clock` that panics on the reaper's thread while `armed`, once per arming.
#[derive(Clone)]
struct ReaperPanickingClock {
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl Clock for ReaperPanickingClock {
    fn now(&self) -> u64 {
        if std::thread::current().name() == Some("ackwheel-reaper")
            && self.armed.swap(false, Ordering::SeqCst)
        {
            panic!("clock failure on the reaper (on purpose)");
        }
        crate::clock::MonotonicClock::new().now()
    }
}

/// A panic in a reaper pass (here the clock's) is caught and counted, and the reaper goes
/// on timing trees out.
#[test]
fn the_reaper_survives_a_panicking_clock() {
    let clock = ReaperPanickingClock {
        armed: Arc::default(),
    };
    let timed_out = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sink = Arc::clone(&timed_out);
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_millis(20))
        .clock(clock.clone())
        .on_complete(move |_| {
            sink.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    clock.armed.store(true, Ordering::SeqCst);
    acker.init(1, 0b1, 1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while (acker.reaper_panics() == 0 || timed_out.load(Ordering::SeqCst) == 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(acker.reaper_panics() >= 1, "the panic was not seen");
    assert_eq!(timed_out.load(Ordering::SeqCst), 1, "the reaper stopped");
    // And it keeps going.
    acker.init(2, 0b1, 2).unwrap();
    while timed_out.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(timed_out.load(Ordering::SeqCst), 2);
}

/// A payload whose drop panics.
struct PanickingDrop(Arc<std::sync::atomic::AtomicU64>);

impl Drop for PanickingDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("payload drop (on purpose)");
    }
}

/// With no `on_complete`, a timed-out payload is dropped by the reaper; a panic in that
/// drop is caught and counted, and the reaper goes on.
#[test]
fn the_reaper_survives_a_payload_whose_drop_panics() {
    let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let acker: Acker<PanickingDrop> = Acker::builder()
        .timeout(Duration::from_millis(10))
        .build()
        .unwrap();
    for root in 0..3 {
        acker
            .init(root, 0b1, PanickingDrop(Arc::clone(&dropped)))
            .unwrap_or_else(|_| panic!("init"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // The reaper counts a drop's panic just after the drop ran: wait for both counts.
    while (dropped.load(Ordering::SeqCst) < 3 || acker.stats().callback_panics < 3)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 3, "a timeout was lost");
    assert_eq!(acker.stats().timed_out, 3);
    assert_eq!(acker.stats().callback_panics, 3);
    assert_eq!(acker.pending(), 0);
}

/// Every `shutdown` returns only after the reaper has stopped, even the second of two
/// concurrent ones while the reaper runs a slow `on_complete`.
#[test]
fn every_concurrent_shutdown_waits_for_the_reaper() {
    let in_callback = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&in_callback);
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_millis(5))
        .on_complete(move |_| {
            flag.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
            flag.store(false, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    acker.init(1, 0b1, 1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !in_callback.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        in_callback.load(Ordering::SeqCst),
        "the timeout's callback never ran"
    );
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (acker, in_callback) = (acker.clone(), Arc::clone(&in_callback));
            s.spawn(move || {
                acker.shutdown();
                assert!(
                    !in_callback.load(Ordering::SeqCst),
                    "shutdown returned while the reaper was still in on_complete"
                );
            });
        }
    });
}

/// A clock that steps back below a tree's first message gives an elapsed time of 0, not a
/// wrapped one.
#[test]
fn a_clock_that_steps_back_gives_zero_elapsed() {
    let clock = ManualClock::new(1 << 40);
    let elapsed = Arc::new(StdMutex::new(Vec::new()));
    let sink = Arc::clone(&elapsed);
    let acker: Acker<u32> = Acker::builder()
        .clock(clock.clone())
        .on_complete(move |c| sink.lock().unwrap().push(c.elapsed))
        .build_manual()
        .unwrap();
    clock.advance(Duration::from_secs(5));
    acker.init(1, 0b1, 1).unwrap();
    clock.set(1 << 40); // five seconds back
    assert!(acker.ack(1, 0b1));
    assert_eq!(*elapsed.lock().unwrap(), [Duration::ZERO]);
}

/// A regression test: a clock jump of 7 days (over 2^29 ticks at 1 ms) must not alias a
/// deadline: the tree times out at the first pass after the jump, not 144 h later. The
/// second core compares `u32` ticks wrapping, which holds for jumps up to 2^30 ticks.
#[test]
fn a_clock_jump_of_a_week_does_not_alias_a_deadline() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    acker.init(1, 0b1, 7).unwrap();
    assert!(!acker.ack(2, 0b1)); // an orphan too
    acker.expire();
    clock.advance(Duration::from_secs(7 * 24 * 3600));
    assert_eq!(acker.expire(), 1);
    assert_eq!(take(&log), [(1, 7, Outcome::TimedOut)]);
    assert_eq!(acker.pending(), 0, "the orphan must be dropped too");
    // And the acker goes on: a new tree after the jump times out on time.
    acker.init(3, 0b1, 8).unwrap();
    clock.advance(29 * SEC);
    assert_eq!(acker.expire(), 0, "early");
    clock.advance(2 * SEC);
    assert_eq!(acker.expire(), 1);
}

/// Sets its flag when dropped.
struct DropWitness(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropWitness {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An `on_complete` that holds a handle of its own acker (the replay pattern) made a cycle
/// that kept the acker alive after `shutdown`. Shutdown now drops the callback once no
/// operation can call it, and with it the handle it held.
#[test]
fn shutdown_drops_a_callback_that_holds_its_own_acker() {
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let witness = DropWitness(Arc::clone(&dropped));
    let holder: Arc<std::sync::OnceLock<Acker<u32>>> = Arc::default();
    let in_callback = Arc::clone(&holder);
    let replays = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&replays);
    let acker: Acker<u32> = Acker::builder()
        .on_complete(move |c| {
            let _ = &witness;
            if c.payload == 1 {
                // Replay once through the handle the callback holds.
                in_callback.get().unwrap().init(2, 0b1, 2).unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .unwrap();
    holder.set(acker.clone()).unwrap();
    drop(holder); // now only the callback holds that handle: a cycle
    acker.init(1, 0b1, 1).unwrap();
    assert!(acker.ack(1, 0b1));
    assert_eq!(replays.load(Ordering::SeqCst), 1);
    assert_eq!(acker.shutdown(), [(2, 2)]);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the callback was not dropped"
    );
}

/// What a callback's `shutdown` handed back, once it has run.
type HandedBack = Arc<StdMutex<Option<Vec<(u64, u32)>>>>;

/// A manual acker whose callback calls `shutdown` on the acker itself, and where that
/// call's hand-back lands.
fn shut_down_by_its_callback() -> (Acker<u32>, HandedBack) {
    let holder: Arc<std::sync::OnceLock<Acker<u32>>> = Arc::default();
    let in_callback = Arc::clone(&holder);
    let handed_back = HandedBack::default();
    let sink = Arc::clone(&handed_back);
    let acker: Acker<u32> = Acker::builder()
        .clock(ManualClock::new(0))
        .on_complete(move |_| {
            *sink.lock().unwrap() = Some(in_callback.get().unwrap().shutdown());
        })
        .build_manual()
        .unwrap();
    holder.set(acker.clone()).unwrap();
    (acker, handed_back)
}

/// A callback that shuts its acker down in the middle of a batch: the batch's later
/// messages change nothing, as the same calls one at a time would not after the shutdown
/// (`apply_each` applies a chunk in one operation, which must look at the callback again
/// after each message).
#[test]
fn a_shutdown_from_a_callback_mid_batch_stops_the_rest_of_the_batch() {
    let (acker, handed_back) = shut_down_by_its_callback();
    acker.init(1, 0b1, 1).unwrap();
    acker.init(2, 0b11, 2).unwrap();
    let frame = [
        Message::Ack { root: 1, xor: 0b1 }, // completes tree 1: the callback shuts down
        Message::Ack { root: 2, xor: 0b01 },
        Message::Fail { root: 3 },
    ];
    let mut results = Vec::new();
    acker.apply_each(&frame, |i, result| results.push((i, result)));
    assert_eq!(results, [(0, true), (1, false), (2, false)]);
    assert_eq!(handed_back.lock().unwrap().take(), Some(vec![(2, 2)]));
    assert_eq!(
        acker.pending(),
        0,
        "the messages after the shutdown held nothing"
    );
}

/// A callback that calls `shutdown` on its own acker returns (it cannot wait for itself),
/// and the callback is not dropped under its own feet.
#[test]
fn shutdown_from_inside_the_callback_returns() {
    let (acker, handed_back) = shut_down_by_its_callback();
    acker.init(1, 0b1, 1).unwrap();
    acker.init(2, 0b1, 2).unwrap();
    assert!(acker.ack(1, 0b1));
    assert_eq!(handed_back.lock().unwrap().take(), Some(vec![(2, 2)]));
    assert!(matches!(acker.init(3, 0b1, 3), Err(InitError::Shutdown(3))));
}
