//! What a pending root costs in memory, the Acker beside the peers of `benches/acker.rs`,
//! each filled from empty in a fresh process.
//!
//! For each pending count (64k, 256k, 1M, 4M) and each tracker, a child process (this
//! binary, with [`CHILD_ENV`] set) reads its resident set (`VmRSS`), builds the tracker as
//! the acker bench does (`Tracker::build`: the Acker with its reaper thread and a
//! `max_pending` of at least twice the count, the peers unbounded), inits that many trees
//! of four edges with a `u32` payload and a timeout of an hour, one at a time, and reads
//! its resident set again right after the fill (the Acker's migrations may still be under
//! way: its old and new tables both held) and 2 s later (settled: the reaper has finished
//! and freed them). The figures are those growths over the count: bytes per pending root,
//! everything included (tables, payloads, timers, the allocator's slack). A fresh process
//! per figure keeps what one tracker's allocator kept from counting against the next.
//!
//! Run: `cargo bench --bench memory` (a minute or two; `-- 1000000` for one count). The
//! last column is the Acker's settled figure over the map+wheel peer's, the one a user
//! would build instead (the target: at most 0.67).

#[allow(dead_code)] // the acker bench uses the rest of the peers
mod peers;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Acker, Completion};

use peers::dash::DashTracker;
use peers::dash_wheel::DashWheelTracker;
use peers::storm::StormAcker;
use peers::Tracker;

/// Set in a child process to `tracker,count`: it measures that one and prints its line.
const CHILD_ENV: &str = "ACKWHEEL_MEMORY_CHILD";

/// The pending counts measured by default.
const COUNTS: [usize; 4] = [1 << 16, 1 << 18, 1_000_000, 4_000_000];

/// The trackers, by the acker bench's names.
const TRACKERS: [&str; 4] = ["ackwheel", "dashmap+wheel", "storm_port", "dashmap"];

/// How long after the fill the settled figure is read.
const SETTLE: Duration = Duration::from_secs(2);

/// A timeout no tree reaches while it is measured.
const TIMEOUT: Duration = Duration::from_secs(3600);

/// The acker bench's bijective mix (splitmix64's finalizer): distinct, random-looking roots.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// This process's resident set, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// The child: fills one tracker and prints `tracker count after_fill settled` (bytes per
/// root).
fn measure<T: Tracker>(name: &str, count: usize) {
    let sink: peers::Sink = Arc::new(|c: Completion<u32>| {
        std::hint::black_box(c);
    });
    let before = rss();
    let tracker = T::build(TIMEOUT, count, sink);
    for i in 0..count as u64 {
        // Four edges' XOR: never 0, so no tree completes.
        let xor = mix(i ^ 0x5eed) | 1;
        tracker
            .init(mix((13 << 56) + i), xor, i as u32)
            .unwrap_or_else(|e| panic!("{name}: init refused at {i}: {e}"));
    }
    let filled = rss();
    std::thread::sleep(SETTLE);
    let settled = rss();
    let per = |after: u64| after.saturating_sub(before) as f64 / count as f64;
    println!("{name} {count} {:.1} {:.1}", per(filled), per(settled));
    drop(tracker);
}

fn child(spec: &str) {
    let (name, count) = spec.split_once(',').expect("tracker,count");
    let count: usize = count.parse().expect("a count");
    match name {
        "ackwheel" => measure::<Acker<u32>>(name, count),
        "dashmap+wheel" => measure::<DashWheelTracker>(name, count),
        "storm_port" => measure::<StormAcker>(name, count),
        "dashmap" => measure::<DashTracker>(name, count),
        other => panic!("no tracker {other}"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    // Criterion's and cargo's own arguments are ignored; a number picks one count.
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        COUNTS.to_vec()
    } else {
        counts
    };
    let exe = std::env::current_exe().expect("this binary");
    println!(
        "bytes per pending root (RSS growth / count), right after a fill from empty and {} s later",
        SETTLE.as_secs()
    );
    println!(
        "  {:>9}  {:<14} {:>10} {:>9}",
        "pending", "tracker", "after fill", "settled"
    );
    for count in counts {
        let mut settled = Vec::new();
        for name in TRACKERS {
            let out = Command::new(&exe)
                .env(CHILD_ENV, format!("{name},{count}"))
                .output()
                .expect("a child process");
            assert!(
                out.status.success(),
                "{name} at {count}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8_lossy(&out.stdout);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, _, filled, after] = fields[..] else {
                panic!("{name} at {count}: printed {line:?}");
            };
            let after: f64 = after.parse().expect("bytes");
            println!("  {count:>9}  {name:<14} {filled:>10} {after:>9.1}");
            settled.push(after);
        }
        println!(
            "  {count:>9}  ackwheel settled / dashmap+wheel settled: {:.2}",
            settled[0] / settled[1]
        );
    }
}
