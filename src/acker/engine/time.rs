//! Time in ticks: the clock's reading at build is the epoch, a tick is a power of two of
//! nanoseconds (the resolution), and tick 0 is never used (module docs of
//! [`engine`](crate::acker::engine), "Times"). Callers read the tick through
//! [`Engine::caller_full`](super::Engine::caller_full), which takes it from the time-stamp
//! counter where it can be trusted; the reaper reads the clock itself.

use std::time::Duration;

use super::{Engine, MAX_TIMEOUT_TICKS};
use crate::acker::table::Stamp;
use crate::acker::timers::ticks::Tick;
use crate::clock::tsc;

/// How clock readings map to ticks: the epoch (tick 1 begins there) and the resolution, a
/// tick of 2^`shift` nanoseconds. (A `Tick` is one tick's number.)
#[derive(Debug)]
pub(super) struct TickScale {
    pub(super) epoch: u64,
    pub(super) shift: u32,
}

impl TickScale {
    /// The full tick of `now` (at least 1; a clock read before the epoch is tick 1).
    #[inline]
    pub(super) fn full(&self, now: u64) -> u64 {
        let since = now.wrapping_sub(self.epoch);
        if (since as i64) < 0 {
            return 1;
        }
        (since >> self.shift) + 1
    }

    /// Ticks in `nanos`, rounded up, plus one (module docs), at most [`MAX_TIMEOUT_TICKS`].
    pub(super) fn timeout(&self, nanos: u64) -> Tick {
        let ticks = nanos.div_ceil(1 << self.shift) + 1;
        ticks.min(MAX_TIMEOUT_TICKS) as Tick
    }

    /// `ticks` ticks as a duration (any count: a tree's life in ticks is not bounded).
    #[inline]
    pub(super) fn nanos(&self, ticks: u64) -> Duration {
        // Every completion's `elapsed` comes through here: in `u64` while it fits (585
        // years of nanoseconds), since a `u128` division is a library call that cost a
        // tree more than the rest of this function.
        if ticks <= u64::MAX >> self.shift {
            return Duration::from_nanos(ticks << self.shift);
        }
        let nanos = u128::from(ticks) << self.shift;
        // Past `Duration::MAX` (2^64 ticks of 2^30 ns and more): the longest there is.
        match u64::try_from(nanos / 1_000_000_000) {
            Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
            Err(_) => Duration::MAX,
        }
    }
}

impl<T: Send + 'static> Engine<T> {
    /// The tick now (tests).
    #[cfg(test)]
    pub(super) fn tick_now(&self) -> Tick {
        self.ticks.full(self.clock.now()) as Tick
    }

    /// [`caller_full`](super::Engine::caller_full) as a stored tick.
    #[cfg(test)]
    pub(super) fn caller_tick(&self) -> Tick {
        self.caller_full() as Tick
    }

    /// The full tick now on a caller's thread: from the time-stamp counter when the clock
    /// is the monotonic one and the counter can be trusted ([`crate::clock::tsc`]: the
    /// clock's tick, or the next one within nanoseconds of a boundary, never an earlier
    /// one), else a read.
    #[inline]
    pub(super) fn caller_full(&self) -> u64 {
        if self.tsc_ticks {
            if let Some((lo, hi)) = tsc::bounds() {
                let tick = self.ticks.full(hi);
                if self.ticks.full(lo) == tick {
                    return tick;
                }
            }
            // The range straddles a tick boundary (or there is no anchor yet): read, and
            // anchor this thread again. `tsc_ticks` says the clock is this one.
            return self.ticks.full(tsc::read());
        }
        self.ticks.full(self.clock.now())
    }

    /// The stamp a new entry gets at full tick `tick` (a writer's,
    /// [`anchor`](crate::acker::engine::anchor)): its start and its base.
    #[inline]
    pub(super) fn stamp_at(&self, tick: u64) -> Stamp {
        Stamp::new(tick as Tick, tick as Tick)
    }
}
