//! A tracked request's cost on one thread, as a plain program for instruction counting:
//! `benches/instructions/count.py track` runs it under callgrind twice (two request counts,
//! so that setup cancels out) and prints, per request, the instructions and the locked
//! instructions by function.
//!
//! 1,024 requests in flight: each step takes the oldest, acks its 4 edges inline, polls its
//! `TreeCompletion` (ready, `Acked`) and drops it, then `track`s a new request of 4 edges.
//! No runtime: the future is polled with a no-op waker, so what is counted is the acker,
//! its waiter cell and the slab that holds it.
//!
//! `cargo run --release --features tokio --example track_instructions -- REQUESTS`

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ackwheel::future::TreeCompletion;
use ackwheel::{Acker, Outcome};

const IN_FLIGHT: u64 = 1024;

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
    mix(request * 8 + k + 1)
}

fn main() {
    let Some(requests) = std::env::args().nth(1).and_then(|n| n.parse::<u64>().ok()) else {
        eprintln!("usage: track_instructions REQUESTS");
        std::process::exit(2);
    };
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_secs(600))
        .build_async(16)
        .expect("a valid configuration");
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut in_flight: VecDeque<(u64, TreeCompletion<u32>)> = VecDeque::new();
    for i in 0..requests + IN_FLIGHT {
        if i >= IN_FLIGHT {
            let (oldest, tree) = in_flight.pop_front().expect("in flight");
            for k in 0..4 {
                acker.ack(mix(oldest), edge(oldest, k));
            }
            let mut tree = pin!(tree);
            match tree.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(done)) if done.outcome == Outcome::Acked => {}
                other => panic!("request {oldest}: {other:?}"),
            }
        }
        if i < requests {
            let xor = (0..4).fold(0, |x, k| x ^ edge(i, k));
            let tree = acker.track(mix(i), xor, i as u32).expect("tracked");
            in_flight.push_back((i, tree));
        }
    }
    assert_eq!(acker.pending(), 0, "every request completed");
}
