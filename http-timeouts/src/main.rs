//! An HTTP service under a real load, tracking its requests with ackwheel's
//! [`AsyncAcker::track`] or with `DashMap` + oneshot + `tokio::time::timeout`, as a new user
//! would write either: its requests/s, its memory, its responses' latency from the client,
//! and how late its 504s are.
//!
//! ## What runs
//!
//! * **The server** (`serve`): an axum 0.8 service (one route; HTTP/1.1, keep-alive) on a
//!   multi-thread tokio runtime with two workers. Each request takes a fresh root, picks
//!   four random edges, starts tracking the tree (timeout 100 ms), and spawns four
//!   sub-tasks; each sleeps a random time up to `--sleep-ms` (none at 0), spins for
//!   `--work-us` microseconds (its "work"), then acks its edge. In a share `--lost` of the
//!   requests the fourth sub-task never acks, so the request times out and is answered
//!   504; in a share `--fail` of the others the first sub-task fails the tree instead,
//!   answered 502; the rest are answered 200 once all four acks are in.
//! * **The load** (`load`): a separate process (its own two-worker runtime) holding
//!   `--connections` keep-alive connections (1024), each sending its next request as soon
//!   as the last response is read (a closed loop). Server and load share the machine's
//!   cores (two on the machine this was written on), both saturated.
//! * **`bench`** (the default): starts a server and a load for each run, with the trackers
//!   alternating (A B A B ...), and prints each run's figures and their medians.
//!
//! ## The trackers (`--tracker`)
//!
//! * `track`: [`AsyncAcker::track`] per request, [`AsyncAcker::ack`] per sub-task, the
//!   `TreeCompletion` awaited (`build_async`'s defaults: its reaper thread, 2^18 ns
//!   resolution).
//! * `tokio`: a `DashMap<u64, (u64, oneshot::Sender<()>)>` of pending XORs, the receiver
//!   awaited under `tokio::time::timeout(100 ms)`, the entry removed when it fires.
//! * `thread-cb`: a plain `Acker` (`build`, its reaper thread) whose `on_complete` stamps
//!   the time and sends it on the tree's oneshot: `track`'s expiry path with the firing
//!   time visible (as `examples/saturated_timeouts.rs`'s `saturated-thread-cb`).
//! * `task-cb`: the same with `build_manual` and expiry driven by
//!   [`ackwheel::future::spawn_expiry`], a task on the server's runtime, whose completions
//!   (and so wake-ups) come from a worker thread.
//!
//! Trackers joined by `+` (`track+tokio`) share one server, taking its requests in turn:
//! their figures then come from the same load at the same moments, which the machine's
//! other work cannot tilt one way (separate runs, A B A B, are what a user would see; a
//! shared run is the fairer comparison on a machine that is not quiet). Their series are
//! printed as `tracker:series`.
//!
//! ## What is measured
//!
//! Server-side, per 504 answered: its lateness, the time from the handler's start to the
//! response it returns, minus the timeout (the handler's future is polled inside the
//! connection's task, so its return is when hyper starts writing). Requests whose deadline
//! falls in the first `--warm-up` seconds or after the end are not counted. The server
//! keeps up to 8,192 of them, in memory written at its start (beyond that, a uniform sample
//! of that size, with the counts exact: `Samples`), so that its peak RSS does not grow with
//! its throughput. With `--probe`
//! (on by default) the awaited future is wrapped in a waker that stamps its last wake-up,
//! so that the lateness splits into *woken* (the wake-up minus the deadline: the timer's
//! firing, tick rounding, a late reaper) and *resumed* (the handler's resumption minus its
//! wake-up: the runtime's scheduling), with the share of wake-ups made on a runtime worker
//! thread (tokio's timer always; ackwheel's when a `track` ran a late reaper's pass, or
//! `task-cb`). The callback trackers give *fired* too (the callback's time minus the
//! deadline). Throughput is every response (200 and 504) answered in the window.
//!
//! Client-side, per status (`c200`, `c502`, `c504`): each request sent after the warm-up
//! and before the end, from its sending to its whole response read. The server reports
//! its peak resident set (`VmHWM`), its resident set at the end, its own CPU time over the
//! window a request answered in it, and for an ackwheel tracker the passes callers ran, the
//! reaper thread's context switches (`/proc/self/task`) and the roots its tables' growth
//! or shrinking moved. With two trackers,
//! `bench` prints each pair's requests/s and peak RSS as the first tracker's over the
//! second's, and their medians.
//!
//! Every latency is in milliseconds: mean, p50, p99, p99.9, max.
//!
//! ## Running it
//!
//! ```text
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- bench
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- bench --runs 3 --secs 20 track tokio
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- bench --runs 3 track+tokio
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- bench --runs 5 \
//!     --lost 0.005 --fail 0.005 --sleep-ms 10 --work-us 0 --probe off track tokio
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- serve --tracker track --port 8055 --secs 60
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- load --port 8055 --secs 60
//! cargo run --release --manifest-path http-timeouts/Cargo.toml -- held --runs 3
//! ```
//!
//! `held` measures memory instead, with no load: for each tracker, in a fresh process, a
//! 2-worker runtime, the tracker built, `--connections` trees started (four edges each,
//! a task awaiting each, their timeout a minute), then all acked; the anonymous memory
//! resident above the runtime's own after each step (`built`, `in flight`, `after`; the
//! code pages a tracker first runs are the program's), alternating the trackers `--runs`
//! times.
//!
//! Options (each `--name value`): `--secs` (20, per run), `--warm-up` (3), `--runs` (2, per
//! tracker), `--connections` (1024), `--lost` (0.25: the share of requests whose fourth
//! sub-task never acks), `--fail` (0: the share whose first sub-task fails the tree),
//! `--sleep-ms` (0: the longest a sub-task sleeps), `--work-us` (5), `--timeout-ms` (100), `--resolution-us` (the
//! acker's, unset: the builder's default), `--global-queue-interval` and `--event-interval`
//! (the server runtime's, unset: tokio's), `--client-threads` (2), `--probe` (`on`/`off`),
//! `--port` (0 for `serve`: any), `--max-other` (0.1: see below). `bench` takes tracker
//! names as plain arguments (default: `track tokio`).
//!
//! With 1024 connections in a closed loop the server runs at the edge of its capacity: a
//! request waits behind every other runnable one, so the figures move a lot with anything
//! else the machine runs. `bench` waits (up to two minutes) for the machine's other
//! processes to use less than `--max-other` cores before each run, measures the cores they
//! took during it (`cores used: ... other processes'`), and runs again (three tries at
//! most, the quietest kept) when that was more than `--max-other`. The defaults (a
//! quarter of the requests timing out, 5 µs of work a sub-task) load a 2-core machine with
//! about 35,000 requests and 9,000 504s a second, as measured on the development machine,
//! the 504s a few milliseconds late on average.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ackwheel::future::{spawn_expiry, AsyncAcker};
use ackwheel::{Acker, Outcome};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use bytes::Bytes;
use dashmap::DashMap;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The server runtime's worker threads are named this, so that a wake-up can tell whether
/// it runs on one.
const WORKER_NAME: &str = "srv-worker";

// ---------------------------------------------------------------------------------------
// Settings

#[derive(Clone, Debug)]
struct Settings {
    tracker: String,
    trackers: Vec<String>,
    secs: f64,
    warm_up: f64,
    runs: usize,
    connections: usize,
    lost: f64,
    fail: f64,
    sleep_ms: u64,
    work_us: u64,
    timeout_ms: u64,
    resolution_us: Option<u64>,
    global_queue_interval: Option<u32>,
    event_interval: Option<u32>,
    client_threads: usize,
    probe: bool,
    port: u16,
    max_other: f64,
}

const TRACKERS: [&str; 4] = ["track", "tokio", "thread-cb", "task-cb"];

/// What `--help` prints (the module docs' "Running it" and options, in short).
const USAGE: &str = "\
usage: http-timeouts [bench] [OPTIONS] [TRACKER ...]
       http-timeouts serve --tracker TRACKER [OPTIONS]
       http-timeouts load [OPTIONS]
       http-timeouts held [--connections N] [--runs N] [TRACKER ...]  (timeout 60 s)

TRACKER: track, tokio, thread-cb or task-cb, or several joined by + (one shared server)
OPTIONS (each --name value): --secs 20, --warm-up 3, --runs 2, --connections 1024,
  --lost 0.25, --fail 0, --sleep-ms 0, --work-us 5, --timeout-ms 100, --resolution-us,
  --global-queue-interval, --event-interval, --client-threads 2, --probe on|off,
  --port 0, --max-other 0.1";

/// The settings `args` give, or what is wrong with them; `Ok(None)` for `--help`.
fn parse(args: &[String]) -> Result<Option<Settings>, String> {
    let mut s = Settings {
        tracker: "track".into(),
        trackers: Vec::new(),
        secs: 20.0,
        warm_up: 3.0,
        runs: 2,
        connections: 1024,
        lost: 0.25,
        fail: 0.0,
        sleep_ms: 0,
        work_us: 5,
        timeout_ms: 100,
        resolution_us: None,
        global_queue_interval: None,
        event_interval: None,
        client_threads: 2,
        probe: true,
        port: 0,
        max_other: 0.1,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if matches!(arg.as_str(), "--help" | "-h") {
            return Ok(None);
        }
        let Some(name) = arg.strip_prefix("--") else {
            check_trackers(arg)?;
            s.trackers.push(arg.clone());
            continue;
        };
        let value = it.next().ok_or_else(|| format!("--{name} takes a value"))?;
        let num = || {
            value
                .parse::<f64>()
                .map_err(|_| format!("--{name}: not a number: {value:?}"))
        };
        match name {
            "tracker" => {
                check_trackers(value)?;
                s.tracker = value.clone();
            }
            "secs" => s.secs = num()?,
            "warm-up" => s.warm_up = num()?,
            "runs" => s.runs = num()? as usize,
            "connections" => s.connections = num()? as usize,
            "lost" => s.lost = num()?,
            "fail" => s.fail = num()?,
            "sleep-ms" => s.sleep_ms = num()? as u64,
            "work-us" => s.work_us = num()? as u64,
            "timeout-ms" => s.timeout_ms = num()? as u64,
            "resolution-us" => s.resolution_us = Some(num()? as u64),
            "global-queue-interval" => s.global_queue_interval = Some(num()? as u32),
            "event-interval" => s.event_interval = Some(num()? as u32),
            "client-threads" => s.client_threads = num()? as usize,
            "probe" => s.probe = matches!(value.as_str(), "on" | "1" | "true"),
            "port" => s.port = num()? as u16,
            "max-other" => s.max_other = num()?,
            _ => return Err(format!("unknown option --{name}")),
        }
    }
    if s.secs <= s.warm_up + 1.0 {
        return Err("--secs must exceed --warm-up by a second".into());
    }
    Ok(Some(s))
}

/// A tracker's name, or several joined by `+` (they take the requests in turn, so that
/// they are compared under the same load).
fn check_trackers(names: &str) -> Result<(), String> {
    for name in names.split('+') {
        if !TRACKERS.contains(&name) {
            return Err(format!(
                "unknown tracker {name:?}: one of {TRACKERS:?}, or several joined by +"
            ));
        }
    }
    Ok(())
}

/// The options `serve` and `load` need, as arguments (for `bench`'s children).
fn child_args(s: &Settings) -> Vec<String> {
    let mut args = vec![
        "--secs".into(),
        s.secs.to_string(),
        "--warm-up".into(),
        s.warm_up.to_string(),
        "--connections".into(),
        s.connections.to_string(),
        "--lost".into(),
        s.lost.to_string(),
        "--fail".into(),
        s.fail.to_string(),
        "--sleep-ms".into(),
        s.sleep_ms.to_string(),
        "--work-us".into(),
        s.work_us.to_string(),
        "--timeout-ms".into(),
        s.timeout_ms.to_string(),
        "--client-threads".into(),
        s.client_threads.to_string(),
        "--probe".into(),
        if s.probe { "on" } else { "off" }.into(),
    ];
    let mut opt = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            args.push(format!("--{name}"));
            args.push(v);
        }
    };
    opt("resolution-us", s.resolution_us.map(|v| v.to_string()));
    opt(
        "global-queue-interval",
        s.global_queue_interval.map(|v| v.to_string()),
    );
    opt("event-interval", s.event_interval.map(|v| v.to_string()));
    args
}

// ---------------------------------------------------------------------------------------
// Time stamps and the probe

/// Nanoseconds since the process's first call.
fn stamp() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn stamp_of(at: Instant) -> u64 {
    stamp() - Instant::now().saturating_duration_since(at).as_nanos() as u64
}

/// A waker around the task's own that stamps its last wake-up, and whether that ran on a
/// server worker thread.
struct Probe {
    inner: Mutex<Option<Waker>>,
    woke: AtomicU64,
    on_worker: AtomicBool,
}

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Relaxed: read by the same task after the wake-up it causes (the scheduler's
        // hand-off orders it).
        self.woke.store(stamp(), Ordering::Relaxed);
        let on_worker = std::thread::current().name() == Some(WORKER_NAME);
        self.on_worker.store(on_worker, Ordering::Relaxed);
        let inner = self.inner.lock().unwrap().clone();
        if let Some(w) = inner {
            w.wake();
        }
    }
}

/// `fut` polled with a [`Probe`]'s waker.
struct Probed<F> {
    fut: Pin<Box<F>>,
    probe: Arc<Probe>,
    waker: Waker,
}

impl<F: Future> Probed<F> {
    fn new(fut: F) -> Self {
        let probe = Arc::new(Probe {
            inner: Mutex::new(None),
            woke: AtomicU64::new(0),
            on_worker: AtomicBool::new(false),
        });
        Probed {
            fut: Box::pin(fut),
            waker: Waker::from(Arc::clone(&probe)),
            probe,
        }
    }
}

impl<F: Future> Future for Probed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        {
            let mut inner = self.probe.inner.lock().unwrap();
            if !inner.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *inner = Some(cx.waker().clone());
            }
        }
        let this = &mut *self;
        this.fut
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

// ---------------------------------------------------------------------------------------
// The trackers

/// A callback tracker's payload: where its completion's time and outcome go.
type CbPayload = oneshot::Sender<(Instant, Outcome)>;

#[derive(Clone)]
enum Tracker {
    Track(AsyncAcker<()>),
    /// Pending XORs, each with the sender its request awaits: `true` acked, `false` failed.
    Tokio(Arc<DashMap<u64, (u64, oneshot::Sender<bool>)>>),
    Callback(Acker<CbPayload>),
}

/// What the awaited tree came to, and when the acker fired it (callback trackers).
type Waited = (Outcome, Option<Instant>);

impl Tracker {
    fn build(name: &str, s: &Settings) -> Tracker {
        let timeout = Duration::from_millis(s.timeout_ms);
        let resolution = s.resolution_us.map(Duration::from_micros);
        match name {
            "track" => {
                let mut b = Acker::<()>::builder().timeout(timeout);
                if let Some(r) = resolution {
                    b = b.resolution(r);
                }
                // Room for every connection's request (and `held`'s trees).
                let buffer = s.connections.max(1024);
                let (acker, _completions) = b.build_async(buffer).expect("valid settings");
                Tracker::Track(acker)
            }
            "tokio" => Tracker::Tokio(Arc::new(DashMap::new())),
            "thread-cb" | "task-cb" => {
                let mut b = Acker::<CbPayload>::builder()
                    .timeout(timeout)
                    .on_complete(|c| {
                        let _ = c.payload.send((Instant::now(), c.outcome));
                    });
                if let Some(r) = resolution {
                    b = b.resolution(r);
                }
                let acker = if name == "task-cb" {
                    let acker = b.build_manual().expect("valid settings");
                    // Dropped: the task runs as long as the acker (this process).
                    drop(spawn_expiry(&acker));
                    acker
                } else {
                    b.build().expect("valid settings")
                };
                Tracker::Callback(acker)
            }
            other => panic!("unknown tracker {other:?}"),
        }
    }

    /// Starts tracking the tree; the future of its outcome.
    fn start(
        &self,
        root: u64,
        xor: u64,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Waited> + Send>> {
        match self {
            Tracker::Track(acker) => {
                let tree = acker.track(root, xor, ()).expect("a fresh root, room");
                Box::pin(async move {
                    let done = tree.await.expect("the acker runs");
                    (done.outcome, None)
                })
            }
            Tracker::Tokio(map) => {
                let (tx, rx) = oneshot::channel();
                map.insert(root, (xor, tx));
                let map = Arc::clone(map);
                Box::pin(async move {
                    match tokio::time::timeout(timeout, rx).await {
                        Ok(Ok(true)) => (Outcome::Acked, None),
                        Ok(_) => (Outcome::Failed, None),
                        Err(_) => {
                            map.remove(&root);
                            (Outcome::TimedOut, None)
                        }
                    }
                })
            }
            Tracker::Callback(acker) => {
                let (tx, rx) = oneshot::channel();
                acker.init(root, xor, tx).expect("a fresh root, room");
                Box::pin(async move {
                    let (at, outcome) = rx.await.expect("the tree completes");
                    (outcome, Some(at))
                })
            }
        }
    }

    fn ack(&self, root: u64, edge: u64) {
        match self {
            Tracker::Track(acker) => {
                acker.ack(root, edge);
            }
            Tracker::Tokio(map) => {
                let done = match map.get_mut(&root) {
                    Some(mut entry) => {
                        entry.0 ^= edge;
                        entry.0 == 0
                    }
                    None => false,
                };
                if done {
                    if let Some((_, (_, tx))) = map.remove_if(&root, |_, p| p.0 == 0) {
                        let _ = tx.send(true);
                    }
                }
            }
            Tracker::Callback(acker) => {
                acker.ack(root, edge);
            }
        }
    }

    fn fail(&self, root: u64) {
        match self {
            Tracker::Track(acker) => {
                acker.fail(root);
            }
            Tracker::Tokio(map) => {
                if let Some((_, (_, tx))) = map.remove(&root) {
                    let _ = tx.send(false);
                }
            }
            Tracker::Callback(acker) => {
                acker.fail(root);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server

/// One 504's figures, in nanoseconds after its deadline (or, for `resumed`, after its
/// wake-up).
#[derive(Clone, Copy, Default)]
struct Sample {
    late: i64,
    woken: Option<i64>,
    resumed: Option<i64>,
    fired: Option<i64>,
    on_worker: bool,
    /// Which of the server's trackers.
    kind: usize,
}

/// The 504s' samples, in memory the server holds from its start: every sample while there
/// are at most [`SAMPLES_KEPT`], and beyond that a uniform sample of them that size (a
/// reservoir, Vitter's algorithm R), with the count of each tracker's samples exact. A
/// growing `Vec` made the server's peak resident set depend on its throughput (a faster
/// tracker answered more 504s, and each doubling of the vector moved half a megabyte), so
/// that peak RSS compared the trackers' speeds as much as what they hold.
struct Samples {
    /// `SAMPLES_KEPT` samples, written at the start so that their pages are resident from
    /// the first request; the first `total` (at most all) are samples.
    slots: Box<[Sample]>,
    /// Samples recorded, per tracker (`Sample::kind`).
    seen: Vec<u64>,
    /// Samples recorded, all trackers: the reservoir's count.
    total: u64,
}

/// The samples the server keeps: 590 kB. The service bench's 504s (0.5 % of about 50,000
/// requests a second over a 17 s window, about 4,300) are all kept; the default load's
/// (a quarter of the requests) are sampled.
const SAMPLES_KEPT: usize = 8192;

impl Samples {
    fn new() -> Self {
        // A filler that is not all zero bits: zeroes could come from calloc, whose pages
        // stay unmapped until a sample is written to them.
        let filler = Sample {
            kind: usize::MAX,
            ..Sample::default()
        };
        let slots = vec![filler; SAMPLES_KEPT].into_boxed_slice();
        Samples {
            slots,
            seen: Vec::new(),
            total: 0,
        }
    }

    fn record(&mut self, sample: Sample) {
        if self.seen.len() <= sample.kind {
            self.seen.resize(sample.kind + 1, 0);
        }
        self.seen[sample.kind] += 1;
        // Algorithm R: the n-th sample fills slot n - 1 while there is one, and then
        // replaces a kept one with probability kept / n.
        let at = if self.total < self.slots.len() as u64 {
            self.total
        } else {
            splitmix(self.total ^ 0x5A3B_1E5D) % (self.total + 1)
        };
        self.total += 1;
        if let Some(slot) = self.slots.get_mut(at as usize) {
            *slot = sample;
        }
    }

    /// The samples kept and the count recorded per tracker kind.
    fn take(&mut self) -> (Vec<Sample>, Vec<u64>) {
        let kept = self.slots.len().min(self.total as usize);
        (self.slots[..kept].to_vec(), std::mem::take(&mut self.seen))
    }
}

struct Server {
    /// By name; request `root` uses `trackers[root % len]`.
    trackers: Vec<(String, Tracker)>,
    timeout: Duration,
    lost_per_million: u64,
    fail_per_million: u64,
    /// The longest a sub-task sleeps (each sleeps a random time up to it), if any.
    sleep: Duration,
    work: Duration,
    probe: bool,
    roots: AtomicU64,
    /// Stamps bounding the recorded deadlines.
    window: (u64, u64),
    samples: Mutex<Samples>,
    ok: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn spin(work: Duration) {
    let t = Instant::now();
    while t.elapsed() < work {
        std::hint::spin_loop();
    }
}

fn signed(later: u64, earlier: u64) -> i64 {
    later as i64 - earlier as i64
}

impl Server {
    async fn handle(self: Arc<Self>) -> Response<Full<Bytes>> {
        let start = Instant::now();
        let root = self.roots.fetch_add(1, Ordering::Relaxed);
        let mut edges = [0u64; 4];
        for (i, e) in edges.iter_mut().enumerate() {
            *e = splitmix(root.wrapping_mul(8) + i as u64) | 1;
        }
        let xor = edges.iter().fold(0, |a, e| a ^ e);
        let lose = splitmix(!root) % 1_000_000 < self.lost_per_million;
        let fail = !lose && splitmix(root ^ 0x5EED) % 1_000_000 < self.fail_per_million;
        let kind = (root % self.trackers.len() as u64) as usize;
        let tracker = &self.trackers[kind].1;
        let waiting = tracker.start(root, xor, self.timeout);
        for (i, &edge) in edges.iter().enumerate() {
            let tracker = tracker.clone();
            let (work, sleep) = (self.work, self.sleep);
            tokio::spawn(async move {
                if !sleep.is_zero() {
                    let nanos = splitmix(root.wrapping_mul(8) + i as u64 + 4)
                        % (sleep.as_nanos() as u64 + 1);
                    tokio::time::sleep(Duration::from_nanos(nanos)).await;
                }
                if !work.is_zero() {
                    spin(work);
                }
                match i {
                    3 if lose => {}
                    0 if fail => tracker.fail(root),
                    _ => tracker.ack(root, edge),
                }
            });
        }
        let (outcome, fired, probe) = if self.probe {
            let probed = Probed::new(waiting);
            let probe = Arc::clone(&probed.probe);
            let (o, f) = probed.await;
            (o, f, Some(probe))
        } else {
            let (o, f) = waiting.await;
            (o, f, None)
        };
        let timed_out = outcome == Outcome::TimedOut;
        let resumed = stamp();
        let (status, body, count): (_, &'static [u8], _) = match outcome {
            Outcome::Acked => (StatusCode::OK, b"ok", &self.ok),
            Outcome::Failed => (StatusCode::BAD_GATEWAY, b"failed", &self.failed),
            _ => (StatusCode::GATEWAY_TIMEOUT, b"timed out", &self.timed_out),
        };
        let response = Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(body)))
            .expect("a response");
        let answered = stamp();
        if answered >= self.window.0 && answered < self.window.1 {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let due = stamp_of(start) + self.timeout.as_nanos() as u64;
        if timed_out && due >= self.window.0 && due < self.window.1 {
            let mut sample = Sample {
                late: signed(answered, due),
                fired: fired.map(|f| signed(stamp_of(f), due)),
                kind,
                ..Sample::default()
            };
            if let Some(probe) = probe {
                // Relaxed: the wake-up that resumed this task came after the stores.
                let woke = probe.woke.load(Ordering::Relaxed);
                sample.woken = Some(signed(woke, due));
                sample.resumed = Some(signed(resumed, woke));
                sample.on_worker = probe.on_worker.load(Ordering::Relaxed);
            }
            self.samples.lock().unwrap().record(sample);
        }
        response
    }
}

fn serve(s: &Settings) {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .thread_name(WORKER_NAME)
        .enable_all();
    if let Some(n) = s.global_queue_interval {
        builder.global_queue_interval(n);
    }
    if let Some(n) = s.event_interval {
        builder.event_interval(n);
    }
    let runtime = builder.build().expect("a runtime");
    let began = stamp();
    let secs = |f: f64| (f * 1e9) as u64;
    let server = runtime.block_on(async {
        Arc::new(Server {
            trackers: s
                .tracker
                .split('+')
                .map(|name| (name.to_string(), Tracker::build(name, s)))
                .collect(),
            timeout: Duration::from_millis(s.timeout_ms),
            lost_per_million: (s.lost * 1e6) as u64,
            fail_per_million: (s.fail * 1e6) as u64,
            sleep: Duration::from_millis(s.sleep_ms),
            work: Duration::from_micros(s.work_us),
            probe: s.probe,
            roots: AtomicU64::new(1),
            window: (began + secs(s.warm_up), began + secs(s.secs)),
            samples: Mutex::new(Samples::new()),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    });
    let listener = runtime
        .block_on(TcpListener::bind(("127.0.0.1", s.port)))
        .expect("a port");
    println!("LISTENING {}", listener.local_addr().unwrap().port());
    // An axum service, as a user would write it: one route, its handler the request's
    // fan-out.
    let handling = Arc::clone(&server);
    let app = Router::new().route(
        "/",
        get(move || {
            let server = Arc::clone(&handling);
            async move { server.handle().await }
        }),
    );
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // The server's own CPU over the window, for its cost a request: steadier than the
    // requests/s of a saturated run, which the machine's moods move by a third.
    let window_cpu = {
        let (from, to) = (secs(s.warm_up), secs(s.secs));
        std::thread::spawn(move || {
            let at = |t: u64| std::thread::sleep(Duration::from_nanos(t.saturating_sub(stamp())));
            at(began + from);
            let before = own_cpu_seconds();
            at(began + to);
            own_cpu_seconds() - before
        })
    };
    // The deadlines recorded end at `secs`; their responses come by then plus the timeout
    // plus some lateness.
    let end = Duration::from_secs_f64(s.secs)
        + Duration::from_millis(s.timeout_ms)
        + Duration::from_millis(100);
    std::thread::sleep(end.saturating_sub(Duration::from_nanos(stamp() - began)));
    let (samples, seen) = server.samples.lock().unwrap().take();
    let window = s.secs - s.warm_up;
    let answered = [&server.ok, &server.failed, &server.timed_out]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum::<u64>();
    let mut out = vec![
        ("tracker".to_string(), s.tracker.clone()),
        ("rps".into(), format!("{:.0}", answered as f64 / window)),
        ("peak_rss_mb".into(), format!("{:.1}", memory_mb("VmHWM"))),
        (
            "cpu_us_per_req".into(),
            format!(
                "{:.2}",
                window_cpu.join().unwrap_or(0.0) * 1e6 / (answered.max(1) as f64)
            ),
        ),
        ("rss_mb".into(), format!("{:.1}", memory_mb("VmRSS"))),
        (
            "t504ps".into(),
            format!(
                "{:.0}",
                server.timed_out.load(Ordering::Relaxed) as f64 / window
            ),
        ),
    ];
    for (kind, (name, tracker)) in server.trackers.iter().enumerate() {
        // One tracker's series are named plainly; several trackers' get their names.
        let prefix = if server.trackers.len() > 1 {
            format!("{name}:")
        } else {
            String::new()
        };
        let mine: Vec<Sample> = samples.iter().filter(|x| x.kind == kind).copied().collect();
        out.push((
            format!("{prefix}n"),
            seen.get(kind).copied().unwrap_or(0).to_string(),
        ));
        let mut series = |name: &str, mut v: Vec<i64>| {
            if v.is_empty() {
                return;
            }
            for (q, f) in ["mean", "p50", "p99", "p999", "max"]
                .iter()
                .zip(summary(&mut v))
            {
                out.push((format!("{prefix}{name}.{q}"), format!("{f:.3}")));
            }
        };
        series("late", mine.iter().map(|x| x.late).collect());
        series("woken", mine.iter().filter_map(|x| x.woken).collect());
        series("resumed", mine.iter().filter_map(|x| x.resumed).collect());
        series("fired", mine.iter().filter_map(|x| x.fired).collect());
        // The resumption split by where the wake-up ran: a worker (tokio's timer; a
        // caller's pass for a late reaper; `task-cb`) or another thread (the reaper's).
        let resumed_where = |on: bool| {
            mine.iter()
                .filter(|x| x.on_worker == on)
                .filter_map(|x| x.resumed)
                .collect()
        };
        series("res_wkr", resumed_where(true));
        series("res_oth", resumed_where(false));
        if s.probe {
            let on = mine.iter().filter(|x| x.on_worker).count();
            out.push((
                format!("{prefix}on_worker"),
                format!("{:.3}", on as f64 / mine.len().max(1) as f64),
            ));
        }
        let stats = match tracker {
            Tracker::Track(a) => Some(a.stats()),
            Tracker::Callback(a) => Some(a.stats()),
            Tracker::Tokio(_) => None,
        };
        if let Some(st) = stats {
            out.push((
                format!("{prefix}caller_passes"),
                st.caller_passes.to_string(),
            ));
            out.push((
                format!("{prefix}reaper_switches"),
                reaper_switches().to_string(),
            ));
            // Growth and shrinking: each moved root is a migration's work, and each
            // migration a new table and tick record.
            out.push((format!("{prefix}roots_moved"), st.roots_moved.to_string()));
            out.push((
                format!("{prefix}acker_late_mean"),
                format!(
                    "{:.3}",
                    st.timeout_lateness_total.as_secs_f64() * 1e3 / st.timed_out.max(1) as f64
                ),
            ));
        }
    }
    let line: Vec<String> = out.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("RESULT {}", line.join(" "));
    std::process::exit(0);
}

/// The context switches (voluntary and not) of this process's reaper threads so far:
/// each is a wake-up of the thread, or its preemption, on a core the workers want.
fn reaper_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim() == "ackwheel-reaper")
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// This process's `/proc/self/status` figure `field` (`VmHWM`: its peak resident set;
/// `VmRSS`: now), in MB; 0 where there is none.
fn memory_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / 1e3)
        })
        .unwrap_or(0.0)
}

/// `[mean, p50, p99, p99.9, max]` in milliseconds.
fn summary(nanos: &mut [i64]) -> [f64; 5] {
    nanos.sort_unstable();
    let at = |q: f64| nanos[((q * nanos.len() as f64) as usize).min(nanos.len() - 1)] as f64;
    let mean = nanos.iter().map(|&n| n as f64).sum::<f64>() / nanos.len() as f64;
    [
        mean,
        at(0.5),
        at(0.99),
        at(0.999),
        nanos[nanos.len() - 1] as f64,
    ]
    .map(|n| n / 1e6)
}

// ---------------------------------------------------------------------------------------
// The load

fn load(s: &Settings) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(s.client_threads)
        .thread_name("load-worker")
        .enable_all()
        .build()
        .expect("a runtime");
    let addr: SocketAddr = ([127, 0, 0, 1], s.port).into();
    let sent = Arc::new(AtomicU64::new(0));
    // Each request started in the window (after the warm-up, before `secs`): its status
    // and its time from sending to the whole response read, in nanoseconds.
    let began = Instant::now();
    let window = (
        Duration::from_secs_f64(s.warm_up),
        Duration::from_secs_f64(s.secs),
    );
    let timed = Arc::new(Mutex::new(Vec::<(u16, u64)>::new()));
    runtime.block_on(async {
        for _ in 0..s.connections {
            let sent = Arc::clone(&sent);
            let timed = Arc::clone(&timed);
            tokio::spawn(async move {
                let mut mine = Vec::new();
                let Ok(stream) = TcpStream::connect(addr).await else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let Ok((mut sender, conn)) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
                else {
                    return;
                };
                tokio::spawn(conn);
                loop {
                    let req = Request::get("/")
                        .header("host", "localhost")
                        .body(Empty::<Bytes>::new())
                        .expect("a request");
                    let start = Instant::now();
                    let Ok(res) = sender.send_request(req).await else {
                        break;
                    };
                    let status = res.status().as_u16();
                    if res.into_body().collect().await.is_err() {
                        break;
                    }
                    let since = start.duration_since(began);
                    if since >= window.0 && since < window.1 {
                        mine.push((status, start.elapsed().as_nanos() as u64));
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    if since >= window.1 {
                        break;
                    }
                }
                timed.lock().unwrap().extend(mine);
            });
        }
        tokio::time::sleep(Duration::from_secs_f64(s.secs + 0.5)).await;
    });
    eprintln!("load: {} responses", sent.load(Ordering::Relaxed));
    // Per status: how many, and their latencies (`c200.p99`, ...), for `bench`.
    let mut timed = std::mem::take(&mut *timed.lock().unwrap());
    timed.sort_unstable();
    let mut out = Vec::new();
    for status in [200u16, 502, 504] {
        let mut nanos: Vec<i64> = timed
            .iter()
            .filter(|(st, _)| *st == status)
            .map(|&(_, n)| n as i64)
            .collect();
        out.push(format!("c{status}.n={}", nanos.len()));
        if nanos.is_empty() {
            continue;
        }
        for (q, f) in COLUMNS.iter().zip(summary(&mut nanos)) {
            out.push(format!("c{status}.{q}={f:.3}"));
        }
    }
    println!("CLIENT {}", out.join(" "));
    std::process::exit(0);
}

// ---------------------------------------------------------------------------------------
// The bench

type Figures = Vec<(String, String)>;

/// The `key=value` words of a line (a server's `RESULT`, a load's `CLIENT`, `held-one`'s
/// `HELD`), in order.
fn figures_of(line: &str) -> Figures {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The figure named `key`, if there is one and it is a number.
fn number(figures: &Figures, key: &str) -> Option<f64> {
    figures
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
}

/// CPU seconds every process on the machine has used since boot (`/proc/stat`; 0 where
/// there is none), and this process's waited-for children's.
/// This process's CPU time so far (user and system, every thread), in seconds.
fn own_cpu_seconds() -> f64 {
    // Safety: `usage` is a valid rusage for the call to fill.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(usage.ru_utime) + secs(usage.ru_stime)
    }
}

fn cpu_seconds() -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let machine = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            let line = stat.lines().next()?.to_string();
            let f: Vec<f64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal: all but idle and iowait.
            Some((f[0] + f[1] + f[2] + f[5] + f[6] + f.get(7).copied().unwrap_or(0.0)) / ticks)
        })
        .unwrap_or(0.0);
    // Safety: `usage` is a valid rusage for the call to fill.
    let children = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(usage.ru_utime) + secs(usage.ru_stime)
    };
    (machine, children)
}

/// Waits (up to two minutes) until the machine's other processes use less than
/// `max_other` cores over three seconds; whether they did.
fn wait_quiet(max_other: f64) -> bool {
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        let (before, _) = cpu_seconds();
        std::thread::sleep(Duration::from_secs(3));
        let (after, _) = cpu_seconds();
        if (after - before) / 3.0 < max_other {
            return true;
        }
        if Instant::now() > give_up {
            return false;
        }
    }
}

/// A run, repeated (up to three times) while other processes took more than
/// `--max-other` cores during it: the figures are of the quietest try.
fn run_quietly(s: &Settings, tracker: &str) -> Figures {
    let other = |f: &Figures| number(f, "cpu_other").unwrap_or(0.0);
    let mut best: Option<Figures> = None;
    for _ in 0..3 {
        wait_quiet(s.max_other);
        let figures = run_once(s, tracker);
        let quiet = other(&figures) <= s.max_other;
        if best.as_ref().is_none_or(|b| other(&figures) < other(b)) {
            best = Some(figures);
        }
        if quiet {
            break;
        }
        eprintln!("(a {tracker} run was disturbed by other processes: again)");
    }
    best.expect("a run")
}

fn run_once(s: &Settings, tracker: &str) -> Figures {
    let (machine_before, ours_before) = cpu_seconds();
    let began = Instant::now();
    let exe = std::env::current_exe().expect("this program");
    let mut server = Command::new(&exe)
        .arg("serve")
        .args(["--tracker", tracker, "--port", "0"])
        .args(child_args(s))
        .stdout(Stdio::piped())
        .spawn()
        .expect("a server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the server's first line").unwrap();
    let port = first
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("the server said {first:?}"))
        .to_string();
    let load = Command::new(&exe)
        .arg("load")
        .args(["--port", &port])
        .args(child_args(s))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("a load");
    let mut result = None;
    for line in lines {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("RESULT ") {
            result = Some(rest.to_string());
        }
    }
    let _ = server.wait();
    // The load ends half a second after the window, and then tells its figures.
    let client = load.wait_with_output().expect("the load's figures");
    let client = String::from_utf8_lossy(&client.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("CLIENT ").map(str::to_string))
        .unwrap_or_default();
    let (machine, ours) = cpu_seconds();
    let wall = began.elapsed().as_secs_f64();
    let result = result.expect("the server's result") + " " + &client;
    let mut figures = figures_of(&result);
    // Other processes' CPU during the run, in cores: anything above a few hundredths
    // means the figures were disturbed.
    let cpu_ours = (ours - ours_before) / wall;
    let cpu_other = ((machine - machine_before) - (ours - ours_before)).max(0.0) / wall;
    figures.push(("cpu_ours".into(), format!("{cpu_ours:.2}")));
    figures.push(("cpu_other".into(), format!("{cpu_other:.2}")));
    figures
}

/// The series among `figures`' keys (`series.mean`, ...), in order.
fn series_of(figures: &Figures) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (k, _) in figures {
        if let Some((series, _)) = k.rsplit_once('.') {
            if !names.iter().any(|n| n == series) {
                names.push(series.to_string());
            }
        }
    }
    names
}

const COLUMNS: [&str; 5] = ["mean", "p50", "p99", "p999", "max"];

fn print_row(label: &str, figures: &Figures, series: &str) {
    let get = |k: &str| {
        figures
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "-".into())
    };
    let cells: String = COLUMNS
        .iter()
        .map(|c| format!(" {:>8}", get(&format!("{series}.{c}"))))
        .collect();
    // A mixed run's series are `tracker:series`; their counts are `tracker:n`.
    let prefix = series
        .rsplit_once(':')
        .map_or(String::new(), |(t, _)| format!("{t}:"));
    // The client's series (`c200`, ...) count their own responses.
    let n = match get(&format!("{series}.n")) {
        own if own != "-" => own,
        _ => get(&format!("{prefix}n")),
    };
    println!(
        "  {label:<16} {:<17} {:>6} {:>6} {:>6}{cells} {:>6}",
        series,
        get("rps"),
        get("t504ps"),
        n,
        get(&format!("{prefix}on_worker")),
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn bench(mut s: Settings) {
    if s.trackers.is_empty() {
        s.trackers = vec!["track".into(), "tokio".into()];
    }
    println!(
        "http-timeouts: {} connections, lost {}, work {} µs x4, timeout {} ms, {} s a run \
         ({} s warm-up), resolution {}, probe {}, gqi {:?}, event interval {:?}",
        s.connections,
        s.lost,
        s.work_us,
        s.timeout_ms,
        s.secs,
        s.warm_up,
        s.resolution_us
            .map_or("default".to_string(), |r| format!("{r} µs")),
        s.probe,
        s.global_queue_interval,
        s.event_interval
    );
    println!(
        "  {:<16} {:<17} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "run", "series", "req/s", "504/s", "n", "mean", "p50", "p99", "p99.9", "max", "onwkr"
    );
    let mut all: Vec<(String, Figures)> = Vec::new();
    for run in 0..s.runs {
        for tracker in s.trackers.clone() {
            let figures = run_quietly(&s, &tracker);
            let label = format!("{tracker} #{}", run + 1);
            for series in series_of(&figures) {
                print_row(&label, &figures, &series);
            }
            let get = |k: &str| {
                figures
                    .iter()
                    .find(|(n, _)| n == k)
                    .map_or("-", |(_, v)| v.as_str())
            };
            let acker: String = figures
                .iter()
                .filter_map(|(k, v)| {
                    let unit = if k.ends_with("acker_late_mean") {
                        " ms"
                    } else if ["caller_passes", "reaper_switches", "roots_moved"]
                        .iter()
                        .any(|name| k.ends_with(name))
                    {
                        ""
                    } else {
                        return None;
                    };
                    Some(format!(" {k} {v}{unit}"))
                })
                .collect();
            println!(
                "  {label:<16} cores used: ours {}, other processes' {}; server RSS peak {} MB, \
                 at the end {} MB; server CPU {} µs a request;{acker}",
                get("cpu_ours"),
                get("cpu_other"),
                get("peak_rss_mb"),
                get("rss_mb"),
                get("cpu_us_per_req"),
            );
            all.push((tracker, figures));
        }
    }
    // Each run's requests/s and peak RSS over the second tracker's in the same pair.
    if s.trackers.len() == 2 {
        let figure = |f: &Figures, k: &str| number(f, k).unwrap_or(f64::NAN);
        let ratios = |k: &str| -> Vec<f64> {
            all.chunks(2)
                .filter(|pair| pair.len() == 2)
                .map(|pair| figure(&pair[0].1, k) / figure(&pair[1].1, k))
                .collect()
        };
        for (k, what) in [
            ("rps", "requests/s"),
            ("peak_rss_mb", "peak RSS"),
            ("cpu_us_per_req", "server CPU a request"),
        ] {
            let r = ratios(k);
            let each: Vec<String> = r.iter().map(|x| format!("{x:.3}")).collect();
            println!(
                "{} over {}, {what}, each pair: {} (median {:.3})",
                s.trackers[0],
                s.trackers[1],
                each.join(" "),
                median(r.clone())
            );
        }
    }
    println!("medians over runs:");
    for tracker in &s.trackers {
        let runs: Vec<&Figures> = all
            .iter()
            .filter(|(t, _)| t == tracker)
            .map(|(_, f)| f)
            .collect();
        let mut keys: Vec<String> = runs[0].iter().map(|(k, _)| k.clone()).collect();
        keys.retain(|k| k != "tracker");
        let med: Figures = keys
            .iter()
            .map(|k| {
                let vals: Vec<f64> = runs
                    .iter()
                    .filter_map(|f| f.iter().find(|(n, _)| n == k))
                    .filter_map(|(_, v)| v.parse().ok())
                    .collect();
                (k.clone(), format!("{:.3}", median(vals)))
            })
            .collect();
        for series in series_of(&med) {
            print_row(tracker, &med, &series);
        }
    }
}

// ---------------------------------------------------------------------------------------
// What a tracker holds

/// The trees' timeout in `held`: a minute, so that none times out while it is measured.
const HELD_TIMEOUT: Duration = Duration::from_secs(60);

/// `held-one`: in this fresh process, a 2-worker runtime, then `--tracker` built, then
/// `--connections` trees started (four edges each, none acked) with a task awaiting each,
/// then every edge acked and every task done. Prints the anonymous resident memory above
/// the runtime's own after each step, in kB. The trees' timeout is [`HELD_TIMEOUT`],
/// whatever `--timeout-ms` says; a tree that came to anything but acked is an error.
fn held_one(s: &Settings) {
    let s = &Settings {
        timeout_ms: HELD_TIMEOUT.as_millis() as u64,
        ..s.clone()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // Anonymous memory only: what the trackers allocate. The code pages each first runs
    // (the acker's build faults in about 0.4 MB of this binary's and libc's) are the
    // program's, and in a service its other code has faulted in the same pages.
    let kb = || memory_mb("RssAnon") * 1e3;
    let settle = || std::thread::sleep(Duration::from_millis(100));
    // The runtime's workers started and parked: its own memory, before the tracker's.
    runtime.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
    let base = kb();
    let tracker = runtime.block_on(async { Tracker::build(&s.tracker, s) });
    settle();
    let built = kb() - base;
    let edges = |root: u64| [1, 2, 3, 4].map(|k| splitmix(root * 8 + k) | 1);
    let tasks: Vec<_> = (1..=s.connections as u64)
        .map(|root| {
            let xor = edges(root).iter().fold(0, |x, e| x ^ e);
            runtime.spawn(tracker.start(root, xor, HELD_TIMEOUT))
        })
        .collect();
    settle();
    let in_flight = kb() - base;
    for root in 1..=s.connections as u64 {
        for edge in edges(root) {
            tracker.ack(root, edge);
        }
    }
    for task in tasks {
        match runtime.block_on(task) {
            Ok((Outcome::Acked, _)) => {}
            Ok((outcome, _)) => {
                eprintln!("http-timeouts held-one: a tree came to {outcome:?}, not Acked");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("http-timeouts held-one: a tree's task failed: {e}");
                std::process::exit(1);
            }
        }
    }
    settle();
    let after = kb() - base;
    println!("HELD built={built:.0} in_flight={in_flight:.0} after={after:.0}");
}

/// `held`: `held-one` for each tracker (`track tokio` unless named), each in a fresh
/// process, `--runs` times alternating; each run's figures and the medians.
fn held(s: Settings) {
    if s.runs == 0 {
        eprintln!("http-timeouts held: --runs must be at least 1");
        std::process::exit(2);
    }
    let trackers = if s.trackers.is_empty() {
        vec!["track".to_string(), "tokio".to_string()]
    } else {
        s.trackers.clone()
    };
    if let Some(shared) = trackers.iter().find(|t| t.contains('+')) {
        eprintln!("http-timeouts held: one tracker a process, not {shared:?}");
        std::process::exit(2);
    }
    println!(
        "http-timeouts held: {} trees in flight (four edges each) on a 2-worker runtime, \
         kB of anonymous memory above the runtime's own",
        s.connections
    );
    println!("  run              built  in flight    after");
    let exe = std::env::current_exe().expect("this program's path");
    let mut figures: Vec<Vec<[f64; 3]>> = vec![Vec::new(); trackers.len()];
    for run in 1..=s.runs {
        for (i, name) in trackers.iter().enumerate() {
            let out = Command::new(&exe)
                .args(["held-one", "--tracker", name])
                .args(["--connections", &s.connections.to_string()])
                .stderr(Stdio::inherit())
                .output()
                .expect("a child process");
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(line) = text.lines().find_map(|l| l.strip_prefix("HELD ")) else {
                eprintln!(
                    "http-timeouts held: held-one {name} failed ({})",
                    out.status
                );
                std::process::exit(1);
            };
            let held = figures_of(line);
            let f = ["built", "in_flight", "after"].map(|k| number(&held, k).unwrap_or(f64::NAN));
            println!(
                "  {:<12} #{run} {:>6.0} {:>10.0} {:>8.0}",
                name, f[0], f[1], f[2]
            );
            figures[i].push(f);
        }
    }
    println!("medians over runs:");
    for (name, runs) in trackers.iter().zip(&figures) {
        let m = |k: usize| median(runs.iter().map(|f| f[k]).collect());
        println!("  {:<15} {:>6.0} {:>10.0} {:>8.0}", name, m(0), m(1), m(2));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.first().map(String::as_str) {
        Some(c @ ("serve" | "load" | "bench" | "held" | "held-one")) => (c.to_string(), &args[1..]),
        _ => ("bench".to_string(), &args[..]),
    };
    let s = match parse(rest) {
        Ok(Some(s)) => s,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("http-timeouts: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    match command.as_str() {
        "serve" => serve(&s),
        "load" => load(&s),
        "held-one" => held_one(&s),
        "held" => held(s),
        _ => bench(s),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Sample, Samples, SAMPLES_KEPT};

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// Bad options are errors that name what is wrong, never a panic; `--help` is none.
    #[test]
    fn bad_options_are_errors_and_help_is_not() {
        for (line, error) in [
            ("--runs", "--runs takes a value"),
            ("--runs x", "--runs: not a number: \"x\""),
            ("--bogus 1", "unknown option --bogus"),
            ("trak", "unknown tracker \"trak\""),
            ("--tracker track+tokyo", "unknown tracker \"tokyo\""),
            (
                "--secs 3 --warm-up 3",
                "--secs must exceed --warm-up by a second",
            ),
        ] {
            match parse(&args(line)) {
                Err(e) => assert!(e.starts_with(error), "{line:?}: {e:?}"),
                Ok(_) => panic!("{line:?} was taken"),
            }
        }
        assert!(matches!(parse(&args("--runs 3 --help")), Ok(None)));
        let s = parse(&args("--runs 3 --lost 0.005 track tokio"))
            .unwrap()
            .unwrap();
        assert_eq!((s.runs, s.lost, s.trackers.len()), (3, 0.005, 2));
    }

    /// Every sample is kept up to the store's size; past it the counts stay exact and the
    /// kept ones are a uniform sample: of 4 x SAMPLES_KEPT samples numbered in order, about
    /// a quarter of those kept come from each quarter.
    #[test]
    fn samples_are_all_kept_then_sampled_uniformly() {
        let sample = |late: i64, kind: usize| Sample {
            late,
            kind,
            ..Sample::default()
        };
        let mut few = Samples::new();
        for i in 0..100 {
            few.record(sample(i, (i % 2) as usize));
        }
        let (kept, seen) = few.take();
        assert_eq!(seen, [50, 50]);
        assert_eq!(
            kept.iter().map(|s| s.late).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );

        let mut many = Samples::new();
        let n = 4 * SAMPLES_KEPT as i64;
        for i in 0..n {
            many.record(sample(i, 0));
        }
        let (kept, seen) = many.take();
        assert_eq!((kept.len(), seen), (SAMPLES_KEPT, vec![n as u64]));
        for quarter in 0..4 {
            let range = quarter * n / 4..(quarter + 1) * n / 4;
            let share = kept.iter().filter(|s| range.contains(&s.late)).count();
            let expected = SAMPLES_KEPT / 4;
            assert!(
                share.abs_diff(expected) < expected / 10,
                "quarter {quarter}: {share} kept, about {expected} expected"
            );
        }
    }
}
