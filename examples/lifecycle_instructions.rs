//! The one-thread lifecycle of `benches/acker.rs` at 1k trees in flight, as a plain program
//! for instruction counting: `benches/instructions/count.py` runs it under callgrind twice
//! (two tree counts, so that setup cancels out) and prints, per tree, the instructions and
//! the locked instructions (`lock`-prefixed, and `xchg` with memory), by function.
//!
//! Each step acks one edge of the trees 256, 512 and 768 steps old and the last edge of the
//! one 1,024 steps old, then inits a new tree of 4 edges: 5 messages a tree, so a design
//! that pays one locked instruction per message has a floor of 5 a tree.
//!
//! `cargo run --release --example lifecycle_instructions -- KIND TREES [BACKGROUND [RESOLUTION_MS]]`,
//! KIND one of `acker` (one message at a time), `batched` (acks through `Acker::apply` in
//! frames of 64) and `dashmap` (a `DashMap<u64, (u64, bool)>`: entry, XOR, remove at zero).
//! BACKGROUND roots (default 0) are inited first and never acked, as in the bench's
//! `1M-pending` groups: the tables are large and cold, and `count.py --cache` counts the
//! lines a tree misses there. `ack`, `ack-batched` (frames of 64 through `apply`) and
//! `ack-dashmap` are the bench's `ack/1t` groups instead: BACKGROUND roots held, then TREES
//! acks of them one at a time in a shuffled order, none completing a tree (each "tree" of
//! `count.py` is then one ack). RESOLUTION_MS is the acker's tick (default 1): `count.py`
//! makes it 64 under callgrind, which runs about 50 times slower, so that the reaper
//! thread's passes, 64 ticks apart while trees are pending, come about as often a tree as
//! they do natively (at 1 ms they would come 50 times as often). No tree reaches the reaper
//! either way: each completes long before its group's scan, due only 67 ms or so before
//! its deadline, 600 s on.

use ackwheel::{Acker, Message};
use dashmap::DashMap;
use std::time::Duration;

const LAG: u64 = 256;
const WINDOW: u64 = 4 * LAG;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn root(tree: u64) -> u64 {
    mix(tree + 77)
}

fn edge(tree: u64, k: u64) -> u64 {
    mix(tree * 8 + k + 1) | 1
}

fn init_xor(tree: u64) -> u64 {
    (0..4).fold(0, |x, k| x ^ edge(tree, k))
}

trait Tracker {
    fn init(&self, root: u64, xor: u64);
    fn ack(&self, root: u64, xor: u64);
    fn apply(&self, messages: &[Message]);
}

impl Tracker for Acker<u32> {
    fn init(&self, root: u64, xor: u64) {
        assert!(Acker::init(self, root, xor, 0).is_ok(), "init refused");
    }
    fn ack(&self, root: u64, xor: u64) {
        Acker::ack(self, root, xor);
    }
    fn apply(&self, messages: &[Message]) {
        Acker::apply(self, messages);
    }
}

struct Dash(DashMap<u64, (u64, bool)>);

impl Tracker for Dash {
    fn init(&self, root: u64, xor: u64) {
        let mut e = self.0.entry(root).or_insert((0, false));
        e.0 ^= xor;
        e.1 = true;
    }
    fn ack(&self, root: u64, xor: u64) {
        let done = {
            let mut e = self.0.entry(root).or_insert((0, false));
            e.0 ^= xor;
            e.0 == 0 && e.1
        };
        if done {
            self.0.remove(&root);
        }
    }
    fn apply(&self, messages: &[Message]) {
        for m in messages {
            if let Message::Ack { root, xor } = *m {
                self.ack(root, xor);
            }
        }
    }
}

/// The acker's `max_pending`, as the benches' `Tracker::build` sets it: 1 << 20, or twice
/// `background` past half of that, so that the tables sit at the load growth leaves them at
/// rather than at the brim.
fn bound(background: u64) -> usize {
    let background = background as usize;
    if background > 1 << 19 {
        2 * background
    } else {
        1 << 20
    }
}

/// The acker every Acker kind runs: trees that outlive the run, a tick of
/// `resolution_ms`, `max_pending` as the benches set it for `background` roots.
fn acker(background: u64, resolution_ms: u64) -> Acker<u32> {
    Acker::<u32>::builder()
        .timeout(Duration::from_secs(600))
        .resolution(Duration::from_millis(resolution_ms))
        .max_pending(bound(background))
        .on_complete(|_| {})
        .build()
        .expect("a valid configuration")
}

/// Roots inited before the lifecycle and never acked: ids no tree of `run` has.
fn hold(tracker: &dyn Tracker, background: u64) {
    for i in 0..background {
        tracker.init(mix(i | 1 << 62), 1);
    }
}

/// Waits until the background is settled: every root covered (its group dirty, or filed on
/// the reaper's wheel by a move of the growth), the tables' growth finished and its old
/// generations freed, and the dead entries the growth left in the reaper's wheel swept (a
/// sweep is due above 9/8 of the live bound plus 4,096). Otherwise the reaper would still
/// be at it during the lifecycle, for longer in a longer one (more so under callgrind,
/// which runs the threads one at a time), which would not cancel out between two tree
/// counts.
fn settle(acker: &Acker<u32>) {
    loop {
        let [_, successors, retired, _] = acker.memory_parts();
        let live = acker.pending().min(acker.table_slots() / 4);
        if successors == 0
            && retired == 0
            && acker.covered_roots() >= acker.pending()
            && acker.scheduled_timers() <= live + live / 8 + 4096
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(tracker: &dyn Tracker, trees: u64, batched: bool) {
    let mut frame = Vec::with_capacity(64);
    for i in 0..trees + WINDOW {
        for k in 0..4 {
            let lag = (k + 1) * LAG;
            if i < lag || i - lag >= trees {
                continue;
            }
            let tree = i - lag;
            if batched {
                frame.push(Message::Ack {
                    root: root(tree),
                    xor: edge(tree, k),
                });
            } else {
                tracker.ack(root(tree), edge(tree, k));
            }
        }
        if frame.len() >= 64 {
            tracker.apply(&frame);
            frame.clear();
        }
        if i < trees {
            tracker.init(root(i), init_xor(i));
        }
    }
    tracker.apply(&frame);
}

/// Set in every `ack` root's init value and never acked, so no ack completes a tree.
const KEEP: u64 = 1 << 63;

/// The `ack` kind: `acks` acks, one at a time, of the `roots` held (visited in a fixed
/// shuffle, so that no two acks in a row are near each other in any table), none of which
/// completes: the common ack of the benches' `ack/1t` groups, with the tables as large as
/// `roots` makes them.
fn ack_only(tracker: &dyn Tracker, roots: &[u64], acks: u64) {
    for i in 0..acks as usize {
        tracker.ack(roots[i % roots.len()], edge(i as u64, 0) & !KEEP);
    }
}

/// [`ack_only`] in frames of 64 through `apply` (the `ack-batched` kind, the benches'
/// `ackwheel-batched` in the `ack/1t` groups).
fn ack_only_batched(tracker: &dyn Tracker, roots: &[u64], acks: u64) {
    let mut frame = Vec::with_capacity(64);
    for i in 0..acks as usize {
        frame.push(Message::Ack {
            root: roots[i % roots.len()],
            xor: edge(i as u64, 0) & !KEEP,
        });
        if frame.len() == 64 {
            tracker.apply(&frame);
            frame.clear();
        }
    }
    tracker.apply(&frame);
}

/// `count` root ids for the `ack` kind, inited with [`KEEP`], in a shuffled order.
fn held_roots(tracker: &dyn Tracker, count: u64) -> Vec<u64> {
    let mut roots: Vec<u64> = (0..count).map(|i| mix(i | 1 << 61)).collect();
    for &root in &roots {
        tracker.init(root, KEEP | 1);
    }
    // Fisher-Yates with the mix as its random source.
    for i in (1..roots.len()).rev() {
        let j = (mix(i as u64 ^ 0xac4) % (i as u64 + 1)) as usize;
        roots.swap(i, j);
    }
    roots
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: lifecycle_instructions acker|batched|dashmap|ack|ack-batched|ack-dashmap TREES [BACKGROUND [RESOLUTION_MS]]";
    let (Some(kind), Some(trees)) = (args.get(1), args.get(2).and_then(|t| t.parse().ok())) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| args.get(i).map_or(Some(default), |a| a.parse().ok());
    let (Some(background), Some(resolution_ms)) = (number(3, 0), number(4, 1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    match kind.as_str() {
        "acker" | "batched" => {
            let acker = acker(background, resolution_ms);
            hold(&acker, background);
            settle(&acker);
            run(&acker, trees, kind == "batched");
            assert_eq!(acker.pending() as u64, background, "every tree completed");
        }
        "ack" | "ack-batched" => {
            let acker = acker(background, resolution_ms);
            let roots = held_roots(&acker, background.max(1));
            settle(&acker);
            if kind == "ack" {
                ack_only(&acker, &roots, trees);
            } else {
                ack_only_batched(&acker, &roots, trees);
            }
            assert_eq!(acker.pending(), roots.len(), "no tree completed");
        }
        "ack-dashmap" => {
            let map = Dash(DashMap::new());
            let roots = held_roots(&map, background.max(1));
            ack_only(&map, &roots, trees);
            assert_eq!(map.0.len(), roots.len(), "no tree completed");
        }
        "dashmap" => {
            let map = Dash(DashMap::new());
            hold(&map, background);
            run(&map, trees, false);
            assert_eq!(map.0.len() as u64, background, "every tree completed");
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
