//! Random edge ids for the [`Acker`](crate::Acker).
//!
//! Storm names every edge of a tuple tree with a random 64-bit id and tracks a tree as the
//! XOR of its edges: init XORs in the ids of the tuples it emits, each ack XORs in the id of
//! the tuple it acks and of the tuples that bolt emitted, and the value is 0 exactly when
//! every edge has been acked — *if* no subset of outstanding ids happens to XOR to 0.
//! With random ids that happens with probability 2^-64 per message; with ids numbered
//! 1, 2, 3 it happens at once (`1 ^ 2 ^ 3 == 0`), and the tree completes `Acked` before a
//! single sub-task reported back.
//!
//! [`edge_id`] draws from a per-thread generator: no lock, no shared cache line, a few
//! nanoseconds a call. Each thread's sequence is splitmix64 over a counter from a random
//! start (std's per-process random keys, the thread's identity and the time), so a thread
//! never repeats an id within 2^64 draws and two threads' ids collide only by chance.

use std::cell::Cell;
use std::hash::{BuildHasher, Hash, Hasher};

/// splitmix64's increment: an odd constant, so the counter visits every `u64`.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

thread_local! {
    /// The calling thread's counter; 0 until its first draw seeds it.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// A random, non-zero 64-bit id for one edge of an Acker tree.
///
/// Use one for every tuple a tree emits: pass the XOR of a tree's first edges to
/// [`Acker::init`](crate::Acker::init) and each edge's id (XORed with the ids of the tuples
/// that processing it emitted) to [`Acker::ack`](crate::Acker::ack). Ids must be random:
/// small sequential ids cancel each other out (see the module docs of the `Acker`).
///
/// ```
/// use ackwheel::{edge_id, Acker};
///
/// let acker: Acker<&str> = Acker::builder().build_manual().unwrap();
/// let (a, b, c) = (edge_id(), edge_id(), edge_id());
/// acker.init(42, a ^ b ^ c, "request 42").unwrap();
/// assert!(!acker.ack(42, a));
/// assert!(!acker.ack(42, b));
/// assert!(acker.ack(42, c)); // the last edge completes the tree
/// ```
pub fn edge_id() -> u64 {
    STATE.with(|state| loop {
        let mut s = state.get();
        if s == 0 {
            s = seed();
        }
        s = s.wrapping_add(GOLDEN_GAMMA);
        state.set(s);
        let id = mix(s);
        if id != 0 {
            return id;
        }
    })
}

/// splitmix64's finalizer: a bijection, so distinct counters give distinct ids.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random, non-zero start for this thread's counter.
fn seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    std::thread::current().id().hash(&mut h);
    h.finish() | 1
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_non_zero_distinct_and_differ_between_threads() {
        let mine: Vec<u64> = (0..10_000).map(|_| edge_id()).collect();
        assert!(mine.iter().all(|&id| id != 0));
        let distinct: HashSet<u64> = mine.iter().copied().collect();
        assert_eq!(distinct.len(), mine.len(), "an id repeated within a thread");
        let theirs: Vec<u64> = std::thread::spawn(|| (0..10_000).map(|_| edge_id()).collect())
            .join()
            .unwrap();
        assert!(
            theirs.iter().all(|id| !distinct.contains(id)),
            "two threads drew the same id"
        );
    }

    #[test]
    fn ids_look_random_bit_by_bit() {
        // Each bit set in about half of 4096 draws (a counter or a constant fails this).
        let ids: Vec<u64> = (0..4096).map(|_| edge_id()).collect();
        for bit in 0..64 {
            let ones = ids.iter().filter(|&&id| id >> bit & 1 == 1).count();
            assert!((1700..2400).contains(&ones), "bit {bit} set {ones} times");
        }
    }

    #[test]
    fn xor_of_a_few_random_ids_is_not_zero_where_sequential_ids_cancel() {
        assert_eq!(1 ^ 2 ^ 3, 0, "the misuse the docs warn about");
        for _ in 0..1000 {
            let (a, b, c) = (edge_id(), edge_id(), edge_id());
            assert_ne!(a ^ b ^ c, 0);
            assert_ne!(a ^ b, 0);
        }
    }
}
