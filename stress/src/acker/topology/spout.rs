//! The spouts: each starts trees while it has free oracle slots, sends each tree's init
//! before or after emitting its root tuples or holds it back a while (module docs), and
//! starts the replays the checker asks for.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ackwheel::InitError;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{id, Anchor, Topology, Tuple};
use crate::acker::oracle::{self, Event};

impl Topology {
    /// Spout `index`: starts trees while it has free slots, until told to stop.
    pub(crate) fn spout(
        &self,
        index: usize,
        seed: u64,
        free: &Receiver<u32>,
        replays: &Receiver<(u64, u8)>,
    ) {
        let c = &self.counters[index];
        let mut rng = SmallRng::seed_from_u64(seed);
        // Inits held back: (due, slot, root, xor).
        let mut held: BinaryHeap<Reverse<(u64, u32, u64, u64)>> = BinaryHeap::new();
        let mut serial = 0u64;
        let max_hold = self.oracle.timeout() / 20;
        loop {
            let now = self.oracle.now();
            while held.peek().is_some_and(|Reverse(h)| h.0 <= now) {
                let Some(Reverse((_, slot, root, xor))) = held.pop() else {
                    break;
                };
                self.send_init(slot, root, xor);
            }
            // Relaxed: a flag only; what the spout did reaches others through channels.
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let breath = self.shape.breathe_ns;
            if breath > 0 && now % breath >= breath / 4 * 3 {
                std::thread::sleep(Duration::from_millis(1)); // holding its breath
                continue;
            }
            let wait = held.peek().map_or(Duration::from_millis(2), |Reverse(h)| {
                Duration::from_nanos(h.0.saturating_sub(now)).min(Duration::from_millis(2))
            });
            let slot = match free.recv_timeout(wait) {
                Ok(slot) => slot,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if self.started.fetch_add(1, Ordering::Relaxed) >= self.shape.max_trees {
                // --trees reached: the slot goes back unused, and every spout stops.
                self.started.fetch_sub(1, Ordering::Relaxed);
                self.oracle.give_back(slot);
                self.stop.store(true, Ordering::Relaxed);
                continue;
            }
            let (msg, attempt) = match replays.try_recv() {
                Ok(replay) => {
                    c.replays_started.fetch_add(1, Ordering::Relaxed);
                    replay
                }
                Err(_) => {
                    serial += 1;
                    ((index as u64) << 48 | serial, 0)
                }
            };
            let tree = c.trees.fetch_add(1, Ordering::Relaxed);
            let root = id(&mut rng);
            let k = rng.random_range(1..=self.shape.fanout);
            let edges: Vec<u64> = (0..k).map(|_| id(&mut rng)).collect();
            let xor = edges.iter().fold(0, |a, e| a ^ e);
            // Tree numbers are unique across spouts: spout index in the top bits.
            let tree = (index as u64) << 48 | tree;
            self.oracle.begin(slot, root, tree, msg, attempt, k);
            let mode: f64 = rng.random();
            let first = mode < self.shape.init_first_rate;
            let hold = !first && mode < self.shape.init_first_rate + self.shape.init_held_rate;
            if first {
                self.oracle.flag(slot, oracle::INIT_FIRST);
                self.send_init(slot, root, xor);
            }
            self.outstanding.fetch_add(i64::from(k), Ordering::SeqCst);
            for edge in edges {
                let to = rng.random_range(0..self.bolts.len());
                let tuple = Tuple {
                    anchors: [Anchor { slot, root, edge }, Anchor::default()],
                    len: 1,
                    depth: 1,
                };
                let _ = self.bolts[to].send(tuple);
            }
            if hold {
                let delay = rng.random_range(0..=max_hold);
                self.oracle.flag(slot, oracle::INIT_DELAYED);
                self.oracle
                    .log(slot, Event::InitHeld, self.oracle.now(), delay);
                c.inits_held.fetch_add(1, Ordering::Relaxed);
                held.push(Reverse((self.oracle.now() + delay, slot, root, xor)));
            } else if !first {
                self.send_init(slot, root, xor);
            }
        }
        // Stopping: every held init goes out now, so every started tree can finish.
        while let Some(Reverse((_, slot, root, xor))) = held.pop() {
            self.send_init(slot, root, xor);
        }
    }

    /// Sends the init, then drops the spout's reference on the tree.
    fn send_init(&self, slot: u32, root: u64, xor: u64) {
        match self.acker.init(root, xor, slot) {
            Ok(()) => {}
            Err(InitError::Duplicate(_)) => {
                // No completion will come for this init; the checker reports the flag.
                self.oracle.flag(slot, oracle::DUPLICATE_INIT);
                self.oracle.release(slot);
            }
            Err(refusal) => {
                let pending = self.acker.pending();
                if matches!(refusal, InitError::Full(_)) && pending < self.max_pending / 4 * 3 {
                    self.refused_with_room.fetch_add(1, Ordering::Relaxed);
                    self.pending_at_refusal.store(pending, Ordering::Relaxed);
                }
                // Full or Shutdown: legal refusals; no completion may come.
                self.oracle.flag(slot, oracle::REFUSED);
                self.oracle.release(slot);
            }
        }
        self.oracle.init_sent(slot, xor);
        self.oracle.release(slot);
    }
}
