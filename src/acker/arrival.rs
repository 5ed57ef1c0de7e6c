//! The inbox's words: what a writer tells the reaper about a slot's deadline.
//!
//! A word is 64 bits, so an inbox is a ring of plain atomics and the reaper learns a new
//! slot's deadline without reading the slot (whose cache line the acking threads are about
//! to write):
//!
//! ```text
//!  63      62        61..32              31..0
//!  ADJUST  IN_SLOT   deadline tick       slot + 1  (0 is the ring's empty cell)
//! ```
//!
//! * An **open** word comes with every new slot, pushed on one of the shard's inbox rings
//!   (lanes) before the slot is published, so on that lane it precedes anything else about
//!   that occupant; the slot's state records the lane. The reaper schedules it.
//! * An **adjust** word comes from an init whose timeout is shorter than the orphan it
//!   initializes: the deadline moved sooner. It goes on the lane of the orphan's open word,
//!   so the reaper reads it after that word. The reaper only moves an existing timer
//!   earlier, never creates one, so a late adjust (its slot since completed, or reused) does
//!   no harm: an early timer is re-checked against the real deadline when it fires.
//!
//! The deadline travels as its 30-bit wheel tick, read back relative to the reaper's clock
//! as the first nanosecond of that tick. The timer may therefore fire up to a tick before
//! the deadline, never after the exact one would; the reaper never trusts a timer (it reads
//! the slot's real deadline and reschedules the slot when it is not due), so an early one
//! costs a second look at a tree that is about to time out, nothing more. (Rounding up
//! instead made timeouts a tick later: the wheel fires a tick's bucket once that tick is
//! over, so p50 timeout lateness in the stress harness went from 0.5 to 1.1 ms.) Exact
//! while the deadline is within 2^29 ticks of the reaper's `now`.
//! Open words carry it when the timeout is under 2^27 ticks and a tick is at least 2^16 ns
//! (65 µs; the default is ~1 ms), so an entry may wait in the inbox for 2^28 ticks (4.9 h)
//! and still read back exactly. Otherwise, and for every adjust, `IN_SLOT` tells the reaper
//! to read the deadline from the slot instead: rare, and correct either way.

/// The deadline moved sooner: move the existing timer, if any.
const ADJUST: u64 = 1 << 63;
/// The deadline is not in the word: read it from the slot.
const IN_SLOT: u64 = 1 << 62;
const TICK_BITS: u32 = 30;
const TICK_MASK: u64 = (1 << TICK_BITS) - 1;
/// The smallest tick (log2 ns) whose deadlines travel in the word.
const MIN_SHIFT: u32 = 16;
/// Timeouts under this many ticks travel in the word.
const MAX_TICKS: u64 = 1 << 27;

/// The word for a new slot due at `deadline`, `timeout` after it opened; `shift` is log2 of
/// the wheel's tick in ns.
#[inline]
pub(crate) fn open(slot: usize, deadline: u64, timeout: u64, shift: u32) -> u64 {
    let base = slot as u64 + 1;
    if shift < MIN_SHIFT || timeout >> shift >= MAX_TICKS {
        return base | IN_SLOT;
    }
    base | (((deadline >> shift) & TICK_MASK) << 32)
}

/// The word for an init that shortened a held orphan's deadline.
#[inline]
pub(crate) fn adjust(slot: usize) -> u64 {
    (slot as u64 + 1) | ADJUST | IN_SLOT
}

/// A word read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub(crate) slot: usize,
    /// An adjust word (see the module docs).
    pub(crate) adjust: bool,
    /// The deadline, or `None` when it must be read from the slot.
    pub(crate) deadline: Option<u64>,
}

/// The slot a word is about (what [`read`] returns as `slot`), cheaply.
#[inline]
pub(crate) fn slot(word: u64) -> usize {
    (word as u32).wrapping_sub(1) as usize
}

/// Reads a word back at the reaper's `now`.
#[inline]
pub(crate) fn read(word: u64, now: u64, shift: u32) -> Arrival {
    let slot = (word as u32 - 1) as usize;
    let deadline = (word & IN_SLOT == 0).then(|| {
        let now_tick = now >> shift;
        let delta = (word >> 32).wrapping_sub(now_tick) & TICK_MASK;
        // Sign-extend the 30-bit difference: deadlines up to 2^29 ticks behind `now` too.
        let delta = ((delta << (64 - TICK_BITS)) as i64 >> (64 - TICK_BITS)) as u64;
        now_tick.wrapping_add(delta) << shift
    });
    Arrival {
        slot,
        adjust: word & ADJUST != 0,
        deadline,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::is_due;

    #[test]
    fn deadlines_read_back_as_the_start_of_their_tick() {
        let shift = 20; // ~1 ms
        let tick = 1u64 << shift;
        for now in [0, 12_345, u64::MAX - 5 * tick, 1 << 63, (1 << 40) + 7] {
            for timeout in [1, tick - 1, tick, 30_000_000_000, (MAX_TICKS - 1) << shift] {
                let deadline = now.wrapping_add(timeout);
                let word = open(77, deadline, timeout, shift);
                // Read at the time it was pushed, and much later (a lagging reaper).
                for later in [0, 3 * tick, 1 << (shift + 28)] {
                    let at = now.wrapping_add(later);
                    let a = read(word, at, shift);
                    assert_eq!((a.slot, a.adjust), (77, false));
                    let got = a.deadline.expect("in the word");
                    assert_eq!(got >> shift, deadline >> shift, "its own tick");
                    assert!(is_due(got, deadline), "never later: {now} {timeout} {got}");
                }
            }
        }
    }

    #[test]
    fn long_timeouts_fine_ticks_and_adjusts_defer_to_the_slot() {
        let word = open(0, 5 << 20, MAX_TICKS << 20, 20);
        assert_eq!(read(word, 0, 20).deadline, None);
        let word = open(3, 1_000, 1_000, 10);
        assert_eq!(read(word, 0, 10).deadline, None);
        let a = read(adjust(u32::MAX as usize - 1), 0, 20);
        assert_eq!(
            (a.slot, a.adjust, a.deadline),
            (u32::MAX as usize - 1, true, None)
        );
        assert_ne!(adjust(0), 0);
        assert_ne!(open(0, 0, 1, 20), 0, "never the empty cell");
    }
}
