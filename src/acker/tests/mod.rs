//! Acker tests: each rule of the semantics, a random model test against a sequential
//! reference in manual mode, and multi-threaded exactly-once checks.

use super::builder::MAX_PENDING;
use super::*;
use crate::clock::{Clock, ManualClock, MonotonicClock};
use crate::sync::{AtomicU64, Ordering};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Mutex as StdMutex;

type Log = Arc<StdMutex<Vec<(u64, u32, Outcome)>>>;

const SEC: Duration = Duration::from_secs(1);

fn manual(
    clock: &ManualClock,
    builder: impl FnOnce(AckerBuilder<u32>) -> AckerBuilder<u32>,
) -> (Acker<u32>, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let b = Acker::builder()
        .timeout(30 * SEC)
        .clock(clock.clone())
        .shards(4)
        // Small tables: these tests are about semantics (and Miri interprets every slot).
        .max_pending(1024)
        .on_complete(move |c: Completion<u32>| {
            sink.lock().unwrap().push((c.root, c.payload, c.outcome))
        });
    (builder(b).build_manual().unwrap(), log)
}

/// Roots the acker's timers cover: its wheel's, or its dirty groups' while the summary is
/// due no later than their deadlines.
fn covered<T: Send + 'static>(acker: &Acker<T>) -> usize {
    acker.covered_roots()
}

fn take(log: &Log) -> Vec<(u64, u32, Outcome)> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[test]
fn acks_complete_the_tree_once_and_only_the_last_call_says_so() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    for root in [0, 1, u64::MAX, 1 << 63] {
        acker.init(root, 0b1100, 7).unwrap();
        assert!(!acker.ack(root, 0b0100));
        assert!(acker.ack(root, 0b1000));
        assert_eq!(take(&log), [(root, 7, Outcome::Acked)], "root {root}");
        // A late ack is an orphan now, not part of a finished tree.
        assert!(!acker.ack(root, 0b1000));
    }
    assert_eq!(acker.stats().acked, 4);
    assert_eq!(acker.pending(), 4, "four late-ack orphans");
    clock.advance(31 * SEC);
    assert_eq!(acker.expire(), 0, "orphans expire silently");
    assert_eq!(acker.stats().orphans_expired, 4);
    assert_eq!(acker.pending(), 0);
}

#[test]
fn init_with_zero_xor_completes_at_once() {
    let clock = ManualClock::new(5);
    let (acker, log) = manual(&clock, |b| b);
    acker.init(9, 0, 1).unwrap();
    assert_eq!(take(&log), [(9, 1, Outcome::Acked)]);
    assert_eq!(acker.pending(), 0);
}

#[test]
fn acks_before_init_are_held_and_init_completes() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    assert!(!acker.ack(3, 0b01));
    assert!(!acker.ack(3, 0b10));
    assert_eq!(acker.pending(), 1);
    acker.init(3, 0b11, 30).unwrap();
    assert_eq!(take(&log), [(3, 30, Outcome::Acked)]);
    // Partial acks first: init leaves it pending.
    assert!(!acker.ack(4, 0b01));
    acker.init(4, 0b11, 40).unwrap();
    assert!(take(&log).is_empty());
    assert!(acker.ack(4, 0b10));
    assert_eq!(take(&log), [(4, 40, Outcome::Acked)]);
}

#[test]
fn fail_before_init_fails_at_init_unless_acked_wins() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    assert!(!acker.fail(5));
    acker.init(5, 0b1, 50).unwrap();
    assert_eq!(take(&log), [(5, 50, Outcome::Failed)]);
    // Acked wins over a held fail when the value is already 0.
    assert!(!acker.ack(6, 0b1));
    assert!(!acker.fail(6));
    acker.init(6, 0b1, 60).unwrap();
    assert_eq!(take(&log), [(6, 60, Outcome::Acked)]);
}

#[test]
fn fail_on_an_initialized_tree_fails_it_now() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    acker.init(8, 0b111, 80).unwrap();
    assert!(!acker.ack(8, 0b001));
    assert!(acker.fail(8));
    assert!(!acker.ack(8, 0b110), "the tree is gone");
    assert_eq!(take(&log), [(8, 80, Outcome::Failed)]);
    assert_eq!(acker.stats().failed, 1);
}

/// An init that shortens the deadline of an orphan another thread created (registered at
/// the default deadline) registers the tree again: the tree times out at the shortened
/// deadline, not late. (Leaving the summary at the orphan's deadline would lose it.)
#[test]
fn an_adjust_word_follows_its_open_word_on_another_threads_lane() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.resolution(Duration::from_millis(1)));
    for (orphan_lane, init_lane) in [(1, 0), (0, 1)] {
        let root = 40 + orphan_lane as u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                bound::set_stripe_index(orphan_lane);
                assert!(!acker.ack(root, 0b01)); // held, due in 30 s
            });
        });
        bound::set_stripe_index(init_lane);
        acker
            .init_with_timeout(root, 0b11, 7, Duration::from_secs(1))
            .unwrap();
        // One pass reads both words.
        clock.advance(Duration::from_millis(1_002));
        acker.expire();
        assert_eq!(
            take(&log),
            [(root, 7, Outcome::TimedOut)],
            "open word on lane {orphan_lane}, init on lane {init_lane}"
        );
    }
}

/// In manual mode nothing scans between `expire` calls: one thread can create hundreds of
/// orphans and shorten every one's deadline by its init, and each tree times out at its
/// shortened deadline.
#[test]
fn one_thread_can_shorten_the_deadline_of_every_orphan_it_holds() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| {
        b.shards(1)
            .max_pending(1000)
            .resolution(Duration::from_millis(1))
    });
    for root in 0..500 {
        assert!(!acker.ack(root, 0b01));
    }
    for root in 0..500 {
        let refused = acker.init_with_timeout(root, 0b11, root as u32, SEC).err();
        assert!(refused.is_none(), "root {root}: {refused:?}");
    }
    clock.advance(SEC + Duration::from_millis(2));
    acker.expire();
    let mut timed_out = take(&log);
    timed_out.sort_unstable_by_key(|c| c.0);
    let expected: Vec<_> = (0..500)
        .map(|root| (root, root as u32, Outcome::TimedOut))
        .collect();
    assert_eq!(timed_out, expected, "timed out at the shortened deadline");
}

#[test]
fn timeouts_are_never_early_and_reset_moves_the_deadline() {
    let start = u64::MAX - 10_000_000_000; // wraps during the test
    let clock = ManualClock::new(start);
    let (acker, log) = manual(&clock, |b| b.resolution(Duration::from_millis(1)));
    acker.init(1, 1, 10).unwrap();
    acker.init_with_timeout(2, 1, 20, 5 * SEC).unwrap();
    clock.advance(4 * SEC);
    acker.expire();
    assert!(take(&log).is_empty());
    clock.advance(SEC - Duration::from_nanos(1));
    acker.expire();
    assert!(take(&log).is_empty(), "one nanosecond early");
    clock.advance(Duration::from_millis(3));
    acker.expire();
    assert_eq!(take(&log), [(2, 20, Outcome::TimedOut)]);
    // Reset at t=20s: due at 50s, not 30s.
    clock.set(start.wrapping_add(20_000_000_000));
    assert!(acker.reset_timeout(1));
    clock.set(start.wrapping_add(31_000_000_000));
    acker.expire();
    assert!(take(&log).is_empty(), "reset deadline ignored");
    clock.set(start.wrapping_add(50_010_000_000));
    acker.expire();
    assert_eq!(take(&log), [(1, 10, Outcome::TimedOut)]);
    assert!(!acker.reset_timeout(1));
    assert_eq!(acker.stats().timed_out, 2);
}

/// Deadlines in the levels of the reaper's wheel a timeout reaches: levels 1 and 2, whose
/// entries carry their tick offsets in their own bits, and levels 3 and 4, which keep them
/// beside the entries ([`wheel`](crate::acker::timers::wheel), "Memory"). Each tree times
/// out at its deadline's tick, not two ticks before, and not later, with passes run on the
/// way (cascading each entry).
#[test]
fn deadlines_in_every_level_of_the_wheel_time_out_on_their_tick() {
    let tick = Duration::from_millis(1);
    let clock = ManualClock::new(1 << 40);
    let (acker, log) = manual(&clock, |b| b.resolution(tick));
    // About 2^7, 2^13, 2^19, 2^25 and 2^29 ticks: one per level from 1 to 4, at odd offsets
    // within their buckets (a timeout is at most 2^30 - 2 ticks, 13 days here).
    let timeouts: Vec<Duration> = [130u64, 8_200, 530_000, 33_600_000, 700_000_000]
        .into_iter()
        .map(Duration::from_millis)
        .collect();
    for (i, &timeout) in timeouts.iter().enumerate() {
        acker
            .init_with_timeout(i as u64 + 1, 1, i as u32, timeout)
            .unwrap();
    }
    acker.expire(); // hand the timers to the wheel
    let mut elapsed = Duration::ZERO;
    for (i, &timeout) in timeouts.iter().enumerate() {
        // Passes on the way (a few per level), then just before the deadline, then at it.
        for step in 1..=4 {
            let at = elapsed + (timeout - elapsed) * step / 5;
            clock.advance(at - elapsed);
            elapsed = at;
            acker.expire();
        }
        let before = timeout - 2 * tick;
        clock.advance(before - elapsed);
        acker.expire();
        assert!(
            take(&log).is_empty(),
            "tree {i} timed out before {timeout:?}"
        );
        // A deadline is the timeout rounded up to whole ticks, plus one (ticks are 2^20 ns
        // here): due within two ticks of it.
        clock.advance(5 * tick);
        elapsed = timeout + 3 * tick;
        acker.expire();
        assert_eq!(
            take(&log),
            [(i as u64 + 1, i as u32, Outcome::TimedOut)],
            "tree {i} at {timeout:?}"
        );
    }
    assert_eq!(acker.pending(), 0);
}

#[test]
fn duplicate_full_and_shutdown_hand_the_payload_back() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, |b| b.max_pending(3));
    acker.init(1, 1, 1).unwrap();
    assert!(matches!(
        acker.init(1, 1, 11),
        Err(InitError::Duplicate(11))
    ));
    acker.init(2, 1, 2).unwrap();
    assert!(!acker.ack(3, 1)); // an orphan takes the third place
    assert!(matches!(acker.init(4, 1, 44), Err(InitError::Full(44))));
    assert!(!acker.ack(5, 1), "an orphan beyond capacity is refused");
    assert_eq!(acker.stats().rejected_full, 2);
    let mut back = acker.shutdown();
    back.sort_unstable();
    assert_eq!(back, [(1, 1), (2, 2)]);
    let err = acker.init(6, 1, 66).unwrap_err();
    assert!(err.to_string().contains("shut down"));
    assert_eq!(err.into_payload(), 66);
}

/// `max_pending(1 << 30)` was once accepted and then allocated and touched about 78 GB. It
/// is a bound now, not an allocation: the largest accepted value builds an acker whose
/// tables are the smallest (32,768 slots), and one past it is refused by name.
#[test]
fn the_largest_max_pending_costs_nothing_up_front_and_one_more_is_refused() {
    let acker: Acker<u32> = Acker::builder()
        .max_pending(MAX_PENDING)
        .build_manual()
        .unwrap();
    let [current, successors, retired, wheel] = acker.memory_parts();
    // The smallest tables: 1.4 MiB of lines, mapped and untouched until used (their RSS
    // is the stress harness's `build` figure).
    assert!(
        current <= 2 << 20,
        "{current} bytes of tables for an empty acker"
    );
    assert_eq!((successors, retired), (0, 0));
    assert!(
        wheel <= 1 << 16,
        "{wheel} bytes of wheel for an empty acker"
    );
    assert!(
        acker.table_slots() <= 1 << 16,
        "{} slots",
        acker.table_slots()
    );
    acker.init(1, 2, 3).unwrap();
    assert!(acker.ack(1, 2));
    let err = Acker::<u32>::builder()
        .max_pending(MAX_PENDING + 1)
        .build_manual()
        .unwrap_err();
    assert!(err.to_string().contains("max_pending"), "{err}");
}

/// What an operator charts beside the counts: orphans held apart from the trees pending,
/// and how late the reaper delivered timeouts.
#[test]
fn stats_say_how_late_timeouts_came_and_orphans_are_counted_apart() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.timeout(Duration::from_millis(10)));
    acker.init(1, 0b1, 1).unwrap();
    acker.init(2, 0b1, 2).unwrap();
    assert!(!acker.ack(3, 0b1)); // never initialized: an orphan
    assert_eq!((acker.pending(), acker.orphans_held()), (3, 1));
    assert_eq!(acker.stats().timeout_lateness_max, Duration::ZERO);
    // The deadlines are about 10 ms after the start; the reaper runs at 40 ms.
    clock.advance(Duration::from_millis(40));
    assert_eq!(acker.expire(), 2);
    assert_eq!(take(&log).len(), 2);
    let stats = acker.stats();
    let late = stats.timeout_lateness_max;
    assert!(
        (26..=30).contains(&late.as_millis()),
        "{late:?} after a 10 ms deadline at 40 ms"
    );
    assert_eq!(stats.timeout_lateness_total, 2 * late);
    assert_eq!((acker.pending(), acker.orphans_held()), (0, 0));
    assert_eq!(stats.orphans_expired, 1);
    assert!(stats.to_string().contains("timeout lateness max"));
}

/// A callback that reads the stats finds its own timeout counted (the reaper counts a
/// pass's timeouts before it delivers the first).
#[test]
fn a_timeout_is_counted_before_its_callback_runs() {
    let clock = ManualClock::new(0);
    let me: Arc<std::sync::OnceLock<std::sync::Weak<Acker<u32>>>> = Arc::default();
    let seen = Arc::new(StdMutex::new(Vec::new()));
    let (me_in, seen_in) = (Arc::clone(&me), Arc::clone(&seen));
    let acker = Arc::new(
        Acker::builder()
            .timeout(Duration::from_millis(10))
            .clock(clock.clone())
            .max_pending(1024)
            .on_complete(move |_: Completion<u32>| {
                let acker = me_in.get().and_then(std::sync::Weak::upgrade);
                let counted = acker.map(|a| a.stats().timed_out);
                seen_in.lock().unwrap().push(counted);
            })
            .build_manual()
            .unwrap(),
    );
    me.set(Arc::downgrade(&acker)).unwrap();
    for root in 1..=3 {
        acker.init(root, 0b1, 0).unwrap();
    }
    clock.advance(Duration::from_millis(40));
    assert_eq!(acker.expire(), 3);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for (i, counted) in seen.into_iter().enumerate() {
        let counted = counted.expect("the acker is alive during its own pass");
        assert!(
            counted > i as u64,
            "callback {i} saw {counted} timeouts counted"
        );
    }
    assert_eq!(acker.stats().timed_out, 3);
}

#[test]
fn configuration_errors_name_the_parameter() {
    let cases: [(AckerBuilder<u32>, &str); 7] = [
        (Acker::builder().timeout(Duration::ZERO), "timeout"),
        (Acker::builder().shards(0), "shards"),
        (Acker::builder().max_pending(0), "max_pending"),
        (Acker::builder().resolution(Duration::ZERO), "resolution"),
        (
            Acker::builder().timeout(Duration::from_secs(u64::MAX)),
            "timeout",
        ),
        // Above 2^63 ns rounding up to a power of two overflowed (a panic in a debug
        // build, a 64-bit shift in release).
        (
            Acker::builder().resolution(Duration::from_secs(1 << 40)),
            "resolution",
        ),
        (
            Acker::builder().resolution(Duration::from_nanos((1 << 43) + 1)),
            "resolution",
        ),
    ];
    for (builder, param) in cases {
        let err = builder.build_manual().unwrap_err();
        assert!(err.to_string().contains(param), "{err}");
    }
}

#[test]
fn a_panicking_callback_is_counted_and_the_acker_goes_on() {
    let clock = ManualClock::new(0);
    let acker: Acker<u32> = Acker::builder()
        .clock(clock.clone())
        .on_complete(|c| assert_ne!(c.payload, 13))
        .build_manual()
        .unwrap();
    acker.init(1, 0, 13).unwrap();
    acker.init(2, 0, 14).unwrap();
    acker.init(3, 1, 13).unwrap();
    clock.advance(31 * SEC);
    assert_eq!(acker.expire(), 1);
    let stats = acker.stats();
    assert_eq!(
        (stats.acked, stats.timed_out, stats.callback_panics),
        (2, 1, 2)
    );
}

#[test]
fn the_callback_may_call_back_into_the_acker() {
    let clock = ManualClock::new(0);
    let slot: Arc<StdMutex<Option<Acker<u32>>>> = Arc::default();
    let replays = Arc::new(AtomicU64::new(0));
    let (s, r) = (Arc::clone(&slot), Arc::clone(&replays));
    let acker: Acker<u32> = Acker::builder()
        .clock(clock.clone())
        .on_complete(move |c| {
            if c.outcome == Outcome::TimedOut && c.payload < 3 {
                // Replay the tree, as a spout does.
                let a = s.lock().unwrap().clone().unwrap();
                a.init(c.root, 1, c.payload + 1).unwrap();
                a.expire(); // re-entrant pass: must not deadlock
                r.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build_manual()
        .unwrap();
    *slot.lock().unwrap() = Some(acker.clone());
    acker.init(42, 1, 0).unwrap();
    for _ in 0..4 {
        clock.advance(31 * SEC);
        acker.expire();
    }
    assert_eq!(replays.load(Ordering::SeqCst), 3);
    assert_eq!(acker.stats().timed_out, 4);
    slot.lock().unwrap().take();
}

#[test]
fn slots_are_reused_without_mixing_trees() {
    // A tiny table: one shard, few slots; thousands of trees cycle through it.
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b.shards(1).max_pending(8));
    let rounds: u64 = if cfg!(miri) { 40 } else { 2000 };
    for round in 0..rounds {
        let root = round.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Freed slots come back after an epoch grace period, which other test threads
        // can stretch; give reclamation a few passes before calling the table full.
        let mut tries = 0;
        while let Err(InitError::Full(_)) = acker.init(root, 0b11, round as u32) {
            tries += 1;
            assert!(tries < 10_000, "round {round}: slots never came back");
            acker.expire();
            std::thread::yield_now();
        }
        assert!(!acker.ack(root, 0b01));
        assert!(acker.ack(root, 0b10));
        acker.expire(); // lets the reaper retire and (after the grace period) free slots
    }
    let done = take(&log);
    assert_eq!(done.len() as u64, rounds);
    assert!(done
        .iter()
        .enumerate()
        .all(|(i, (_, p, o))| *p == i as u32 && *o == Outcome::Acked));
}

/// After every pass, each pending root (orphans too) is covered by its group's timer: the
/// reaper never loses sight of a root, whatever mix of inits, acks, fails, resets and
/// clock steps came before (the Acker's outcomes against a reference are
/// `tests/acker_model.rs`'s; this is the internal invariant they rest on).
#[test]
fn after_every_pass_each_pending_root_is_covered_by_its_groups_timer() {
    const TICK: u64 = 1 << 20; // the wheel tick of a 1 ms resolution
    let steps = if cfg!(miri) { 200 } else { 20_000 };
    for (seed, origin) in [
        (1u64, 0u64),
        (2, 1 << 63),
        (3, 0u64.wrapping_sub(5000 * TICK)),
    ] {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = ManualClock::new(origin);
        let (acker, log) = manual(&clock, |b| {
            b.shards(2)
                .max_pending(4096)
                .timeout(Duration::from_nanos(48 * TICK))
                .resolution(Duration::from_millis(1))
        });
        let roots: Vec<u64> = (0..24)
            .map(|i| if i == 0 { u64::MAX } else { i * 7919 })
            .collect();
        let mut now = 0u64;
        let mut passes_with_roots = 0;
        for step in 0..steps {
            let root = roots[rng.random_range(0..roots.len())];
            match rng.random_range(0..10) {
                0..=2 => {
                    let timeout = TICK * if rng.random_bool(0.2) { 20 } else { 48 };
                    let xor = if rng.random_bool(0.3) {
                        0
                    } else {
                        rng.random()
                    };
                    let _ = acker.init_with_timeout(
                        root,
                        xor,
                        step as u32,
                        Duration::from_nanos(timeout),
                    );
                }
                3..=5 => {
                    acker.ack(root, rng.random::<u64>() | 1);
                }
                6 => {
                    acker.fail(root);
                }
                7 => {
                    acker.reset_timeout(root);
                }
                _ => {
                    now += TICK * rng.random_range(0..30);
                    clock.set(origin.wrapping_add(now));
                    acker.expire();
                    let pending = acker.pending();
                    passes_with_roots += usize::from(pending > 0);
                    assert_eq!(
                        covered(&acker),
                        pending,
                        "seed {seed} step {step} now {now}"
                    );
                }
            }
        }
        drop(take(&log));
        assert!(
            passes_with_roots > steps / 20,
            "seed {seed}: the passes saw roots"
        );
    }
}

/// A `Clock` that panics while `panicking` is set, and otherwise follows a `ManualClock`.
#[derive(Clone)]
pub(in crate::acker) struct FlakyClock {
    pub time: ManualClock,
    pub panicking: Arc<std::sync::atomic::AtomicBool>,
}

impl Clock for FlakyClock {
    fn now(&self) -> u64 {
        if self.panicking.load(Ordering::SeqCst) {
            panic!("clock failure (on purpose)");
        }
        self.time.now()
    }
}

mod batched;
mod endings;
mod faults;
mod threads;
mod time;
