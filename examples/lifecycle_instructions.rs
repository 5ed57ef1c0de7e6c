//! The one-thread lifecycle of `benches/acker.rs` at 1k trees in flight, as a plain program
//! for instruction counting: `benches/instructions/count.py` runs it under callgrind twice
//! (two tree counts, so that setup cancels out) and prints, per tree, the instructions and
//! the locked instructions (`lock`-prefixed, and `xchg` with memory), by function.
//!
//! Each step acks one edge of the trees 256, 512 and 768 steps old and the last edge of the
//! one 1,024 steps old, then inits a new tree of 4 edges: 5 messages a tree, so a design
//! that pays one locked instruction per message has a floor of 5 a tree.
//!
//! `cargo run --release --example lifecycle_instructions -- KIND TREES`, KIND one of
//! `acker` (one message at a time), `batched` (acks through `Acker::apply` in frames of 64)
//! and `dashmap` (a `DashMap<u64, (u64, bool)>`: entry, XOR, remove at zero).

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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: lifecycle_instructions acker|batched|dashmap TREES";
    let (Some(kind), Some(trees)) = (args.get(1), args.get(2).and_then(|t| t.parse().ok())) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    match kind.as_str() {
        "acker" | "batched" => {
            let acker = Acker::<u32>::builder()
                .timeout(Duration::from_secs(600))
                .max_pending(1 << 16)
                .on_complete(|_| {})
                .build()
                .expect("a valid configuration");
            run(&acker, trees, kind == "batched");
            assert_eq!(acker.pending(), 0, "every tree completed");
        }
        "dashmap" => {
            let map = Dash(DashMap::new());
            run(&map, trees, false);
            assert!(map.0.is_empty(), "every tree completed");
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
