//! The trackers the acker bench compares, behind one trait so every contender runs the
//! very same workload code.
//!
//! Every tracker has the acker's semantics (the `Acker`'s rustdoc):
//!
//! * the value is the XOR of init's `xor` and every ack's `xor`; the tree completes `Acked`
//!   when init has been seen and the value is 0, on the thread whose call made it so;
//! * `fail` completes an initialized tree `Failed`; acks and fails that come before init are
//!   held (an *orphan*), and init then completes at once if the value is 0 (Acked wins) or a
//!   fail was held;
//! * an initialized tree whose deadline passes completes `TimedOut` (on the tracker's own
//!   background thread); an orphan is dropped silently;
//! * a second init of a pending root is refused with `Duplicate`;
//! * exactly one completion per initialized root, through the `on_complete` sink.
//!
//! The bench checks these on every tracker before it measures anything (`semantics.rs`),
//! so a peer cannot win by doing less.
//!
//! The peers key their hash tables with [`U64Hasher`], the same one-multiply mix the Acker
//! uses, rather than SipHash: the default hasher would add ~15 ns per lookup to every peer,
//! and Java's `HashMap<Long, _>` (Storm's) hashes a long almost for free. The comparison is
//! about the structures, not about the hash function.

pub(crate) mod dash;
pub(crate) mod dash_wheel;
pub(crate) mod entry_map;
pub(crate) mod moka_cache;
pub(crate) mod scc_map;
pub(crate) mod semantics;
pub(crate) mod storm;

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use ackwheel::{Acker, Clock, Completion, InitError, MonotonicClock};

/// Where completions go; every tracker calls it once per initialized root.
pub(crate) type Sink = std::sync::Arc<dyn Fn(Completion<u32>) + Send + Sync>;

/// The operations the workload drives. Same signatures and return values as [`Acker`].
pub(crate) trait Tracker: Send + Sync + Sized + 'static {
    /// A tracker whose trees time out `timeout` after their first message and that must
    /// hold `pending` trees at once. The peers are unbounded and grow as needed; the Acker
    /// has a fixed table and needs the bound up front.
    fn build(timeout: Duration, pending: usize, sink: Sink) -> Self;
    /// As `build`, for a tracker that will hold `pending` long-lived roots and no others
    /// (the ack groups). The peers grow to fit either way; the Acker sizes its table for
    /// them, as a user who knows the count would, rather than taking the default 1M.
    fn build_holding(timeout: Duration, pending: usize, sink: Sink) -> Self {
        Self::build(timeout, pending, sink)
    }
    /// Storm's ACKER_INIT.
    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>>;
    /// Storm's ACKER_ACK; `true` iff this call completed the tree (Acked).
    fn ack(&self, root: u64, xor: u64) -> bool;
    /// Storm's ACKER_FAIL; `true` iff this call completed the tree (Failed).
    fn fail(&self, root: u64) -> bool;

    /// Whether each tree can have its own timeout (`Acker::init_with_timeout`). Trackers
    /// with one global timeout (Storm's rotation period, moka's TTL) are built with the long
    /// timeout when long-lived roots must be held.
    const PER_TREE_TIMEOUT: bool = false;

    /// Inits a root that must stay pending for `timeout` (the 1M group's background). With
    /// one global timeout, the tracker must have been built with it.
    fn hold(
        &self,
        root: u64,
        xor: u64,
        payload: u32,
        _timeout: Duration,
    ) -> Result<(), InitError<u32>> {
        self.init(root, xor, payload)
    }
}

/// An Acker with the defaults a user gets (shards = 4 x cores, 1 ms resolution) and the
/// real reaper thread.
fn acker(timeout: Duration, max_pending: usize, sink: Sink) -> Acker<u32> {
    Acker::builder()
        .timeout(timeout)
        .max_pending(max_pending)
        .on_complete(move |c| sink(c))
        .build()
        .expect("valid acker configuration")
}

/// The Acker's `max_pending` for `Tracker::build`. It stays at its default (1 << 20) unless
/// `pending` needs more than half of it, so that the 1M group's background does not fill the
/// table to the brim, as a user holding 1M trees would not.
fn build_bound(pending: usize) -> usize {
    if pending > 1 << 19 {
        2 * pending
    } else {
        1 << 20
    }
}

/// The Acker's `max_pending` for `Tracker::build_holding`. Up to half a million, exactly
/// `pending`: an acker full to its bound, whose tables sit at a load of about 4/5 (where
/// more roots live outside their home group and take the longer path). Beyond, twice, as
/// `build_bound` does.
fn holding_bound(pending: usize) -> usize {
    if pending > 1 << 19 {
        2 * pending
    } else {
        pending
    }
}

/// `ackwheel`: the Acker.
impl Tracker for Acker<u32> {
    fn build(timeout: Duration, pending: usize, sink: Sink) -> Self {
        acker(timeout, build_bound(pending), sink)
    }

    fn build_holding(timeout: Duration, pending: usize, sink: Sink) -> Self {
        acker(timeout, holding_bound(pending), sink)
    }

    #[inline]
    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        Acker::init(self, root, xor, payload)
    }

    #[inline]
    fn ack(&self, root: u64, xor: u64) -> bool {
        Acker::ack(self, root, xor)
    }

    #[inline]
    fn fail(&self, root: u64) -> bool {
        Acker::fail(self, root)
    }

    const PER_TREE_TIMEOUT: bool = true;

    fn hold(
        &self,
        root: u64,
        xor: u64,
        payload: u32,
        timeout: Duration,
    ) -> Result<(), InitError<u32>> {
        Acker::init_with_timeout(self, root, xor, payload, timeout)
    }
}

/// `a` is due at `now` on the wrapping nanosecond timeline (the `clock` module's definition).
#[inline]
pub(crate) fn is_due(deadline: u64, now: u64) -> bool {
    (now.wrapping_sub(deadline) as i64) >= 0
}

/// The peers' clock: the Acker's default one, [`MonotonicClock`], so that every contender
/// pays the same for a reading and the benches compare the trackers, not their clocks.
#[inline]
pub(crate) fn now() -> u64 {
    MonotonicClock.now()
}

/// A completion's `elapsed` from the tree's first message.
#[inline]
pub(crate) fn elapsed(start: u64, now: u64) -> Duration {
    Duration::from_nanos(now.wrapping_sub(start).min(i64::MAX as u64))
}

/// Hashes a `u64` key with one multiply and two xor-shifts: every output bit depends on
/// every input bit, low bits included (hashbrown indexes with the low bits and tags with the
/// top seven; DashMap picks its shard from the high bits; scc picks its bucket from the high
/// bits and tags with the low eight).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct U64Hasher(u64);

impl Hasher for U64Hasher {
    #[inline]
    fn finish(&self) -> u64 {
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 32)
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in so it still works.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

impl BuildHasher for U64Hasher {
    type Hasher = U64Hasher;

    #[inline]
    fn build_hasher(&self) -> U64Hasher {
        U64Hasher(0)
    }
}

/// A background thread that runs `tick` every `period` until dropped; `Drop` wakes it at
/// once and joins it. The peers' stand-in for the Acker's reaper.
pub(crate) struct Ticker {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn spawn(
        name: &str,
        period: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) -> Self {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                // A fixed schedule, like Storm's tick tuple; waiting towards a deadline
                // means a spurious wake-up cannot tick early.
                let mut next = Instant::now() + period;
                let mut stopped = lock.lock().unwrap();
                while !*stopped {
                    let now = Instant::now();
                    if now < next {
                        stopped = cv.wait_timeout(stopped, next - now).unwrap().0;
                        continue;
                    }
                    drop(stopped);
                    tick();
                    next = Instant::now() + period; // fixed delay, like StormTimer
                    stopped = lock.lock().unwrap();
                }
            })
            .expect("spawning a ticker");
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap() = true;
        cv.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
