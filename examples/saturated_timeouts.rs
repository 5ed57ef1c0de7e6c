//! How late an ackwheel timeout wakes its task on a saturated tokio runtime, against
//! `tokio::time::timeout` in the same run.
//!
//! A multi-thread runtime with two workers (the machine this was written on has two cores)
//! is kept busy by CPU-bound tasks, each looping on 50-200 µs of spinning followed by
//! `tokio::task::yield_now().await`. Beside them a closed loop of request tasks (800 by
//! default) each waits, again and again, for a 100 ms timeout that nothing cancels; each task
//! alternates between the two kinds:
//!
//! - **ackwheel**: a tree whose one edge is never acked, awaited until it times out
//!   (`Outcome::TimedOut`);
//! - **tokio**: `tokio::time::timeout(100 ms, rx)` on a oneshot receiver whose sender is
//!   kept but never used.
//!
//! For each request the task records its lateness: the `Instant` at which it resumed after
//! the await, minus its start plus 100 ms. Both kinds promise never to be early, so every
//! figure is at least 0. Requests started in the first second (the initial burst) are not
//! recorded. The example prints, per variant, the percentiles (p50, p90, p99, p99.9, max)
//! and the mean of both kinds, in milliseconds, and ackwheel's over tokio's.
//!
//! The variants (all by default, or those named on the command line):
//!
//! - `idle`: no busy tasks; [`AsyncAcker::track`] (reaper thread), default resolution
//!   (`build_async`'s: 2^18 ns, about 262 µs).
//! - `saturated`: 6 busy tasks; [`AsyncAcker::track`], default resolution.
//! - `saturated-1ms`: as `saturated`, with `.resolution(1 ms)` (2^20 ns once rounded to a
//!   power of two of nanoseconds, `build`'s default).
//! - `saturated-thread-cb`: a plain [`Acker`] with its reaper thread (`build`), whose
//!   `on_complete` stamps the time and sends it on the tree's oneshot (its payload): the
//!   same expiry path as `track`'s, with the firing time visible, so the lateness splits
//!   into *fired* (callback time minus start plus 100 ms: tick rounding and the reaper's
//!   wake-up) and *resumed* (task resumed minus callback time: the runtime's wake-up).
//! - `saturated-task-cb`: as `saturated-thread-cb`, but `build_manual` with expiry driven
//!   by [`ackwheel::future::spawn_expiry`], a task on the same runtime, in place of the
//!   reaper thread. (`spawn_expiry` cannot serve an [`AsyncAcker`]: `build_async` always
//!   starts a reaper thread, and `spawn_expiry` on an acker that has one returns a task that
//!   ends at once.)
//! - `saturated-task-cb-250us`: as `saturated-task-cb`, with `.resolution(250 µs)` (2^18
//!   ns once rounded).
//!
//! Run: `cargo run --release --features tokio --example saturated_timeouts` (10 s per
//! variant). A number among the arguments sets the seconds per variant, other arguments
//! pick variants, e.g. `... --example saturated_timeouts -- 3 idle saturated`. The
//! environment variables `SATURATED_SECS`, `SATURATED_REQUESTS` (concurrent requests) and
//! `SATURATED_BUSY` (busy tasks in the saturated variants) set the same things.

use std::env;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackwheel::future::{spawn_expiry, AsyncAcker};
use ackwheel::{Acker, AckerBuilder, Outcome};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_millis(100);
/// Requests started this long after the beginning are recorded (the first wave starts all
/// at once).
const WARM_UP: Duration = Duration::from_secs(1);
/// A busy task's slice of work, between two yields.
const WORK_MICROS: (u64, u64) = (50, 200);

/// How the ackwheel half of the requests waits.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `AsyncAcker::track`, expiry on the reaper thread.
    Track,
    /// A plain acker's `on_complete` sending on a oneshot, expiry on the reaper thread.
    ThreadCallback,
    /// The same, expiry driven by `spawn_expiry` on the runtime.
    TaskCallback,
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    name: &'static str,
    saturated: bool,
    mode: Mode,
    /// `None`: the builder's default (2^18 ns for `build_async`, 2^20 ns for `build` and
    /// `build_manual`).
    resolution: Option<Duration>,
}

const DEFAULT_RESOLUTION: Option<Duration> = None;
const COARSE_RESOLUTION: Option<Duration> = Some(Duration::from_millis(1));
const FINE_RESOLUTION: Option<Duration> = Some(Duration::from_micros(250));

const VARIANTS: [Variant; 6] = [
    Variant {
        name: "idle",
        saturated: false,
        mode: Mode::Track,
        resolution: DEFAULT_RESOLUTION,
    },
    Variant {
        name: "saturated",
        saturated: true,
        mode: Mode::Track,
        resolution: DEFAULT_RESOLUTION,
    },
    Variant {
        name: "saturated-1ms",
        saturated: true,
        mode: Mode::Track,
        resolution: COARSE_RESOLUTION,
    },
    Variant {
        name: "saturated-thread-cb",
        saturated: true,
        mode: Mode::ThreadCallback,
        resolution: DEFAULT_RESOLUTION,
    },
    Variant {
        name: "saturated-task-cb",
        saturated: true,
        mode: Mode::TaskCallback,
        resolution: DEFAULT_RESOLUTION,
    },
    Variant {
        name: "saturated-task-cb-250us",
        saturated: true,
        mode: Mode::TaskCallback,
        resolution: FINE_RESOLUTION,
    },
];

/// The run's settings.
#[derive(Debug)]
struct Settings {
    run_for: Duration,
    requests: usize,
    busy: usize,
    variants: Vec<Variant>,
}

fn settings() -> Settings {
    let from_env = |name: &str| env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    let mut secs = from_env("SATURATED_SECS").unwrap_or(10.0);
    let requests = from_env("SATURATED_REQUESTS").map_or(800, |n| n as usize);
    let busy = from_env("SATURATED_BUSY").map_or(6, |n| n as usize);
    let mut variants = Vec::new();
    for arg in env::args().skip(1) {
        if let Ok(n) = arg.parse::<f64>() {
            secs = n;
        } else if let Some(v) = VARIANTS.iter().find(|v| v.name == arg) {
            variants.push(*v);
        } else {
            let names: Vec<_> = VARIANTS.iter().map(|v| v.name).collect();
            panic!("unknown argument {arg:?}: a number of seconds, or one of {names:?}");
        }
    }
    if variants.is_empty() {
        variants = VARIANTS.to_vec();
    }
    assert!(secs > 1.0, "run for more than the 1 s warm-up");
    Settings {
        run_for: Duration::from_secs_f64(secs),
        requests: requests.max(2),
        busy,
        variants,
    }
}

/// The ackwheel side of a run.
#[derive(Clone)]
enum Side {
    Tracked(AsyncAcker<()>),
    Callback(Acker<oneshot::Sender<Instant>>),
}

impl Side {
    /// Waits for a tree that times out; the time its completion was delivered, where
    /// visible.
    async fn time_out(&self, root: u64) -> Option<Instant> {
        match self {
            Side::Tracked(acker) => {
                let done = acker
                    .track(root, 1, ())
                    .expect("room for the tree")
                    .await
                    .expect("the acker is running");
                assert_eq!(done.outcome, Outcome::TimedOut);
                None
            }
            Side::Callback(acker) => {
                let (tx, rx) = oneshot::channel();
                acker.init(root, 1, tx).expect("room for the tree");
                Some(rx.await.expect("the tree completes"))
            }
        }
    }
}

/// Lateness figures of one kind, in nanoseconds.
#[derive(Default)]
struct Samples {
    ackwheel: Vec<i64>,
    tokio: Vec<i64>,
    /// Callback modes: the completion's delivery minus start plus the timeout.
    fired: Vec<i64>,
    /// Callback modes: the task's resumption minus the completion's delivery.
    resumed: Vec<i64>,
}

impl Samples {
    fn extend(&mut self, other: Samples) {
        self.ackwheel.extend(other.ackwheel);
        self.tokio.extend(other.tokio);
        self.fired.extend(other.fired);
        self.resumed.extend(other.resumed);
    }
}

fn signed_nanos(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => d.as_nanos() as i64,
        None => -(earlier.duration_since(later).as_nanos() as i64),
    }
}

/// One request task: alternates between the two kinds until `stop`.
async fn requests(
    side: Side,
    slot: u64,
    began: Instant,
    stop: Arc<AtomicBool>,
    roots: Arc<AtomicU64>,
) -> Samples {
    let mut samples = Samples::default();
    let mut ackwheel_turn = slot % 2 == 0;
    // Kept alive so that the tokio kind's receiver never resolves.
    let mut senders = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let due = start + TIMEOUT;
        let record = start >= began + WARM_UP;
        if ackwheel_turn {
            let root = roots.fetch_add(1, Ordering::Relaxed);
            let fired = side.time_out(root).await;
            let resumed = Instant::now();
            if record {
                samples.ackwheel.push(signed_nanos(resumed, due));
                if let Some(fired) = fired {
                    samples.fired.push(signed_nanos(fired, due));
                    samples.resumed.push(signed_nanos(resumed, fired));
                }
            }
        } else {
            let (tx, rx) = oneshot::channel::<()>();
            senders.push(tx);
            let waited = tokio::time::timeout(TIMEOUT, rx).await;
            let resumed = Instant::now();
            assert!(waited.is_err(), "the receiver never resolves");
            senders.clear();
            if record {
                samples.tokio.push(signed_nanos(resumed, due));
            }
        }
        ackwheel_turn = !ackwheel_turn;
    }
    samples
}

/// A CPU-bound task: 50-200 µs of spinning, then a yield, until `stop`. Returns its
/// slices.
async fn busy(seed: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut slices = 0;
    while !stop.load(Ordering::Relaxed) {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (low, high) = WORK_MICROS;
        let work = Duration::from_micros(low + x % (high - low + 1));
        let t = Instant::now();
        while t.elapsed() < work {
            std::hint::spin_loop();
        }
        slices += 1;
        tokio::task::yield_now().await;
    }
    slices
}

/// What one variant saw.
struct Report {
    samples: Samples,
    busy_slices: u64,
}

/// The builder with the variant's resolution, if it sets one.
fn resolution<T: Send + 'static>(builder: AckerBuilder<T>, variant: Variant) -> AckerBuilder<T> {
    match variant.resolution {
        Some(resolution) => builder.resolution(resolution),
        None => builder,
    }
}

async fn run_variant(variant: Variant, settings: &Settings) -> Report {
    let (side, async_acker, expiry) = match variant.mode {
        Mode::Track => {
            let (acker, _completions) = resolution(Acker::<()>::builder(), variant)
                .timeout(TIMEOUT)
                .build_async(1)
                .expect("valid settings");
            (Side::Tracked(acker.clone()), Some(acker), None)
        }
        Mode::ThreadCallback | Mode::TaskCallback => {
            let builder = resolution(Acker::<oneshot::Sender<Instant>>::builder(), variant)
                .timeout(TIMEOUT)
                .on_complete(|c| {
                    let _ = c.payload.send(Instant::now());
                });
            let acker = if matches!(variant.mode, Mode::TaskCallback) {
                builder.build_manual()
            } else {
                builder.build()
            }
            .expect("valid settings");
            let expiry = matches!(variant.mode, Mode::TaskCallback).then(|| spawn_expiry(&acker));
            (Side::Callback(acker), None, expiry)
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let roots = Arc::new(AtomicU64::new(1));
    let busy_tasks: Vec<_> = (0..if variant.saturated { settings.busy } else { 0 })
        .map(|i| tokio::spawn(busy(i as u64 + 1, Arc::clone(&stop))))
        .collect();
    let began = Instant::now();
    let request_tasks: Vec<_> = (0..settings.requests as u64)
        .map(|slot| {
            tokio::spawn(requests(
                side.clone(),
                slot,
                began,
                Arc::clone(&stop),
                Arc::clone(&roots),
            ))
        })
        .collect();
    tokio::time::sleep(settings.run_for).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Samples::default();
    for task in request_tasks {
        samples.extend(task.await.expect("a request task"));
    }
    let mut busy_slices = 0;
    for task in busy_tasks {
        busy_slices += task.await.expect("a busy task");
    }
    match side {
        Side::Tracked(_) => {
            let acker = async_acker.expect("the async acker");
            assert!(acker.shutdown().await.is_empty(), "every tree timed out");
        }
        Side::Callback(acker) => {
            let left = tokio::task::spawn_blocking(move || acker.shutdown().len())
                .await
                .expect("shutdown");
            assert_eq!(left, 0, "every tree timed out");
            if let Some(expiry) = expiry {
                expiry.await.expect("the expiry task");
            }
        }
    }
    Report {
        samples,
        busy_slices,
    }
}

/// `[p50, p90, p99, p99.9, max, mean]` in milliseconds.
fn summary(nanos: &mut [i64]) -> [f64; 6] {
    if nanos.is_empty() {
        return [f64::NAN; 6];
    }
    nanos.sort_unstable();
    let at = |q: f64| nanos[((q * nanos.len() as f64) as usize).min(nanos.len() - 1)] as f64;
    let mean = nanos.iter().map(|&n| n as f64).sum::<f64>() / nanos.len() as f64;
    [
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        *nanos.last().expect("not empty") as f64,
        mean,
    ]
    .map(|n| n / 1e6)
}

fn row(label: &str, n: usize, figures: [f64; 6]) {
    let cells: String = figures.iter().map(|f| format!(" {f:>8.3}")).collect();
    println!("  {label:<22} {n:>7}{cells}");
}

fn print(variant: Variant, settings: &Settings, mut report: Report) {
    println!(
        "{} ({}, {} requests, {:.0} s, resolution {}, busy slices {:.0}/s)",
        variant.name,
        if variant.saturated {
            format!("{} busy tasks", settings.busy)
        } else {
            "no busy tasks".to_owned()
        },
        settings.requests,
        settings.run_for.as_secs_f64(),
        variant
            .resolution
            .map_or_else(|| "the default".to_string(), |r| format!("{r:?}")),
        report.busy_slices as f64 / settings.run_for.as_secs_f64(),
    );
    println!(
        "  {:<22} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}   (ms late)",
        "", "n", "p50", "p90", "p99", "p99.9", "max", "mean"
    );
    let s = &mut report.samples;
    let ackwheel = summary(&mut s.ackwheel);
    let tokio = summary(&mut s.tokio);
    let label = match variant.mode {
        Mode::Track => "ackwheel track",
        Mode::ThreadCallback => "ackwheel cb (thread)",
        Mode::TaskCallback => "ackwheel cb (task)",
    };
    row(label, s.ackwheel.len(), ackwheel);
    row("tokio::time::timeout", s.tokio.len(), tokio);
    let ratio: String = ackwheel
        .iter()
        .zip(tokio)
        .map(|(a, t)| format!(" {:>8.2}", a / t))
        .collect();
    println!("  {:<22} {:>7}{ratio}", "ratio ackwheel/tokio", "");
    if !s.fired.is_empty() {
        row("  of which fired", s.fired.len(), summary(&mut s.fired));
        row(
            "  of which resumed",
            s.resumed.len(),
            summary(&mut s.resumed),
        );
    }
    println!();
}

fn main() {
    let settings = settings();
    for &variant in &settings.variants {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let report = runtime.block_on(run_variant(variant, &settings));
        drop(runtime);
        print(variant, &settings, report);
    }
}
