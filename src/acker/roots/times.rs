//! A slot's times, in ticks of the acker's resolution, beside its word.
//!
//! Each slot has one `AtomicU64`: the tick of the root's first message (high half) and its
//! *base* (low half), the tick its timeout counts from: the first message, or the last
//! reset. Both are `u32` ticks that wrap (2^32 ticks are 49.7 days at 1 ms); readers compare
//! them wrapping, against a full tick they know. The deadline is the base plus the tree's
//! timeout (its own, in the slot's timeout cell, or the acker's default), computed where it
//! is read: a reset moves the base (the later of the two), an init with a timeout of its own
//! stores the timeout, and neither needs the other's value, so the two cannot race into a
//! deadline counted with the wrong timeout (the first version stored deadlines, and a reset
//! that read the orphan's default timeout just before init stored its own lost to it). Zero means *free*: the
//! times are also the slot's **reservation**. A claimer first CASes the times from 0 to its
//! stamp and only then CASes its word into the EMPTY slot, and whoever empties a slot stores
//! 0 only after the word is EMPTY. So:
//!
//! * a slot's times are written before any other thread can see its root (the claim CAS
//!   publishes them), and by no one who could be late: a claimer that lost its race for a
//!   slot never wrote its times there, so no stale stamp can land on the slot's next root;
//! * two claimers never race for one EMPTY word (the second's reservation fails and it
//!   tries the next EMPTY slot), and the word CAS after a reservation cannot fail.
//!
//! After the claim only `reset_timeout` writes the times (a CAS that keeps the start and
//! moves the base to now unless it is later), and then sets R on the word so that a reaper
//! about to time the tree out on the old deadline fails its CAS. The reaper reads the times
//! after it loaded the word and CASes from that word, so a deadline moved by a reset, or by
//! an init's own timeout (written while JOINING), makes its CAS fail (`Roots::expire`).

/// A tick: `u32`, wrapping.
pub type Tick = u32;

/// Whether `tick` is at or before `now`, for ticks less than 2^31 apart.
#[inline]
pub fn reached(tick: Tick, now: Tick) -> bool {
    (now.wrapping_sub(tick) as i32) >= 0
}

/// What a claimer writes into a new entry's times: the tick it read, as its start and its
/// base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    bits: u64,
}

impl Stamp {
    /// `start` and `base` ticks. A start of 0 is stored as `u32::MAX`, one tick earlier
    /// (elapsed times may read one tick long, never short), so a stamp is never 0.
    #[inline]
    pub fn new(start: Tick, base: Tick) -> Stamp {
        let start = if start == 0 { u32::MAX } else { start };
        Stamp {
            bits: u64::from(start) << 32 | u64::from(base),
        }
    }

    #[inline]
    pub(super) fn from_bits(bits: u64) -> Option<Stamp> {
        (bits != 0).then_some(Stamp { bits })
    }

    #[inline]
    pub(super) fn bits(self) -> u64 {
        self.bits
    }

    /// The first message's tick.
    #[inline]
    pub fn start(self) -> Tick {
        (self.bits >> 32) as Tick
    }

    /// The tick the timeout counts from: the first message, or the last reset.
    #[inline]
    pub fn base(self) -> Tick {
        self.bits as Tick
    }

    /// The same start with another base.
    #[inline]
    pub fn with_base(self, base: Tick) -> Stamp {
        Stamp::new(self.start(), base)
    }
}

impl Default for Stamp {
    /// Tick 1: for tests of the table that do not look at times.
    fn default() -> Self {
        Stamp::new(1, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_never_zero_and_keeps_both_ticks() {
        let s = Stamp::new(7, 1_000_007);
        assert_eq!((s.start(), s.base()), (7, 1_000_007));
        let zero = Stamp::new(0, 0);
        assert_ne!(zero.bits(), 0);
        assert_eq!((zero.start(), zero.base()), (u32::MAX, 0));
        assert_eq!(Stamp::from_bits(0), None);
        assert_eq!(s.with_base(9).start(), 7);
    }

    #[test]
    fn reached_compares_across_the_wrap() {
        assert!(reached(5, 5));
        assert!(reached(5, 6));
        assert!(!reached(6, 5));
        assert!(reached(u32::MAX - 1, 3)); // 3 is after the wrap
        assert!(!reached(3, u32::MAX - 1));
    }
}
