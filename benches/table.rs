//! The Acker's table (`src/acker/table/`) alone: what one tree's messages cost in the 128-bit-word table, with a bare
//! `DashMap<u64, u64>` and a bare `scc::HashMap<u64, u64>` doing the same XOR bookkeeping
//! (one locked entry per message, removed at 0) measured in the same run. None of them has
//! timers, times or callbacks here; the Acker bench (`benches/acker.rs`) compares the full
//! contenders. This is the floor the new Acker builds on.
//!
//! Groups:
//! * `table/lifecycle/1t/1k-inflight`: per step, init tree `i` (XOR of four random edges)
//!   and ack one edge of each of trees `i - 256`, `- 512`, `- 768`, `- 1024` (the last
//!   edge of the oldest completes it): 5 operations per step, ~1k trees in flight;
//!   criterion's time is per tree.
//! * `table/lifecycle/2t/1k-inflight`: two threads, each with its own trees and window;
//!   time per tree in aggregate (wall clock for both threads' trees).
//! * `table/lifecycle/1t/1M-pending`: group 1 with 1,000,000 other roots held (inited,
//!   never acked), so the table is large and cold.
//! * `table/ack/1t/64k-pending`: 65,536 roots held LIVE, acked one per iteration in a fixed
//!   random order with XORs that never bring a value to 0; time per ack.
//!
//! Run: `cargo bench --features internals --bench table`.

use std::hint::black_box;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use ackwheel::table::{Completed, Effects, Key, Table, KEY_SHIFT};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dashmap::DashMap;

const WINDOW: u64 = 1024;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn edge(tree: u64, k: u64) -> u64 {
    mix(tree * 8 + k) | 1
}

fn xor_of(tree: u64) -> u64 {
    (0..4).fold(0, |x, k| x ^ edge(tree, k))
}

/// One table holds the keys of one of the acker's tables: the top KEY_SHIFT bits dropped.
fn key(tree: u64) -> Key {
    Key::new(mix(tree) >> KEY_SHIFT)
}

/// The 128-bit-word table: init, ack, and on completion take the payload and free.
struct Engine(Table<u32>);

/// A bare concurrent map with the same XOR bookkeeping (no orphans, no state).
struct Dash(DashMap<u64, u64>);

/// The same on scc's map: one `entry_sync` (the bucket's lock) per message.
struct Scc(scc::HashMap<u64, u64>);

trait Map: Sync {
    fn init(&self, tree: u64);
    /// `true` when this ack completed the tree.
    fn ack(&self, tree: u64, xor: u64) -> bool;
}

impl Map for Engine {
    fn init(&self, tree: u64) {
        let mut effects = Effects::default();
        let _ = self
            .0
            .init(key(tree), xor_of(tree), tree as u32, &mut effects);
    }

    fn ack(&self, tree: u64, xor: u64) -> bool {
        let mut effects = Effects::default();
        self.0.ack(key(tree), xor, &mut effects);
        match effects.take() {
            Some(Completed { slot, key, .. }) => {
                // Safety: this call claimed the completion; taken and freed once.
                black_box(unsafe { self.0.take(slot) });
                // Safety: the same completion, freed once, after its take.
                unsafe { self.0.free(slot, key) };
                true
            }
            None => false,
        }
    }
}

impl Map for Dash {
    fn init(&self, tree: u64) {
        *self.0.entry(mix(tree)).or_insert(0) ^= xor_of(tree);
    }

    fn ack(&self, tree: u64, xor: u64) -> bool {
        let root = mix(tree);
        let zero = {
            let mut entry = self.0.entry(root).or_insert(0);
            *entry ^= xor;
            *entry == 0
        };
        zero && self.0.remove_if(&root, |_, v| *v == 0).is_some()
    }
}

impl Map for Scc {
    fn init(&self, tree: u64) {
        *self.0.entry_sync(mix(tree)).or_insert(0).get_mut() ^= xor_of(tree);
    }

    fn ack(&self, tree: u64, xor: u64) -> bool {
        match self.0.entry_sync(mix(tree)) {
            scc::hash_map::Entry::Occupied(mut entry) => {
                *entry.get_mut() ^= xor;
                if *entry.get() == 0 {
                    let _ = entry.remove_entry();
                    return true;
                }
                false
            }
            scc::hash_map::Entry::Vacant(entry) => {
                entry.insert_entry(xor);
                false
            }
        }
    }
}

/// One step of the window over trees `base + 0, base + 1, ...`: init tree `i`, ack one
/// edge of each of four older trees (the last edge of the oldest).
fn step(table: &impl Map, base: u64, i: u64) {
    table.init(base + i);
    for back in 1..=4u64 {
        if let Some(tree) = i.checked_sub(back * WINDOW / 4) {
            let done = table.ack(base + tree, edge(base + tree, back - 1));
            debug_assert_eq!(done, back == 4);
        }
    }
}

fn engine() -> Engine {
    Engine(Table::new(1024)) // 4096 slots for ~1.3k entries, as growth would keep them
}

fn dash() -> Dash {
    Dash(DashMap::new())
}

fn scc() -> Scc {
    Scc(scc::HashMap::new())
}

/// Group 1 and 3: one thread's window over trees numbered from `base`.
fn one_thread(c: &mut Criterion, group: &str, held: u64) {
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(1));
    fn run(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        table: &impl Map,
        held: u64,
    ) {
        // Held roots are trees numbered from 2^40, inited and never acked.
        (0..held).for_each(|t| table.init(1 << 40 | t));
        let mut next = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                step(table, 0, next);
                next += 1;
            })
        });
    }
    run(&mut group, "engine", &lean_sized(held), held);
    run(&mut group, "dashmap", &dash(), held);
    run(&mut group, "scc", &scc(), held);
    group.finish();
}

/// A table with room for `held` roots beside the window, at most about half full.
fn lean_sized(held: u64) -> Engine {
    let slots = ((held + 2 * WINDOW) * 2).next_power_of_two() as usize;
    Engine(Table::new((slots / 4).max(1024)))
}

fn lifecycle_1t(c: &mut Criterion) {
    one_thread(c, "table/lifecycle/1t/1k-inflight", 0);
}

fn lifecycle_1m(c: &mut Criterion) {
    one_thread(c, "table/lifecycle/1t/1M-pending", 1_000_000);
}

/// Two threads, each stepping its own trees (thread `k`'s trees are numbered from
/// `k << 48`) over one shared table; the time is the wall clock for `iters` trees in all.
fn two_threads_on(table: &impl Map, iters: u64, next: &mut [u64; 2]) -> Duration {
    let per_thread = iters.div_ceil(2);
    let barrier = Barrier::new(2);
    let start = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2u64)
            .map(|k| {
                let from = next[k as usize];
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    for i in from..from + per_thread {
                        step(table, k << 48, i);
                    }
                    t0.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    });
    next.iter_mut().for_each(|n| *n += per_thread);
    start
}

fn lifecycle_2t(c: &mut Criterion) {
    let mut group = c.benchmark_group("table/lifecycle/2t/1k-inflight");
    group.throughput(Throughput::Elements(1));
    fn run(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        table: &impl Map,
    ) {
        let mut next = [0u64; 2];
        group.bench_function(name, |b| {
            b.iter_custom(|iters| two_threads_on(table, iters, &mut next))
        });
    }
    run(&mut group, "engine", &engine());
    run(&mut group, "dashmap", &dash());
    run(&mut group, "scc", &scc());
    group.finish();
}

fn ack_64k(c: &mut Criterion) {
    const HELD: u64 = 1 << 16;
    let mut group = c.benchmark_group("table/ack/1t/64k-pending");
    group.throughput(Throughput::Elements(1));
    let engine = Engine(Table::new(HELD as usize / 2)); // 2 slots per root
    let dash = Dash(DashMap::new());
    let order: Vec<u64> = (0..HELD).map(|i| mix(i ^ 0x5eed) % HELD).collect();
    for tree in 0..HELD {
        // Bit 0 of the value stays set: no ack (edges have bit 0 set, sent twice) clears
        // it.
        let mut effects = Effects::default();
        engine
            .0
            .init(key(tree), 1 << 63 | 1, 0, &mut effects)
            .unwrap();
        dash.0.insert(mix(tree), 1 << 63 | 1);
    }
    let mut i = 0usize;
    group.bench_function("engine", |b| {
        b.iter(|| {
            let tree = order[i % order.len()];
            i += 1;
            engine.ack(tree, 2 << (i & 31))
        })
    });
    let mut i = 0usize;
    group.bench_function("dashmap", |b| {
        b.iter(|| {
            let tree = order[i % order.len()];
            i += 1;
            dash.ack(tree, 2 << (i & 31))
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = lifecycle_1t, lifecycle_2t, lifecycle_1m, ack_64k
}
criterion_main!(benches);
