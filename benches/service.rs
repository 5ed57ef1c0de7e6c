//! The async service path: a request fans out into sub-tasks whose acks must all come back,
//! or the request times out. The contenders are what a tokio user would pick:
//!
//! * `ackwheel` — [`AsyncAcker::track`] per request, `ack` per sub-task, the
//!   `TreeCompletion` awaited (its timeout is the acker's);
//! * `dashmap` — `DashMap<u64, (u64, oneshot::Sender<Outcome>)>`: insert the XOR of the
//!   edges with the sender, XOR each ack in under the shard's lock and remove and send at 0,
//!   the receiver awaited under `tokio::time::timeout` (removing the entry when it fires);
//! * `mutex` — the same with one `Mutex<HashMap>`.
//!
//! ## Workload
//!
//! A two-worker multi-thread runtime runs 256 request loops at once (a server's
//! connections). Each request picks a fresh root and `fanout` random edges (4 or 16),
//! starts its tree, has its edges acked, and awaits the outcome, which must be `Acked`.
//! The acks are sent `inline` (by the request's own task, right after the start: a
//! handler that does its sub-tasks' work itself) or from `spawned` tasks, one per edge
//! (sub-tasks on the runtime). Criterion's time is per request; every request is checked.
//! The timeout is 10 s, so none fires: what is measured is the tracking's own cost. Every
//! contender's start returns a boxed future (one allocation each, the same for all).
//!
//! Run: `cargo bench --features tokio --bench service`. Targets, in one run:
//! inline ≥ 2.5x dashmap at fanout 4 and ≥ 4x at 16; spawned ≥ 1.0x.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackwheel::future::AsyncAcker;
use ackwheel::{Acker, Outcome};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dashmap::DashMap;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// Request loops running at once.
const LOOPS: u64 = 256;
/// Request ids a loop takes at a time.
const ID_BLOCK: u64 = 64;
/// The most sub-tasks a request fans out to.
const MAX_FANOUT: usize = 16;
/// Long enough that no request times out: the bench measures tracking, not expiry.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One way to track requests. `start` returns the future of the request's outcome.
trait Tracker: Send + Sync + 'static {
    fn build() -> Self;
    fn start(&self, root: u64, xor: u64) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;
    fn ack(&self, root: u64, edge: u64);
}

impl Tracker for AsyncAcker<()> {
    fn build() -> Self {
        let (acker, _completions) = Acker::<()>::builder()
            .timeout(TIMEOUT)
            .build_async(1024)
            .expect("a valid configuration");
        acker
    }

    fn start(&self, root: u64, xor: u64) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let tree = self.track(root, xor, ()).expect("a fresh root, room");
        Box::pin(async move { tree.await.expect("not shut down").outcome })
    }

    fn ack(&self, root: u64, edge: u64) {
        AsyncAcker::ack(self, root, edge);
    }
}

/// A pending request in a map peer: the XOR so far and where its outcome goes.
type Pending = (u64, oneshot::Sender<Outcome>);

/// Awaits a map peer's outcome under `tokio::time::timeout`, removing the entry when it
/// fires (`remove` is the map's).
async fn outcome_or_timeout(
    rx: oneshot::Receiver<Outcome>,
    remove: impl FnOnce() -> Option<Pending>,
) -> Outcome {
    match tokio::time::timeout(TIMEOUT, rx).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => Outcome::Failed,
        Err(_) => {
            remove();
            Outcome::TimedOut
        }
    }
}

struct DashTracker(Arc<DashMap<u64, Pending>>);

impl Tracker for DashTracker {
    fn build() -> Self {
        DashTracker(Arc::new(DashMap::new()))
    }

    fn start(&self, root: u64, xor: u64) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let (tx, rx) = oneshot::channel();
        self.0.insert(root, (xor, tx));
        let map = Arc::clone(&self.0);
        Box::pin(outcome_or_timeout(rx, move || {
            map.remove(&root).map(|(_, p)| p)
        }))
    }

    fn ack(&self, root: u64, edge: u64) {
        let done = match self.0.get_mut(&root) {
            Some(mut entry) => {
                entry.0 ^= edge;
                entry.0 == 0
            }
            None => false,
        };
        if done {
            if let Some((_, (_, tx))) = self.0.remove_if(&root, |_, p| p.0 == 0) {
                let _ = tx.send(Outcome::Acked);
            }
        }
    }
}

struct MutexTracker(Arc<Mutex<HashMap<u64, Pending>>>);

impl Tracker for MutexTracker {
    fn build() -> Self {
        MutexTracker(Arc::default())
    }

    fn start(&self, root: u64, xor: u64) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let (tx, rx) = oneshot::channel();
        self.0.lock().unwrap().insert(root, (xor, tx));
        let map = Arc::clone(&self.0);
        Box::pin(outcome_or_timeout(rx, move || {
            map.lock().unwrap().remove(&root)
        }))
    }

    fn ack(&self, root: u64, edge: u64) {
        let mut map = self.0.lock().unwrap();
        let done = match map.get_mut(&root) {
            Some(entry) => {
                entry.0 ^= edge;
                entry.0 == 0
            }
            None => false,
        };
        if done {
            let (_, tx) = map.remove(&root).expect("just seen");
            drop(map);
            let _ = tx.send(Outcome::Acked);
        }
    }
}

/// A bijective mix of a counter: distinct, random-looking ids.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `requests` requests through `tracker` on `runtime` (module docs); the wall time.
fn serve<T: Tracker>(
    runtime: &Runtime,
    tracker: &Arc<T>,
    next: &Arc<AtomicU64>,
    requests: u64,
    fanout: u64,
    spawned: bool,
) -> Duration {
    let end = next.load(Ordering::Relaxed) + requests;
    let started = Instant::now();
    runtime.block_on(async {
        let loops: Vec<_> = (0..LOOPS)
            .map(|_| {
                let (tracker, next) = (Arc::clone(tracker), Arc::clone(next));
                tokio::spawn(async move {
                    let mut ids = 0..0;
                    loop {
                        // Ids in blocks: one shared counter per request bounced its line
                        // between the workers, a fifth of the tracking's own time.
                        let Some(id) = ids.next() else {
                            // Relaxed: a ticket counter; the ids need only be distinct.
                            let start = next.fetch_add(ID_BLOCK, Ordering::Relaxed);
                            if start >= end {
                                return;
                            }
                            ids = start..(start + ID_BLOCK).min(end);
                            continue;
                        };
                        // Distinct, random-looking ids from one mix each, on the stack:
                        // what the request pays for its ids is not what is measured.
                        let root = mix(id.wrapping_mul(2) + 1) | 1;
                        let mut edges = [0u64; MAX_FANOUT];
                        let edges = &mut edges[..fanout as usize];
                        for (k, edge) in (0u64..).zip(edges.iter_mut()) {
                            *edge = mix(id.wrapping_mul(MAX_FANOUT as u64) + k) | 1;
                        }
                        let outcome = tracker.start(root, edges.iter().fold(0, |x, e| x ^ e));
                        if spawned {
                            for &edge in edges.iter() {
                                let tracker = Arc::clone(&tracker);
                                tokio::spawn(async move { tracker.ack(root, edge) });
                            }
                        } else {
                            for &edge in edges.iter() {
                                tracker.ack(root, edge);
                            }
                        }
                        assert_eq!(outcome.await, Outcome::Acked, "request {id}");
                    }
                })
            })
            .collect();
        for l in loops {
            l.await.expect("a request loop");
        }
    });
    started.elapsed()
}

fn service(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    for fanout in [4, 16] {
        for spawned in [false, true] {
            let acks = if spawned { "spawned" } else { "inline" };
            let mut group = c.benchmark_group(format!("service/fanout{fanout}/{acks}"));
            group.throughput(Throughput::Elements(1));
            bench::<AsyncAcker<()>>(&mut group, &runtime, "ackwheel", fanout, spawned);
            bench::<DashTracker>(&mut group, &runtime, "dashmap", fanout, spawned);
            bench::<MutexTracker>(&mut group, &runtime, "mutex", fanout, spawned);
            group.finish();
        }
    }
}

fn bench<T: Tracker>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &Runtime,
    name: &str,
    fanout: u64,
    spawned: bool,
) {
    let tracker = Arc::new(runtime.block_on(async { T::build() }));
    let next = Arc::new(AtomicU64::new(0));
    group.bench_function(name, |b| {
        b.iter_custom(|requests| serve(runtime, &tracker, &next, requests, fanout, spawned))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    targets = service
}
criterion_main!(benches);
