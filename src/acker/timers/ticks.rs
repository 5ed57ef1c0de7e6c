//! Tick arithmetic: the acker stores times as `u32` ticks of its resolution that wrap, and
//! reads them against a full (`u64`) tick it knows. Two ticks compare correctly while they
//! are less than 2^31 apart; keeping every stored tick that close to the tick it is read
//! against is the anchor's job ([`anchor`](crate::acker::engine::time)).

/// A tick: `u32`, wrapping.
pub type Tick = u32;

/// Whether `tick` is at or before `now`, for ticks less than 2^31 apart.
#[inline]
pub fn reached(tick: Tick, now: Tick) -> bool {
    (now.wrapping_sub(tick) as i32) >= 0
}

/// The full tick of a `u32` tick within 2^31 ticks of the full tick `near`.
#[inline]
pub fn full_near(near: u64, tick: Tick) -> u64 {
    let delta = tick.wrapping_sub(near as Tick) as i32;
    near.wrapping_add_signed(i64::from(delta))
}

/// `ns` in ticks of `shift` (2^shift ns), rounded up, and at least one.
pub fn ticks_at_least_one(ns: u64, shift: u32) -> u64 {
    ns.div_ceil(1 << shift).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reached_compares_across_the_wrap() {
        assert!(reached(5, 5));
        assert!(reached(5, 6));
        assert!(!reached(6, 5));
        assert!(reached(u32::MAX - 1, 3)); // 3 is after the wrap
        assert!(!reached(3, u32::MAX - 1));
    }

    #[test]
    fn full_near_finds_the_tick_on_either_side_of_the_wrap() {
        assert_eq!(full_near(1 << 32, 5), (1 << 32) + 5);
        assert_eq!(full_near((1 << 32) + 3, u32::MAX), (1 << 32) - 1);
        assert_eq!(full_near(7, 5), 5);
    }
}
