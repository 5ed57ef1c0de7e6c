//! The expiry-queue scenario: ZooKeeper's session tracking. Many touching threads keep
//! sessions alive; one expirer thread sleeps `wait_time()` and polls; every session must
//! expire exactly once, never before its deadline.
//!
//! ## Sessions
//!
//! Each touching thread owns its sessions, so the latest deadline the queue gave for a
//! session is known without a lock: a session is created with `update`, touched with
//! `touch` (ZooKeeper's `touchSession`: it never resurrects an expired one) on its own
//! period, and after a random number of touches it is abandoned (left to expire) or, now
//! and then, closed with `remove`. Most periods are well inside the timeout; one session in
//! ten is touched about one timeout apart, so touches race the expirer near the deadline.
//!
//! ## The oracle
//!
//! * `update` / `touch` returning `Some(d)`: `d` is on the bucket grid after
//!   `now + timeout` (checked against readings before and after the call); it becomes the
//!   session's deadline.
//! * `touch` / `remove` returning `None`: the expirer took the session, which is legal
//!   only if the call returned after the deadline.
//! * `remove` returning `Some(d)`: `d` must be the deadline last given; the session must
//!   never be expired.
//! * The expirer records each session it is handed with its reading after `poll`; a
//!   second hand-out is a violation, and so is one before the session's deadline.
//! * After the drain, every session not removed was expired exactly once, and the queue
//!   is empty (no element, no bucket set).
//!
//! Lateness is the expirer's reading after `poll` minus the session's deadline.
//!
//! This file runs the scenario and reports; the touchers and the expirer are in
//! [`threads`].

mod threads;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::{ExpiryQueue, MonotonicClock};
use crossbeam_utils::CachePadded;
use serde::Serialize;

use crate::common::report::{self, Percentiles, Progress, Sample};
use crate::common::{rss, split_seed};
use threads::{expirer, toucher, End};

/// The scenario's knobs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Config {
    pub(crate) threads: usize,
    pub(crate) duration_s: f64,
    pub(crate) timeout_ms: u64,
    pub(crate) sessions_per_thread: usize,
    pub(crate) seed: u64,
}

/// What the run did and found.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) config: Option<Config>,
    pub(crate) seconds: f64,
    pub(crate) interval_ms: f64,
    pub(crate) sessions: u64,
    pub(crate) touches: u64,
    pub(crate) touches_per_s: f64,
    pub(crate) expired: u64,
    pub(crate) removed: u64,
    /// touch/remove calls that found the session already expired (legal after its deadline).
    pub(crate) found_expired: u64,
    pub(crate) violations: u64,
    pub(crate) violation_reports: Vec<String>,
    /// Expirer's reading after poll - the session's deadline.
    pub(crate) lateness: Percentiles,
    pub(crate) peak_rss: Option<u64>,
    pub(crate) throughput: Vec<Sample>,
    #[serde(skip)]
    pub(crate) lateness_curve: Vec<(f64, f64)>,
}

/// What a toucher needs to know about the shared state.
struct Shared {
    queue: ExpiryQueue<u64>,
    clock: MonotonicClock,
    timeout: Duration,
    interval: u64,
    stop: AtomicBool,
    touches: Vec<CachePadded<AtomicU64>>,
    expired: AtomicU64,
}

/// Runs the scenario.
pub(crate) fn run(cfg: &Config) -> Summary {
    let timeout = Duration::from_millis(cfg.timeout_ms.max(2));
    // Twenty buckets per timeout, as a ZooKeeper tick is to a session timeout.
    let interval = (timeout / 20).max(Duration::from_micros(100));
    let shared = Arc::new(Shared {
        queue: ExpiryQueue::new(interval).expect("a valid interval"),
        clock: MonotonicClock::new(),
        timeout,
        interval: interval.as_nanos() as u64,
        stop: AtomicBool::new(false),
        touches: (0..cfg.threads)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
        expired: AtomicU64::new(0),
    });
    let expirer_stop = Arc::new(AtomicBool::new(false));
    rss::reset_peak();
    let barrier = Arc::new(Barrier::new(cfg.threads + 2));
    let touchers: Vec<_> = (0..cfg.threads)
        .map(|i| {
            let shared = Arc::clone(&shared);
            let barrier = Arc::clone(&barrier);
            let seed = split_seed(cfg.seed, 2000 + i as u64);
            let per_thread = cfg.sessions_per_thread;
            thread::Builder::new()
                .name(format!("toucher-{i}"))
                .spawn(move || {
                    barrier.wait();
                    toucher(&shared, i, seed, per_thread)
                })
                .expect("spawn a toucher")
        })
        .collect();
    let expirer = {
        let shared = Arc::clone(&shared);
        let barrier = Arc::clone(&barrier);
        let stop = Arc::clone(&expirer_stop);
        thread::Builder::new()
            .name("expirer".into())
            .spawn(move || {
                barrier.wait();
                expirer(&shared, &stop)
            })
            .expect("spawn the expirer")
    };
    barrier.wait();
    let start = Instant::now();
    let duration = Duration::from_secs_f64(cfg.duration_s);
    let mut progress = Progress::new(duration);
    let mut summary = Summary {
        config: Some(cfg.clone()),
        interval_ms: interval.as_secs_f64() * 1e3,
        ..Summary::default()
    };
    let sum_touches =
        |s: &Shared| -> u64 { s.touches.iter().map(|t| t.load(Ordering::Relaxed)).sum() };
    let mut last = (Instant::now(), 0u64, 0u64);
    while start.elapsed() < duration {
        thread::sleep(
            progress
                .period()
                .min(duration.saturating_sub(start.elapsed())),
        );
        let touches = sum_touches(&shared);
        let expired = shared.expired.load(Ordering::Relaxed);
        if last.0.elapsed() >= Duration::from_millis(500) {
            let dt = last.0.elapsed().as_secs_f64();
            summary.throughput.push(Sample {
                t: start.elapsed().as_secs_f64(),
                rate: (touches - last.1) as f64 / dt,
                rate2: (expired - last.2) as f64 / dt,
            });
            last = (Instant::now(), touches, expired);
        }
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        progress.update(&format!(
            "touches {} ({}/s)  expired {}  in queue {}",
            report::si(touches as f64),
            report::si(touches as f64 / secs),
            report::si(expired as f64),
            report::si(shared.queue.len() as f64),
        ));
    }
    shared.stop.store(true, Ordering::SeqCst);
    summary.seconds = start.elapsed().as_secs_f64();
    summary.touches = sum_touches(&shared);
    summary.touches_per_s = summary.touches as f64 / summary.seconds;

    let mut results = Vec::new();
    for t in touchers {
        match t.join() {
            Ok(r) => results.push(r),
            Err(_) => summary
                .violation_reports
                .push("VIOLATION: a toucher thread panicked".into()),
        }
    }
    // Drain: every open session expires within a timeout and a couple of buckets.
    let limit = Instant::now() + timeout + 4 * interval + Duration::from_secs(2);
    while !shared.queue.is_empty() && Instant::now() < limit {
        progress.update(&format!(
            "draining: {} sessions in the queue",
            shared.queue.len()
        ));
        thread::sleep(Duration::from_millis(10));
    }
    progress.finish();
    expirer_stop.store(true, Ordering::SeqCst);
    let (expired, problems) = expirer.join().unwrap_or_else(|_| {
        (
            HashMap::new(),
            vec!["the expirer thread panicked".to_string()],
        )
    });
    summary.peak_rss = rss::peak();

    // Judge every session.
    let mut problems: Vec<String> = problems;
    let mut lateness = report::histogram();
    let mut expected_expiries = 0u64;
    for r in &results {
        problems.extend(r.problems.iter().cloned());
        summary.found_expired += r.found_expired;
        for s in &r.sessions {
            summary.sessions += 1;
            match (s.end, expired.get(&s.id)) {
                (End::Removed, None) => summary.removed += 1,
                (End::Removed, Some(&at)) => problems.push(format!(
                    "session {:#x} was removed (remove returned its deadline) yet expired at {}",
                    s.id, at
                )),
                (End::Open, None) => problems.push(format!(
                    "session {:#x} (deadline {}) never expired",
                    s.id, s.deadline
                )),
                (End::Open, Some(&at)) => {
                    expected_expiries += 1;
                    if (at.wrapping_sub(s.deadline) as i64) < 0 {
                        problems.push(format!(
                            "session {:#x} expired {:.3} ms before its deadline",
                            s.id,
                            s.deadline.wrapping_sub(at) as f64 / 1e6
                        ));
                    } else {
                        lateness.saturating_record(at.wrapping_sub(s.deadline).max(1));
                    }
                }
            }
        }
    }
    summary.expired = expired.len() as u64;
    if summary.expired != expected_expiries {
        problems.push(format!(
            "{} sessions expired, {} were expected to (an unknown session was handed out?)",
            summary.expired, expected_expiries
        ));
    }
    if !shared.queue.is_empty() || shared.queue.bucket_count() != 0 {
        problems.push(format!(
            "after the drain the queue still holds {} sessions in {} bucket sets",
            shared.queue.len(),
            shared.queue.bucket_count()
        ));
    }
    summary.violations = problems.len() as u64;
    summary.violation_reports.extend(
        problems
            .into_iter()
            .take(20)
            .map(|p| format!("VIOLATION: {p}")),
    );
    summary.violations = summary
        .violations
        .max(summary.violation_reports.len() as u64);
    summary.lateness = Percentiles::of(&lateness);
    summary.lateness_curve = report::percentile_curve(&lateness);
    summary
}

/// Prints the summary.
pub(crate) fn print(s: &Summary) {
    let Some(cfg) = &s.config else { return };
    println!(
        "expiry-queue: {:.1} s, seed {}, {} touching threads + 1 expirer, {} sessions per thread, timeout {} ms, buckets of {:.1} ms",
        s.seconds, cfg.seed, cfg.threads, cfg.sessions_per_thread, cfg.timeout_ms, s.interval_ms
    );
    println!(
        "  touches      {}: {} touches/s",
        report::si(s.touches as f64),
        report::si(s.touches_per_s)
    );
    println!(
        "  sessions     {} in all: {} expired exactly once, {} removed, {} found expired by touch/remove",
        report::si(s.sessions as f64),
        report::si(s.expired as f64),
        report::si(s.removed as f64),
        s.found_expired
    );
    println!("  violations   {}", s.violations);
    println!("  expiry lateness     {}", s.lateness.line());
    println!(
        "  peak RSS     {}",
        s.peak_rss.map_or("unavailable".into(), report::bytes)
    );
    for r in &s.violation_reports {
        println!("{r}");
    }
}
