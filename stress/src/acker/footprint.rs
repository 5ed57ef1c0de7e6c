//! Two more figures of the memory phase: what an acker costs before its first tree, and
//! what it costs at a steady trickle of trees.
//!
//! - **Build cost**: the RSS growth and wall time of `Acker::<u32>::builder().build()`,
//!   default settings and reaper thread, before any tree: the price of an acker that is
//!   built and then sits idle (one per topology, per test, per tenant). It is the median of
//!   [`BUILD_SAMPLES`] processes that build one acker each, and then one process that
//!   builds `--ackers-at-once` of them (10 by default), one after another, all alive at the
//!   end (total RSS growth and total time of the `build()` calls).
//! - **Churn**: an acker with `max_pending(1 << 20)` (otherwise default: reaper thread,
//!   real `MonotonicClock`, 30 s timeout) through which `--churn-trees` trees (2M by
//!   default) pass, about [`CHURN_IN_FLIGHT`] at a time: each is initialized, acked once
//!   halfway along the window (the root tuple's ack, anchoring one child) and acked again
//!   at its end (the child's ack, which completes it). The figure is the peak RSS (`VmHWM`)
//!   over the baseline before the build: what a server with a generous `max_pending` and
//!   little traffic pays. The RSS right after the build is reported beside it: what is
//!   there before the first tree, which must not depend on `max_pending`.
//!
//! Each of these is measured in a fresh child process (this binary, with [`FOOTPRINT_ENV`]
//! set), like the threaded fill of [`memory`](super::memory): by the time they run, this
//! process has built and dropped the memory phase's million-root acker, and what the
//! allocator kept of it (arenas, freed pages not returned to the kernel) would be reused
//! by the next build and hide its cost, or, with a peak, add to it. A fresh process starts
//! from a clean baseline of a few MiB, and its peak covers nothing but the measurement.
//!
//! The targets ([`BUILD_TARGET_RSS`], [`BUILD_TARGET_SECONDS`], [`CHURN_TARGET_RSS`]) say
//! that nothing is allocated for `max_pending` up front. They are printed beside the
//! figures and never fail the run; a child that cannot measure, or a churned tree that
//! does not complete, does. RSS figures are steady from run to run; the times are
//! wall-clock times of one call, and on a shared machine they vary several-fold.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use ackwheel::{Acker, InitError};
use serde::{Deserialize, Serialize};

use crate::common::rss;

/// Set in a child process to what it measures: `build,N` (N default ackers) or
/// `churn,TREES`.
pub(crate) const FOOTPRINT_ENV: &str = "ACKWHEEL_STRESS_FOOTPRINT";

/// Processes that build one acker each; the median is the figure (an odd count).
pub(crate) const BUILD_SAMPLES: usize = 3;
/// The churning acker's `max_pending`.
pub(crate) const CHURN_MAX_PENDING: usize = 1 << 20;
/// Trees in flight during the churn (a power of two: the window is indexed by masking).
pub(crate) const CHURN_IN_FLIGHT: usize = 1 << 10;

/// The build and churn targets (the project's memory targets for an acker before and
/// around its first trees), reported, not enforced.
pub(crate) const BUILD_TARGET_RSS: u64 = 2 << 20;
pub(crate) const BUILD_TARGET_SECONDS: f64 = 0.002;
pub(crate) const CHURN_TARGET_RSS: u64 = 4 << 20;

/// How long after `build()` returns the RSS is read: the reaper thread has then started,
/// found nothing scheduled and parked, and what it touched on the way counts (it is part
/// of what an idle acker costs).
const SETTLE: Duration = Duration::from_millis(50);

/// Both figures; written to the JSON report under `acker.footprint`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Footprint {
    pub(crate) build: Build,
    /// `None` with `--churn-trees 0`.
    pub(crate) churn: Option<Churn>,
    pub(crate) seconds: f64,
}

/// The build cost (bytes, seconds).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Build {
    /// Median over [`BUILD_SAMPLES`] fresh processes of one default acker's RSS growth
    /// (read [`SETTLE`] after `build()` returned).
    pub(crate) rss_growth: u64,
    /// Median wall time of `build()` over the same processes.
    pub(crate) seconds: f64,
    /// Every sample, for the spread.
    pub(crate) rss_growth_samples: Vec<u64>,
    pub(crate) seconds_samples: Vec<f64>,
    /// `--ackers-at-once` default ackers in one fresh process, all alive at the end: total
    /// RSS growth and total time of the builds.
    pub(crate) ackers_at_once: usize,
    pub(crate) rss_growth_at_once: u64,
    pub(crate) seconds_at_once: f64,
    pub(crate) target_rss: u64,
    pub(crate) target_seconds: f64,
}

/// The churn's figures (bytes), as the child measured them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Churn {
    pub(crate) trees: u64,
    pub(crate) in_flight: usize,
    pub(crate) max_pending: usize,
    /// Peak RSS (`VmHWM`) over the baseline before the build: the figure.
    pub(crate) peak_rss_growth: u64,
    /// RSS growth right after `build()`, before the first tree.
    pub(crate) built_rss_growth: u64,
    /// RSS growth once every slot has been freed again (`pending()` back to 0).
    pub(crate) end_rss_growth: u64,
    /// Inits refused `Full` (and retried): tombstones of completed trees awaiting a lagging
    /// reaper took the room. Not a failure here; the traffic phase judges refusals.
    pub(crate) refused: u64,
    /// The churn itself, without the build and the final wait for the reaper.
    pub(crate) seconds: f64,
    pub(crate) trees_per_s: f64,
    pub(crate) target_rss: u64,
}

/// What one build child measured.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct BuildSample {
    rss_growth: u64,
    seconds: f64,
}

/// Runs both measurements, each in fresh child processes (module docs): the build cost
/// with `ackers_at_once` ackers for its second figure, the churn with `churn_trees` trees
/// (0 skips it). `None` when RSS cannot be read.
pub(crate) fn run(churn_trees: u64, ackers_at_once: usize) -> Result<Option<Footprint>, String> {
    let start = Instant::now();
    let mut singles = Vec::with_capacity(BUILD_SAMPLES);
    for _ in 0..BUILD_SAMPLES {
        match in_child::<BuildSample>("build,1")? {
            Some(sample) => singles.push(sample),
            None => return Ok(None),
        }
    }
    let Some(at_once) = in_child::<BuildSample>(&format!("build,{ackers_at_once}"))? else {
        return Ok(None);
    };
    let churn = match churn_trees {
        0 => None,
        trees => match in_child::<Churn>(&format!("churn,{trees}"))? {
            Some(churn) => Some(churn),
            None => return Ok(None),
        },
    };
    let mut rss: Vec<u64> = singles.iter().map(|s| s.rss_growth).collect();
    let mut seconds: Vec<f64> = singles.iter().map(|s| s.seconds).collect();
    let rss_growth_samples = rss.clone();
    let seconds_samples = seconds.clone();
    rss.sort_unstable();
    seconds.sort_unstable_by(f64::total_cmp);
    Ok(Some(Footprint {
        build: Build {
            rss_growth: rss[rss.len() / 2],
            seconds: seconds[seconds.len() / 2],
            rss_growth_samples,
            seconds_samples,
            ackers_at_once,
            rss_growth_at_once: at_once.rss_growth,
            seconds_at_once: at_once.seconds,
            target_rss: BUILD_TARGET_RSS,
            target_seconds: BUILD_TARGET_SECONDS,
        },
        churn,
        seconds: start.elapsed().as_secs_f64(),
    }))
}

/// Runs this binary with [`FOOTPRINT_ENV`] = `spec` and decodes what it printed (JSON;
/// `null` when the child could not read its RSS).
fn in_child<M: for<'de> Deserialize<'de>>(spec: &str) -> Result<Option<M>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("footprint ({spec}): {e}"))?;
    let out = Command::new(exe)
        .env(FOOTPRINT_ENV, spec)
        .output()
        .map_err(|e| format!("footprint ({spec}): cannot start the child process: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "footprint ({spec}): the child process failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "footprint ({spec}): the child printed {:?}: {e}",
            text.trim()
        )
    })
}

/// The child process's whole job: measures what `spec` names, prints it as JSON (`null`
/// when RSS cannot be read) and exits 0, or explains on stderr and exits 1.
pub(crate) fn footprint_child(spec: &str) -> ExitCode {
    let printed = match spec.split_once(',') {
        Some(("build", n)) => match n.parse() {
            Ok(n) => build_in_this_process(n).and_then(|m| to_json(&m)),
            Err(e) => Err(format!("{FOOTPRINT_ENV}: bad acker count {n:?}: {e}")),
        },
        Some(("churn", trees)) => match trees.parse() {
            Ok(trees) => churn_in_this_process(trees).and_then(|m| to_json(&m)),
            Err(e) => Err(format!("{FOOTPRINT_ENV}: bad tree count {trees:?}: {e}")),
        },
        _ => Err(format!(
            "{FOOTPRINT_ENV}: expected `build,N` or `churn,TREES`, got {spec:?}"
        )),
    };
    match printed {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn to_json<M: Serialize>(m: &M) -> Result<String, String> {
    serde_json::to_string(m).map_err(|e| format!("encoding the measurement: {e}"))
}

/// Builds `n` default ackers one after another and keeps them all: RSS growth (after
/// [`SETTLE`]) and the total time of the `build()` calls.
fn build_in_this_process(n: usize) -> Result<Option<BuildSample>, String> {
    let Some(before) = rss::current() else {
        return Ok(None);
    };
    let mut ackers: Vec<Acker<u32>> = Vec::with_capacity(n);
    let mut spent = Duration::ZERO;
    for _ in 0..n {
        // Only the call is timed: the Vec push and the clock readings are not the acker's.
        let start = Instant::now();
        let acker = Acker::<u32>::builder().build();
        spent += start.elapsed();
        ackers.push(acker.map_err(|e| format!("building a default acker: {e}"))?);
    }
    std::thread::sleep(SETTLE);
    let after = rss::current().unwrap_or(0);
    for acker in &ackers {
        acker.shutdown();
    }
    Ok(Some(BuildSample {
        rss_growth: after.saturating_sub(before),
        seconds: spent.as_secs_f64(),
    }))
}

/// The churn (module docs). Tree `i`'s root and edges are functions of `i`, recomputed when
/// they are acked rather than stored, and the window is a counter: the harness itself adds
/// nothing to the RSS being measured.
fn churn_in_this_process(trees: u64) -> Result<Option<Churn>, String> {
    let Some(before) = rss::current() else {
        return Ok(None);
    };
    // A fresh process's peak is already little more than `before`; resetting it (where the
    // kernel allows) leaves only what follows.
    rss::reset_peak();
    let acker: Acker<u32> = Acker::builder()
        .max_pending(CHURN_MAX_PENDING)
        .build()
        .map_err(|e| format!("building the churn acker: {e}"))?;
    let built = rss::current().unwrap_or(0);
    let window = CHURN_IN_FLIGHT as u64;
    let mut refused = 0u64;
    let start = Instant::now();
    // Step i starts tree i, sends the first ack of tree i - window/2 and the last of tree
    // i - window: `window` trees in flight, every one completed by its last ack.
    for i in 0..trees + window {
        if i < trees {
            let (root, first, _) = tree(i);
            let mut refused_since = None;
            loop {
                match acker.init(root, first, i as u32) {
                    Ok(()) => break,
                    Err(InitError::Full(_)) => {
                        // The init already waited 100 ms for the reaper to free tombstones;
                        // the figure is memory, so wait longer rather than lose a tree.
                        refused += 1;
                        let since = *refused_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(10) {
                            return Err(format!(
                                "churn: tree {i} refused Full for 10 s with {} pending of max_pending {CHURN_MAX_PENDING}",
                                acker.pending()
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(format!("churn: init of tree {i} refused: {e}")),
                }
            }
        }
        if let Some(j) = i.checked_sub(window / 2).filter(|&j| j < trees) {
            let (root, first, last) = tree(j);
            if acker.ack(root, first ^ last) {
                return Err(format!("churn: tree {j} completed by its first ack"));
            }
        }
        if let Some(j) = i.checked_sub(window) {
            let (root, _, last) = tree(j);
            if !acker.ack(root, last) {
                return Err(format!(
                    "churn: tree {j}'s last ack did not complete it ({} pending)",
                    acker.pending()
                ));
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // The reaper frees the last trees' slots after a grace period: wait for it, so that the
    // end figure says whether churned trees leave anything behind.
    let waited = Instant::now();
    while acker.pending() > 0 && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let end = rss::current().unwrap_or(0);
    let peak = rss::peak().unwrap_or(0).max(end);
    acker.shutdown();
    Ok(Some(Churn {
        trees,
        in_flight: CHURN_IN_FLIGHT,
        max_pending: CHURN_MAX_PENDING,
        peak_rss_growth: peak.saturating_sub(before),
        built_rss_growth: built.saturating_sub(before),
        end_rss_growth: end.saturating_sub(before),
        refused,
        seconds,
        trees_per_s: trees as f64 / seconds.max(1e-9),
        target_rss: CHURN_TARGET_RSS,
    }))
}

/// Tree `i`: its root and its two edges (the root tuple's, then its one child's), all
/// nonzero and distinct, so that the value is 0 only after the last ack.
pub(super) fn tree(i: u64) -> (u64, u64, u64) {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let root = z ^ (z >> 31);
    let first = root | 1;
    let last = (root.rotate_left(32) & !1) | 2;
    (root, first, last)
}
