//! Unit tests for each method, and a seeded model test against a `HashMap` reference.

use super::*;
use crate::clock::is_due;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

const MS: u64 = 1_000_000;

/// Clock origins every test runs from: 0, just below and at 2^63, just below `u64::MAX`.
const ORIGINS: [u64; 5] = [
    0,
    (1 << 63) - (1 << 30) + 1,
    1 << 63,
    u64::MAX - (1 << 30) + 1,
    u64::MAX,
];

fn ms_wheel<T>(now: u64) -> TimerWheel<T> {
    TimerWheel::with_resolution(now, Duration::from_millis(1))
}

fn drain<T>(wheel: &mut TimerWheel<T>, now: u64) -> Vec<Expired<T>> {
    wheel.advance(now).collect()
}

#[test]
fn fires_never_early_and_at_most_one_resolution_late() {
    for origin in ORIGINS {
        let mut wheel = ms_wheel(origin);
        let r = wheel.resolution();
        let offsets = [
            1,
            r - 1,
            r,
            r + 1,
            7 * r + 3,
            63 * r,
            64 * r + 5,
            5000 * r,
            3 << 30,
        ];
        for (i, off) in offsets.iter().enumerate() {
            wheel.schedule(origin.wrapping_add(*off), i);
        }
        let mut fired = vec![None; offsets.len()];
        // Step by a third of a resolution: the advance after a tick boundary may come up to
        // one step after it, so lateness is bounded by one resolution plus one step.
        let step = r / 3;
        let mut now = origin;
        while !wheel.is_empty() {
            now = now.wrapping_add(step);
            for e in wheel.advance(now) {
                assert!(
                    is_due(e.deadline, now),
                    "origin {origin}: {} fired early at {now}",
                    e.deadline
                );
                let late = now.wrapping_sub(e.deadline);
                assert!(
                    late <= r + step,
                    "origin {origin}: timer {} fired {late} ns late",
                    e.value
                );
                assert!(fired[e.value].replace(now).is_none(), "fired twice");
            }
        }
        assert!(fired.iter().all(Option::is_some));
    }
}

#[test]
fn schedule_returns_distinct_keys_and_len_counts() {
    let mut wheel = ms_wheel(0);
    let keys: Vec<_> = (0..100u64).map(|i| wheel.schedule(i * MS, i)).collect();
    assert_eq!(wheel.len(), 100);
    let unique: std::collections::HashSet<_> = keys.iter().collect();
    assert_eq!(unique.len(), 100);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(wheel.get(*k), Some(&(i as u64)));
        assert_eq!(wheel.deadline(*k), Some(i as u64 * MS));
    }
}

#[test]
fn cancel_removes_and_stale_keys_never_touch_new_timers() {
    let mut wheel = ms_wheel(0);
    let a = wheel.schedule(10 * MS, "a");
    assert_eq!(wheel.cancel(a), Some("a"));
    assert_eq!(wheel.cancel(a), None);
    assert!(wheel.is_empty());
    // The slot is reused; the old key must not see the new timer.
    let b = wheel.schedule(20 * MS, "b");
    assert_ne!(a, b);
    assert_eq!(wheel.get(a), None);
    assert_eq!(wheel.deadline(a), None);
    assert!(!wheel.reschedule(a, 1));
    assert_eq!(wheel.cancel(a), None);
    assert_eq!(wheel.get(b), Some(&"b"));
    // A fired timer's key is stale too.
    let fired = drain(&mut wheel, 30 * MS);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].key, b);
    assert_eq!(wheel.cancel(b), None);
    assert!(!wheel.reschedule(b, 40 * MS));
    assert!(drain(&mut wheel, 100 * MS).is_empty());
}

/// One node reused until its generations run out (a schedule/cancel loop with the free
/// list's LIFO order reaches 2^32 reuses of one node in seconds): the key of the node's
/// first timer must stay stale. The generation is moved near the end by hand.
#[test]
fn a_stale_key_never_names_a_timer_even_after_its_node_is_reused_2_pow_32_times() {
    let mut wheel = ms_wheel(0);
    let first = wheel.schedule(10 * MS, "first");
    assert_eq!(wheel.cancel(first), Some("first"));
    let node = first.index() as usize;
    wheel.slab.nodes[node].generation = slab::RETIRED - 1;
    let last = wheel.schedule(10 * MS, "last generation");
    assert_eq!(last.index() as usize, node);
    assert_eq!(wheel.cancel(last), Some("last generation"));
    // Without retirement the node would come back with generation RETIRED, then with 0,
    // the generation of `first`.
    let churn = wheel.schedule(20 * MS, "churn");
    wheel.cancel(churn);
    let later: Vec<_> = (0..3)
        .map(|i| wheel.schedule(10 * MS, ["a", "b", "c"][i]))
        .collect();
    assert_eq!(wheel.get(first), None, "a stale key names a live timer");
    assert_eq!(
        wheel.cancel(first),
        None,
        "a stale key cancelled a live timer"
    );
    assert!(
        later.iter().all(|k| k.index() as usize != node),
        "a retired node came back"
    );
    assert_eq!(wheel.cancel(last), None);
    assert_eq!(wheel.len(), 3);
}

#[test]
fn cancelled_timers_never_fire() {
    let mut wheel = ms_wheel(0);
    let keys: Vec<_> = (0..1000u64)
        .map(|i| wheel.schedule(i * 37 * MS, i))
        .collect();
    for k in keys.iter().step_by(2) {
        wheel.cancel(*k);
    }
    let fired: Vec<u64> = drain(&mut wheel, 40_000 * MS)
        .into_iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(fired.len(), 500);
    assert!(fired.iter().all(|v| v % 2 == 1));
}

#[test]
fn reschedule_moves_earlier_and_later() {
    let mut wheel = ms_wheel(0);
    let early = wheel.schedule(10_000 * MS, "was late");
    let late = wheel.schedule(5 * MS, "was early");
    assert!(wheel.reschedule(early, 3 * MS));
    assert!(wheel.reschedule(late, 9_000 * MS));
    assert_eq!(wheel.deadline(early), Some(3 * MS));
    let first: Vec<_> = drain(&mut wheel, 6 * MS)
        .into_iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(first, ["was late"]);
    assert!(drain(&mut wheel, 8_999 * MS).is_empty());
    let second: Vec<_> = drain(&mut wheel, 9_001 * MS)
        .into_iter()
        .map(|e| (e.value, e.deadline))
        .collect();
    assert_eq!(second, [("was early", 9_000 * MS)]);
}

#[test]
fn get_mut_changes_the_value() {
    let mut wheel = ms_wheel(0);
    let k = wheel.schedule(MS, 1);
    *wheel.get_mut(k).unwrap() += 41;
    assert_eq!(drain(&mut wheel, 3 * MS)[0].value, 42);
    assert_eq!(wheel.get_mut(k), None);
}

#[test]
fn already_due_goes_into_the_current_bucket_and_fires_on_the_next_tick() {
    for origin in ORIGINS {
        let mut wheel = ms_wheel(origin);
        let r = wheel.resolution();
        let k = wheel.schedule(origin.wrapping_sub(5 * r), "past");
        wheel.schedule(origin, "now");
        // The current finest bucket comes last in ascending order.
        assert_eq!(
            wheel.iter().map(|(_, _, v)| *v).collect::<Vec<_>>(),
            ["past", "now"]
        );
        assert_eq!(wheel.next_expiration_delay(), Some(r - (origin & (r - 1))));
        let fired = drain(&mut wheel, origin.wrapping_add(r));
        assert_eq!(fired.len(), 2, "origin {origin}");
        assert_eq!(fired[0].key, k);
    }
}

#[test]
fn backwards_yields_nothing_and_loses_nothing() {
    for origin in ORIGINS {
        let mut wheel = ms_wheel(origin);
        wheel.schedule(origin.wrapping_add(5 * MS), 5);
        wheel.schedule(origin.wrapping_add(50 * MS), 50);
        let t = origin.wrapping_add(10 * MS);
        assert_eq!(drain(&mut wheel, t).len(), 1);
        // A leftover on the ready list must not come out on a backward move either.
        wheel.schedule(origin.wrapping_add(20 * MS), 20);
        // Take one and let the iterator go.
        assert_eq!(
            wheel.advance(origin.wrapping_add(60 * MS)).take(1).count(),
            1
        );
        assert_eq!(wheel.len(), 1);
        assert!(drain(&mut wheel, t).is_empty(), "backwards yielded");
        assert_eq!(wheel.now(), origin.wrapping_add(60 * MS));
        assert_eq!(wheel.len(), 1);
        // A jump of 2^63 or more is backwards on the wrapping timeline.
        assert!(drain(
            &mut wheel,
            origin.wrapping_add(60 * MS).wrapping_add(1 << 63)
        )
        .is_empty());
        assert_eq!(drain(&mut wheel, origin.wrapping_add(60 * MS)).len(), 1);
    }
}

#[test]
fn a_dropped_advance_keeps_the_rest_for_the_next_one() {
    let mut wheel = ms_wheel(0);
    for i in 0..100u64 {
        wheel.schedule(i * MS, i);
    }
    let first: Vec<_> = wheel.advance(200 * MS).take(30).map(|e| e.value).collect();
    assert_eq!(first.len(), 30);
    assert_eq!(wheel.len(), 70);
    // Even within the same tick, the leftovers come out.
    let rest: Vec<_> = wheel.advance(200 * MS).map(|e| e.value).collect();
    assert_eq!(rest.len(), 70);
    let mut all: Vec<_> = first.into_iter().chain(rest).collect();
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
}

#[test]
fn a_panicking_consumer_leaves_the_wheel_consistent() {
    let mut wheel = ms_wheel(0);
    for i in 0..50u64 {
        wheel.schedule(i * MS, i);
    }
    let mut seen = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for e in wheel.advance(100 * MS) {
            seen.push(e.value);
            if seen.len() == 10 {
                panic!("consumer fails");
            }
        }
    }));
    assert!(result.is_err());
    assert_eq!(wheel.len(), 40);
    seen.extend(wheel.advance(101 * MS).map(|e| e.value));
    seen.sort_unstable();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}

#[test]
fn far_timers_wait_in_the_overflow_and_still_fire_on_time() {
    // Default geometry: the top level reaches ~6.5 days; schedule up to 30 days out.
    let day = 86_400_000_000_000u64;
    for origin in ORIGINS {
        let mut wheel = TimerWheel::new(origin);
        let r = wheel.resolution();
        for d in [1u64, 5, 7, 13, 30] {
            wheel.schedule(origin.wrapping_add(d * day), d);
        }
        let mut now = origin;
        let mut fired = Vec::new();
        let mut wakeups = 0;
        while let Some(delay) = wheel.next_expiration_delay() {
            wakeups += 1;
            now = now.wrapping_add(delay);
            for e in wheel.advance(now) {
                let late = now.wrapping_sub(e.deadline);
                assert!(
                    is_due(e.deadline, now) && late <= r,
                    "day {} fired {late} ns late",
                    e.value
                );
                fired.push(e.value);
            }
        }
        assert_eq!(fired, [1, 5, 7, 13, 30]);
        // Sleeping between cascades, not polling: a handful of wake-ups per timer per level,
        // plus the overflow's turns (every 2^49 ns ≈ 6.5 days).
        assert!(wakeups < 100, "{wakeups} wake-ups");
    }
}

#[test]
fn next_expiration_delay_is_none_when_empty_and_bounded_by_the_next_timer() {
    let mut wheel = ms_wheel(1 << 63);
    assert_eq!(wheel.next_expiration_delay(), None);
    let r = wheel.resolution();
    let k = wheel.schedule((1 << 63) + 10 * r + 7, ());
    let d = wheel.next_expiration_delay().unwrap();
    // Never later than one resolution past the deadline, never before it is due... for a
    // level-0 timer the wake is the end of its tick.
    assert_eq!(d, 11 * r);
    wheel.cancel(k);
    assert_eq!(wheel.next_expiration_delay(), None);
    // A far timer: the delay is the next cascade, not the deadline.
    wheel.schedule((1 << 63) + 10_000 * r, ());
    let d = wheel.next_expiration_delay().unwrap();
    assert!(d >= 1 && d <= 10_000 * r, "{d}");
}

#[test]
fn iter_walks_caffeines_order_and_rev_is_its_reverse() {
    let mut wheel = ms_wheel(0);
    let r = wheel.resolution();
    // Level 0 buckets 3 and 1, level 1, overflow, then the current bucket.
    let order = [
        (r, "l0 b1 first"),
        (r + 1, "l0 b1 second"),
        (3 * r, "l0 b3"),
        (70 * r, "l1"),
        (1 << 45, "overflow"),
    ];
    wheel.schedule(3 * r, "l0 b3");
    wheel.schedule(1 << 45, "overflow");
    wheel.schedule(r, "l0 b1 first");
    wheel.schedule(70 * r, "l1");
    wheel.schedule(r + 1, "l0 b1 second");
    let current = wheel.schedule(0, "current");
    let ascending: Vec<_> = wheel.iter().map(|(_, _, v)| *v).collect();
    assert_eq!(
        ascending,
        [
            "l0 b1 first",
            "l0 b1 second",
            "l0 b3",
            "current",
            "l1",
            "overflow"
        ]
    );
    let descending: Vec<_> = wheel.iter().rev().map(|(_, _, v)| *v).collect();
    let mut expected = ascending.clone();
    expected.reverse();
    assert_eq!(descending, expected);
    for (deadline, name) in order {
        assert!(wheel.iter().any(|(_, d, v)| d == deadline && *v == name));
    }
    // Both ends together still yield each timer once.
    let mut it = wheel.iter();
    let mut both = vec![it.next().unwrap().2, it.next_back().unwrap().2];
    both.extend(it.map(|(_, _, v)| v));
    assert_eq!(both.len(), 6);
    assert_eq!(
        wheel
            .iter()
            .find(|(k, _, _)| *k == current)
            .map(|(_, d, _)| d),
        Some(0)
    );
    assert_eq!(wheel.iter().len(), 6);
}

#[test]
fn debug_shows_time_and_len() {
    let mut wheel = ms_wheel(7);
    wheel.schedule(9, ());
    let s = format!("{wheel:?}");
    assert!(s.contains("now: 7") && s.contains("len: 1"), "{s}");
}

// ---------------------------------------------------------------- the model test

/// A reference timer: what the wheel must hold.
#[derive(Clone, Copy, Debug)]
struct Model {
    deadline: u64,
    id: u64,
}

struct ModelRun {
    rng: StdRng,
    wheel: TimerWheel<u64>,
    reference: HashMap<TimerKey, Model>,
    keys: Vec<TimerKey>,
    retired: Vec<TimerKey>,
    next_id: u64,
    now: u64,
}

impl ModelRun {
    fn new(origin: u64, resolution: Duration, seed: u64) -> Self {
        ModelRun {
            rng: StdRng::seed_from_u64(seed),
            wheel: TimerWheel::with_resolution(origin, resolution),
            reference: HashMap::new(),
            keys: Vec::new(),
            retired: Vec::new(),
            next_id: 0,
            now: origin,
        }
    }

    /// A deadline offset spread over every level, the overflow, and the past.
    fn offset(&mut self) -> u64 {
        let r = self.wheel.resolution();
        let top = self.wheel.geometry.shift[LEVELS - 1];
        match self.rng.random_range(0..10) {
            0 => 0u64.wrapping_sub(self.rng.random_range(0..10 * r)),
            1..=3 => self.rng.random_range(0..64 * r),
            4..=5 => self
                .rng
                .random_range(0..1 << (self.wheel.geometry.shift[1] + 6)),
            6..=7 => self.rng.random_range(0..1u64 << top.min(62)),
            8 => self.rng.random_range(0..1u64 << (top + 2).min(62)),
            _ => self.rng.random_range(0..1u64 << 62),
        }
    }

    fn step_size(&mut self) -> u64 {
        let r = self.wheel.resolution();
        let top = self.wheel.geometry.shift[LEVELS - 1];
        match self.rng.random_range(0..12) {
            0 => 0,
            1..=3 => self.rng.random_range(0..r),
            4..=6 => self.rng.random_range(0..8 * r),
            7 => self.rng.random_range(0..100 * r),
            8 => self
                .rng
                .random_range(0..1 << (self.wheel.geometry.shift[2] + 2)),
            9 => self.rng.random_range(0..1u64 << (top + 1).min(62)),
            10 => 0u64.wrapping_sub(self.rng.random_range(0..10 * r)), // backwards
            _ => self.wheel.next_expiration_delay().unwrap_or(r),
        }
    }

    fn pick(&mut self) -> Option<TimerKey> {
        if self.rng.random_bool(0.1) && !self.retired.is_empty() {
            return Some(self.retired[self.rng.random_range(0..self.retired.len())]);
        }
        if self.keys.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.keys.len());
        Some(self.keys[i])
    }

    fn forget(&mut self, key: TimerKey) {
        self.reference.remove(&key);
        if let Some(i) = self.keys.iter().position(|k| *k == key) {
            self.keys.swap_remove(i);
        }
        if self.retired.len() < 64 {
            self.retired.push(key);
        } else {
            let i = self.rng.random_range(0..64);
            self.retired[i] = key;
        }
    }

    fn step(&mut self) {
        let ctx = format!("now {} seed-run", self.now);
        match self.rng.random_range(0..10) {
            0..=3 => {
                let deadline = self.now.wrapping_add(self.offset());
                let id = self.next_id;
                self.next_id += 1;
                let key = self.wheel.schedule(deadline, id);
                assert!(
                    self.reference.insert(key, Model { deadline, id }).is_none(),
                    "{ctx}: key reused while live"
                );
                self.keys.push(key);
            }
            4 => {
                if let Some(key) = self.pick() {
                    let deadline = self.now.wrapping_add(self.offset());
                    let live = self.reference.contains_key(&key);
                    assert_eq!(
                        self.wheel.reschedule(key, deadline),
                        live,
                        "{ctx}: reschedule"
                    );
                    if let Some(m) = self.reference.get_mut(&key) {
                        m.deadline = deadline;
                    }
                }
            }
            5 => {
                if let Some(key) = self.pick() {
                    let expected = self.reference.get(&key).map(|m| m.id);
                    assert_eq!(self.wheel.cancel(key), expected, "{ctx}: cancel");
                    if expected.is_some() {
                        self.forget(key);
                    }
                }
            }
            6 => {
                if let Some(key) = self.pick() {
                    let m = self.reference.get(&key);
                    assert_eq!(
                        self.wheel.deadline(key),
                        m.map(|m| m.deadline),
                        "{ctx}: deadline"
                    );
                    assert_eq!(self.wheel.get(key), m.map(|m| &m.id), "{ctx}: get");
                }
            }
            _ => self.advance(),
        }
        assert_eq!(self.wheel.len(), self.reference.len(), "{ctx}: len");
    }

    fn advance(&mut self) {
        let target = self.now.wrapping_add(self.step_size());
        let before = self.wheel.now();
        let forward = is_due(before, target);
        let tick_changed = forward && self.wheel.geometry.ticks_between(0, before, target) > 0;
        let limit = if self.rng.random_bool(0.2) {
            self.rng.random_range(0..20)
        } else {
            usize::MAX
        };
        let fired: Vec<_> = self.wheel.advance(target).take(limit).collect();
        if !forward {
            assert!(
                fired.is_empty(),
                "backward advance to {target} from {before} yielded"
            );
            assert_eq!(self.wheel.now(), before);
            return;
        }
        self.now = target;
        for e in &fired {
            let m = self.reference.get(&e.key).copied();
            let m =
                m.unwrap_or_else(|| panic!("yielded {e:?} which is not scheduled (now {target})"));
            assert_eq!(
                (m.deadline, m.id),
                (e.deadline, e.value),
                "yielded the wrong timer"
            );
            assert!(
                is_due(e.deadline, target),
                "yielded {} early at {target}",
                e.deadline
            );
            self.forget(e.key);
        }
        if tick_changed && fired.len() < limit {
            if let Some(m) = self.reference.values().find(|m| is_due(m.deadline, target)) {
                panic!(
                    "timer {m:?} is due at {target} but was not yielded (wheel was at {before})"
                );
            }
        }
    }

    /// Sleeps as `next_expiration_delay` says and checks lateness: at most one resolution
    /// after the deadline (or after the wheel time it was scheduled at, if already due).
    fn sleep_loop(&mut self, rounds: usize) {
        let r = self.wheel.resolution();
        // Drain leftovers so the lateness bound applies from a clean state.
        self.now = self.wheel.now();
        let leftovers: Vec<_> = self.wheel.advance(self.now).collect();
        for e in leftovers {
            self.forget(e.key);
        }
        let since: HashMap<TimerKey, u64> = self.reference.keys().map(|k| (*k, self.now)).collect();
        for _ in 0..rounds {
            let Some(delay) = self.wheel.next_expiration_delay() else {
                break;
            };
            assert!(delay >= 1);
            self.now = self.now.wrapping_add(delay);
            let fired: Vec<_> = self.wheel.advance(self.now).collect();
            for e in fired {
                assert!(is_due(e.deadline, self.now), "early");
                let start = since[&e.key];
                let reference_point = if is_due(e.deadline, start) {
                    start
                } else {
                    e.deadline
                };
                let late = self.now.wrapping_sub(reference_point);
                assert!(late <= r, "yielded {late} ns late (resolution {r}): {e:?}");
                self.forget(e.key);
            }
        }
        assert_eq!(self.wheel.len(), self.reference.len());
    }

    fn check_iter(&self) {
        let listed: Vec<_> = self.wheel.iter().map(|(k, d, v)| (k, d, *v)).collect();
        assert_eq!(listed.len(), self.reference.len());
        for (k, d, v) in &listed {
            let m = self.reference[k];
            assert_eq!((m.deadline, m.id), (*d, *v));
        }
        let mut back: Vec<_> = self
            .wheel
            .iter()
            .rev()
            .map(|(k, d, v)| (k, d, *v))
            .collect();
        back.reverse();
        assert_eq!(listed, back);
    }
}

/// A value that counts its drops in a shared tally.
#[derive(Debug)]
struct Tallied(std::rc::Rc<std::cell::Cell<usize>>, u32);

impl Drop for Tallied {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn every_value_is_dropped_exactly_once_whichever_way_it_leaves() {
    // A node's value is uninitialized while the node is free; this checks that the values
    // handed out (cancel, advance), the ones still held when the wheel drops, and the ones
    // in reused nodes are each dropped once, never twice, never lost (Miri runs it too).
    let drops = std::rc::Rc::new(std::cell::Cell::new(0));
    let value = |i| Tallied(drops.clone(), i);
    let mut wheel = ms_wheel(0);
    let keys: Vec<TimerKey> = (0..40)
        .map(|i| wheel.schedule((1 + i as u64) * MS, value(i)))
        .collect();
    // Cancel every fourth: each comes back once and is dropped here.
    for key in keys.iter().step_by(4) {
        let v = wheel.cancel(*key).expect("live");
        assert_eq!(wheel.cancel(*key).map(|v| v.1), None);
        drop(v);
    }
    assert_eq!(drops.get(), 10);
    // Reuse the freed nodes, and change a value in place (the old one is dropped).
    for i in 40..50 {
        wheel.schedule(100 * MS, value(i));
    }
    *wheel.get_mut(keys[1]).expect("live") = value(99);
    assert_eq!(drops.get(), 11);
    assert_eq!(wheel.get(keys[1]).map(|v| v.1), Some(99));
    // Fire the first 20 ms worth: the uncancelled ones due by then (15 of them).
    let fired: Vec<u32> = wheel.advance(20 * MS + MS).map(|e| e.value.1).collect();
    assert_eq!(fired.len(), 15);
    assert_eq!(drops.get(), 26);
    assert_eq!(wheel.len(), 50 - 10 - 15);
    // The rest drop with the wheel.
    drop(wheel);
    assert_eq!(drops.get(), 26 + 25);
}

fn model_steps() -> usize {
    if cfg!(miri) {
        300
    } else {
        20_000
    }
}

#[test]
fn model_test_against_a_reference_map_at_every_origin() {
    let mut seeder = StdRng::seed_from_u64(0x5EED_0001);
    let mut origins = ORIGINS.to_vec();
    origins.push(seeder.random());
    for (o, origin) in origins.into_iter().enumerate() {
        for (r, resolution) in [
            Duration::from_nanos(1 << 30),
            Duration::from_millis(1),
            Duration::from_nanos(1),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = 1000 * o as u64 + r as u64;
            let mut run = ModelRun::new(origin, resolution, seed);
            let steps = model_steps();
            for i in 0..steps {
                run.step();
                if i % 1000 == 999 {
                    run.check_iter();
                    run.sleep_loop(200);
                }
            }
            run.check_iter();
            run.sleep_loop(100);
        }
    }
}
