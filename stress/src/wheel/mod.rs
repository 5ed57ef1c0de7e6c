//! The wheel scenario: one single-owner `TimerWheel` per thread, driven by random schedule /
//! reschedule / cancel / advance and checked after every operation against a model.
//!
//! A thread runs a sequence of *episodes*, each a fresh wheel with its own clock origin
//! (0, just below 2^63, just below `u64::MAX` so it wraps within the episode, or anywhere),
//! its own resolution (1 ns to 2^43 ns) and its own population cap (64 to 100k timers).
//!
//! ## The model
//!
//! Time in the model is *unwrapped*: a `u128` that starts at 2^64 and only grows, so "due"
//! is a plain `<=`. The wheel sees `origin + t` truncated to 64 bits. Live timers sit in a
//! slab (`entries`, with a dense `live` list for random picks) and in a `BTreeSet` ordered
//! by unwrapped deadline, so "is anything due left?" is one `first()`.
//!
//! ## What is checked
//!
//! * every yielded timer was scheduled, is yielded once, carries its key, deadline and
//!   value, and is due at the advance's `now` (both unwrapped and by the API's wrapping rule
//!   `(now - deadline) as i64 >= 0`);
//! * an advance into a later finest tick that is drained to the end leaves no due timer
//!   behind (the wheel's promise: at most one resolution late);
//! * an advance backwards yields nothing and keeps the wheel's time;
//! * `len`, `deadline`, `get`, `get_mut` agree with the model; stale keys (cancelled or
//!   fired) are refused by `cancel`, `reschedule`, `deadline` and `get`;
//! * `next_expiration_delay` is `None` exactly when empty, else at least 1 and never past
//!   the end of the earliest deadline's tick;
//! * at the end of each episode, `iter()` and `iter().rev()` list exactly the model's
//!   timers, in mirrored order.
//!
//! This file runs the threads and reports; each thread's episodes are in [`episode`], the
//! reference they are checked against in [`model`].

mod episode;
mod model;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::common::split_seed;

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

/// The wheel scenario's figures (its part of `--json`).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) ops: u64,
    pub(crate) seconds: f64,
    pub(crate) ops_per_s: f64,
    pub(crate) per_thread_mops: Vec<f64>,
    pub(crate) failures: Vec<String>,
}

pub(crate) fn run(seed: u64, ops: u64, threads: usize, seconds: f64) -> Summary {
    let until = Some(Instant::now() + Duration::from_secs_f64(seconds));
    println!("wheel: {threads} threads, {ops} ops, at most {seconds:.1} s, seed {seed}");
    let (reports, elapsed) = run_threads(seed, ops, threads, until);
    let mut summary = Summary {
        seconds: elapsed.as_secs_f64(),
        ..Summary::default()
    };
    for (index, report) in reports.iter().enumerate() {
        summary.ops += report.ops;
        let mops = report.ops as f64 / report.elapsed.as_secs_f64().max(1e-9) / 1e6;
        summary.per_thread_mops.push(mops);
        println!(
            "  thread {index}: {} ops, {mops:.2} M ops/s ({})",
            report.ops, report.detail
        );
        if let Some(failure) = &report.failure {
            summary.failures.push(format!("thread {index}: {failure}"));
        }
    }
    summary.ops_per_s = summary.ops as f64 / summary.seconds.max(1e-9);
    println!(
        "  total: {} ops in {:.2} s, {:.2} M ops/s",
        summary.ops,
        summary.seconds,
        summary.ops_per_s / 1e6
    );
    println!("  violations   {}", summary.failures.len());
    for failure in &summary.failures {
        println!("VIOLATION: {failure}");
    }
    summary
}

/// Runs `threads` wheel workers, started together, and returns their reports and the wall
/// time from the start signal to the last join.
fn run_threads(
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
                    let mut report = episode::run(thread_seed, &limits);
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
