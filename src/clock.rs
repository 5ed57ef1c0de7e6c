//! Time sources.
//!
//! Every part of the crate reads time as `u64` nanoseconds on a *wrapping* timeline whose
//! origin is arbitrary. "`d` is due at `now`" means `(now.wrapping_sub(d) as i64) >= 0`, so
//! every comparison is valid as long as the two instants are within 2^63 ns (292 years) of
//! each other, wherever the origin lies — near 0, near 2^63 or just below `u64::MAX`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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

/// The real clock: nanoseconds since a process-wide [`Instant`] taken on first use.
///
/// All `MonotonicClock`s in a process share that origin, so their readings are comparable.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// A handle on the process-wide monotonic clock.
    pub fn new() -> Self {
        MonotonicClock
    }
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        // Truncation is the wrapping timeline: it only matters after 584 years.
        origin().elapsed().as_nanos() as u64
    }
}

/// A clock that moves only when told to; clones share one time.
///
/// For deterministic tests and simulation. It deliberately uses std's atomic even under loom:
/// its reading is an input to the protocols being modelled, not part of them.
#[derive(Clone, Debug)]
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
    fn due_is_wrap_aware() {
        assert!(is_due(u64::MAX, 3));
        assert!(!is_due(3, u64::MAX));
        assert!(is_due(7, 7));
        assert!(is_due(1 << 63, (1 << 63) + 1));
        assert!(!is_due((1 << 63) + 1, 1 << 63));
    }
}
