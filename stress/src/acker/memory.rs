//! The memory phase: what one pending root costs, and whether memory follows the roots
//! pending rather than the roots ever seen.
//!
//! A fresh `Acker<u32>` is built with `max_pending = N` and filled with N roots (random ids,
//! `u32` payloads); the resident-set growth from before the build to the full acker, divided
//! by the roots actually pending, is the cost per pending root, everything included: the
//! ledger's slots (preallocated for `max_pending`), the payloads, and the reaper's wheel
//! timers. Every root is then acked, the phase waits out the timeout (so the wheels' stale
//! timers for the acked roots fire and their slots are reclaimed), and a second wave of N
//! new roots does the same. The second wave's resident size must not exceed the first's by
//! much: roots that came and went must leave nothing behind.
//!
//! RSS is coarse (pages, allocator arenas), which is why N is in the millions.

use std::time::{Duration, Instant};

use ackwheel::Acker;
use serde::Serialize;

use crate::rss;

/// How long a root may stay pending in this phase: longer than a wave's fill on a slow
/// machine, short enough to wait out between waves.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The phase's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Memory {
    pub(crate) max_pending: usize,
    /// Roots pending when the first wave's RSS was read.
    pub(crate) pending: usize,
    /// Inits refused (`Full`: the root's ledger bucket was full).
    pub(crate) refused: u64,
    pub(crate) rss_before: u64,
    /// Right after `build()`, before any init: the preallocated table.
    pub(crate) rss_built: u64,
    pub(crate) rss_full: u64,
    /// The second wave, at the same fill.
    pub(crate) rss_full_second: u64,
    /// After both waves drained.
    pub(crate) rss_drained: u64,
    pub(crate) bytes_per_pending_root: f64,
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
    let acker: Acker<u32> = Acker::builder()
        .max_pending(roots)
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| format!("building the memory-phase acker: {e}"))?;
    let rss_built = rss::current().unwrap_or(0);

    let mut next = seed;
    let mut wave = |acker: &Acker<u32>| -> (Vec<u64>, u64, Instant) {
        let began = Instant::now();
        let mut ok = Vec::with_capacity(roots);
        let mut refused = 0;
        for i in 0..roots {
            let root = splitmix(&mut next);
            match acker.init(root, root | 1, i as u32) {
                Ok(()) => ok.push(root),
                Err(_) => refused += 1,
            }
        }
        (ok, refused, began)
    };
    let drain = |acker: &Acker<u32>, roots: Vec<u64>, began: Instant| -> Result<(), String> {
        for root in roots {
            acker.ack(root, root | 1);
        }
        // Past every deadline of the wave, plus slack for the reaper to reclaim.
        let until = began + TIMEOUT + Duration::from_millis(300);
        while Instant::now() < until || acker.pending() != 0 {
            if Instant::now() > until + Duration::from_secs(10) {
                return Err(format!(
                    "memory phase: {} roots still pending 10 s after the timeout",
                    acker.pending()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    };

    let (first, refused, began) = wave(&acker);
    let pending = acker.pending();
    let rss_full = rss::current().unwrap_or(0);
    drain(&acker, first, began)?;
    let (second, _, began) = wave(&acker);
    let rss_full_second = rss::current().unwrap_or(0);
    drain(&acker, second, began)?;
    let rss_drained = rss::current().unwrap_or(0);
    drop(acker);

    let grown = rss_full.saturating_sub(rss_before);
    Ok(Some(Memory {
        max_pending: roots,
        pending,
        refused,
        rss_before,
        rss_built,
        rss_full,
        rss_full_second,
        rss_drained,
        bytes_per_pending_root: grown as f64 / pending.max(1) as f64,
        second_wave_growth: (rss_full_second as f64 - rss_full as f64) / grown.max(1) as f64,
        seconds: start.elapsed().as_secs_f64(),
    }))
}

/// SplitMix64: distinct, well-spread roots from a seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
