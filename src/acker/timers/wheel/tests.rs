//! The wheel's tests: entries against a sorted model, level boundaries, retain, memory.

use super::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Plain values lend the wheel nothing: every offset is kept beside them.
macro_rules! no_spare {
    ($($t:ty),*) => {$(
        impl WheelEntry for $t {
            const SPARE_BITS: u32 = 0;
            fn spare(self) -> u32 {
                0
            }
            fn with_spare(self, _: u32) -> Self {
                self
            }
        }
    )*};
}
no_spare!(u64, u32, char);

/// An id below 2^52 that lends the wheel its top 12 bits, as the Acker's entries do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Lending(u64);

impl WheelEntry for Lending {
    const SPARE_BITS: u32 = 12;
    fn spare(self) -> u32 {
        (self.0 >> 52) as u32
    }
    fn with_spare(self, bits: u32) -> Self {
        assert!(bits < 1 << 12, "{bits} does not fit");
        Lending(self.0 & ((1 << 52) - 1) | u64::from(bits) << 52)
    }
}

/// Removes and returns, sorted, the model's entries at ticks <= `now`.
fn model_due(model: &mut BTreeMap<u64, Vec<u64>>, now: u64) -> Vec<u64> {
    let later = match now.checked_add(1) {
        Some(next) => model.split_off(&next),
        None => BTreeMap::new(),
    };
    let mut due: Vec<u64> = mem::replace(model, later).into_values().flatten().collect();
    due.sort_unstable();
    due
}

/// A tick for a new entry: sometimes at or before `time`, mostly a distance after it
/// whose bit length is uniform over every level and past the overflow's horizon, now and
/// then near the end of time.
fn random_tick(rng: &mut StdRng, time: u64) -> u64 {
    match rng.random_range(0..100) {
        0..10 => time - rng.random_range(0..=time.min(100)),
        10..12 => u64::MAX - rng.random_range(0..1000),
        _ => {
            let bits = rng.random_range(0..=44);
            time.saturating_add(1 + rng.random_range(0..1u64 << bits))
        }
    }
}

/// Where to advance to: small steps mostly, jumps over every level, bucket boundaries
/// and the exact next due tick.
fn random_now(rng: &mut StdRng, time: u64, next_due: Option<u64>) -> u64 {
    match rng.random_range(0..100) {
        0..15 => next_due.unwrap_or(time).max(time),
        15..25 => {
            // The first tick of a coming bucket of some level (or the overflow's span).
            let shift = BITS * rng.random_range(1..=LEVELS as u32);
            (time >> shift)
                .checked_add(1)
                .and_then(|t| t.checked_mul(1 << shift))
                .unwrap_or(u64::MAX)
        }
        25..27 => (u64::MAX - rng.random_range(0..1000)).max(time),
        27..60 => time.saturating_add(rng.random_range(0..4)),
        _ => {
            let bits = rng.random_range(0..=42);
            time.saturating_add(rng.random_range(0..1u64 << bits))
        }
    }
}

/// Random pushes and advances against a sorted map: every entry comes out exactly once,
/// at the first advance whose `now` reaches its tick; `next_due` is exact and nothing
/// comes out before it.
fn check_against_model(seed: u64, start: u64, steps: usize) {
    check_entries_against_model(seed, start, steps, |id| id, |e| e);
    check_entries_against_model(seed, start, steps, Lending, |e| {
        assert_eq!(e.spare(), 0, "{e:?} came out with the wheel's bits");
        e.0
    });
}

/// [`check_against_model`] for entries made from ids by `make` and read back by `id`.
fn check_entries_against_model<E: WheelEntry>(
    seed: u64,
    start: u64,
    steps: usize,
    make: fn(u64) -> E,
    id: fn(E) -> u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut wheel = CompactWheel::<E>::new(start);
    let empty_bytes = wheel.heap_bytes();
    let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut time = start;
    let mut next_id = 0u64;
    let mut due = Vec::new();
    for step in 0..steps {
        if rng.random_bool(0.6) {
            for _ in 0..rng.random_range(1..8) {
                let tick = random_tick(&mut rng, time);
                wheel.push(tick, make(next_id));
                model.entry(tick).or_default().push(next_id);
                next_id += 1;
            }
        } else {
            let next_due = wheel.next_due();
            let expected = model.keys().next().map(|&t| t.max(time));
            assert_eq!(next_due, expected, "seed {seed} step {step}: next_due");
            if let Some(next) = next_due.filter(|&n| n > time && rng.random_bool(0.2)) {
                // Anywhere before the next due tick returns nothing.
                let before = rng.random_range(time..next);
                wheel.advance(before, &mut due);
                assert!(due.is_empty(), "seed {seed} step {step}: early at {before}");
                time = before;
            }
            let now = random_now(&mut rng, time, next_due);
            wheel.advance(now, &mut due);
            let mut ids: Vec<u64> = due.drain(..).map(id).collect();
            ids.sort_unstable();
            assert_eq!(
                ids,
                model_due(&mut model, now),
                "seed {seed} step {step}: due at {now}"
            );
            time = now;
        }
        assert_eq!(wheel.len(), model.values().map(Vec::len).sum::<usize>());
    }
    wheel.advance(u64::MAX, &mut due);
    let mut ids: Vec<u64> = due.drain(..).map(id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        model_due(&mut model, u64::MAX),
        "seed {seed}: the rest"
    );
    assert_eq!(wheel.len(), 0);
    assert_eq!(wheel.next_due(), None);
    assert_eq!(wheel.heap_bytes(), empty_bytes, "seed {seed}: memory kept");
}

#[test]
fn entries_come_out_at_their_tick_once() {
    for seed in 0..4 {
        check_against_model(seed, 0, 20_000);
    }
    // Unaligned starts, one near the end of time.
    check_against_model(10, 12_345_678_901, 20_000);
    check_against_model(11, (1 << 40) + 4095, 20_000);
    check_against_model(12, u64::MAX - (1 << 41) - 77, 20_000);
}

/// A bounded advance ([`CompactWheel::advance_within`]) against the model, with pushes
/// between: no call returns more than its budget, an entry comes out only once its tick
/// has come and only once, a call that says it reached `now` has returned everything due
/// by then, and what bounded calls leave the next full advance returns.
fn check_bounded_against_model(seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut wheel = CompactWheel::<Lending>::new(0);
    let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut ticks: HashMap<u64, u64> = HashMap::new();
    let mut time = 0;
    let mut next_id = 0u64;
    let mut due = Vec::new();
    let mut partial = 0;
    for step in 0..steps {
        if rng.random_bool(0.6) {
            // Bursts at one tick now and then, larger than any budget.
            let burst = if rng.random_bool(0.05) { 300 } else { 1 };
            let tick = random_tick(&mut rng, time);
            for _ in 0..rng.random_range(1..8) * burst {
                wheel.push(tick, Lending(next_id));
                model.entry(tick).or_default().push(next_id);
                ticks.insert(next_id, tick);
                next_id += 1;
            }
            continue;
        }
        let now = random_now(&mut rng, time, model.keys().next().copied());
        for _ in 0..rng.random_range(1..6) {
            let most = rng.random_range(0..100);
            let cascade = most + rng.random_range(0..400);
            let reached = wheel.advance_within(now, most, cascade, &mut due);
            assert!(
                due.len() <= most,
                "seed {seed} step {step}: {} > {most}",
                due.len()
            );
            for entry in due.drain(..) {
                assert_eq!(entry.spare(), 0, "{entry:?} came out with the wheel's bits");
                let tick = ticks.remove(&entry.0).expect("out twice, or never in");
                assert!(tick <= now, "seed {seed} step {step}: {tick} out at {now}");
                let at = model.get_mut(&tick).unwrap();
                at.retain(|&id| id != entry.0);
                if at.is_empty() {
                    model.remove(&tick);
                }
            }
            if reached {
                assert!(
                    model.keys().next().map_or(true, |&t| t > now),
                    "seed {seed} step {step}: reached {now} with {:?} left",
                    model.keys().next()
                );
                break;
            }
            partial += 1;
        }
        // The reaper thread's pass: everything due.
        if rng.random_bool(0.5) {
            wheel.advance(now, &mut due);
            let mut ids: Vec<u64> = due.drain(..).map(|e| e.0).collect();
            ids.sort_unstable();
            for id in &ids {
                ticks.remove(id);
            }
            assert_eq!(ids, model_due(&mut model, now), "seed {seed} step {step}");
        }
        time = now;
        assert_eq!(wheel.len(), ticks.len(), "seed {seed} step {step}: len");
    }
    assert!(
        partial > 100,
        "seed {seed}: only {partial} bounded advances stopped short"
    );
    wheel.advance(u64::MAX, &mut due);
    let mut ids: Vec<u64> = due.drain(..).map(|e| e.0).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        model_due(&mut model, u64::MAX),
        "seed {seed}: the rest"
    );
    assert_eq!(wheel.len(), 0);
}

#[test]
fn a_bounded_advance_returns_at_most_its_budget_and_loses_nothing() {
    for seed in 0..4 {
        check_bounded_against_model(seed, 20_000);
    }
}

/// A coarse bucket within a bounded advance's cascade: it is cascaded (the wheel's time
/// moves past it), and the due entries past the budget wait in `ready` for the next call,
/// each returned once.
#[test]
fn a_bounded_advance_cascades_within_its_bound_and_keeps_the_rest_ready() {
    let mut wheel = CompactWheel::<Lending>::new(0);
    // Ticks 64..128: one level-1 bucket, 200 entries, 17 of every 64 due by 80.
    for id in 0..200u64 {
        wheel.push(64 + id % 64, Lending(id));
    }
    let expected: Vec<u64> = (0..200u64).filter(|id| id % 64 <= 16).collect();
    let mut due = Vec::new();
    assert!(
        !wheel.advance_within(80, 10, 200, &mut due),
        "all due in one call"
    );
    assert_eq!(due.len(), 10);
    assert_eq!(
        wheel.next_due(),
        Some(80),
        "the rest ready, at the wheel's time"
    );
    let mut out: Vec<u64> = due.drain(..).map(|e| e.0).collect();
    let mut calls = 0;
    while !wheel.advance_within(80, 10, 0, &mut due) {
        assert!(due.len() <= 10);
        out.extend(due.drain(..).map(|e| e.0));
        calls += 1;
        assert!(calls < 100, "never reached 80");
    }
    out.extend(due.drain(..).map(|e| e.0));
    out.sort_unstable();
    assert_eq!(out, expected, "cascaded once: no more moves needed");
    assert_eq!(wheel.len(), 200 - expected.len());
}

/// A coarse bucket too large for a bounded advance to cascade: the due part of it comes
/// out a budget at a time, without moving the wheel's time, and the full advance returns
/// the rest, each entry once and none before its tick.
#[test]
fn a_bounded_advance_takes_due_entries_out_of_a_coarse_bucket() {
    for lend in [false, true] {
        let mut wheel = CompactWheel::<Lending>::new(0);
        let make = |id: u64| {
            if lend {
                Lending(id)
            } else {
                Lending(id | 1 << 51)
            }
        };
        // Ticks 64..128: one level-1 bucket, 1,000 entries.
        for id in 0..1000u64 {
            wheel.push(64 + id % 64, make(id));
        }
        let mut out = Vec::new();
        let mut due = Vec::new();
        for _ in 0..100 {
            assert!(!wheel.advance_within(80, 10, 10, &mut due));
            assert!(due.len() <= 10);
            out.append(&mut due);
        }
        // Ticks 64..=80: 17 of every 64 ids.
        let expected = (0..1000u64).filter(|id| id % 64 <= 16).count();
        assert_eq!(out.len(), expected, "lend {lend}");
        assert!(out.iter().all(|e| 64 + (e.0 & 0xFFFF) % 64 <= 80));
        wheel.advance(80, &mut due);
        assert!(due.is_empty(), "due entries left behind: {}", due.len());
        wheel.advance(200, &mut due);
        out.append(&mut due);
        let mut ids: Vec<u64> = out.iter().map(|e| e.0 & ((1 << 51) - 1)).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>(), "lend {lend}");
        assert_eq!(wheel.len(), 0);
    }
}

#[test]
fn entries_at_level_boundaries() {
    // Each level's first and last tick as seen from an unaligned time, and the horizon.
    let start = 1_000_003;
    let mut wheel = CompactWheel::new(start);
    let mut ticks = vec![start + 1];
    wheel.push(start + 1, start + 1);
    for level in 1..=LEVELS as u32 {
        let span = 1u64 << (BITS * level);
        for tick in [start + span - 1, start + span, start + span + 1] {
            ticks.push(tick);
            wheel.push(tick, tick);
        }
    }
    ticks.sort_unstable();
    ticks.dedup();
    let mut due = Vec::new();
    for &tick in &ticks {
        assert_eq!(wheel.next_due(), Some(tick));
        wheel.advance(tick - 1, &mut due);
        assert!(due.is_empty(), "{tick} came out early");
        wheel.advance(tick, &mut due);
        assert!(due.contains(&tick), "{tick} did not come out at its tick");
        assert!(due.iter().all(|&d| d == tick));
        due.clear();
    }
    assert_eq!(wheel.len(), 0);
}

#[test]
fn a_push_at_or_before_now_comes_out_at_the_next_advance() {
    let mut wheel = CompactWheel::new(100);
    wheel.push(100, 'a');
    wheel.push(5, 'b');
    wheel.push(101, 'c');
    assert_eq!(wheel.len(), 3);
    assert_eq!(wheel.next_due(), Some(100));
    let mut due = Vec::new();
    wheel.advance(100, &mut due);
    due.sort_unstable();
    assert_eq!(due, ['a', 'b']);
    due.clear();
    wheel.advance(100, &mut due);
    assert!(due.is_empty());
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.next_due(), Some(101));
}

#[test]
fn a_huge_jump_moves_bucket_wise() {
    let jump = 1u64 << 40;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut due = Vec::new();
        // An empty wheel.
        let mut wheel = CompactWheel::<u64>::new(7);
        wheel.advance(7 + jump, &mut due);
        assert!(due.is_empty());
        // A few entries spread over the levels and the overflow, one beyond the jump.
        let mut wheel = CompactWheel::<u64>::new(7);
        let ticks = [8, 70, 5_000, 1 << 25, (1 << 37) + 3, jump, jump + 8];
        for t in ticks {
            wheel.push(t, t);
        }
        wheel.advance(jump + 7, &mut due);
        due.sort_unstable();
        tx.send((due, wheel.len(), wheel.next_due())).unwrap();
    });
    // A walk tick by tick would take hours; bucket-wise it takes microseconds.
    let (due, len, next) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a 2^40-tick advance did not finish in 20 s");
    assert_eq!(due, [8, 70, 5_000, 1 << 25, (1 << 37) + 3, jump]);
    assert_eq!((len, next), (1, Some(jump + 8)));
}

#[test]
fn retain_keeps_what_it_is_told_at_its_ticks() {
    retain_against_model(|id| id, |e| e);
    retain_against_model(Lending, |e| {
        assert_eq!(
            e.spare(),
            0,
            "{e:?} shown or returned with the wheel's bits"
        );
        e.0
    });
}

fn retain_against_model<E: WheelEntry>(make: fn(u64) -> E, id: fn(E) -> u64) {
    let mut rng = StdRng::seed_from_u64(11);
    let mut wheel = CompactWheel::new(100);
    let mut model: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut ticks = HashMap::new();
    for i in 0..20_000u64 {
        let tick = 100 + (rng.random::<u64>() >> rng.random_range(20..64));
        wheel.push(tick, make(i));
        model.entry(tick.max(100)).or_default().push(i);
        ticks.insert(i, tick);
    }
    // Off a round time, with entries cascaded to finer levels on the way.
    let mut due = Vec::new();
    wheel.advance(100 + 4_099, &mut due);
    let mut expected = model_due(&mut model, 100 + 4_099);
    let mut ids: Vec<u64> = due.into_iter().map(id).collect();
    ids.sort_unstable();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    // Each entry's tick as the wheel gives it is the one it was filed under.
    wheel.retain_filed(|tick, &e| {
        assert_eq!(tick, Some(ticks[&id(e)]), "entry {}", id(e));
        id(e) % 3 == 0
    });
    model.values_mut().for_each(|v| v.retain(|e| e % 3 == 0));
    model.retain(|_, v| !v.is_empty());
    assert_eq!(wheel.len(), model.values().map(Vec::len).sum::<usize>());
    assert_eq!(wheel.next_due(), model.keys().next().copied());
    for (&tick, expected) in &model {
        let mut due = Vec::new();
        wheel.advance(tick, &mut due);
        let mut ids: Vec<u64> = due.into_iter().map(id).collect();
        ids.sort_unstable();
        let mut expected = expected.clone();
        expected.sort_unstable();
        assert_eq!(ids, expected, "at tick {tick}");
    }
    assert_eq!(wheel.len(), 0);
}

#[test]
fn memory_falls_back_after_a_burst() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut wheel = CompactWheel::<u64>::new(0);
    let empty = wheel.heap_bytes();
    let n = 200_000;
    // A burst over the levels, a few late ones and a few far ones.
    for i in 0..n {
        wheel.push(rng.random_range(1..300_000), i);
    }
    for i in 0..1_000 {
        wheel.push(0, i);
        wheel.push(rng.random_range(1 << 37..1 << 38), i);
    }
    assert!(wheel.heap_bytes() > empty + n as usize * 8);
    let mut due = Vec::new();
    wheel.advance(300_000, &mut due);
    assert_eq!(due.len(), n as usize + 1_000);
    assert!(
        wheel.heap_bytes() < empty + 1_000 * 4 * 16,
        "the far ones' vector only"
    );
    wheel.advance(1 << 38, &mut due);
    assert_eq!(wheel.len(), 0);
    assert_eq!(wheel.heap_bytes(), empty);
}

/// A sweep that keeps a few of a burst's entries gives back the room of the vectors it
/// leaves mostly empty, not only of those it empties.
#[test]
fn a_sweep_gives_back_the_room_of_what_it_drops() {
    let mut wheel = CompactWheel::<u64>::new(0);
    let empty = wheel.heap_bytes();
    let n = 200_000u64;
    // One level-1 bucket, and the ready list.
    for i in 0..n {
        wheel.push(100, i);
        wheel.push(0, i);
    }
    assert!(wheel.heap_bytes() > empty + 2 * n as usize * 8);
    wheel.retain_filed(|_, &e| e % 10_000 == 0);
    assert_eq!(wheel.len(), 2 * 20);
    assert!(
        wheel.heap_bytes() < empty + (1 << 10),
        "{} B for 40 entries",
        wheel.heap_bytes() - empty
    );
    let mut due = Vec::new();
    wheel.advance(100, &mut due);
    assert_eq!(due.len(), 40);
}

#[test]
fn memory_per_entry_stays_within_budget() {
    // A million 8-byte entries over a 30 s window of 1 ms ticks, mostly in levels 1-2.
    let mut rng = StdRng::seed_from_u64(3);
    let mut wheel = CompactWheel::<u64>::new(0);
    let empty = wheel.heap_bytes();
    let n = 1_000_000;
    for i in 0..n {
        wheel.push(rng.random_range(1..30_000), i);
    }
    // 8 B entry and 4 B offset, and buckets grown by half: at most 18 B (about 16.8 here);
    // `Vec`'s doubling would give up to 24 B (about 22.8 here).
    let per_entry = (wheel.heap_bytes() - empty) as f64 / n as f64;
    assert!(per_entry <= 18.0, "{per_entry} B per 8-byte entry");

    // An entry that lends its top bits (as the Acker's do) carries its offset in
    // levels 1 and 2: 8 B, at most 12 with the slack (about 11.2 here).
    let mut wheel = CompactWheel::<Lending>::new(0);
    for i in 0..n {
        wheel.push(rng.random_range(1..30_000), Lending(i));
    }
    let per_entry = (wheel.heap_bytes() - empty) as f64 / n as f64;
    assert!(
        per_entry <= 12.0,
        "{per_entry} B per 8-byte entry lending 12 bits"
    );
}
