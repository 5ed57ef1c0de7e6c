//! The Acker against the designs it replaces, on the Storm tree lifecycle, each group holding
//! every contender side by side:
//!
//! * `ackwheel` — this crate's [`Acker`] with its defaults and the real reaper thread;
//! * `storm_port` — Storm's acker: one `Mutex` around a 3-bucket rotating map of
//!   `AckObject`s, rotated by a ticker thread every timeout / 2 ([`peers::storm`]);
//! * `dashmap` — `DashMap<u64, Entry>` with one `entry()` per operation and a sweeper
//!   thread ([`peers::dash`]);
//! * `dashmap+wheel` — the peer a user builds when that sweep costs too much: the same map
//!   with a per-shard `Mutex<TimerWheel>` (schedule at the first message, cancel at
//!   completion, advanced by a ticker thread every millisecond: [`peers::dash_wheel`]);
//! * `scc` — `scc::HashMap<u64, Entry>` (one array of small bucket-locked hash tables, no
//!   shards) with the same one `entry_sync()` per operation and sweeper ([`peers::scc_map`]);
//! * `moka` — `moka::sync::Cache` with `time_to_live`, an eviction listener and
//!   `and_compute_with` ([`peers::moka_cache`]).
//!
//! Before measuring, `semantics` runs the same scenario on every contender (acks before
//! init, fail before init, Acked winning over a held fail, a lost ack timing out, an orphan
//! expiring silently, a duplicate init) and panics on any difference, so the peers are
//! checked to do the Acker's job, not a cheaper one.
//!
//! ## Workload: the Storm tree lifecycle
//!
//! A tree is `init(root, e0 ^ e1 ^ e2 ^ e3, payload)` and then four acks `e0`..`e3`, the last
//! of which brings the value to 0 and completes it `Acked` through `on_complete` on the
//! acking thread. Roots are a bijective mix of a counter (distinct, random-looking); edges
//! come from a seeded random table, checked so that no tree completes before its last ack.
//!
//! One iteration (one step) inits tree `i` and acks one edge of each of trees `i - 256`,
//! `i - 512`, `i - 768` and `i - 1024` (the last edge of the oldest). So every tree is in
//! flight for 1024 steps, ~1024 trees are pending at any time, and one step is exactly one
//! tree's worth of work: 5 operations. Criterion's time is per tree (Throughput: 1 element =
//! 1 tree); the per-operation cost is that time / 5. Each criterion sample fills the window
//! (untimed), times N steps and then sends the acks still owed (untimed), so no tree is left
//! in flight between samples (where it could time out) and every tree is checked.
//!
//! Groups:
//!
//! 1. `lifecycle/1t/1k-inflight` — one thread, the sliding window above.
//! 2. `lifecycle/1t/1M-pending` — the same, with 1,000,000 other roots initialized
//!    beforehand (never acked, 1 h timeout) so the tables are large and cold.
//! 3. `lifecycle/2t/1k-inflight` — two threads with distinct roots, each with its own window;
//!    the wall clock for N trees shared between both (persistent workers, released by
//!    barriers, claiming steps in chunks of 256 so they finish together), so the time is per
//!    tree in aggregate and group 1 / group 3 is the 1 -> 2 thread scaling.
//! 4. `ack/1t/64k-pending` and 5. `ack/1t/1M-pending` — the common ack alone: 65,536 or
//!    1,000,000 roots held pending (1 h timeout, an init value no ack can cancel), acked one
//!    per iteration in a fixed random order; criterion's time is per ack. The Acker's table
//!    is sized for the roots held (`Tracker::build_holding`), not the default 1M. One more
//!    contender, `ackwheel-batched`, applies the same acks in frames of 64 through
//!    `Acker::apply`, which fetches the next messages' lines while it applies the current
//!    ones: the cost per ack when acks arrive together.
//! 7. `fill/1t/1M-from-empty` and `fill+acks/1t/1M-from-empty` — one thread inits a
//!    million trees one at a time into a tracker built empty (its tables grow all the
//!    way), and then, in the second, acks their four edges each in a random order; one
//!    fill per sample, criterion's time per fill (the summary divides it per tree). One
//!    more contender, `ackwheel-batched`, inits the million through one
//!    `Acker::init_each` and applies the acks in frames of 64 through `Acker::apply`.
//! 6. `reaper/expire` — the Acker alone, on each core (the reaper's throughput): one
//!    `expire` of a manual Acker times out 50,000 trees whose timers are already on the wheels;
//!    criterion's throughput is expirations.
//!
//! Timeouts: 200 ms for the trees in every group (none expires in flight, and every
//! contender's timer work happens inside the measurement; see `TIMEOUT`); the 1M group's
//! background roots are held for 1 h (peers with one global timeout are built with 1 h).
//! A last, untimed target, `sustained_capacity`, runs 2.5M trees through a default Acker
//! with Storm's 30 s timeout and fails the run if it refuses inits.
//!
//! After each contender the bench checks that every tree it inited completed `Acked` exactly
//! once, on its last ack and on the acking thread (`ack` returned `true` and `on_complete`
//! ran there), and that nothing failed or timed out, and panics otherwise. Inits refused with
//! `InitError::Full` (which only the Acker, with its fixed table, can return) are counted and
//! printed; the refused tree is skipped, which makes that contender's time optimistic. More
//! than 1 in 10^4 is recorded as a violation and fails the run at the end (`verdict`), after
//! every group has been measured.
//!
//! Run: `cargo bench --bench acker` (a few minutes here), then
//! `python3 benches/acker_summary.py` for the medians per operation and the ratios. A smoke
//! run: `cargo bench --bench acker -- --test`. The configuration is short on purpose
//! (2-core, noisy machine): 1 s warm-up, 2 s measurement, 10 samples.

mod peers;

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::{Acker, Completion, InitError, ManualClock, Message, Outcome};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use peers::dash::DashTracker;
use peers::dash_wheel::DashWheelTracker;
use peers::moka_cache::MokaTracker;
use peers::scc_map::SccTracker;
use peers::semantics::check_semantics;
use peers::storm::StormAcker;
use peers::{Sink, Tracker};

/// Trees in flight per thread.
const WINDOW: u64 = 1024;
/// Steps between a tree's consecutive acks.
const LAG: u64 = WINDOW / 4;
/// Edge table size (a power of two; 4 edges per tree, so TABLE / 4 distinct edge sets).
const TABLE: usize = 1 << 16;
const TREES_IN_TABLE: u64 = (TABLE / 4) as u64;
/// Roots held pending in group 2.
const BACKGROUND: u64 = 1_000_000;
/// The trees' timeout. A tree is in flight for 1024 steps (a few ms even for moka), so none
/// expires; but it is short enough that every contender's timer work for a tree — the
/// Acker's reaper scanning its dirty groups and looking at group timers whose trees have
/// completed, the peers' rotations and sweeps — happens inside the measurement (the
/// lifecycle's figure is "timer included"). With Storm's default 30 s, the Acker's reaper
/// would not scan a single dirty group during a contender's few seconds, so its timer work
/// would go unmeasured.
const TIMEOUT: Duration = Duration::from_millis(200);
/// The 1M group's background roots must outlive the whole group. Trackers with one global
/// timeout are built with it; the Acker holds them with `init_with_timeout` and keeps
/// TIMEOUT for the trees.
const LONG_TIMEOUT: Duration = Duration::from_secs(3600);
/// Storm's default `topology.message.timeout.secs`, for `sustained_capacity`.
const STORM_DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Trees `sustained_capacity` runs through one acker: a little over the default table's
/// 2M slots, at ~1 us per tree a few seconds.
const SUSTAINED_TREES: u64 = 2_500_000;
/// Counter ranges: lifecycle thread t counts from (t + 1) << 56, the background from 15 << 56;
/// `mix` is a bijection, so the roots never collide.
const BACKGROUND_SEED: u64 = 15 << 56;

/// A ring entry for a tree whose init was refused (`mix` never yields 0 for the counters
/// used, which are all non-zero).
const REFUSED: u64 = 0;

/// A bijective 64-bit mix (splitmix64's finalizer): distinct counters give distinct,
/// random-looking roots without a random number generator in the measured loop.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ============================================================================ workload

/// The edges of `TREES_IN_TABLE` trees and each tree's init XOR.
struct Edges {
    edges: Vec<u64>,
    inits: Vec<u64>,
}

impl Edges {
    fn get() -> &'static Edges {
        static EDGES: OnceLock<Edges> = OnceLock::new();
        EDGES.get_or_init(|| {
            let mut rng = StdRng::seed_from_u64(0xacce);
            let edges: Vec<u64> = (0..TABLE).map(|_| rng.random()).collect();
            let inits: Vec<u64> = edges
                .chunks(4)
                .map(|e| e.iter().fold(0, |x, e| x ^ e))
                .collect();
            // The tree must stay pending until its last ack: no prefix of init ^ e0 ^ e1 ^ e2
            // may be 0.
            for (tree, e) in edges.chunks(4).enumerate() {
                let mut value = inits[tree];
                for (k, edge) in e.iter().enumerate().take(3) {
                    assert_ne!(value, 0, "tree {tree} is empty before ack {k}");
                    value ^= edge;
                }
                assert_ne!(value, 0, "tree {tree} completes early");
            }
            Edges { edges, inits }
        })
    }

    #[inline]
    fn edge(&self, tree: u64, k: u64) -> u64 {
        self.edges[((tree % TREES_IN_TABLE) * 4 + k) as usize]
    }

    #[inline]
    fn init(&self, tree: u64) -> u64 {
        self.inits[(tree % TREES_IN_TABLE) as usize]
    }
}

/// One thread's sliding window of trees.
///
/// A sample is `prefill` (untimed), N timed `step`s, `drain` (untimed): so no tree is ever
/// left in flight while criterion analyses or the other thread catches up (it would time
/// out), and every tree inited is accounted for by the end.
struct Lifecycle {
    seed: u64,
    /// The next tree to init; trees are numbered from 0 and never reused.
    next: u64,
    /// The first tree of the current window (trees before it are all finished).
    base: u64,
    /// Roots of the last WINDOW trees, by tree number mod WINDOW.
    ring: Vec<u64>,
    /// Trees whose last ack returned `true`.
    completed: u64,
    /// Trees whose last ack was sent (refused trees are not acked).
    expected: u64,
    /// Inits refused with `Full`: allowed by the Acker's contract (a fixed table whose
    /// buckets can fill up before max_pending), counted and reported.
    full: u64,
    /// Anything else: other refusals, and acks that completed a tree before its last edge.
    errors: u64,
}

impl Lifecycle {
    fn new(thread: u64) -> Self {
        Lifecycle {
            seed: (thread + 1) << 56,
            next: 0,
            base: 0,
            ring: vec![0; WINDOW as usize],
            completed: 0,
            expected: 0,
            full: 0,
            errors: 0,
        }
    }

    /// From an empty window, runs WINDOW steps (their acks for trees before the window are
    /// skipped), reaching the steady state: WINDOW trees in flight at every stage of life.
    fn prefill<T: Tracker>(&mut self, tracker: &T, edges: &Edges) {
        debug_assert_eq!(self.base, self.next, "prefill of a non-empty window");
        for _ in 0..WINDOW {
            self.step(tracker, edges);
        }
    }

    /// Sends every ack still owed to the window's trees, in the order the steps would have,
    /// leaving the window empty.
    fn drain<T: Tracker>(&mut self, tracker: &T, edges: &Edges) {
        let end = self.next;
        for i in end..end + WINDOW {
            self.acks(i, tracker, edges);
        }
        self.base = end;
    }

    /// Step `i`'s acks: one edge of each of trees i - 256, i - 512, i - 768 and the last
    /// edge of i - 1024, for those that exist in this window.
    #[inline]
    fn acks<T: Tracker>(&mut self, i: u64, tracker: &T, edges: &Edges) {
        for k in 0..4 {
            let lag = (k + 1) * LAG;
            if i < self.base + lag || i - lag >= self.next {
                continue; // before the window (prefill) or never inited (drain)
            }
            let tree = i - lag;
            let root = self.ring[(tree % WINDOW) as usize];
            if root == REFUSED {
                continue;
            }
            let done = tracker.ack(root, edges.edge(tree, k));
            if k == 3 {
                self.completed += u64::from(done);
                self.expected += 1;
            } else {
                self.errors += u64::from(done);
            }
        }
    }

    /// One tree's worth of work: four acks on older trees, one init.
    #[inline]
    fn step<T: Tracker>(&mut self, tracker: &T, edges: &Edges) {
        let i = self.next;
        self.acks(i, tracker, edges);
        let root = mix(self.seed.wrapping_add(i));
        self.ring[(i % WINDOW) as usize] = match tracker.init(root, edges.init(i), i as u32) {
            Ok(()) => root,
            Err(InitError::Full(_)) => {
                self.full += 1;
                REFUSED
            }
            Err(_) => {
                self.errors += 1;
                REFUSED
            }
        };
        self.next = i + 1;
    }

    /// After a drain: every tree inited completed `Acked` on its last ack, on this thread,
    /// and nothing else went wrong. Refusals are reported, and recorded as a violation
    /// beyond the contract's "rare".
    fn check(&self, name: &str, delivered_here: u64) {
        assert_eq!(self.base, self.next, "{name}: checked before a drain");
        assert_eq!(self.errors, 0, "{name}: refused inits or early completions");
        assert_eq!(
            self.expected + self.full,
            self.next,
            "{name}: trees never finished"
        );
        assert_eq!(
            self.completed, self.expected,
            "{name}: trees not completed by their last ack"
        );
        assert_eq!(
            delivered_here, self.expected,
            "{name}: on_complete calls on the acking thread"
        );
        refusals(name, "lifecycle", self.full, self.next);
    }

    /// One timed sample: `iters` trees through a full window.
    fn sample<T: Tracker>(&mut self, tracker: &T, edges: &Edges, iters: u64) -> Duration {
        self.prefill(tracker, edges);
        let start = Instant::now();
        for _ in 0..iters {
            self.step(tracker, edges);
        }
        let took = start.elapsed();
        self.drain(tracker, edges);
        took
    }

    /// `n` steps (at most [`FRAME_STEPS`]) with their acks in one frame through
    /// `Acker::apply_each`, then their inits through `Acker::init_each`. The trees acked are [`LAG`] or more steps
    /// older than any of the frame's inits, so the frame acks exactly what the steps would.
    fn frame(&mut self, acker: &Acker<u32>, edges: &Edges, n: u64, frame: &mut Vec<Message>) {
        let first = self.next;
        // What each message is: (the tree's last edge).
        let mut last = [false; 4 * FRAME_STEPS as usize];
        frame.clear();
        for i in first..first + n {
            for k in 0..4 {
                let lag = (k + 1) * LAG;
                if i < self.base + lag {
                    continue; // before the window (prefill)
                }
                let tree = i - lag;
                let root = self.ring[(tree % WINDOW) as usize];
                if root == REFUSED {
                    continue;
                }
                last[frame.len()] = k == 3;
                frame.push(Message::Ack {
                    root,
                    xor: edges.edge(tree, k),
                });
            }
        }
        let (completed, errors) = (&mut self.completed, &mut self.errors);
        let mut expected = 0;
        acker.apply_each(frame, |m, done| {
            if last[m] {
                *completed += u64::from(done);
                expected += 1;
            } else {
                *errors += u64::from(done);
            }
        });
        self.expected += expected;
        let seed = self.seed;
        let trees =
            (first..first + n).map(|i| (mix(seed.wrapping_add(i)), edges.init(i), i as u32));
        let (ring, full, errors) = (&mut self.ring, &mut self.full, &mut self.errors);
        acker.init_each(trees, |j, result| {
            let i = first + j as u64;
            ring[(i % WINDOW) as usize] = match result {
                Ok(()) => mix(seed.wrapping_add(i)),
                Err(InitError::Full(_)) => {
                    *full += 1;
                    REFUSED
                }
                Err(_) => {
                    *errors += 1;
                    REFUSED
                }
            };
        });
        self.next = first + n;
    }

    /// [`sample`](Self::sample) with the timed steps in frames ([`frame`](Self::frame)).
    fn sample_batched(&mut self, acker: &Acker<u32>, edges: &Edges, iters: u64) -> Duration {
        self.prefill(acker, edges);
        let mut frame = Vec::with_capacity(4 * FRAME_STEPS as usize);
        let start = Instant::now();
        let mut done = 0;
        while done < iters {
            let n = (iters - done).min(FRAME_STEPS);
            self.frame(acker, edges, n, &mut frame);
            done += n;
        }
        let took = start.elapsed();
        self.drain(acker, edges);
        took
    }
}

/// Steps per frame of the lifecycle's `ackwheel-batched`: 64 acks, then 16 inits, each
/// kind in one batch.
const FRAME_STEPS: u64 = 16;
const _: () = assert!(FRAME_STEPS < LAG);

/// Full refusals the Acker's contract calls rare ("an init can also be refused slightly
/// before max_pending when the root's bucket is full"): at most 1 in 10^4 inits, with every
/// contender here at or below half its max_pending.
const REFUSAL_BUDGET: f64 = 1e-4;

/// Failures found after a contender's numbers were taken: reported by `verdict`, the last
/// target, which fails the run, so that the remaining groups still get measured.
static VIOLATIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Reports `full` refusals out of `inits`, and records a violation beyond the budget. A
/// refused tree is not acked, so a contender that refuses does less work per step: its
/// time is then optimistic.
fn refusals(name: &str, what: &str, full: u64, inits: u64) {
    if full == 0 {
        return;
    }
    let rate = full as f64 / inits.max(1) as f64;
    eprintln!(
        "{name}: {full} of {inits} {what} inits refused with InitError::Full ({:.4}%)",
        rate * 100.0
    );
    if rate > REFUSAL_BUDGET {
        VIOLATIONS.lock().unwrap().push(format!(
            "{name}: {full} of {inits} {what} inits refused with InitError::Full ({:.4}% > \
             {:.2}%); its time per tree is optimistic (refused trees are not acked)",
            rate * 100.0,
            REFUSAL_BUDGET * 100.0
        ));
    }
}

fn verdict(_: &mut Criterion) {
    let violations = VIOLATIONS.lock().unwrap();
    if !violations.is_empty() {
        for v in violations.iter() {
            eprintln!("VIOLATION: {v}");
        }
        panic!("{} violation(s); see above", violations.len());
    }
}

// ============================================================================ completions

thread_local! {
    /// `Acked` completions delivered on this thread (the bench's own threads only).
    static ACKED_HERE: Cell<u64> = const { Cell::new(0) };
}
/// Every other completion (failed, timed out): none is expected while measuring.
static OTHER: AtomicU64 = AtomicU64::new(0);

fn acked_here() -> u64 {
    ACKED_HERE.with(Cell::get)
}

/// The measuring sink: a thread-local count, so that delivery itself costs every contender
/// the same few instructions and no shared cache line.
fn counting_sink() -> Sink {
    Arc::new(|c: Completion<u32>| {
        if c.outcome == Outcome::Acked {
            ACKED_HERE.with(|n| n.set(n.get() + 1));
        } else {
            OTHER.fetch_add(1, Ordering::Relaxed);
        }
        black_box(c.payload);
    })
}

fn semantics(_: &mut Criterion) {
    check_semantics::<Acker<u32>>("ackwheel");
    check_semantics::<StormAcker>("storm_port");
    check_semantics::<DashTracker>("dashmap");
    check_semantics::<DashWheelTracker>("dashmap+wheel");
    check_semantics::<SccTracker>("scc");
    check_semantics::<MokaTracker>("moka");
}

// ============================================================================ groups 1, 2

/// One thread drives the window; `background` roots are initialized first and stay pending.
fn one_thread<T: Tracker>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, background: u64) {
    one_thread_with::<T>(group, name, background, Lifecycle::sample);
}

/// [`one_thread`], with `sample` timing each sample.
fn one_thread_with<T: Tracker>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    background: u64,
    sample: fn(&mut Lifecycle, &T, &Edges, u64) -> Duration,
) {
    let timeout = if background == 0 || T::PER_TREE_TIMEOUT {
        TIMEOUT
    } else {
        LONG_TIMEOUT
    };
    let tracker = T::build(timeout, (background + WINDOW) as usize, counting_sink());
    let edges = Edges::get();
    let mut full = 0u64;
    for j in 0..background {
        let root = mix(BACKGROUND_SEED + j);
        match tracker.hold(root, edges.init(j), 0, LONG_TIMEOUT) {
            Ok(()) => {}
            Err(InitError::Full(_)) => full += 1,
            Err(e) => panic!("{name}: background init refused: {e}"),
        }
    }
    refusals(name, "background", full, background);
    let other_before = OTHER.load(Ordering::Relaxed);
    let delivered_before = acked_here();
    let mut lc = Lifecycle::new(0);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| sample(&mut lc, &tracker, edges, iters))
    });
    lc.check(name, acked_here() - delivered_before);
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
    drop(tracker);
}

fn lifecycle_1t_1k(c: &mut Criterion) {
    let mut group = c.benchmark_group("lifecycle/1t/1k-inflight");
    group.throughput(Throughput::Elements(1));
    one_thread::<Acker<u32>>(&mut group, "ackwheel", 0);
    one_thread_with(&mut group, "ackwheel-batched", 0, Lifecycle::sample_batched);
    one_thread::<StormAcker>(&mut group, "storm_port", 0);
    one_thread::<DashTracker>(&mut group, "dashmap", 0);
    one_thread::<DashWheelTracker>(&mut group, "dashmap+wheel", 0);
    one_thread::<SccTracker>(&mut group, "scc", 0);
    one_thread::<MokaTracker>(&mut group, "moka", 0);
    group.finish();
}

fn lifecycle_1t_1m(c: &mut Criterion) {
    let mut group = c.benchmark_group("lifecycle/1t/1M-pending");
    group.throughput(Throughput::Elements(1));
    one_thread::<Acker<u32>>(&mut group, "ackwheel", BACKGROUND);
    one_thread_with(
        &mut group,
        "ackwheel-batched",
        BACKGROUND,
        Lifecycle::sample_batched,
    );
    one_thread::<StormAcker>(&mut group, "storm_port", BACKGROUND);
    one_thread::<DashTracker>(&mut group, "dashmap", BACKGROUND);
    one_thread::<DashWheelTracker>(&mut group, "dashmap+wheel", BACKGROUND);
    one_thread::<SccTracker>(&mut group, "scc", BACKGROUND);
    one_thread::<MokaTracker>(&mut group, "moka", BACKGROUND);
    group.finish();
}

// ============================================================================ group 3

/// Two persistent workers, each with its own window and roots. Per sample: the main thread
/// sets the shared quota and releases the workers, which fill their windows (untimed); the
/// clock runs from the next barrier until both have taken the whole quota, in chunks, so
/// neither waits long with trees in flight; then both drain (untimed).
fn two_threads<T: Tracker>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str) {
    const THREADS: usize = 2;
    /// Steps a worker claims at once: small enough that the two finish within a fraction of
    /// a millisecond of each other, large enough that claiming costs nothing.
    const CHUNK: u64 = 256;
    let tracker = T::build(TIMEOUT, THREADS * WINDOW as usize, counting_sink());
    let edges = Edges::get();
    let barrier = Barrier::new(THREADS + 1);
    let quota = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let other_before = OTHER.load(Ordering::Relaxed);
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (tracker, barrier, quota, stop) = (&tracker, &barrier, &quota, &stop);
                s.spawn(move || {
                    let delivered_before = acked_here();
                    let mut lc = Lifecycle::new(t as u64);
                    loop {
                        barrier.wait(); // released
                                        // Relaxed: the barriers order the flag and quota with the main thread.
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        lc.prefill(tracker, edges);
                        barrier.wait(); // clock starts
                        while let Ok(left) =
                            quota.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                                (q > 0).then(|| q.saturating_sub(CHUNK))
                            })
                        {
                            for _ in 0..left.min(CHUNK) {
                                lc.step(tracker, edges);
                            }
                        }
                        barrier.wait(); // clock stops
                        lc.drain(tracker, edges);
                        barrier.wait(); // drained
                    }
                    lc.check(name, acked_here() - delivered_before);
                })
            })
            .collect();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                quota.store(iters, Ordering::Relaxed);
                barrier.wait(); // release
                barrier.wait(); // windows full
                let start = Instant::now();
                barrier.wait(); // quota done
                let took = start.elapsed();
                barrier.wait(); // drained
                took
            })
        });
        stop.store(true, Ordering::Relaxed);
        barrier.wait();
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
    drop(tracker);
}

fn lifecycle_2t_1k(c: &mut Criterion) {
    let mut group = c.benchmark_group("lifecycle/2t/1k-inflight");
    group.throughput(Throughput::Elements(1));
    two_threads::<Acker<u32>>(&mut group, "ackwheel");
    two_threads::<StormAcker>(&mut group, "storm_port");
    two_threads::<DashTracker>(&mut group, "dashmap");
    two_threads::<DashWheelTracker>(&mut group, "dashmap+wheel");
    two_threads::<SccTracker>(&mut group, "scc");
    two_threads::<MokaTracker>(&mut group, "moka");
    group.finish();
}

// ============================================================================ groups 4, 5, 6

/// Roots pending in group 4 (an ack on 1 thread at up to 64k pending).
const ACK_PENDING_SMALL: u64 = 1 << 16;
/// Counter range of the ack groups' roots (see BACKGROUND_SEED).
const ACK_SEED: u64 = 14 << 56;
/// Set in every ack-group root's init value and cleared in every edge acked into it, so the
/// value never reaches 0 and every ack is the common one: no completion.
const KEEP: u64 = 1 << 63;

/// One thread acks `pending` roots that stay pending, visiting them in a random order (a
/// fixed shuffle, so no two consecutive acks are near each other in any table), one ack per
/// iteration: the cost of the common ack — for the Acker a pin, a hash, a probe and one
/// `fetch_xor` — with the contender's table as large as `pending` makes it.
fn ack_only<T: Tracker>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, pending: u64) {
    let tracker = T::build_holding(LONG_TIMEOUT, pending as usize, counting_sink());
    let mut roots = Vec::with_capacity(pending as usize);
    let mut full = 0u64;
    for j in 0..pending {
        let root = mix(ACK_SEED + j);
        match tracker.hold(root, KEEP | 1, 0, LONG_TIMEOUT) {
            Ok(()) => roots.push(root),
            Err(InitError::Full(_)) => full += 1,
            Err(e) => panic!("{name}: ack-group init refused: {e}"),
        }
    }
    refusals(name, "ack-group", full, pending);
    roots.shuffle(&mut StdRng::seed_from_u64(0xac4));
    let edges = Edges::get();
    let other_before = OTHER.load(Ordering::Relaxed);
    let delivered_before = acked_here();
    let (mut next, mut completed) = (0usize, 0u64);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for i in 0..iters {
                let edge = edges.edges[(i as usize) & (TABLE - 1)] & !KEEP;
                completed += u64::from(tracker.ack(roots[next], edge));
                next += 1;
                if next == roots.len() {
                    next = 0;
                }
            }
            start.elapsed()
        })
    });
    assert_eq!(
        completed, 0,
        "{name}: an ack completed a tree that cannot complete"
    );
    assert_eq!(acked_here(), delivered_before, "{name}: a tree completed");
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
    drop(tracker);
}

/// Messages per frame of `ackwheel-batched`.
const FRAME: usize = 64;

/// As [`ack_only`], for the Acker with its acks applied in frames of [`FRAME`] through
/// `Acker::apply` (memory fetched ahead), the frame built from the same edges and root
/// order: per iteration, one ack.
fn ack_only_batched(group: &mut BenchmarkGroup<'_, WallTime>, pending: u64) {
    let name = "ackwheel-batched";
    let tracker =
        <Acker<u32> as Tracker>::build_holding(LONG_TIMEOUT, pending as usize, counting_sink());
    let mut roots = Vec::with_capacity(pending as usize);
    for j in 0..pending {
        let root = mix(ACK_SEED + j);
        match tracker.hold(root, KEEP | 1, 0, LONG_TIMEOUT) {
            Ok(()) => roots.push(root),
            Err(InitError::Full(_)) => {}
            Err(e) => panic!("{name}: ack-group init refused: {e}"),
        }
    }
    roots.shuffle(&mut StdRng::seed_from_u64(0xac4));
    let edges = Edges::get();
    let delivered_before = acked_here();
    let (mut next, mut completed) = (0usize, 0usize);
    let mut frame = [Message::Fail { root: 0 }; FRAME];
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            let mut i = 0u64;
            while i < iters {
                let n = (iters - i).min(FRAME as u64) as usize;
                for (k, message) in frame[..n].iter_mut().enumerate() {
                    let edge = edges.edges[((i as usize) + k) & (TABLE - 1)] & !KEEP;
                    *message = Message::Ack {
                        root: roots[next],
                        xor: edge,
                    };
                    next += 1;
                    if next == roots.len() {
                        next = 0;
                    }
                }
                completed += tracker.apply(&frame[..n]);
                i += n as u64;
            }
            start.elapsed()
        })
    });
    assert_eq!(
        completed, 0,
        "{name}: an ack completed a tree that cannot complete"
    );
    assert_eq!(acked_here(), delivered_before, "{name}: a tree completed");
    drop(tracker);
}

/// Every contender of an ack group, side by side.
fn ack_group(c: &mut Criterion, name: &str, pending: u64) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    ack_only::<Acker<u32>>(&mut group, "ackwheel", pending);
    ack_only_batched(&mut group, pending);
    ack_only::<StormAcker>(&mut group, "storm_port", pending);
    ack_only::<DashTracker>(&mut group, "dashmap", pending);
    ack_only::<DashWheelTracker>(&mut group, "dashmap+wheel", pending);
    ack_only::<SccTracker>(&mut group, "scc", pending);
    ack_only::<MokaTracker>(&mut group, "moka", pending);
    group.finish();
}

fn ack_1t_64k(c: &mut Criterion) {
    ack_group(c, "ack/1t/64k-pending", ACK_PENDING_SMALL);
}

fn ack_1t_1m(c: &mut Criterion) {
    ack_group(c, "ack/1t/1M-pending", BACKGROUND);
}

/// Trees timed out per measured `expire` in group 6.
const EXPIRY_BATCH: u64 = 50_000;

/// The reaper's throughput: a manual Acker on a `ManualClock` holds EXPIRY_BATCH
/// trees whose timers the reaper has already scheduled (an `expire` at the same instant,
/// untimed); the clock moves past their deadline and one timed `expire` times every one of
/// them out: wheel advance, the re-check of each slot's deadline, the completion CAS, the
/// payload, `on_complete`, and retiring the slot. Criterion's throughput is expirations.
fn reaper_expire(c: &mut Criterion) {
    let mut group = c.benchmark_group("reaper/expire");
    group.throughput(Throughput::Elements(EXPIRY_BATCH));
    expire_batches(&mut group, "ackwheel");
    group.finish();
}

/// One contender of `reaper/expire`.
fn expire_batches(group: &mut BenchmarkGroup<'_, WallTime>, name: &str) {
    let clock = ManualClock::new(0);
    let timed_out = Arc::new(AtomicU64::new(0));
    let sink = Arc::clone(&timed_out);
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_secs(1))
        .clock(clock.clone())
        .on_complete(move |c| {
            if c.outcome == Outcome::TimedOut {
                sink.fetch_add(1, Ordering::Relaxed);
            }
            black_box(c.payload);
        })
        .build_manual()
        .expect("a valid configuration");
    let mut next = 0u64;
    let mut expected = 0u64;
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..EXPIRY_BATCH {
                    let root = mix(ACK_SEED + next);
                    next += 1;
                    match acker.init(root, KEEP | 1, next as u32) {
                        Ok(()) => expected += 1,
                        Err(InitError::Full(_)) => {}
                        Err(e) => panic!("reaper/expire/{name}: init refused: {e}"),
                    }
                }
                acker.expire();
                clock.advance(Duration::from_secs(2));
                let start = Instant::now();
                black_box(acker.expire());
                took += start.elapsed();
            }
            took
        })
    });
    assert_eq!(
        timed_out.load(Ordering::Relaxed),
        expected,
        "reaper/expire/{name}: every tree times out once"
    );
    assert_eq!(
        acker.pending(),
        0,
        "reaper/expire/{name}: trees left pending"
    );
}

// ============================================================================ capacity

/// Not a timing: the Acker as a Storm user would configure it (defaults, 30 s timeout) runs
/// SUSTAINED_TREES trees through the 1k window as fast as it can, and every init refused
/// with `Full` counts against the refusal budget. Only ~1k trees are ever pending, 1/1000 of
/// max_pending, so the contract allows none. The call that completes a tree frees its slot
/// at once (its group's dirty bit or timer costs the reaper a look later, never the slot):
/// a run that completes more trees per timeout than the tables have slots would expose a
/// slot kept until a reaper pass. The peers are unbounded maps and cannot refuse, so only the Acker
/// runs here. Skipped under `--test` (a smoke run).
fn sustained_capacity(_: &mut Criterion) {
    if std::env::args().any(|a| a == "--test") {
        eprintln!("sustained_capacity: skipped under --test");
        return;
    }
    let name = "sustained_capacity/ackwheel";
    let acker =
        <Acker<u32> as Tracker>::build(STORM_DEFAULT_TIMEOUT, WINDOW as usize, counting_sink());
    let edges = Edges::get();
    let other_before = OTHER.load(Ordering::Relaxed);
    let delivered_before = acked_here();
    let mut lc = Lifecycle::new(0);
    let took = lc.sample(&acker, edges, SUSTAINED_TREES);
    eprintln!(
        "{name}: {SUSTAINED_TREES} trees in {took:.2?} ({:.0} ns per tree), {:?} timeout, \
         {} refused with Full, pending at the end: {}",
        took.as_nanos() as f64 / SUSTAINED_TREES as f64,
        STORM_DEFAULT_TIMEOUT,
        lc.full,
        acker.pending()
    );
    lc.check(name, acked_here() - delivered_before);
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
}

// ============================================================================ group 7

/// Trees in group 7's fill.
const FILL: u64 = 1_000_000;
/// Counter range of group 7's roots (see BACKGROUND_SEED).
const FILL_SEED: u64 = 13 << 56;

/// Group 7: one thread fills a tracker built empty with `FILL` trees of four edges, one
/// `init` at a time, so that its tables grow all the way (`fill`); and the same fill
/// followed by the trees' `4 × FILL` acks in a random order, each tree completing on its
/// last (`fill+acks`: a million trees' whole lifecycle). Each sample is one fill into a
/// fresh tracker; building it and dropping it are not timed. Criterion's time is per tree.
fn fill_1t_1m(c: &mut Criterion) {
    for (name, acks) in [
        ("fill/1t/1M-from-empty", false),
        ("fill+acks/1t/1M-from-empty", true),
    ] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(FILL));
        group.sampling_mode(SamplingMode::Flat);
        fill::<Acker<u32>>(&mut group, "ackwheel", acks);
        fill_batched(&mut group, acks);
        fill::<StormAcker>(&mut group, "storm_port", acks);
        fill::<DashTracker>(&mut group, "dashmap", acks);
        fill::<DashWheelTracker>(&mut group, "dashmap+wheel", acks);
        fill::<SccTracker>(&mut group, "scc", acks);
        group.finish();
    }
}

/// One contender of group 7.
fn fill<T: Tracker>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, acks: bool) {
    let edges = Edges::get();
    // Every (tree, edge) pair once, in a fixed random order.
    let mut order: Vec<u32> = (0..4 * FILL as u32).collect();
    order.shuffle(&mut StdRng::seed_from_u64(0xf111));
    let (mut full, mut fills) = (0u64, 0u64);
    let delivered_before = acked_here();
    let other_before = OTHER.load(Ordering::Relaxed);
    let mut refused = vec![false; FILL as usize];
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let tracker = T::build(LONG_TIMEOUT, FILL as usize, counting_sink());
                let start = Instant::now();
                for tree in 0..FILL {
                    let root = mix(FILL_SEED + tree);
                    match tracker.init(root, edges.init(tree), 0) {
                        Ok(()) => refused[tree as usize] = false,
                        Err(InitError::Full(_)) => {
                            full += 1;
                            refused[tree as usize] = true;
                        }
                        Err(e) => panic!("{name}: fill init refused: {e}"),
                    }
                }
                if acks {
                    for &pair in &order {
                        let tree = u64::from(pair / 4);
                        if !refused[tree as usize] {
                            tracker
                                .ack(mix(FILL_SEED + tree), edges.edge(tree, u64::from(pair % 4)));
                        }
                    }
                }
                took += start.elapsed();
                fills += 1;
                drop(tracker);
            }
            took
        })
    });
    refusals(name, "fill", full, fills * FILL);
    let completed = acked_here() - delivered_before;
    if acks {
        assert_eq!(
            completed,
            fills * FILL - full,
            "{name}: trees not acked once each"
        );
    } else {
        assert_eq!(completed, 0, "{name}: a tree completed in a fill");
    }
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
}

/// As [`fill`], for the Acker with its inits through one `Acker::init_each` over the
/// million (lines fetched ahead, as a bulk load would) and its acks through `Acker::apply`
/// in frames of [`FRAME`], in the same order.
fn fill_batched(group: &mut BenchmarkGroup<'_, WallTime>, acks: bool) {
    let name = "ackwheel-batched";
    let edges = Edges::get();
    let mut order: Vec<u32> = (0..4 * FILL as u32).collect();
    order.shuffle(&mut StdRng::seed_from_u64(0xf111));
    let (mut full, mut fills, mut errors) = (0u64, 0u64, 0u64);
    let delivered_before = acked_here();
    let other_before = OTHER.load(Ordering::Relaxed);
    let mut refused = vec![false; FILL as usize];
    let mut frame = Vec::with_capacity(FRAME);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let tracker =
                    <Acker<u32> as Tracker>::build(LONG_TIMEOUT, FILL as usize, counting_sink());
                let start = Instant::now();
                let trees = (0..FILL).map(|tree| (mix(FILL_SEED + tree), edges.init(tree), 0));
                tracker.init_each(trees, |tree, result| {
                    refused[tree] = match result {
                        Ok(()) => false,
                        Err(InitError::Full(_)) => {
                            full += 1;
                            true
                        }
                        Err(_) => {
                            errors += 1;
                            true
                        }
                    };
                });
                if acks {
                    for pairs in order.chunks(FRAME) {
                        frame.clear();
                        frame.extend(
                            pairs
                                .iter()
                                .map(|&pair| (u64::from(pair / 4), u64::from(pair % 4)))
                                .filter(|&(tree, _)| !refused[tree as usize])
                                .map(|(tree, edge)| Message::Ack {
                                    root: mix(FILL_SEED + tree),
                                    xor: edges.edge(tree, edge),
                                }),
                        );
                        tracker.apply(&frame);
                    }
                }
                took += start.elapsed();
                fills += 1;
                drop(tracker);
            }
            took
        })
    });
    assert_eq!(errors, 0, "{name}: a fill init refused other than full");
    refusals(name, "fill", full, fills * FILL);
    let completed = acked_here() - delivered_before;
    let expected = if acks { fills * FILL - full } else { 0 };
    assert_eq!(completed, expected, "{name}: trees not acked once each");
    assert_eq!(
        OTHER.load(Ordering::Relaxed),
        other_before,
        "{name}: trees failed or timed out"
    );
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = semantics, lifecycle_1t_1k, lifecycle_1t_1m, lifecycle_2t_1k, ack_1t_64k, ack_1t_1m,
        fill_1t_1m, reaper_expire, sustained_capacity, verdict
}
criterion_main!(benches);
