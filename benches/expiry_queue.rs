//! `ExpiryQueue` and `RotatingMap` beside straightforward `Mutex`-protected ports of
//! ZooKeeper's and Storm's designs, in the same groups.
//!
//! Run: `cargo bench --bench expiry_queue`. Two-thread rows report wall time per operation
//! with the work split over both threads (so perfect scaling halves the time).
#![allow(missing_docs)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ackwheel::{Clock, ExpiryQueue, ManualClock, RotatingMap};
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput,
};

const INTERVAL: u64 = 1_000_000; // 1 ms
const KEYS_PER_THREAD: u64 = 4_096;

// === peers ===

/// ZooKeeper's ExpiryQueue, two maps behind one mutex.
struct ZkQueue {
    inner: Mutex<ZkInner>,
    interval: u64,
    clock: ManualClock,
}

struct ZkInner {
    elems: HashMap<u64, u64>,
    expiry: HashMap<u64, HashSet<u64>>,
    next: u64,
}

impl ZkQueue {
    fn new(interval: u64, clock: ManualClock) -> Self {
        let now = clock.now();
        let next = (now / interval + 1) * interval;
        ZkQueue {
            inner: Mutex::new(ZkInner {
                elems: HashMap::new(),
                expiry: HashMap::new(),
                next,
            }),
            interval,
            clock,
        }
    }

    fn update(&self, elem: u64, timeout: Duration) -> Option<u64> {
        let t = self.clock.now() + timeout.as_nanos() as u64;
        let deadline = (t / self.interval + 1) * self.interval;
        let mut inner = self.inner.lock().unwrap();
        let prev = inner.elems.get(&elem).copied();
        if prev == Some(deadline) {
            return None;
        }
        inner.expiry.entry(deadline).or_default().insert(elem);
        inner.elems.insert(elem, deadline);
        if let Some(prev) = prev {
            if let Some(set) = inner.expiry.get_mut(&prev) {
                set.remove(&elem);
            }
        }
        Some(deadline)
    }

    /// ZooKeeper's poll, plus removal from the element map (which ZooKeeper leaves to the
    /// session tracker) so that both sides do the same work.
    fn poll(&self) -> Vec<u64> {
        let now = self.clock.now();
        let mut inner = self.inner.lock().unwrap();
        if now < inner.next {
            return Vec::new();
        }
        let bucket = inner.next;
        inner.next += self.interval;
        let set = inner.expiry.remove(&bucket).unwrap_or_default();
        for e in &set {
            inner.elems.remove(e);
        }
        set.into_iter().collect()
    }

    fn wait_time(&self) -> u64 {
        self.inner
            .lock()
            .unwrap()
            .next
            .saturating_sub(self.clock.now())
    }
}

/// Storm's RotatingMap (a deque of hash maps), made thread-safe by one outer mutex.
struct StormRotatingMap {
    buckets: VecDeque<HashMap<u64, u64>>,
}

impl StormRotatingMap {
    fn new(n: usize) -> Self {
        StormRotatingMap {
            buckets: (0..n).map(|_| HashMap::new()).collect(),
        }
    }

    fn put(&mut self, k: u64, v: u64) {
        let mut it = self.buckets.iter_mut();
        let head = it.next().unwrap();
        head.insert(k, v);
        for b in it {
            b.remove(&k);
        }
    }

    fn get(&self, k: &u64) -> Option<u64> {
        self.buckets.iter().find_map(|b| b.get(k).copied())
    }
}

// === drivers ===

/// Runs `op(thread, i)` `iters` times split over `threads` threads; returns wall time.
fn run_split(threads: u64, iters: u64, op: impl Fn(u64, u64) + Sync) -> Duration {
    let per = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let op = &op;
            s.spawn(move || {
                for i in 0..per {
                    op(t, i);
                }
            });
        }
    });
    start.elapsed()
}

fn configure(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
}

/// Timeout for element `i` touched on pass `pass`: constant (same bucket) or alternating
/// between two buckets.
fn timeout(moving: bool, i: u64) -> Duration {
    let pass = i / KEYS_PER_THREAD;
    if moving && pass % 2 == 1 {
        Duration::from_millis(20)
    } else {
        Duration::from_millis(10)
    }
}

fn bench_update(c: &mut Criterion) {
    for (name, moving) in [
        ("update_same_bucket", false),
        ("update_moving_bucket", true),
    ] {
        let mut g = c.benchmark_group(name);
        configure(&mut g);
        g.throughput(Throughput::Elements(1));
        for threads in [1u64, 2] {
            let clock = ManualClock::new(0);
            let q = ExpiryQueue::with_clock(Duration::from_nanos(INTERVAL), clock.clone()).unwrap();
            g.bench_function(format!("ackwheel/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    run_split(threads, iters, |t, i| {
                        let e = t << 32 | (i % KEYS_PER_THREAD);
                        black_box(q.update(e, timeout(moving, i)));
                    })
                })
            });
            let zk = ZkQueue::new(INTERVAL, clock.clone());
            g.bench_function(format!("zk_mutex/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    run_split(threads, iters, |t, i| {
                        let e = t << 32 | (i % KEYS_PER_THREAD);
                        black_box(zk.update(e, timeout(moving, i)));
                    })
                })
            });
        }
        g.finish();
    }
}

const POLL_ELEMS: u64 = 10_000;
const POLL_BUCKETS: u64 = 100;

fn bench_poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll_drain");
    configure(&mut g);
    g.throughput(Throughput::Elements(POLL_ELEMS));
    let timeout_of = |e: u64| Duration::from_nanos((e % POLL_BUCKETS) * INTERVAL);
    for threads in [1u64, 2] {
        g.bench_function(format!("ackwheel/{threads}t"), |b| {
            b.iter_batched(
                || {
                    let clock = ManualClock::new(0);
                    let q = ExpiryQueue::with_clock(Duration::from_nanos(INTERVAL), clock.clone())
                        .unwrap();
                    for e in 0..POLL_ELEMS {
                        q.update(e, timeout_of(e));
                    }
                    clock.set(POLL_BUCKETS * INTERVAL + INTERVAL);
                    q
                },
                |q| {
                    std::thread::scope(|s| {
                        for _ in 0..threads {
                            s.spawn(|| {
                                let mut n = 0;
                                while q.wait_time().is_zero() {
                                    n += q.poll().len();
                                }
                                black_box(n)
                            });
                        }
                    });
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function(format!("zk_mutex/{threads}t"), |b| {
            b.iter_batched(
                || {
                    let clock = ManualClock::new(0);
                    let q = ZkQueue::new(INTERVAL, clock.clone());
                    for e in 0..POLL_ELEMS {
                        q.update(e, timeout_of(e));
                    }
                    clock.set(POLL_BUCKETS * INTERVAL + INTERVAL);
                    q
                },
                |q| {
                    std::thread::scope(|s| {
                        for _ in 0..threads {
                            s.spawn(|| {
                                let mut n = 0;
                                while q.wait_time() == 0 {
                                    n += q.poll().len();
                                }
                                black_box(n)
                            });
                        }
                    });
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn bench_rotating(c: &mut Criterion) {
    let mut g = c.benchmark_group("rotating_put_get");
    configure(&mut g);
    g.throughput(Throughput::Elements(2));
    for threads in [1u64, 2] {
        let ours = RotatingMap::new(3).unwrap();
        g.bench_function(format!("ackwheel/{threads}t"), |b| {
            b.iter_custom(|iters| {
                run_split(threads, iters, |t, i| {
                    let k = t << 32 | (i % KEYS_PER_THREAD);
                    ours.put(k, i);
                    black_box(ours.get(&(k ^ 1)));
                    if t == 0 && i % 65_536 == 0 {
                        ours.rotate();
                    }
                })
            })
        });
        let storm = Mutex::new(StormRotatingMap::new(3));
        g.bench_function(format!("storm_mutex/{threads}t"), |b| {
            b.iter_custom(|iters| {
                run_split(threads, iters, |t, i| {
                    let k = t << 32 | (i % KEYS_PER_THREAD);
                    storm.lock().unwrap().put(k, i);
                    black_box(storm.lock().unwrap().get(&(k ^ 1)));
                    if t == 0 && i % 65_536 == 0 {
                        let mut m = storm.lock().unwrap();
                        m.buckets.pop_back();
                        m.buckets.push_front(HashMap::new());
                    }
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_update, bench_poll, bench_rotating);
criterion_main!(benches);
