//! Time sources.
//!
//! Every part of the crate reads time as `u64` nanoseconds on a *wrapping* timeline whose
//! origin is arbitrary. "`d` is due at `now`" means `(now.wrapping_sub(d) as i64) >= 0`, so
//! every comparison is valid as long as the two instants are within 2^63 ns (292 years) of
//! each other, wherever the origin lies — near 0, near 2^63 or just below `u64::MAX`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) mod tsc;

/// A source of monotonic time in nanoseconds on a wrapping `u64` timeline.
pub trait Clock: Send + Sync + 'static {
    /// Current time in nanoseconds on a monotonic, wrapping u64 timeline.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl Clock for Box<dyn Clock> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// `true` when `deadline` is due at `now` on the wrapping timeline.
#[inline]
pub(crate) fn is_due(deadline: u64, now: u64) -> bool {
    (now.wrapping_sub(deadline) as i64) >= 0
}

/// `d` as whole nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The real clock: the system's monotonic clock (the one [`Instant`](std::time::Instant)
/// reads) in nanoseconds.
///
/// All `MonotonicClock`s in a process share one origin, so their readings are comparable.
/// On Linux the reading is `CLOCK_MONOTONIC` itself, taken with one `clock_gettime` call
/// rather than through `Instant` and a subtraction (27 rather than 34 ns a reading on the
/// development machine). The Acker's callers need only the tick they are in, and take it
/// from the CPU's time-stamp counter where that is safe. Elsewhere, and under Miri, it is
/// the time since a process-wide `Instant` taken on first use.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// A handle on the process-wide monotonic clock.
    pub fn new() -> Self {
        MonotonicClock
    }
}

impl MonotonicClock {
    /// The `Instant` of a reading of this clock: for code that holds `Instant`s (tokio's
    /// timers, deadline-based sleeps). The two timelines are tied by one pair of readings
    /// taken together once per process, so a conversion is off by at most the time
    /// between those two readings (tens of nanoseconds), always by the same amount: a
    /// reading converted there and back is unchanged, and differences are exact.
    ///
    /// ```
    /// use ackwheel::{Clock, MonotonicClock};
    /// use std::time::{Duration, Instant};
    ///
    /// let clock = MonotonicClock::new();
    /// let deadline = clock.now() + 5_000_000; // 5 ms from now
    /// let at: Instant = clock.instant(deadline);
    /// assert!(at > Instant::now());
    /// assert_eq!(clock.nanos(at), deadline);
    /// ```
    pub fn instant(&self, nanos: u64) -> std::time::Instant {
        let (at, reading) = anchor();
        // Signed: a reading may lie before the anchor (a deadline in the past).
        let offset = nanos.wrapping_sub(reading) as i64;
        if offset >= 0 {
            at + Duration::from_nanos(offset as u64)
        } else {
            at.checked_sub(Duration::from_nanos(offset.unsigned_abs()))
                .unwrap_or(at)
        }
    }

    /// This clock's reading at `instant`: the inverse of [`instant`](Self::instant).
    pub fn nanos(&self, instant: std::time::Instant) -> u64 {
        let (at, reading) = anchor();
        match instant.checked_duration_since(at) {
            Some(after) => reading.wrapping_add(duration_nanos(after)),
            None => reading.wrapping_sub(duration_nanos(at - instant)),
        }
    }
}

/// One `Instant` and the clock's reading taken with it, once per process: the two
/// timelines differ by a constant, which this pair fixes.
fn anchor() -> (std::time::Instant, u64) {
    use std::sync::OnceLock;
    static ANCHOR: OnceLock<(std::time::Instant, u64)> = OnceLock::new();
    *ANCHOR.get_or_init(|| (std::time::Instant::now(), MonotonicClock.now()))
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn origin() -> std::time::Instant {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // Safety: `ts` is a valid, writable timespec for the call's duration, and
            // CLOCK_MONOTONIC is always supported on Linux, so the call cannot fail (std's
            // `Instant::now` makes the same call and treats an error as impossible).
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
            // Wrapping is the timeline's arithmetic: it only matters after 584 years.
            (ts.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(ts.tv_nsec as u64)
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            // Truncation is the wrapping timeline: it only matters after 584 years.
            origin().elapsed().as_nanos() as u64
        }
    }
}

/// A clock that moves only when told to; clones share one time.
///
/// For deterministic tests and simulation. It deliberately uses std's atomic even under
/// loom: its reading is an input to the protocols being modelled, not part of them.
/// `ManualClock::default()` starts at 0.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: u64) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Sets the time to `now` (it may move backwards; the crate's types tolerate that).
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`, wrapping around `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        // fetch_add wraps on overflow, which is exactly the timeline's arithmetic.
        self.now.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time_and_wrap() {
        let a = ManualClock::new(u64::MAX - 5);
        let b = a.clone();
        a.advance(Duration::from_nanos(10));
        assert_eq!(b.now(), 4);
        b.set(42);
        assert_eq!(a.now(), 42);
        let shared: Arc<dyn Clock> = Arc::new(a);
        assert_eq!(shared.now(), 42);
    }

    #[test]
    fn monotonic_clock_does_not_go_backwards() {
        let c = MonotonicClock::new();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(is_due(last, t), "{t} went behind {last}");
            last = t;
        }
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.now().wrapping_sub(last) >= 2_000_000);
    }

    #[test]
    fn monotonic_clock_runs_at_the_rate_of_instant() {
        // Read inside a pair of `Instant` readings: the clock's interval lies within
        // theirs, and covers the sleep. A clock in other units, or on another source that
        // runs faster than the system's monotonic clock, fails the first bound.
        let c = MonotonicClock::new();
        let outer = std::time::Instant::now();
        let start = c.now();
        std::thread::sleep(Duration::from_millis(20));
        let end = c.now();
        let outer = duration_nanos(outer.elapsed());
        let inner = end.wrapping_sub(start);
        assert!(
            inner <= outer,
            "clock {inner} ns within Instant's {outer} ns"
        );
        assert!(inner >= 20_000_000, "clock {inner} ns over a 20 ms sleep");
    }

    #[test]
    fn readings_and_instants_convert_both_ways_past_and_future() {
        let c = MonotonicClock::new();
        let before = std::time::Instant::now();
        let now = c.now();
        let after = std::time::Instant::now();
        let at = c.instant(now);
        // Within the anchor pair's own gap (tens of ns; 1 ms allows for a preempted read).
        let slack = Duration::from_millis(1);
        assert!(
            before - slack <= at && at <= after + slack,
            "{at:?} not within {before:?}..{after:?}"
        );
        for offset in [0, 1, 999, 5_000_000_000] {
            assert_eq!(c.nanos(c.instant(now + offset)), now + offset);
            assert_eq!(c.nanos(c.instant(now - offset)), now - offset);
        }
        let later = c.instant(now + 7_000_000);
        assert_eq!(later.duration_since(at), Duration::from_millis(7));
        assert_eq!(ManualClock::default().now(), 0);
    }

    #[test]
    fn due_is_wrap_aware() {
        assert!(is_due(u64::MAX, 3));
        assert!(!is_due(3, u64::MAX));
        assert!(is_due(7, 7));
        assert!(is_due(1 << 63, (1 << 63) + 1));
        assert!(!is_due((1 << 63) + 1, 1 << 63));
    }
}
