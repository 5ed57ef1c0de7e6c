//! [`AckerBuilder`]: an acker's configuration, checked at build ([`ConfigError`] names
//! the parameter), and the start of its engine.

use std::fmt;
use std::time::Duration;

use super::engine;
use super::{Acker, BurstHandOver, Callback, Completion};
use crate::clock::{duration_nanos, Clock, MonotonicClock};
use crate::error::ConfigError;

/// Configures and builds an [`Acker`].
pub struct AckerBuilder<T> {
    pub(crate) timeout: Duration,
    /// `None`: the default of the build method (`DEFAULT_RESOLUTION`, or the async one).
    pub(crate) resolution: Option<Duration>,
    pub(crate) shards: Option<usize>,
    pub(crate) max_pending: usize,
    pub(crate) clock: Option<Box<dyn Clock>>,
    pub(crate) on_complete: Option<Callback<T>>,
    /// The order in which a pass delivers a burst of timeouts, by a key of each payload
    /// (`Engine::deliver_timeouts`): set by the async acker (its cells' numbers), not by
    /// users.
    pub(crate) delivery_order: Option<fn(&T) -> u32>,
    /// Where the reaper thread's bursts of timeouts go, in batches, in place of
    /// `on_complete` (`Engine::deliver_timeouts`): set by the async acker (its runtime's
    /// workers), not by users.
    pub(crate) burst_hand_over: Option<BurstHandOver<T>>,
    /// The groups of the smallest table ([`engine`]'s `Config::smallest_groups`): `None`
    /// for the plain acker's; the async acker's are smaller.
    pub(crate) smallest_groups: Option<usize>,
}

impl<T> fmt::Debug for AckerBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckerBuilder")
            .field("timeout", &self.timeout)
            .field("resolution", &self.resolution)
            .field("shards", &self.shards)
            .field("max_pending", &self.max_pending)
            .field("custom_clock", &self.clock.is_some())
            .field("on_complete", &self.on_complete.is_some())
            .finish()
    }
}

/// The longest timeout: deadlines must stay within the wrapping timeline's 2^63 ns horizon
/// (the ticks' own bound, [`engine::MAX_TIMEOUT_TICKS`], is checked at build).
pub(super) const MAX_TIMEOUT_NS: u64 = 1 << 62;
/// Slot indices are `u32` in the timers' entries, and the largest table holds `max_pending`
/// at a load of 2/3 (rounded to groups, `Engine::room_table_slots` in [`engine`]): 2^30
/// keeps every timer entry's table and slot within 32 bits.
pub(super) const MAX_PENDING: usize = 1 << 30;
/// The coarsest tick, 2^43 ns (about 2.4 h): the wheels' coarsest level then spans 2^62 ns,
/// the most a wrapping timeline's due test can tell apart (`wheel::MAX_SHIFT`).
const MAX_RESOLUTION_NS: u64 = 1 << crate::wheel::MAX_SHIFT;
const MAX_SHARDS: usize = 1 << 16;
/// The resolution of `build` and `build_manual` unless one is set: 2^20 ns, about 1 ms.
const DEFAULT_RESOLUTION: Duration = Duration::from_nanos(1 << 20);

impl<T: Send + 'static> AckerBuilder<T> {
    pub(super) fn new() -> Self {
        AckerBuilder {
            timeout: Duration::from_secs(30),
            resolution: None,
            shards: None,
            max_pending: 1 << 20,
            clock: None,
            on_complete: None,
            delivery_order: None,
            burst_hand_over: None,
            smallest_groups: None,
        }
    }

    /// The default tree timeout; 30 s unless set.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The wheels' tick, rounded up to a power of two of nanoseconds. Above 2^43 ns (about
    /// 2.4 h) `build` refuses it. Unless set: 2^20 ns (~1 ms) for [`build`](Self::build)
    /// and [`build_manual`](Self::build_manual), 2^18 ns (~262 µs) for `build_async` (the
    /// `tokio` feature).
    ///
    /// A tree times out at the start of the first tick after its base tick plus its timeout
    /// rounded up to whole ticks, plus one (the base is read at the first message, and may
    /// be up to a tick old): on average about a tick and a half late for a timeout that is
    /// not a whole number of ticks, never early. A finer tick makes timeouts more punctual
    /// and wakes the reaper more often while trees are being handed to it (once a tick).
    pub fn resolution(mut self, resolution: Duration) -> Self {
        self.resolution = Some(resolution);
        self
    }

    /// Number of shards (tables), rounded up to a power of two and at least 16 (a root's
    /// key leaves its table's 4 bits out); default: a power of two >= 4 x cores.
    /// 0 is an error.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The most entries (initialized trees and orphans) held at once, across all shards;
    /// default 1 << 20. It is an exact upper bound, and a bound only: nothing is allocated
    /// for it. Each thread keeps a few spare credits for its next trees (at most 64, and
    /// none when `max_pending` is below 128 times the credits' stripes, twice the cores
    /// rounded up to a power of two), so with several threads an init may be refused while
    /// another thread holds some: early by at most that many a thread. The tables start
    /// small (2,048 to 4,096 slots each, 32 B a slot for a `u32` payload; `build_async`'s,
    /// 256 to 512; mapped but untouched until used), double as what is pending grows, up to
    /// their share of `max_pending` at a load of 4/5 (further for a root that finds no
    /// room), and shrink back after it falls. A completed tree's
    /// slot is reusable at once. Random roots from one thread fill an acker to the brim
    /// without a refusal.
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// The time source; [`MonotonicClock`] unless set.
    pub fn clock<C: Clock>(mut self, clock: C) -> Self {
        // The default clock named explicitly is the default: callers' ticks then come from
        // the time-stamp counter where that is safe ([`tsc`](crate::clock::tsc)).
        self.clock = (std::any::TypeId::of::<C>() != std::any::TypeId::of::<MonotonicClock>())
            .then(|| Box::new(clock) as Box<dyn Clock>);
        self
    }

    /// Called exactly once per initialized root, on the completing thread. It may call back
    /// into the acker. A panic in it is caught and counted.
    ///
    /// A callback that owns an `Acker` handle keeps the acker alive (and its reaper
    /// running) until [`Acker::shutdown`] is called.
    pub fn on_complete(mut self, f: impl Fn(Completion<T>) + Send + Sync + 'static) -> Self {
        self.on_complete = Some(Box::new(f));
        self
    }

    /// Builds the acker and starts its one reaper thread (`ackwheel-reaper`), which sleeps
    /// until the next deadline and not at all while nothing is pending. A bad parameter is
    /// a [`ConfigError`] that names it; so is an operating system that refuses the thread.
    pub fn build(self) -> Result<Acker<T>, ConfigError> {
        self.build_with(false)
    }

    /// No thread: the owner drives expiry with [`Acker::expire`]. For tests and simulation.
    pub fn build_manual(self) -> Result<Acker<T>, ConfigError> {
        self.build_with(true)
    }

    /// Checks the parameters: `(timeout ns, resolution ns, shards)`.
    fn checked(&self) -> Result<(u64, u64, usize), ConfigError> {
        let timeout = duration_nanos(self.timeout);
        if timeout == 0 {
            return Err(ConfigError::Zero { param: "timeout" });
        }
        let resolution = self.resolution.unwrap_or(DEFAULT_RESOLUTION);
        if resolution.is_zero() {
            return Err(ConfigError::Zero {
                param: "resolution",
            });
        }
        if duration_nanos(resolution) > MAX_RESOLUTION_NS {
            return Err(ConfigError::TooLarge {
                param: "resolution",
                got: format!("{resolution:?}"),
                max: format!("{:?}", Duration::from_nanos(MAX_RESOLUTION_NS)),
            });
        }
        let resolution = duration_nanos(resolution).next_power_of_two();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = match self.shards {
            Some(0) => return Err(ConfigError::Zero { param: "shards" }),
            Some(n) if n > MAX_SHARDS => {
                return Err(ConfigError::TooLarge {
                    param: "shards",
                    got: n.to_string(),
                    max: MAX_SHARDS.to_string(),
                })
            }
            Some(n) => n.next_power_of_two(),
            None => (4 * cores).next_power_of_two().min(MAX_SHARDS),
        };
        if self.max_pending == 0 {
            return Err(ConfigError::Zero {
                param: "max_pending",
            });
        }
        if self.max_pending > MAX_PENDING {
            return Err(ConfigError::TooLarge {
                param: "max_pending",
                got: self.max_pending.to_string(),
                max: MAX_PENDING.to_string(),
            });
        }
        Ok((timeout, resolution, shards))
    }

    fn build_with(self, manual: bool) -> Result<Acker<T>, ConfigError> {
        let (timeout_ns, resolution_ns, shards) = self.checked()?;
        let max_timeout = engine::MAX_TIMEOUT_TICKS.saturating_mul(resolution_ns);
        if timeout_ns > max_timeout {
            return Err(ConfigError::TooLarge {
                param: "timeout",
                got: format!("{:?}", self.timeout),
                max: format!(
                    "{:?} (2^30 - 2 ticks of the resolution)",
                    Duration::from_nanos(max_timeout)
                ),
            });
        }
        let config = engine::Config {
            shards,
            max_pending: self.max_pending,
            timeout_ns,
            resolution_ns,
            tsc_ticks: self.clock.is_none() && crate::clock::tsc::available(),
            clock: self
                .clock
                .unwrap_or_else(|| Box::new(MonotonicClock::new())),
            on_complete: self.on_complete,
            delivery_order: self.delivery_order,
            burst_hand_over: self.burst_hand_over,
            smallest_groups: self.smallest_groups,
            manual,
        };
        Ok(Acker {
            handle: engine::Handle::start(config)?,
        })
    }
}
