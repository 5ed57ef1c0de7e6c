//! The memory phase: what one pending root costs, and whether memory follows the roots
//! pending rather than the roots ever seen.
//!
//! An `Acker<u32>` is built with `max_pending = N` and filled with N roots (random ids,
//! `u32` payloads), then one reaper pass scans their groups and files them on its wheel;
//! the resident-set growth from before the build to that point, divided by the roots
//! actually pending, is the cost per pending root with everything included: the tables
//! (which grow with what is pending), the payloads and the reaper's timers. Every root is
//! then acked, the clock moves past the timeout and a pass reaps the stale timers, and a
//! second wave of N new roots does the same. The second wave's resident size must not
//! exceed the first's by much: roots that came and went must leave nothing behind.
//!
//! The acker runs in manual mode on a `ManualClock`: the same tables and wheel as with a
//! reaper thread, but the phase does not wait out real timeouts, and a slow machine cannot
//! make roots time out in the middle of a fill. A server's acker has a reaper thread,
//! though, so the phase then fills a second acker, with a reaper thread and the same
//! `ManualClock`, and reports its growth too: what a root costs a server. That one runs in
//! a child process (this binary, with [`THREADED_ENV`] set): what the allocator keeps of
//! the reaper thread's arena after the acker is dropped would otherwise stay in this
//! process's RSS and in the traffic phase's peak, and the child starts from a clean
//! baseline. RSS is coarse (pages, allocator arenas), which is why N is in the millions.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ackwheel::{Acker, ManualClock};
use serde::Serialize;

use crate::common::rss;

/// The roots' timeout (any length: the clock is manual).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The phase's figures (bytes).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Memory {
    pub(crate) max_pending: usize,
    /// Roots pending when the first wave's RSS was read.
    pub(crate) pending: usize,
    /// Inits refused (`Full`: the root's table had no room).
    pub(crate) refused: u64,
    pub(crate) rss_before: u64,
    /// Right after `build()`, before any init: the preallocated table.
    pub(crate) rss_built: u64,
    pub(crate) rss_full: u64,
    /// The second wave, at the same fill.
    pub(crate) rss_full_second: u64,
    /// At the first wave's fill, per pending root: the tables' current generations, their
    /// successors, retired generations, and the reaper's wheel (`Acker::memory_parts`).
    pub(crate) parts_per_root: [f64; 4],
    /// After both waves were acked and reaped.
    pub(crate) rss_drained: u64,
    /// After the acker was dropped.
    pub(crate) rss_dropped: u64,
    pub(crate) bytes_per_pending_root: f64,
    /// The same with a reaper thread (a single wave), `None` if it could not be measured.
    pub(crate) bytes_per_pending_root_threaded: Option<f64>,
    /// (second wave - first wave) / first wave's growth: memory left behind by roots that
    /// came and went.
    pub(crate) second_wave_growth: f64,
    pub(crate) seconds: f64,
}

/// Runs the phase with `roots` roots per wave. `None` when RSS cannot be read.
pub(crate) fn run(roots: usize, seed: u64) -> Result<Option<Memory>, String> {
    let start = Instant::now();
    let Some(rss_before) = rss::current() else {
        return Ok(None);
    };
    let clock = ManualClock::new(seed);
    let acker: Acker<u32> = Acker::builder()
        .max_pending(roots)
        .timeout(TIMEOUT)
        .clock(clock.clone())
        .build_manual()
        .map_err(|e| format!("building the memory-phase acker: {e}"))?;
    let rss_built = rss::current().unwrap_or(0);

    // The roots are a SplitMix64 sequence, regenerated to ack them rather than stored: a
    // list of them would add 8 B per root to the very RSS being measured.
    let wave = |from: u64| -> HashSet<u64> {
        let mut refused = HashSet::new();
        let mut next = from;
        for i in 0..roots {
            let root = splitmix(&mut next);
            if acker.init(root, root | 1, i as u32).is_err() {
                refused.insert(root);
            }
        }
        // One pass at the same instant: nothing is due, each dirty group goes on the wheel.
        acker.expire();
        refused
    };
    let drain = |from: u64, refused: &HashSet<u64>| -> Result<(), String> {
        let mut next = from;
        for _ in 0..roots {
            let root = splitmix(&mut next);
            if !refused.contains(&root) {
                acker.ack(root, root | 1);
            }
        }
        // Past every deadline: the pass reaps the stale timers of the acked roots.
        clock.advance(TIMEOUT + Duration::from_secs(1));
        acker.expire();
        match acker.pending() {
            0 => Ok(()),
            n => Err(format!(
                "memory phase: {n} entries pending after every root was acked"
            )),
        }
    };

    let (first, second) = (splitmix(&mut (seed ^ 1)), splitmix(&mut (seed ^ 2)));
    let refused = wave(first);
    let pending = acker.pending();
    let rss_full = rss::current().unwrap_or(0);
    let parts = acker.memory_parts();
    drain(first, &refused)?;
    let refused_second = wave(second);
    let rss_full_second = rss::current().unwrap_or(0);
    drain(second, &refused_second)?;
    let rss_drained = rss::current().unwrap_or(0);
    drop(acker);
    let rss_dropped = rss::current().unwrap_or(0);
    let threaded = threaded_in_child(roots, seed)?;

    let grown = rss_full.saturating_sub(rss_before);
    Ok(Some(Memory {
        max_pending: roots,
        pending,
        refused: refused.len() as u64,
        rss_before,
        rss_built,
        rss_full,
        rss_full_second,
        rss_drained,
        rss_dropped,
        bytes_per_pending_root: grown as f64 / pending.max(1) as f64,
        bytes_per_pending_root_threaded: threaded,
        second_wave_growth: (rss_full_second as f64 - rss_full as f64) / grown.max(1) as f64,
        seconds: start.elapsed().as_secs_f64(),
        parts_per_root: parts.map(|b| b as f64 / pending.max(1) as f64),
    }))
}

/// Set (to `roots,seed`) in the child process that measures the acker with a reaper thread.
pub(crate) const THREADED_ENV: &str = "ACKWHEEL_STRESS_MEMORY_THREADED";

/// Runs [`threaded_bytes_per_root`] in a child process (module docs) and reads its figure.
fn threaded_in_child(roots: usize, seed: u64) -> Result<Option<f64>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("memory phase: {e}"))?;
    let out = std::process::Command::new(exe)
        .env(THREADED_ENV, format!("{roots},{seed}"))
        .output()
        .map_err(|e| format!("memory phase: cannot start the threaded measurement: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "memory phase: the threaded measurement failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    match text.trim() {
        "unavailable" => Ok(None),
        figure => figure
            .parse()
            .map(Some)
            .map_err(|e| format!("memory phase: the threaded measurement printed {figure:?}: {e}")),
    }
}

/// The child process's whole job: `spec` is `roots,seed`; prints the figure (or
/// `unavailable`) and exits 0, or explains on stderr and exits 1.
pub(crate) fn threaded_child(spec: &str) -> std::process::ExitCode {
    let parsed = spec
        .split_once(',')
        .and_then(|(roots, seed)| Some((roots.parse().ok()?, seed.parse().ok()?)));
    let Some((roots, seed)) = parsed else {
        eprintln!("{THREADED_ENV}: expected `roots,seed`, got {spec:?}");
        return std::process::ExitCode::FAILURE;
    };
    match threaded_bytes_per_root(roots, seed) {
        Ok(Some(bytes)) => println!("{bytes}"),
        Ok(None) => println!("unavailable"),
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    std::process::ExitCode::SUCCESS
}

/// One wave into an acker with a reaper thread: RSS growth per pending root once the reaper
/// has filed every root's group on its wheel. The clock stays put, so nothing is due and
/// no scan of the dirty groups either: a last root with a 1 ns timeout makes the scan due
/// by its deadline, and once the clock moves 10 ms the pass that times it out scans every
/// dirty group and files it.
fn threaded_bytes_per_root(roots: usize, seed: u64) -> Result<Option<f64>, String> {
    let Some(rss_before) = rss::current() else {
        return Ok(None);
    };
    let clock = ManualClock::new(seed);
    let acker: Acker<u32> = Acker::builder()
        .max_pending(roots + 1)
        .timeout(TIMEOUT)
        .clock(clock.clone())
        .build()
        .map_err(|e| format!("building the threaded memory-phase acker: {e}"))?;
    let mut next = splitmix(&mut (seed ^ 3));
    for i in 0..roots {
        let root = splitmix(&mut next);
        // A refusal leaves the root out of the count (pending), nothing more.
        let _ = acker.init(root, root | 1, i as u32);
    }
    acker
        .init_with_timeout(splitmix(&mut next), 1, 0, Duration::from_nanos(1))
        .map_err(|e| format!("memory phase: the wake-up root was refused: {e}"))?;
    // Several of the wheels' ~1 ms ticks, so that the root's tick has surely passed.
    clock.advance(Duration::from_millis(10));
    let waited = Instant::now();
    let pending = loop {
        let pending = acker.pending();
        if pending <= roots && acker.covered_roots() >= pending {
            break pending;
        }
        if waited.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "memory phase: the reaper thread covered {} roots of {pending} in 30 s",
                acker.covered_roots()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let grown = rss::current().unwrap_or(0).saturating_sub(rss_before);
    acker.shutdown();
    Ok(Some(grown as f64 / pending.max(1) as f64))
}

/// SplitMix64: distinct, well-spread roots from a seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
