//! Who pays for a fill: one thread inits a million trees into an empty [`Acker`] (its
//! tables grow all the way, as in the bench's `fill/1t/1M-from-empty`), and the program
//! prints the fill's wall time a tree and each thread's CPU time a tree over the same
//! stretch: the filler's and the reaper thread's (`ackwheel-reaper`), which builds and
//! moves the growing tables meanwhile, filing the groups it moves on its wheel. A fill goes
//! no faster than the busier of the two.
//!
//! `one` inits one call at a time, `batched` through one `Acker::init_each` over the
//! million (lines fetched ahead). CPU times come from `/proc/self/task` (Linux);
//! elsewhere only the wall time is printed.
//!
//! Run: `cargo run --release --example fill_threads -- [one|batched] [trees]`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ackwheel::Acker;

/// A bijective mix (splitmix64's finalizer): distinct, spread roots.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Each thread of this process: its name and its CPU time so far, in nanoseconds.
fn thread_times() -> Option<Vec<(String, f64)>> {
    // USER_HZ, the unit of `utime` and `stime`: 100 on every Linux target.
    const TICK_NS: f64 = 1e9 / 100.0;
    let mut times = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // The fields after the name in parentheses: `utime` and `stime` are the 12th and
        // 13th of them.
        let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        times.push((name.trim().to_string(), ticks * TICK_NS));
    }
    Some(times)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "one".into());
    let trees: u64 = match args.next().map(|n| n.parse()) {
        None => 1_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: fill_threads [one|batched] [trees > 0]");
            return ExitCode::FAILURE;
        }
    };
    if mode != "one" && mode != "batched" {
        eprintln!("usage: fill_threads [one|batched] [trees > 0]");
        return ExitCode::FAILURE;
    }
    let acker = match Acker::<u32>::builder()
        .timeout(Duration::from_secs(3600))
        .max_pending(trees as usize)
        .build()
    {
        Ok(acker) => acker,
        Err(e) => {
            eprintln!("fill_threads: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tree = |i: u64| (mix(i), mix(i ^ 0xabc) | 1, i as u32);
    let mut refused = 0u64;
    let before = thread_times();
    let started = Instant::now();
    if mode == "batched" {
        acker.init_each((0..trees).map(tree), |_, result| {
            refused += u64::from(result.is_err());
        });
    } else {
        for i in 0..trees {
            let (root, xor, payload) = tree(i);
            refused += u64::from(acker.init(root, xor, payload).is_err());
        }
    }
    let wall = started.elapsed();
    let after = thread_times();
    if refused > 0 {
        eprintln!("fill_threads: {refused} inits refused");
        return ExitCode::FAILURE;
    }
    let per_tree = |ns: f64| ns / trees as f64;
    let mut line = format!(
        "{mode}: {trees} trees, {:.1} ns a tree",
        per_tree(wall.as_nanos() as f64)
    );
    if let (Some(before), Some(after)) = (before, after) {
        line += "; CPU a tree:";
        for (name, ns) in &after {
            let was = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |&(_, t)| t);
            if ns - was > 0.0 {
                line += &format!(" {name} {:.0} ns", per_tree(ns - was));
            }
        }
    }
    println!("{line}");
    // Not dropped: dropping a million trees' acker is not part of what is measured.
    std::process::exit(0);
}
