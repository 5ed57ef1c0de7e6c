//! A tracked request's cost on one thread, as a plain program for instruction counting:
//! `benches/instructions/count.py track` runs it under callgrind twice (two request counts,
//! so that setup cancels out) and prints, per request, the instructions and the locked
//! instructions by function.
//!
//! 1,024 requests in flight: each step takes the oldest, acks its `FANOUT` edges inline
//! (4 by default), polls its future (ready, `Acked`) and drops it, then starts a new request
//! of `FANOUT` edges. No runtime is driven: the future is polled with a no-op waker, so what
//! is counted is the tracking itself. The contenders are those of `benches/service.rs`:
//!
//! * `ackwheel` — [`AsyncAcker::track`](ackwheel::future::AsyncAcker::track), an `ack` per
//!   edge, the `TreeCompletion` polled: the acker, its waiter cell and the slab that holds
//!   it;
//! * `dashmap` — `DashMap<u64, (u64, oneshot::Sender<Outcome>)>`: an insert with a oneshot,
//!   each ack XORed in under the shard's lock, the entry removed and the outcome sent at 0,
//!   the receiver polled under `tokio::time::timeout` (made in a runtime's context, as a
//!   handler's would be; it registers no timer, the receiver being ready at its first
//!   poll).
//!
//! `cargo run --release --features tokio --example track_instructions -- REQUESTS [FANOUT
//! [ackwheel|dashmap [RESOLUTION_NS]]]`
//!
//! RESOLUTION_NS is the acker's tick (default: `build_async`'s, 2^18 ns). `count.py` makes
//! it 64 times that under callgrind, which runs about 50 times slower, so that the reaper
//! thread's passes come not much more often a request than natively: while requests are
//! pending it sleeps 2^26 ns (256 ticks) at the native tick and 64 ticks (2^30 ns) at
//! 2^24 ns, so its passes come about 3 times as often a request under callgrind, rather
//! than 50. No request reaches the reaper either way: each completes long before its
//! group's scan, due only 67 ms or so before its deadline, 600 s on.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ackwheel::{Acker, Outcome};
use dashmap::DashMap;
use tokio::sync::oneshot;

const IN_FLIGHT: u64 = 1024;
/// The most edges a request fans out to.
const MAX_FANOUT: u64 = 64;
/// Long enough that nothing times out.
const TIMEOUT: Duration = Duration::from_secs(600);

/// splitmix64's finalizer: distinct, spread roots and edges.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The requests' futures are polled only once they are ready: nothing to wake.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn edge(request: u64, k: u64) -> u64 {
    mix(request * MAX_FANOUT + k + 1)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let requests = args.next().and_then(|n| n.parse::<u64>().ok());
    let fanout = args.next().map_or(Some(4), |n| n.parse::<u64>().ok());
    let contender = args.next();
    let resolution = args
        .next()
        .map(|n| n.parse::<u64>().ok().map(Duration::from_nanos));
    let (Some(requests), Some(fanout @ 1..=MAX_FANOUT), None | Some(Some(_))) =
        (requests, fanout, resolution)
    else {
        eprintln!(
            "usage: track_instructions REQUESTS [FANOUT (1-{MAX_FANOUT}) [ackwheel|dashmap [RESOLUTION_NS]]]"
        );
        std::process::exit(2);
    };
    match contender.as_deref() {
        None | Some("ackwheel") => ackwheel(requests, fanout, resolution.flatten()),
        Some("dashmap") => dashmap(requests, fanout),
        Some(other) => {
            eprintln!("unknown contender {other}: ackwheel or dashmap");
            std::process::exit(2);
        }
    }
}

/// The XOR of request `i`'s edges.
fn xor(i: u64, fanout: u64) -> u64 {
    (0..fanout).fold(0, |x, k| x ^ edge(i, k))
}

/// Runs `requests` requests, `IN_FLIGHT` at a time: `start(i)` starts request `i` (its
/// root is `mix(i)`) and returns its future, `ack(i, edge)` acks one of its edges, and the
/// oldest request's edges are all acked and its future polled once, ready, before the
/// next starts.
fn run<F: Future<Output = Outcome>>(
    requests: u64,
    fanout: u64,
    mut start: impl FnMut(u64) -> F,
    mut ack: impl FnMut(u64, u64),
) {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut in_flight: VecDeque<(u64, F)> = VecDeque::new();
    for i in 0..requests + IN_FLIGHT {
        if i >= IN_FLIGHT {
            let (oldest, future) = in_flight.pop_front().expect("in flight");
            for k in 0..fanout {
                ack(oldest, edge(oldest, k));
            }
            let mut future = pin!(future);
            match future.as_mut().poll(&mut cx) {
                Poll::Ready(Outcome::Acked) => {}
                other => panic!("request {oldest}: {other:?}"),
            }
        }
        if i < requests {
            in_flight.push_back((i, start(i)));
        }
    }
}

fn ackwheel(requests: u64, fanout: u64, resolution: Option<Duration>) {
    let mut builder = Acker::<u32>::builder().timeout(TIMEOUT);
    if let Some(resolution) = resolution {
        builder = builder.resolution(resolution);
    }
    let (acker, _completions) = builder.build_async(16).expect("a valid configuration");
    run(
        requests,
        fanout,
        |i| {
            let tree = acker
                .track(mix(i), xor(i, fanout), i as u32)
                .expect("tracked");
            async move { tree.await.map_or(Outcome::Failed, |done| done.outcome) }
        },
        |i, edge| {
            acker.ack(mix(i), edge);
        },
    );
    assert_eq!(acker.pending(), 0, "every request completed");
}

fn dashmap(requests: u64, fanout: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _context = runtime.enter();
    let map: DashMap<u64, (u64, oneshot::Sender<Outcome>)> = DashMap::new();
    run(
        requests,
        fanout,
        |i| {
            let (tx, rx) = oneshot::channel();
            map.insert(mix(i), (xor(i, fanout), tx));
            let outcome = tokio::time::timeout(TIMEOUT, rx);
            async move {
                match outcome.await {
                    Ok(Ok(outcome)) => outcome,
                    _ => Outcome::TimedOut,
                }
            }
        },
        |i, edge| {
            let root = mix(i);
            let done = map.get_mut(&root).is_some_and(|mut entry| {
                entry.0 ^= edge;
                entry.0 == 0
            });
            if let Some((_, (_, tx))) = done.then(|| map.remove(&root)).flatten() {
                let _ = tx.send(Outcome::Acked);
            }
        },
    );
    assert!(map.is_empty(), "every request completed");
}
