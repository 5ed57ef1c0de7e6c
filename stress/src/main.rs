//! The ackwheel stress harness: long randomized runs on every core, each checked against a
//! reference model, ending in `PASS` or `FAIL: <details>` (exit code 1).
//!
//! ```text
//! cargo run --release -p stress                 # the default scenario (wheel, for now)
//! cargo run --release -p stress -- wheel --seed 7 --ops 5000000 --duration 10
//! ```
//!
//! Each scenario lives in its own module and exposes one function that runs a single worker
//! thread to completion; this file owns the command line, the threads (started together
//! behind a `Barrier`), the shared stop flag and the report. A scenario added later
//! (`acker`, `expiry-queue`) is one more `Scenario` variant and one more module; `all` runs
//! them in turn.

mod wheel;

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};

/// Randomized multi-core stress runs of ackwheel, checked against reference models.
#[derive(Debug, Parser)]
#[command(name = "stress", version, about)]
struct Cli {
    /// Which scenario to run.
    #[arg(value_enum, default_value_t = Scenario::Wheel)]
    scenario: Scenario,

    /// Seed of every random choice; each thread derives its own from it. Random (and
    /// printed, so a failure can be replayed) when absent.
    #[arg(long)]
    seed: Option<u64>,

    /// Total operations over all threads.
    #[arg(long, default_value_t = 30_000_000)]
    ops: u64,

    /// Stop after this many seconds even if `--ops` is not reached.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,

    /// Worker threads [default: available parallelism].
    #[arg(long)]
    threads: Option<NonZeroUsize>,
}

/// The scenarios, each a module of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Single-owner TimerWheels (one per thread), random schedule / reschedule / cancel /
    /// advance against a model, over several clock origins (0, near 2^63, near u64::MAX).
    Wheel,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Wheel => "wheel",
        }
    }
}

/// What one worker thread is allowed to do, and how it learns to stop early.
#[derive(Debug)]
pub(crate) struct Limits {
    /// This thread's share of `--ops`.
    pub(crate) ops: u64,
    /// `--duration`, as an instant.
    pub(crate) until: Option<Instant>,
    /// Set by the first thread that fails, so the others stop soon.
    pub(crate) stop: Arc<AtomicBool>,
}

impl Limits {
    /// `true` once the run should end. Cheap enough to call every few thousand operations.
    pub(crate) fn expired(&self) -> bool {
        // Relaxed: the flag carries no data; a failing thread's report travels by join().
        self.stop.load(Ordering::Relaxed) || self.until.is_some_and(|t| Instant::now() >= t)
    }
}

/// What one worker thread did.
#[derive(Debug, Default)]
pub(crate) struct ThreadReport {
    /// Operations performed (every call on the structure under test counts one).
    pub(crate) ops: u64,
    /// Scenario-specific counters, printed after the rate (e.g. "3.1M fired, 12 wheels").
    pub(crate) detail: String,
    /// The first model mismatch, with what is needed to replay it.
    pub(crate) failure: Option<String>,
    /// This thread's own run time (set by the runner).
    pub(crate) elapsed: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = cli
        .threads
        .or_else(|| thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let seed = cli.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
    });
    let until = match cli.duration {
        Some(s) if s.is_finite() && s >= 0.0 => Some(Instant::now() + Duration::from_secs_f64(s)),
        Some(s) => {
            eprintln!("stress: --duration must be a non-negative number of seconds, got {s}");
            return ExitCode::from(2);
        }
        None => None,
    };
    println!(
        "stress: scenario {}, seed {seed}, {threads} threads, {} ops{}",
        cli.scenario.name(),
        cli.ops,
        cli.duration
            .map_or(String::new(), |s| format!(", at most {s} s")),
    );

    let (reports, elapsed) = run_threads(cli.scenario, seed, cli.ops, threads, until);

    let mut total = 0;
    let mut failures = Vec::new();
    for (index, report) in reports.iter().enumerate() {
        total += report.ops;
        println!(
            "  thread {index}: {} ops, {} ({})",
            report.ops,
            rate(report.ops, report.elapsed),
            report.detail
        );
        if let Some(failure) = &report.failure {
            failures.push(format!("thread {index}: {failure}"));
        }
    }
    println!(
        "  total: {total} ops in {:.2} s, {}",
        elapsed.as_secs_f64(),
        rate(total, elapsed)
    );
    if failures.is_empty() {
        println!("PASS");
        ExitCode::SUCCESS
    } else {
        println!("FAIL: {}", failures.join("; "));
        println!("replay: cargo run --release -p stress -- {} --seed {seed} --threads {threads} --ops {}", cli.scenario.name(), cli.ops);
        std::process::exit(1);
    }
}

/// Runs `threads` workers of `scenario`, started together, and returns their reports and
/// the wall time from the start signal to the last join.
fn run_threads(
    scenario: Scenario,
    seed: u64,
    ops: u64,
    threads: usize,
    until: Option<Instant>,
) -> (Vec<ThreadReport>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|index| {
            let share = ops / threads as u64 + u64::from((index as u64) < ops % threads as u64);
            let limits = Limits {
                ops: share,
                until,
                stop: Arc::clone(&stop),
            };
            let barrier = Arc::clone(&barrier);
            let thread_seed = split_seed(seed, index as u64);
            thread::Builder::new()
                .name(format!("stress-{index}"))
                .spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut report = match scenario {
                        Scenario::Wheel => wheel::run(thread_seed, &limits),
                    };
                    report.elapsed = start.elapsed();
                    if report.failure.is_some() {
                        limits.stop.store(true, Ordering::Relaxed);
                    }
                    report
                })
                .expect("spawn a stress thread")
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let reports = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|panic| {
                stop.store(true, Ordering::Relaxed);
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("non-string panic payload");
                ThreadReport {
                    failure: Some(format!("panicked: {message}")),
                    ..ThreadReport::default()
                }
            })
        })
        .collect();
    (reports, start.elapsed())
}

/// Thread `index`'s seed: a SplitMix64 step of `seed` and the index, so neighbouring seeds
/// and threads get unrelated streams.
fn split_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rate(ops: u64, elapsed: Duration) -> String {
    let per_second = ops as f64 / elapsed.as_secs_f64().max(1e-9);
    format!("{:.2} M ops/s", per_second / 1e6)
}
