//! The wheel's shape: how many buckets each level has, how wide they are, and where in the
//! slab each bucket's sentinel lives.
//!
//! Caffeine's geometry is five wheels of 64, 64, 32, 4 and 1 buckets whose buckets span
//! 2^30, 2^36, 2^42, 2^47 and 2^49 ns (≈1.07 s, 1.14 min, 1.22 h, 1.63 d, 6.5 d). Each
//! level's whole range equals one bucket of the next (64 × 2^30 = 2^36, 64 × 2^36 = 2^42,
//! 32 × 2^42 = 2^47, 4 × 2^47 = 2^49), which is what lets a timer that does not fit level
//! `i` fall into a *later* bucket of level `i + 1`, never its current one. The single bucket
//! of the last level is the overflow: everything 2^49 ns or more away waits there and is
//! re-placed each time the top level's tick turns.
//!
//! `with_resolution` keeps the shape and slides every shift down so the finest bucket spans
//! the requested resolution (rounded up to a power of two).

/// Buckets per level, finest first (Caffeine's `BUCKETS`).
pub(crate) const BUCKETS: [u64; LEVELS] = [64, 64, 32, 4, 1];

/// Number of levels, the overflow included.
pub(crate) const LEVELS: usize = 5;

/// log2 of each level's bucket span relative to the finest: 64 = 2^6 buckets of level 0 make
/// one bucket of level 1, another 2^6 make one of level 2, then 2^5, then 2^2.
const RELATIVE_SHIFT: [u32; LEVELS] = [0, 6, 12, 17, 19];

/// Caffeine's finest span, `ceilingPowerOfTwo(1 s)` = 2^30 ns.
pub(crate) const DEFAULT_SHIFT: u32 = 30;

/// The coarsest shift must stay below 64 (a shift by 64 is not a tick); one bit more keeps
/// every tick difference below 2^63, the wrapping timeline's horizon.
pub(crate) const MAX_SHIFT: u32 = 63 - 1 - RELATIVE_SHIFT[LEVELS - 1];

/// Where each level's sentinels start in the slab: level `l`'s bucket `b` is node
/// `FIRST_SENTINEL[l] + b`.
pub(crate) const FIRST_SENTINEL: [u32; LEVELS] = [0, 64, 128, 160, 164];

/// The list of timers already found due by an `advance` but not yet yielded.
pub(crate) const READY: u32 = 165;

/// Nodes below this index are list heads, never timers.
pub(crate) const SENTINELS: u32 = 166;

/// The bucket shifts of one wheel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// log2 of the bucket span of each level, in nanoseconds.
    pub(crate) shift: [u32; LEVELS],
}

impl Geometry {
    /// The geometry whose finest bucket spans `2^finest` ns (clamped to [`MAX_SHIFT`]).
    pub(crate) fn with_finest_shift(finest: u32) -> Self {
        let finest = finest.min(MAX_SHIFT);
        let mut shift = [0; LEVELS];
        for (s, rel) in shift.iter_mut().zip(RELATIVE_SHIFT) {
            *s = finest + rel;
        }
        Geometry { shift }
    }

    /// The geometry whose finest bucket spans `resolution_ns` rounded up to a power of two.
    pub(crate) fn with_resolution_nanos(resolution_ns: u64) -> Self {
        let finest = resolution_ns
            .max(1)
            .checked_next_power_of_two()
            .map_or(64, u64::trailing_zeros);
        Self::with_finest_shift(finest)
    }

    /// The finest bucket span in nanoseconds.
    pub(crate) fn resolution(&self) -> u64 {
        1 << self.shift[0]
    }

    /// `level`'s tick of the instant `t`: which of its buckets-widths `t` falls in.
    #[inline]
    pub(crate) fn tick(&self, level: usize, t: u64) -> u64 {
        t >> self.shift[level]
    }

    /// How many of `level`'s ticks lie between `from` and `to`, counted forward on the
    /// wrapping timeline. Ticks live in `[0, 2^(64 - shift))`, so the difference is taken
    /// modulo that: the tick after the last one is tick 0.
    #[inline]
    pub(crate) fn ticks_between(&self, level: usize, from: u64, to: u64) -> u64 {
        let s = self.shift[level];
        (to >> s).wrapping_sub(from >> s) & (u64::MAX >> s)
    }

    /// The sentinel of `level`'s bucket that holds tick `tick`.
    #[inline]
    pub(crate) fn sentinel(level: usize, tick: u64) -> u32 {
        FIRST_SENTINEL[level] + (tick & (BUCKETS[level] - 1)) as u32
    }

    /// The start of `level`'s tick `tick` as an instant, wrapping like the timeline.
    #[inline]
    pub(crate) fn tick_start(&self, level: usize, tick: u64) -> u64 {
        tick.wrapping_shl(self.shift[level])
    }
}

/// The (level, bucket) of a wheel sentinel, or `None` for [`READY`].
#[inline]
pub(crate) fn level_of_sentinel(sentinel: u32) -> Option<(usize, u32)> {
    // Spelled out rather than searched: this runs on every link and unlink.
    let level = match sentinel {
        0..=63 => 0,
        64..=127 => 1,
        128..=159 => 2,
        160..=163 => 3,
        164 => 4,
        _ => return None,
    };
    Some((level, sentinel - FIRST_SENTINEL[level]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry_is_caffeines() {
        let g = Geometry::with_finest_shift(DEFAULT_SHIFT);
        assert_eq!(g.shift, [30, 36, 42, 47, 49]);
        // Each level's range is one bucket of the next.
        for l in 0..LEVELS - 1 {
            assert_eq!(
                BUCKETS[l] << g.shift[l],
                1u64 << g.shift[l + 1],
                "level {l}"
            );
        }
        let total: u64 = BUCKETS.iter().sum();
        assert_eq!(total as u32 + 1, SENTINELS);
        assert_eq!(FIRST_SENTINEL[LEVELS - 1] + 1, READY);
    }

    #[test]
    fn resolution_rounds_up_to_a_power_of_two_and_clamps() {
        assert_eq!(
            Geometry::with_resolution_nanos(1_000_000).resolution(),
            1 << 20
        );
        assert_eq!(
            Geometry::with_resolution_nanos(1 << 20).resolution(),
            1 << 20
        );
        assert_eq!(Geometry::with_resolution_nanos(0).resolution(), 1);
        assert_eq!(Geometry::with_resolution_nanos(1).resolution(), 1);
        assert_eq!(
            Geometry::with_resolution_nanos(u64::MAX).shift[0],
            MAX_SHIFT
        );
        assert!(Geometry::with_resolution_nanos(u64::MAX).shift[LEVELS - 1] < 63);
    }

    #[test]
    fn ticks_wrap_with_the_timeline() {
        let g = Geometry::with_finest_shift(10);
        assert_eq!(g.ticks_between(0, u64::MAX, 0), 1);
        assert_eq!(g.ticks_between(0, u64::MAX - 1023, 1024), 2);
        assert_eq!(g.ticks_between(4, 5, 5), 0);
        assert_eq!(g.tick_start(0, g.tick(0, u64::MAX).wrapping_add(1)), 0);
    }

    #[test]
    fn sentinels_map_back_to_their_level() {
        assert_eq!(level_of_sentinel(0), Some((0, 0)));
        assert_eq!(level_of_sentinel(63), Some((0, 63)));
        assert_eq!(level_of_sentinel(64), Some((1, 0)));
        assert_eq!(level_of_sentinel(163), Some((3, 3)));
        assert_eq!(level_of_sentinel(164), Some((4, 0)));
        assert_eq!(level_of_sentinel(READY), None);
        assert_eq!(Geometry::sentinel(2, 33), 128 + 1);
    }
}
