//! A tokio service tracking fan-out requests with timeouts, on an
//! [`AsyncAcker`](ackwheel::future::AsyncAcker).
//!
//! Requests arrive about one a millisecond. Each fans out to three sub-tasks (spawned
//! tasks) under one tree: its root and each sub-task's edge are random non-zero ids, the
//! tree is started with `track` and the XOR of the three edges, and each sub-task, after a
//! random 1-8 ms of work, acks its edge. A few sub-tasks never answer (their request then
//! times out after 200 ms, on the acker's reaper thread) and a few fail (`fail`). The
//! request awaits its own tree: `Acked`, `Failed` or `TimedOut`, exactly once.
//!
//! Every outcome is recorded under its request's id: those the requests' trees resolve
//! with, and any the acker's completion stream yields (there should be none: a tracked
//! tree's completion goes to its future only). At the end the example prints the counts and
//! latencies and asserts that every request got exactly one outcome, that no outcome
//! contradicts what its sub-tasks did (`Acked` needs three acks, `Failed` a fail), and
//! that the acker's counters agree. Answers that come after their request's outcome (the
//! other sub-tasks' acks after a fail) are held as orphans until their deadline, as in
//! Storm; the run waits for them to expire and checks that nothing is left pending.
//!
//! Run: `cargo run --example tokio_requests --features tokio` (under a second).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ackwheel::future::AsyncAcker;
use ackwheel::{edge_id, Acker, Outcome};

/// Sub-tasks per request.
const FAN_OUT: usize = 3;
const TIMEOUT: Duration = Duration::from_millis(200);
/// Trees pending plus completions not yet taken from the stream: far above what one
/// timeout's worth of arrivals needs, so requests do not wait for room.
const BUFFER: usize = 4096;
/// Chances, in percent, that a sub-task never answers, and that it fails.
const SILENT_PERCENT: u64 = 2;
const FAIL_PERCENT: u64 = 2;

/// What a sub-task does once its work is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Ack,
    Fail,
    Silent,
}

/// The payload a request's tree carries.
#[derive(Debug)]
struct Request {
    id: usize,
    arrived: Instant,
}

/// What [`run`] saw.
#[derive(Debug)]
pub struct Summary {
    /// Requests served.
    pub requests: usize,
    /// Requests whose three sub-tasks all acked in time.
    pub acked: usize,
    /// Requests with a failed sub-task.
    pub failed: usize,
    /// Requests that timed out.
    pub timed_out: usize,
    /// Requests whose sub-tasks all acked but that still timed out (only on a machine
    /// stalled for most of the timeout).
    pub late: usize,
    /// Answers that came after their request's outcome (acks after a fail or a timeout,
    /// a second fail): each was held as an orphan until its deadline, then dropped.
    pub orphans_expired: u64,
    /// The 99th percentile of the acked requests' latency, from arrival to outcome.
    pub p99_acked: Duration,
    /// The 99th percentile over all requests (the timed-out ones wait the full timeout).
    pub p99_all: Duration,
}

/// Serves `requests` requests on a two-thread tokio runtime and checks their outcomes;
/// panics if a request got no outcome, two outcomes, or one its sub-tasks contradict.
pub fn run(requests: usize) -> Summary {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(serve(requests))
}

async fn serve(requests: usize) -> Summary {
    let (acker, mut completions) = Acker::<Request>::builder()
        .timeout(TIMEOUT)
        .build_async(BUFFER)
        .expect("valid settings");
    let outcomes: Arc<Mutex<HashMap<usize, Vec<Outcome>>>> = Arc::default();

    // Untracked completions: none are expected, but one would count as a second outcome.
    let stray = {
        let outcomes = Arc::clone(&outcomes);
        tokio::spawn(async move {
            while let Some(c) = completions.next().await {
                record(&outcomes, c.payload.id, c.outcome);
            }
        })
    };

    let mut served = Vec::with_capacity(requests);
    for id in 0..requests {
        served.push(tokio::spawn(handle(
            acker.clone(),
            id,
            Arc::clone(&outcomes),
        )));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut latencies = Vec::with_capacity(requests);
    let mut acked_latencies = Vec::new();
    let mut late = 0;
    for request in served {
        let (answers, outcome, latency) = request.await.expect("a request's task");
        latencies.push(latency);
        let acks = answers.iter().filter(|&&a| a == Answer::Ack).count();
        match outcome {
            Outcome::Acked => {
                assert_eq!(acks, FAN_OUT, "Acked without every ack: {answers:?}");
                acked_latencies.push(latency);
            }
            Outcome::Failed => assert!(answers.contains(&Answer::Fail), "{answers:?}"),
            _ => late += usize::from(acks == FAN_OUT),
        }
    }

    // Late answers' orphans expire a timeout after they came; then nothing is left.
    tokio::time::timeout(TIMEOUT * 25, async {
        while acker.pending() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the late answers' orphans expire");
    assert!(acker.shutdown().await.is_empty(), "every tree completed");
    stray.await.expect("the stream's consumer");
    let stats = acker.stats();

    let outcomes = outcomes.lock().expect("no panic while recording");
    for id in 0..requests {
        let got = outcomes.get(&id).map_or(&[][..], Vec::as_slice);
        assert_eq!(got.len(), 1, "request {id} got {got:?}");
    }
    let count = |wanted: Outcome| {
        outcomes
            .values()
            .filter(|o| o.as_slice() == [wanted])
            .count()
    };
    let summary = Summary {
        requests,
        acked: count(Outcome::Acked),
        failed: count(Outcome::Failed),
        timed_out: count(Outcome::TimedOut),
        late,
        orphans_expired: stats.orphans_expired,
        p99_acked: p99(&mut acked_latencies),
        p99_all: p99(&mut latencies),
    };
    assert_eq!(summary.acked + summary.failed + summary.timed_out, requests);
    let counted = (stats.acked, stats.failed, stats.timed_out);
    let expected = (summary.acked, summary.failed, summary.timed_out);
    assert_eq!(
        counted,
        (expected.0 as u64, expected.1 as u64, expected.2 as u64)
    );
    summary
}

/// One request: its tree, its three sub-tasks, its outcome. Returns what the sub-tasks
/// did, the outcome and the latency.
async fn handle(
    acker: AsyncAcker<Request>,
    id: usize,
    outcomes: Arc<Mutex<HashMap<usize, Vec<Outcome>>>>,
) -> ([Answer; FAN_OUT], Outcome, Duration) {
    let arrived = Instant::now();
    // Random non-zero ids: XOR tracking needs ids no subset of which XORs to 0, which
    // numbered ids break at once (`1 ^ 2 ^ 3 == 0`). A root is any unique id; a random
    // one spreads requests over the acker's tables.
    let root = edge_id();
    let edges: [u64; FAN_OUT] = std::array::from_fn(|_| edge_id());
    let answers: [Answer; FAN_OUT] = std::array::from_fn(|_| match random() % 100 {
        n if n < SILENT_PERCENT => Answer::Silent,
        n if n < SILENT_PERCENT + FAIL_PERCENT => Answer::Fail,
        _ => Answer::Ack,
    });
    let tree = acker
        .track(
            root,
            edges.iter().fold(0, |x, e| x ^ e),
            Request { id, arrived },
        )
        .expect("room for the tree, and a fresh root");
    let mut sub_tasks = Vec::with_capacity(FAN_OUT);
    for (&edge, &answer) in edges.iter().zip(&answers) {
        let acker = acker.clone();
        sub_tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1 + random() % 8)).await;
            match answer {
                Answer::Ack => {
                    acker.ack(root, edge);
                }
                Answer::Fail => {
                    acker.fail(root);
                }
                Answer::Silent => {}
            }
        }));
    }
    // Bounded, so that a lost completion fails the run instead of hanging it.
    let done = tokio::time::timeout(TIMEOUT * 25, tree)
        .await
        .expect("an outcome by the timeout, give or take a stalled machine")
        .expect("the acker runs until every request is served");
    assert_eq!((done.root, done.payload.id), (root, id));
    let latency = done.payload.arrived.elapsed();
    record(&outcomes, id, done.outcome);
    // Done before the run checks what is pending: after a fail or a timeout the other
    // sub-tasks' acks still come, each held as an orphan until its deadline.
    for sub_task in sub_tasks {
        sub_task.await.expect("a sub-task");
    }
    (answers, done.outcome, latency)
}

fn record(outcomes: &Mutex<HashMap<usize, Vec<Outcome>>>, id: usize, outcome: Outcome) {
    let mut outcomes = outcomes.lock().expect("no panic while recording");
    outcomes.entry(id).or_default().push(outcome);
}

fn p99(latencies: &mut [Duration]) -> Duration {
    latencies.sort_unstable();
    latencies
        .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

/// The simulation's dice (which sub-tasks answer, how long they work): splitmix64 over a
/// shared counter seeded from the time.
fn random() -> u64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
    static STATE: OnceLock<AtomicU64> = OnceLock::new();
    let state = STATE.get_or_init(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH);
        AtomicU64::new(now.map_or(0, |d| d.as_nanos() as u64))
    });
    // Relaxed: each draw needs only its own counter value, which fetch_add makes unique.
    let mut z = state
        .fetch_add(GAMMA, Ordering::Relaxed)
        .wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() {
    let started = Instant::now();
    let s = run(500);
    println!(
        "{} requests in {:.2?}: {} acked, {} failed, {} timed out ({} of them with every ack)",
        s.requests,
        started.elapsed(),
        s.acked,
        s.failed,
        s.timed_out,
        s.late
    );
    println!(
        "{} late answers held as orphans, then dropped",
        s.orphans_expired
    );
    println!(
        "latency p99: acked {:.2?}, all {:.2?} (timeout {TIMEOUT:?})",
        s.p99_acked, s.p99_all
    );
    println!("every request got exactly one outcome");
}
