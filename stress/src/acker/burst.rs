//! The burst phase: memory as a server sees it, on the plain and the async paths.
//!
//! Each path runs in a fresh child process (this binary, with [`BURST_ENV`] set), so that
//! its baseline is clean and what the allocator keeps of one path is not charged to the
//! next. A child builds a default acker with the real clock, a reaper thread and a timeout
//! of 600 s (nothing times out during the phase), reads RSS (the *baseline*), starts
//! `roots` trees from one thread and reads RSS once every tree is covered (its group dirty,
//! or filed on the reaper's wheel by a move of the growth: the *fill*, bytes per pending
//! tree), then completes every tree and samples RSS every 50 ms for 3 s: how long until it
//! is back within 2 MiB of the baseline, and how far above it it still is after 2 s. A
//! server's memory should follow what is pending, not what a burst left behind for a whole
//! timeout.
//!
//! The paths:
//!
//! * **plain**: `Acker<u32>` (`build`), `init`, then one `ack` per tree. The fill also
//!   reads RSS at each power of two of trees pending from 64k (once they are covered):
//!   memory per tree as pending grows, tables growing with it.
//! * **full**: the same with `max_pending` set to the burst's size: an acker filled to its
//!   bound.
//! * **track**: `AsyncAcker<u32>` (`build_async`) on a current-thread tokio runtime,
//!   `track` per tree (its `TreeCompletion` kept in a vector written before the baseline,
//!   as a server's tasks would hold them), then one `ack` per tree and every future
//!   awaited. Everything the crate allocates per request is in the figure: the
//!   tables, the timers and the waiter.
//! * **dashmap**: the peer a tokio user would write instead, in the same way:
//!   `DashMap<u64, (u64, oneshot::Sender<Outcome>)>` (default hasher), an insert and a
//!   oneshot per request, its receiver kept in a vector written before the baseline (its
//!   `tokio::time::timeout` would live in the request's future, as a `TreeCompletion`
//!   does), then each ack XORed in under the shard's lock, the entry removed and the
//!   outcome sent at 0, and every receiver awaited. No timer, so the peer's figure is a
//!   floor for it.

use std::time::{Duration, Instant};

use ackwheel::Acker;
use serde::{Deserialize, Serialize};

use crate::common::rss;

/// Set (to `path,roots`) in the child process that measures one path.
pub(crate) const BURST_ENV: &str = "ACKWHEEL_STRESS_BURST";

/// The trees' timeout: far longer than the phase, so that only completions free them.
const TIMEOUT: Duration = Duration::from_secs(600);

/// How long RSS is watched after the burst has completed.
const WATCH: Duration = Duration::from_secs(3);

/// How close to the baseline counts as back.
pub(crate) const BACK_WITHIN: u64 = 2 << 20;

/// One path's figures (bytes, seconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Burst {
    pub(crate) path: String,
    pub(crate) roots: usize,
    /// RSS growth at the fill per pending tree.
    pub(crate) bytes_per_tree: f64,
    /// The fill's duration.
    pub(crate) fill_seconds: f64,
    /// RSS above the baseline 2 s after the last completion.
    pub(crate) held_after_2s: u64,
    /// Seconds from the last completion until RSS was back within [`BACK_WITHIN`] of the
    /// baseline; `None` if it was not within the watch.
    pub(crate) back_after: Option<f64>,
    /// What the acker itself held at the fill and at the end of the watch
    /// (`Acker::memory_parts`): its tables (every generation) and the reaper's wheel.
    pub(crate) tables_full: u64,
    pub(crate) wheel_full: u64,
    pub(crate) tables_after: u64,
    pub(crate) wheel_after: u64,
    /// RSS growth per pending tree at each power of two from 64k during the fill, and at
    /// its end (each read once every pending tree is covered): `(trees pending, bytes per
    /// tree, of which tables, of which the reaper's wheel)`. Plain paths only.
    pub(crate) curve: Vec<(usize, f64, f64, f64)>,
    /// The acker's `max_pending`.
    pub(crate) max_pending: usize,
}

/// The first pending count at which the fill's curve is read.
const CURVE_FROM: usize = 1 << 16;

/// What the burst reads of an acker, plain or async.
trait Figures {
    fn pending(&self) -> usize;
    fn covered_roots(&self) -> usize;
    fn memory_parts(&self) -> [usize; 4];
}

impl<T: Send + 'static> Figures for Acker<T> {
    fn pending(&self) -> usize {
        Acker::pending(self)
    }
    fn covered_roots(&self) -> usize {
        Acker::covered_roots(self)
    }
    fn memory_parts(&self) -> [usize; 4] {
        Acker::memory_parts(self)
    }
}

impl<T: Send + 'static> Figures for ackwheel::future::AsyncAcker<T> {
    fn pending(&self) -> usize {
        ackwheel::future::AsyncAcker::pending(self)
    }
    fn covered_roots(&self) -> usize {
        ackwheel::future::AsyncAcker::covered_roots(self)
    }
    fn memory_parts(&self) -> [usize; 4] {
        ackwheel::future::AsyncAcker::memory_parts(self)
    }
}

/// The acker's tables (every generation) and wheel, in bytes.
fn parts(acker: &impl Figures) -> (u64, u64) {
    let [current, successors, retired, wheel] = acker.memory_parts();
    ((current + successors + retired) as u64, wheel as u64)
}

/// Runs both paths, each in a child process. `None` for a path whose RSS is unreadable.
pub(crate) fn run(roots: usize) -> Result<Vec<Burst>, String> {
    let mut out = Vec::new();
    for path in ["plain", "full", "track", "dashmap"] {
        let exe = std::env::current_exe().map_err(|e| format!("burst phase: {e}"))?;
        let child = std::process::Command::new(exe)
            .env(BURST_ENV, format!("{path},{roots}"))
            .output()
            .map_err(|e| format!("burst phase: cannot start the {path} child: {e}"))?;
        if !child.status.success() {
            return Err(format!(
                "burst phase: the {path} child failed ({}): {}",
                child.status,
                String::from_utf8_lossy(&child.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&child.stdout);
        if text.trim() == "unavailable" {
            continue;
        }
        out.push(
            serde_json::from_str(text.trim())
                .map_err(|e| format!("burst phase: the {path} child printed {text:?}: {e}"))?,
        );
    }
    Ok(out)
}

/// The child process's whole job: `spec` is `path,roots`; prints the figures as JSON (or
/// `unavailable`) and exits 0, or explains on stderr and exits 1.
pub(crate) fn burst_child(spec: &str) -> std::process::ExitCode {
    let parsed = spec
        .split_once(',')
        .and_then(|(path, roots)| Some((path, roots.parse().ok()?)));
    let result = match parsed {
        Some(("plain", roots)) => plain(roots, DEFAULT_MAX_PENDING),
        Some(("full", roots)) => plain(roots, roots),
        Some(("track", roots)) => track(roots),
        Some(("dashmap", roots)) => dashmap_oneshot(roots),
        _ => Err(format!(
            "{BURST_ENV}: expected `plain|full|track|dashmap,roots`, got {spec:?}"
        )),
    };
    match result {
        Ok(Some(burst)) => match serde_json::to_string(&burst) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("burst phase: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        Ok(None) => println!("unavailable"),
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    std::process::ExitCode::SUCCESS
}

/// The `i`th tree's root and edge.
fn tree(i: usize) -> (u64, u64) {
    let root = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (root, root | 1)
}

/// Waits until every pending tree is covered: its group dirty with a scan due by its
/// deadline, or filed on the reaper's wheel (RSS then includes what covers them).
fn filed(acker: &impl Figures) -> Result<(), String> {
    let waited = Instant::now();
    while acker.covered_roots() < acker.pending() {
        if waited.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "burst phase: the reaper covered {} of {} trees in 30 s",
                acker.covered_roots(),
                acker.pending()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Samples RSS after the burst (module docs).
fn watch(baseline: u64) -> (u64, Option<f64>) {
    let done = Instant::now();
    let mut back_after = None;
    let mut held_after_2s = None;
    while done.elapsed() < WATCH {
        let now = rss::current().unwrap_or(0);
        let held = now.saturating_sub(baseline);
        if back_after.is_none() && held <= BACK_WITHIN {
            back_after = Some(done.elapsed().as_secs_f64());
        }
        if held_after_2s.is_none() && done.elapsed() >= Duration::from_secs(2) {
            held_after_2s = Some(held);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = rss::current().unwrap_or(0).saturating_sub(baseline);
    (held_after_2s.unwrap_or(held), back_after)
}

/// The builder's default `max_pending`.
const DEFAULT_MAX_PENDING: usize = 1 << 20;

/// `init` and `ack` on an `Acker<u32>` with `max_pending`: the default one (`plain`), or
/// one whose bound is the burst itself (`full`: the acker filled to its brim).
fn plain(roots: usize, max_pending: usize) -> Result<Option<Burst>, String> {
    let acker: Acker<u32> = Acker::builder()
        .timeout(TIMEOUT)
        .max_pending(max_pending)
        .build()
        .map_err(|e| format!("burst phase: {e}"))?;
    let Some(baseline) = rss::current() else {
        return Ok(None);
    };
    let mut fill_seconds = 0.0;
    let mut curve = Vec::new();
    let points = std::iter::successors(Some(CURVE_FROM), |p| p.checked_mul(2))
        .take_while(|&p| p < roots)
        .chain([roots]);
    let mut done = 0;
    for next in points {
        let started = Instant::now();
        for i in done..next {
            let (root, edge) = tree(i);
            acker
                .init(root, edge, i as u32)
                .map_err(|e| format!("burst phase: init {i} refused: {e}"))?;
        }
        fill_seconds += started.elapsed().as_secs_f64();
        done = next;
        // Not counted in the fill's time: the reaper files the groups it moves meanwhile.
        filed(&acker)?;
        let rss = rss::current().unwrap_or(0);
        let (tables, wheel) = parts(&acker);
        let per = |bytes: u64| bytes as f64 / done as f64;
        curve.push((
            done,
            per(rss.saturating_sub(baseline)),
            per(tables),
            per(wheel),
        ));
    }
    let full = rss::current().unwrap_or(0);
    let (tables_full, wheel_full) = parts(&acker);
    for i in 0..roots {
        let (root, edge) = tree(i);
        if !acker.ack(root, edge) {
            return Err(format!(
                "burst phase: the ack of tree {i} completed nothing"
            ));
        }
    }
    let (held_after_2s, back_after) = watch(baseline);
    let (tables_after, wheel_after) = parts(&acker);
    acker.shutdown();
    Ok(Some(Burst {
        tables_full,
        wheel_full,
        tables_after,
        wheel_after,
        path: if max_pending == roots {
            "full"
        } else {
            "plain"
        }
        .into(),
        roots,
        bytes_per_tree: full.saturating_sub(baseline) as f64 / roots as f64,
        fill_seconds,
        held_after_2s,
        back_after,
        curve,
        max_pending,
    }))
}

/// The async paths' runtime: one thread, as the fill and the acks are one task's.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("burst phase: a tokio runtime: {e}"))
}

fn track(roots: usize) -> Result<Option<Burst>, String> {
    runtime()?.block_on(async {
        let (acker, _completions) = Acker::<u32>::builder()
            .timeout(TIMEOUT)
            .build_async(1024)
            .map_err(|e| format!("burst phase: {e}"))?;
        // The server's own memory for its requests, written before the baseline so that
        // its pages are not charged to the acker.
        let mut waiting: Vec<Option<ackwheel::future::TreeCompletion<u32>>> =
            (0..roots).map(|_| None).collect();
        let Some(baseline) = rss::current() else {
            return Ok(None);
        };
        let started = Instant::now();
        for (i, slot) in waiting.iter_mut().enumerate() {
            let (root, edge) = tree(i);
            let tree = acker
                .track(root, edge, i as u32)
                .map_err(|e| format!("burst phase: track {i} refused: {e}"))?;
            *slot = Some(tree);
        }
        let fill_seconds = started.elapsed().as_secs_f64();
        filed(&acker)?;
        let full = rss::current().unwrap_or(0);
        let (tables_full, wheel_full) = parts(&acker);
        for i in 0..roots {
            let (root, edge) = tree(i);
            acker.ack(root, edge);
        }
        for (i, tree) in waiting.iter_mut().enumerate() {
            let Some(tree) = tree.take() else {
                return Err(format!("burst phase: tree {i} was not tracked"));
            };
            let done = tree
                .await
                .map_err(|e| format!("burst phase: tree {i}: {e}"))?;
            if done.outcome != ackwheel::Outcome::Acked {
                return Err(format!("burst phase: tree {i} {:?}", done.outcome));
            }
        }
        let (held_after_2s, back_after) = watch(baseline);
        let (tables_after, wheel_after) = parts(&acker);
        acker.shutdown().await;
        Ok(Some(Burst {
            tables_full,
            wheel_full,
            tables_after,
            wheel_after,
            path: "track".into(),
            roots,
            bytes_per_tree: full.saturating_sub(baseline) as f64 / roots as f64,
            fill_seconds,
            held_after_2s,
            back_after,
            curve: Vec::new(),
            max_pending: DEFAULT_MAX_PENDING,
        }))
    })
}

/// The hand-written peer (module docs): a DashMap of XORs and oneshot senders.
fn dashmap_oneshot(roots: usize) -> Result<Option<Burst>, String> {
    use ackwheel::Outcome;
    use tokio::sync::oneshot;
    runtime()?.block_on(async {
        let map: dashmap::DashMap<u64, (u64, oneshot::Sender<Outcome>)> = dashmap::DashMap::new();
        let mut waiting: Vec<Option<oneshot::Receiver<Outcome>>> =
            (0..roots).map(|_| None).collect();
        let Some(baseline) = rss::current() else {
            return Ok(None);
        };
        let started = Instant::now();
        for (i, slot) in waiting.iter_mut().enumerate() {
            let (root, edge) = tree(i);
            let (tx, rx) = oneshot::channel();
            map.insert(root, (edge, tx));
            *slot = Some(rx);
        }
        let fill_seconds = started.elapsed().as_secs_f64();
        let full = rss::current().unwrap_or(0);
        for i in 0..roots {
            let (root, edge) = tree(i);
            let done = map.get_mut(&root).is_some_and(|mut e| {
                e.0 ^= edge;
                e.0 == 0
            });
            if let Some((_, (_, tx))) = done.then(|| map.remove(&root)).flatten() {
                let _ = tx.send(Outcome::Acked);
            }
        }
        for (i, rx) in waiting.iter_mut().enumerate() {
            let outcome = match rx.take() {
                Some(rx) => rx
                    .await
                    .map_err(|e| format!("burst phase: request {i}: {e}"))?,
                None => return Err(format!("burst phase: request {i} was not started")),
            };
            if outcome != Outcome::Acked {
                return Err(format!("burst phase: request {i} {outcome:?}"));
            }
        }
        let (held_after_2s, back_after) = watch(baseline);
        drop(map);
        Ok(Some(Burst {
            tables_full: 0,
            wheel_full: 0,
            tables_after: 0,
            wheel_after: 0,
            path: "dashmap".into(),
            roots,
            bytes_per_tree: full.saturating_sub(baseline) as f64 / roots as f64,
            fill_seconds,
            held_after_2s,
            back_after,
            curve: Vec::new(),
            max_pending: 0,
        }))
    })
}
