//! The Acker from many threads and at capacity: exactly once under races, the reaper
//! thread, the `max_pending` bound and the tables.

use super::*;

#[test]
fn concurrent_acks_complete_each_tree_exactly_once() {
    let trees: u64 = if cfg!(miri) { 20 } else { 20_000 };
    let edges = 8u64;
    let completions = Arc::new(StdMutex::new(HashMap::<u64, u32>::new()));
    let sink = Arc::clone(&completions);
    // Room for every tree, and for the spare credits each of the four threads' hands may
    // hold (at most 64: `bound`, "Hands"), which the initing thread cannot take: with
    // 16 to spare, an init near the end was refused `Full` now and then (3-5 runs in 40).
    let acker: Acker<u32> = Acker::builder()
        .max_pending(trees as usize + 16 + 4 * 64)
        .on_complete(move |c| *sink.lock().unwrap().entry(c.root).or_default() += 1)
        .build()
        .unwrap();
    let completed_by_ack = AtomicU64::new(0);
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (acker, barrier, completed_by_ack) = (&acker, &barrier, &completed_by_ack);
            s.spawn(move || {
                barrier.wait();
                for tree in 0..trees {
                    let root = tree.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    if t == 0 {
                        let all =
                            (0..edges).fold(0, |x, e| x ^ (root ^ ((e + 1) * 0x1234_5678_9abc)));
                        let _ = acker.init(root, all, tree as u32);
                    }
                    // Each thread acks its share of the edges, before or after init.
                    for e in (t..edges).step_by(4) {
                        if acker.ack(root, root ^ ((e + 1) * 0x1234_5678_9abc)) {
                            completed_by_ack.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            });
        }
    });
    let map = completions.lock().unwrap();
    assert_eq!(map.len() as u64, trees, "every tree completed");
    assert!(map.values().all(|n| *n == 1), "a tree completed twice");
    // The init may complete a tree whose acks all came first; every other completion is
    // claimed by exactly one ack.
    assert!(completed_by_ack.load(Ordering::SeqCst) <= trees);
    assert_eq!(acker.stats().acked, trees);
    assert_eq!(acker.pending(), 0);
}

#[test]
fn the_reaper_thread_times_out_trees_never_early() {
    let n = if cfg!(miri) { 5 } else { 200 };
    let clock = MonotonicClock::new();
    let seen = Arc::new(StdMutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let acker: Acker<u64> = Acker::builder()
        .timeout(Duration::from_millis(20))
        .on_complete(move |c: Completion<u64>| {
            sink.lock()
                .unwrap()
                .push((c.outcome, c.payload, clock.now(), c.elapsed))
        })
        .build()
        .unwrap();
    for i in 0..n {
        let t = clock.now();
        acker
            .init_with_timeout(i, 1, t, Duration::from_millis(5 + i % 20))
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < n as usize && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), n as usize, "all trees timed out");
    for (i, (outcome, start, at, elapsed)) in seen.iter().enumerate() {
        assert_eq!(*outcome, Outcome::TimedOut);
        let _ = i;
        assert!(
            at.wrapping_sub(*start) >= 5_000_000,
            "timed out after {} ns",
            at - start
        );
        assert!(*elapsed >= Duration::from_millis(5));
    }
    assert_eq!(acker.pending(), 0);
    drop(seen);
    // Idle now: once its linger is over (four of its sleeps while trees are pending: 20 ms
    // here, each a quarter of the 20 ms timeout) the reaper must be parked, not polling.
    std::thread::sleep(Duration::from_millis(60));
    let before = acker.idle_wakeups();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        acker.idle_wakeups() - before <= 2,
        "reaper polls while idle"
    );
}

#[test]
fn dropping_the_last_handle_stops_the_reaper_promptly() {
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    acker.init(1, 1, 1).unwrap();
    let t = std::time::Instant::now();
    drop(acker);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_longer_tree_timeout_on_an_orphan_is_not_cut_short() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.timeout(10 * SEC));
    assert!(!acker.ack(1, 0b1)); // orphan: due at 10 s with the default timeout
    acker.init_with_timeout(1, 0b11, 10, 60 * SEC).unwrap();
    clock.set(30_000_000_000);
    acker.expire();
    assert!(take(&log).is_empty(), "timed out at the orphan's deadline");
    clock.set(60_010_000_000);
    acker.expire();
    assert_eq!(take(&log), [(1, 10, Outcome::TimedOut)]);
}

#[test]
fn a_reset_before_init_is_kept_by_init() {
    // Found by the stress harness: init recomputed the deadline from the first message and
    // silently undid a reset_timeout that had returned true for the orphan.
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.timeout(10 * SEC));
    assert!(!acker.ack(1, 0b1)); // orphan: due at 10 s
    clock.set(8_000_000_000);
    assert!(acker.reset_timeout(1)); // due at 18 s
    clock.set(9_000_000_000);
    acker.init(1, 0b11, 5).unwrap();
    clock.set(12_000_000_000);
    acker.expire();
    assert!(take(&log).is_empty(), "init undid the reset");
    clock.set(18_010_000_000);
    acker.expire();
    assert_eq!(take(&log), [(1, 5, Outcome::TimedOut)]);
}

#[test]
fn an_init_for_a_held_orphan_is_accepted_at_capacity() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.max_pending(2));
    acker.init(1, 0b1, 1).unwrap();
    assert!(!acker.ack(2, 0b1));
    assert_eq!(acker.pending(), 2);
    // Root 2's entry exists: its init adds nothing and completes it.
    acker.init(2, 0b1, 2).unwrap();
    assert_eq!(take(&log), [(2, 2, Outcome::Acked)]);
}

/// Inits `root` (value `xor`), which must be accepted: it is below `max_pending`, and a
/// completed tree's slot and credit come back at once (no tombstone waits for a reaper),
/// so a refusal is a bug, however loaded the machine.
fn init_below_max_pending(acker: &Acker<u32>, root: u64, xor: u64) {
    if let Err(e) = acker.init(root, xor, 0) {
        panic!("root {root}: {e} with {} pending", acker.pending());
    }
}

/// Completed trees free their slots long before their (30 s) deadline: a small acker runs
/// many times its table's size of lifecycles back to back, and no init is refused. (A
/// table whose completed slots stayed tombstones until the reaper freed them after a grace
/// period would refuse inits `Full` after about two tables' worth of completions.)
#[test]
fn completed_slots_are_recycled_without_waiting_for_a_deadline() {
    let acker: Acker<u32> = Acker::builder()
        .timeout(30 * SEC)
        .shards(1)
        .max_pending(256)
        .build()
        .unwrap();
    let trees: u64 = if cfg!(miri) { 2_000 } else { 200_000 };
    for root in 0..trees {
        let root = root.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        init_below_max_pending(&acker, root, 0b1);
        assert!(acker.ack(root, 0b1));
    }
    assert_eq!(acker.stats().acked, trees);
    assert_eq!(acker.pending(), 0);
}

/// More busy threads than cores (the common case for a server's worker pool), each
/// preempted for whole time slices in the middle of operations: no init is refused below
/// `max_pending`. (With tombstones that wait for a descheduled reaper, inits are refused
/// with an eighth of it pending.)
#[test]
fn busy_threads_are_not_refused_below_max_pending() {
    const THREADS: u64 = 4;
    const IN_FLIGHT: u64 = 64;
    let trees: u64 = if cfg!(miri) { 100 } else { 50_000 };
    let acker: Acker<u32> = Acker::builder()
        .timeout(30 * SEC)
        .shards(1)
        // Room for twice what is ever in flight.
        .max_pending((2 * THREADS * IN_FLIGHT) as usize)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let acker = acker.clone();
            s.spawn(move || {
                let root = |i: u64| (t << 48 | i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                for i in 0..trees + IN_FLIGHT {
                    if i < trees {
                        init_below_max_pending(&acker, root(i), 0b11);
                        assert!(!acker.ack(root(i), 0b01));
                    }
                    if i >= IN_FLIGHT {
                        assert!(acker.ack(root(i - IN_FLIGHT), 0b10));
                    }
                }
            });
        }
    });
    assert_eq!(acker.stats().acked, THREADS * trees);
    assert_eq!(acker.pending(), 0);
}

/// A panicking `Clock` panics the caller before the table changes: no slot is left
/// CLAIMED (where every later call for the root would wait forever), nothing is counted,
/// and a tree whose completing ack panicked is still completed, by its timeout.
#[test]
fn a_panicking_clock_leaves_nothing_half_done() {
    let time = ManualClock::new(0);
    let clock = FlakyClock {
        time: time.clone(),
        panicking: Arc::default(),
    };
    let (acker, log) = manual(&time, |b| b.clock(clock.clone()));
    let fails = |f: &dyn Fn()| {
        clock.panicking.store(true, Ordering::SeqCst);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        clock.panicking.store(false, Ordering::SeqCst);
        assert!(result.is_err(), "the clock's panic reaches the caller");
    };
    fails(&|| {
        let _ = acker.init(1, 0b1, 7);
    });
    fails(&|| {
        let _ = acker.ack(2, 0b1);
    });
    fails(&|| {
        let _ = acker.fail(3);
    });
    assert_eq!(acker.pending(), 0, "{:?}", acker.stats());
    // The same roots work normally afterwards.
    acker.init(1, 0b1, 7).unwrap();
    assert!(!acker.ack(2, 0b1));
    assert!(!acker.fail(3));
    assert_eq!(acker.pending(), 3);
    // The clock is read for `elapsed` only after the completing CAS: the completion is
    // delivered whole (elapsed 0), and then the panic reaches the caller.
    fails(&|| {
        let _ = acker.ack(1, 0b1);
    });
    assert_eq!(take(&log), [(1, 7, Outcome::Acked)]);
    assert_eq!(acker.pending(), 2);
}

/// A root whose table is full of live trees and at its largest (skewed or chosen roots)
/// below `max_pending` is refused at once: nothing is worth waiting for.
#[test]
fn a_window_full_of_live_trees_is_refused_without_waiting() {
    let acker: Acker<u32> = Acker::builder()
        .timeout(30 * SEC)
        .shards(4)
        .max_pending(4000)
        .build()
        .unwrap();
    // Fill shard 0 with live trees until it refuses; the other shards keep pending low.
    let mut root = 0u64;
    let refused = loop {
        root += 1;
        if acker.placement(root).0 != 0 {
            continue;
        }
        let started = std::time::Instant::now();
        if let Err(e) = acker.init(root, 0b1, 0) {
            assert!(matches!(e, InitError::Full(_)), "{e}");
            break started.elapsed();
        }
    };
    assert!(
        acker.pending() < 4000,
        "shard 0's table fills before max_pending"
    );
    assert!(
        refused < Duration::from_millis(50),
        "refused after {refused:?}"
    );
    assert_eq!(acker.stats().rejected_full, 1);
}

/// Random roots fill a table to `max_pending` without one refusal: tables at a load of 4/5
/// at the brim, probe windows of 64 groups of 4 slots, and growth for room up to a load of
/// 2/3 absorb the clustering of a table filled to the brim
/// ([`engine`](crate::acker::engine), "The bound, and growth").
#[test]
fn random_roots_fill_max_pending_without_a_refusal() {
    const N: u64 = 1 << 20;
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, |b| b.shards(8).max_pending(N as usize));
    let mut refused = Vec::new();
    for i in 0..N {
        // splitmix64's finalizer: distinct, random-looking roots.
        let mut z = i.wrapping_add(77);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let root = z ^ (z >> 31);
        if acker.init(root, 1, 0).is_err() {
            refused.push(i);
        }
    }
    assert!(refused.is_empty(), "refused below max_pending: {refused:?}");
    assert_eq!(acker.pending(), N as usize);
    assert!(matches!(acker.init(N, 1, 1), Err(InitError::Full(1))));
}

/// The reaper's wheel keeps a group's entries until they come due: one filed for each
/// registration whose deadline is earlier than the group's (own timeouts that shrink round
/// by round here), and those of groups whose trees all completed. The sweep keeps it
/// within about twice what is pending, and every pending root stays covered.
#[test]
fn the_wheel_sweeps_dead_entries_beyond_twice_pending() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.max_pending(1 << 16));
    const LIVE: u64 = 1000;
    for root in 0..LIVE {
        // Held all along, due long after every round's trees.
        acker
            .init_with_timeout(1 << 40 | root, 0b1, 0, Duration::from_secs(3600))
            .unwrap();
    }
    let mut most = 0;
    for round in 0..40u64 {
        // Each round's trees outlive a tick (so they reach the wheel), then complete. Each
        // round's are due earlier than the last's: every one files an entry of its own.
        let timeout = Duration::from_secs(1000 - 10 * round);
        for root in 0..1000 {
            acker
                .init_with_timeout(round << 20 | root, 0b1, 1, timeout)
                .unwrap();
        }
        clock.advance(Duration::from_millis(5));
        acker.expire();
        assert_eq!(acker.covered_roots(), acker.pending(), "round {round}");
        for root in 0..1000 {
            assert!(acker.ack(round << 20 | root, 0b1));
        }
        most = most.max(acker.scheduled_timers());
    }
    assert_eq!(take(&log).len(), 40_000);
    assert_eq!(acker.pending(), LIVE as usize);
    // Without the sweep the wheel would hold about 40 000 entries.
    assert!(most <= 2 * (LIVE as usize + 1000) + 4096, "{most} entries");
    // The live trees still time out, at their deadline.
    clock.advance(Duration::from_secs(3601));
    assert_eq!(acker.expire(), LIVE as usize);
    assert_eq!(acker.pending(), 0);
}

/// The second core allocates nothing for `max_pending` that it touches at build, and the
/// bound is exact whatever the tables' room: the ninth tree of eight is refused.
#[test]
fn lean_tables_are_small_and_the_bound_exact() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, |b| b.max_pending(8));
    for root in 0..8 {
        acker.init(root, 1, 0).unwrap();
    }
    assert!(matches!(acker.init(8, 1, 8), Err(InitError::Full(8))));
    assert!(!acker.ack(9, 1), "an orphan needs room too");
    assert_eq!(acker.stats().rejected_full, 2);
    assert_eq!(acker.pending(), 8);
    // A completion gives its credit back.
    assert!(acker.ack(0, 1));
    acker.init(8, 1, 8).unwrap();
}

/// An ack from a thread-local's destructor, after the acker's own thread-local state on
/// that thread is gone, still delivers its completion to the callback. (It was dropped:
/// an async tree's future then never resolved and its cell leaked.)
#[test]
fn an_ack_from_a_thread_local_destructor_is_delivered() {
    struct AckOnExit(Option<(Acker<u32>, u64)>);
    impl Drop for AckOnExit {
        fn drop(&mut self) {
            if let Some((acker, root)) = self.0.take() {
                assert!(
                    acker.ack(root, 0b10),
                    "the exiting thread's ack completes the tree"
                );
            }
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<AckOnExit> =
            const { std::cell::RefCell::new(AckOnExit(None)) };
    }
    let delivered: Log = Arc::default();
    let sink = Arc::clone(&delivered);
    let acker: Acker<u32> = Acker::builder()
        .max_pending(1024)
        .on_complete(move |c| sink.lock().unwrap().push((c.root, c.payload, c.outcome)))
        .build()
        .unwrap();
    let sender = acker.clone();
    std::thread::spawn(move || {
        // Registered before the acker's thread-locals, so destroyed after them (destructors
        // run in the reverse order of registration).
        ON_EXIT.with(|on_exit| on_exit.borrow_mut().0 = Some((sender.clone(), 7)));
        sender.init(7, 0b11, 70).unwrap();
        assert!(!sender.ack(7, 0b01));
    })
    .join()
    .unwrap();
    acker.wait_delivered();
    assert_eq!(take(&delivered), [(7, 70, Outcome::Acked)]);
    assert_eq!((acker.pending(), acker.stats().acked), (0, 1));
}

/// The reaper thread runs with the short scheduling slice that lets its timer's wake-up
/// take a busy core at once ([`slice`](crate::sync::slice)): the slice read from inside a
/// timeout's callback, which the reaper thread runs, is the one this kernel grants a thread
/// that asks (none before Linux 6.12, when there is nothing to check).
#[test]
#[cfg(all(target_os = "linux", not(miri)))]
fn the_reaper_thread_runs_with_a_short_slice() {
    use crate::sync::slice::{ask_for_slice, slice_of, REAPER_SLICE_NS};
    let granted = std::thread::spawn(|| {
        ask_for_slice(REAPER_SLICE_NS);
        slice_of(0)
    })
    .join()
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_millis(10))
        .on_complete(move |c: Completion<u32>| {
            let thread = std::thread::current();
            let _ = tx.send((c.outcome, thread.name().map(str::to_owned), slice_of(0)));
        })
        .build()
        .unwrap();
    acker.init(1, 0b11, 0).unwrap();
    let (outcome, name, slice) = rx.recv_timeout(20 * SEC).expect("a timeout");
    assert_eq!(outcome, Outcome::TimedOut);
    assert_eq!(name.as_deref(), Some("ackwheel-reaper"));
    assert_eq!(slice, granted);
}

/// Each thread counts into its own record, and a thread that ends leaves its counts (and
/// its hand of credits) behind: folded into the shared set before its record goes, so the
/// stats neither lose nor double them.
#[test]
fn the_counts_and_credits_of_ended_threads_stay() {
    let threads = if cfg!(miri) { 2 } else { 8 };
    let acker: Acker<u32> = Acker::builder().build_manual().unwrap();
    for t in 0..threads {
        let acker = acker.clone();
        std::thread::spawn(move || {
            for tree in 0..100u64 {
                let root = (t * 1000 + tree).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                acker.init(root, 0b11, 0).unwrap();
                acker.ack(root, 0b01);
                acker.ack(root, 0b10); // completes it
            }
            acker.fail(0xfa11 + t); // an orphan, held
        })
        .join()
        .unwrap();
    }
    let stats = acker.stats();
    assert_eq!(
        (stats.acked, stats.pending),
        (100 * threads, threads as usize)
    );
    let records = acker.engine().thread_records();
    // Passes drop the ended threads' records (their orphans collected, their hands
    // reclaimed): the counts stay.
    for _ in 0..3 {
        acker.expire();
    }
    assert!(
        acker.engine().thread_records() < records,
        "no ended thread's record dropped ({records})"
    );
    let stats = acker.stats();
    assert_eq!(
        (stats.acked, stats.pending),
        (100 * threads, threads as usize)
    );
}
