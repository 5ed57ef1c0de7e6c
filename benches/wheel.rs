//! `TimerWheel` against the timer structures a Rust server would otherwise reach for, each
//! group holding the peers side by side:
//!
//! * `tokio_util::time::DelayQueue` — tokio's hashed hierarchical wheel (1 ms resolution),
//!   driven inside a current-thread runtime with a paused clock;
//! * `BinaryHeap<Reverse<(deadline, seq)>>` with lazy deletion — cancel marks the sequence
//!   number in a `HashSet`, pops skip marked entries, and the heap is rebuilt once the
//!   tombstones outnumber the live timers (so memory stays bounded);
//! * `BTreeMap<(deadline, seq), T>` — the ordered-map timer queue; cancel is a `remove`.
//!
//! Groups:
//!
//! 1. `schedule_cancel_1M_live`: one schedule plus one cancel of that new timer, with 1M
//!    timers live (random deadlines over 60 s). The steady state of a server whose requests
//!    mostly complete before their timeout.
//! 2. `schedule_then_expire_all`: schedule 100k timers over 10 s, then let time run until
//!    every one has fired. Throughput is per timer.
//! 3. `reschedule_churn`: with 100k live timers, move a random one to a random new deadline
//!    (a keep-alive being refreshed).
//!
//! Deadlines come from precomputed random tables so the random number generator is not
//! measured, and every contender reads the same table.
//!
//! Run: `cargo bench --bench wheel`. The configuration is short on purpose (2-core build
//! machine): 1 s warm-up, 2.5 s measurement, 20 samples.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::future::poll_fn;
use std::hint::black_box;
use std::time::Duration;

use ackwheel::{TimerKey, TimerWheel};
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio_util::time::{delay_queue, DelayQueue};

/// 1M live timers for group 1.
const LIVE_1M: usize = 1_000_000;
/// Deadlines of group 1 and 3 spread over this many nanoseconds (60 s).
const SPREAD_60S: u64 = 60_000_000_000;
/// Timers per iteration in group 2.
const EXPIRE_N: usize = 100_000;
/// Deadlines of group 2 spread over 10 s.
const SPREAD_10S: u64 = 10_000_000_000;
/// Live timers of group 3.
const CHURN_LIVE: usize = 100_000;
/// Size of the per-iteration random tables (a power of two, indexed by `counter & MASK`).
const TABLE: usize = 1 << 16;
const MASK: usize = TABLE - 1;
/// The wheel's finest resolution: 1 ms (rounded up to 2^20 ns), the same as DelayQueue's.
const RESOLUTION: Duration = Duration::from_millis(1);

fn random_deadlines(seed: u64, n: usize, spread: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..spread)).collect()
}

/// A current-thread runtime with time enabled and the clock paused: DelayQueue needs the
/// time driver for its `Sleep`, and a paused clock makes its expiry deterministic and lets
/// the runtime auto-advance time instead of sleeping for real.
fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

// ============================================================================ peers

/// The textbook lazy-deletion heap: cancel only marks the timer's sequence number, pops
/// discard marked entries, and once the tombstones outnumber the live timers the heap is
/// compacted (without that, a schedule/cancel loop would grow the heap without bound).
struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    cancelled: HashSet<u64>,
    next_seq: u64,
}

impl LazyHeap {
    fn new() -> Self {
        LazyHeap {
            heap: BinaryHeap::new(),
            cancelled: HashSet::new(),
            next_seq: 0,
        }
    }

    fn schedule(&mut self, deadline: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse((deadline, seq)));
        seq
    }

    fn cancel(&mut self, seq: u64) {
        self.cancelled.insert(seq);
        if self.cancelled.len() > self.heap.len() - self.cancelled.len() {
            let cancelled = &self.cancelled;
            self.heap.retain(|Reverse((_, s))| !cancelled.contains(s));
            self.cancelled.clear();
        }
    }

    /// Pops the earliest live timer due at `now`.
    fn pop_due(&mut self, now: u64) -> Option<(u64, u64)> {
        while let Some(&Reverse((deadline, seq))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if !self.cancelled.remove(&seq) {
                return Some((deadline, seq));
            }
        }
        None
    }

    fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((d, _))| *d)
    }
}

// ============================================================================ group 1

fn schedule_cancel_1m_live(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_cancel_1M_live");
    group.throughput(Throughput::Elements(1));
    let live = random_deadlines(1, LIVE_1M, SPREAD_60S);
    let table = random_deadlines(2, TABLE, SPREAD_60S);

    {
        let mut wheel = TimerWheel::with_resolution(0, RESOLUTION);
        for (i, &d) in live.iter().enumerate() {
            wheel.schedule(d, i as u64);
        }
        let mut i = 0usize;
        group.bench_function("TimerWheel", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let key = wheel.schedule(table[i & MASK], i as u64);
                black_box(wheel.cancel(key))
            })
        });
        assert_eq!(wheel.len(), LIVE_1M);
    }

    {
        // DelayQueue's own API: insert_at returns a Key, remove takes it back. It must run
        // inside the runtime (its Sleep registers with the time driver).
        let rt = paused_runtime();
        let _guard = rt.enter();
        let start = tokio::time::Instant::now();
        let mut queue = DelayQueue::new();
        for (i, &d) in live.iter().enumerate() {
            queue.insert_at(i as u64, start + Duration::from_nanos(d));
        }
        let table: Vec<tokio::time::Instant> = table
            .iter()
            .map(|&d| start + Duration::from_nanos(d))
            .collect();
        let mut i = 0usize;
        group.bench_function("DelayQueue", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let key = queue.insert_at(i as u64, table[i & MASK]);
                black_box(queue.remove(&key))
            })
        });
        assert_eq!(queue.len(), LIVE_1M);
    }

    {
        let mut heap = LazyHeap::new();
        for &d in &live {
            heap.schedule(d);
        }
        let mut i = 0usize;
        group.bench_function("BinaryHeap_lazy", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let seq = heap.schedule(table[i & MASK]);
                heap.cancel(black_box(seq))
            })
        });
    }

    {
        let mut map = BTreeMap::new();
        for (i, &d) in live.iter().enumerate() {
            map.insert((d, i as u64), i as u64);
        }
        let mut seq = LIVE_1M as u64;
        group.bench_function("BTreeMap", |b| {
            b.iter(|| {
                seq += 1;
                let key = (table[seq as usize & MASK], seq);
                map.insert(key, seq);
                black_box(map.remove(&key))
            })
        });
        assert_eq!(map.len(), LIVE_1M);
    }
    group.finish();
}

// ============================================================================ group 2

fn schedule_then_expire_all(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_then_expire_all");
    group.throughput(Throughput::Elements(EXPIRE_N as u64));
    // Each iteration is milliseconds long: equal-sized samples instead of a linear ramp.
    group.sampling_mode(SamplingMode::Flat);
    let deadlines = random_deadlines(3, EXPIRE_N, SPREAD_10S);
    let id = BenchmarkId::new("TimerWheel", EXPIRE_N);

    // The wheel is driven the way its owner would: sleep for next_expiration_delay, then
    // advance and drain.
    group.bench_function(id, |b| {
        b.iter(|| {
            let mut wheel = TimerWheel::with_resolution(0, RESOLUTION);
            for (i, &d) in deadlines.iter().enumerate() {
                wheel.schedule(d, i as u64);
            }
            let (mut now, mut fired, mut sum) = (0u64, 0usize, 0u64);
            while let Some(delay) = wheel.next_expiration_delay() {
                now += delay;
                for expired in wheel.advance(now) {
                    fired += 1;
                    sum = sum.wrapping_add(expired.value);
                }
            }
            assert_eq!(fired, EXPIRE_N);
            black_box(sum)
        })
    });

    // DelayQueue as a task uses it: insert everything, then await poll_expired until it
    // reports the queue empty. With the clock paused, the runtime auto-advances time to the
    // queue's next Sleep whenever the task is pending, so no real time passes.
    let rt = paused_runtime();
    group.bench_function(BenchmarkId::new("DelayQueue", EXPIRE_N), |b| {
        b.iter(|| {
            rt.block_on(async {
                let start = tokio::time::Instant::now();
                let mut queue = DelayQueue::new();
                for (i, &d) in deadlines.iter().enumerate() {
                    queue.insert_at(i as u64, start + Duration::from_nanos(d));
                }
                let (mut fired, mut sum) = (0usize, 0u64);
                while let Some(expired) = poll_fn(|cx| queue.poll_expired(cx)).await {
                    fired += 1;
                    sum = sum.wrapping_add(expired.into_inner());
                }
                assert_eq!(fired, EXPIRE_N);
                black_box(sum)
            })
        })
    });

    // The heap's natural driver: jump to the earliest deadline, pop everything due.
    group.bench_function(BenchmarkId::new("BinaryHeap", EXPIRE_N), |b| {
        b.iter(|| {
            let mut heap = LazyHeap::new();
            for &d in &deadlines {
                heap.schedule(d);
            }
            let (mut fired, mut sum) = (0usize, 0u64);
            while let Some(now) = heap.next_deadline() {
                while let Some((_, seq)) = heap.pop_due(now) {
                    fired += 1;
                    sum = sum.wrapping_add(seq);
                }
            }
            assert_eq!(fired, EXPIRE_N);
            black_box(sum)
        })
    });

    group.bench_function(BenchmarkId::new("BTreeMap", EXPIRE_N), |b| {
        b.iter(|| {
            let mut map = BTreeMap::new();
            for (i, &d) in deadlines.iter().enumerate() {
                map.insert((d, i as u64), i as u64);
            }
            let (mut fired, mut sum) = (0usize, 0u64);
            while let Some(((deadline, _), _)) = map.first_key_value() {
                let now = *deadline;
                while let Some(entry) = map.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    fired += 1;
                    sum = sum.wrapping_add(entry.remove());
                }
            }
            assert_eq!(fired, EXPIRE_N);
            black_box(sum)
        })
    });
    group.finish();
}

// ============================================================================ group 3

fn reschedule_churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("reschedule_churn");
    group.throughput(Throughput::Elements(1));
    let initial = random_deadlines(4, CHURN_LIVE, SPREAD_60S);
    let table = random_deadlines(5, TABLE, SPREAD_60S);
    let mut rng = StdRng::seed_from_u64(6);
    let victims: Vec<usize> = (0..TABLE)
        .map(|_| rng.random_range(0..CHURN_LIVE))
        .collect();

    {
        let mut wheel = TimerWheel::with_resolution(0, RESOLUTION);
        let keys: Vec<TimerKey> = initial
            .iter()
            .enumerate()
            .map(|(i, &d)| wheel.schedule(d, i as u64))
            .collect();
        let mut i = 0usize;
        group.bench_function("TimerWheel", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(wheel.reschedule(keys[victims[i & MASK]], table[i & MASK]))
            })
        });
        assert_eq!(wheel.len(), CHURN_LIVE);
    }

    {
        // DelayQueue::reset_at moves an entry in place, keeping its Key.
        let rt = paused_runtime();
        let _guard = rt.enter();
        let start = tokio::time::Instant::now();
        let mut queue = DelayQueue::new();
        let keys: Vec<delay_queue::Key> = initial
            .iter()
            .enumerate()
            .map(|(i, &d)| queue.insert_at(i as u64, start + Duration::from_nanos(d)))
            .collect();
        let table: Vec<tokio::time::Instant> = table
            .iter()
            .map(|&d| start + Duration::from_nanos(d))
            .collect();
        let mut i = 0usize;
        group.bench_function("DelayQueue", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                queue.reset_at(&keys[victims[i & MASK]], table[i & MASK]);
            })
        });
        assert_eq!(queue.len(), CHURN_LIVE);
    }

    {
        // A heap cannot move an entry: push the new deadline under a fresh sequence number
        // and mark the old one dead.
        let mut heap = LazyHeap::new();
        let mut seqs: Vec<u64> = initial.iter().map(|&d| heap.schedule(d)).collect();
        let mut i = 0usize;
        group.bench_function("BinaryHeap_lazy", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let timer = victims[i & MASK];
                let new = heap.schedule(table[i & MASK]);
                heap.cancel(std::mem::replace(&mut seqs[timer], new));
            })
        });
    }

    {
        // The map is keyed by (deadline, id): moving a timer is remove + insert, with the
        // current deadline of each timer kept beside it.
        let mut map = BTreeMap::new();
        let mut current = initial.clone();
        for (i, &d) in initial.iter().enumerate() {
            map.insert((d, i as u64), i as u64);
        }
        let mut i = 0usize;
        group.bench_function("BTreeMap", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let timer = victims[i & MASK];
                let deadline = table[i & MASK];
                let old = std::mem::replace(&mut current[timer], deadline);
                let value = map.remove(&(old, timer as u64)).expect("live timer");
                map.insert((deadline, timer as u64), value);
            })
        });
        assert_eq!(map.len(), CHURN_LIVE);
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = schedule_cancel_1m_live, schedule_then_expire_all, reschedule_churn
}
criterion_main!(benches);
