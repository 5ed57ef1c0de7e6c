//! The Acker: Storm-style XOR tracking of tuple trees.
//!
//! ## Semantics
//!
//! A tree's value is the XOR of init's `xor` and every ack's `xor`; the tree completes
//! `Acked` when init has been seen and the value is 0. `fail` on an initialized tree
//! completes it `Failed`. Acks and fails that arrive before init are held in an entry of
//! their own (an *orphan*); when init arrives it completes at once — `Acked` if the value is
//! 0 (Acked wins), else `Failed` if a fail was seen — or stays pending. The deadline is the
//! first message's time plus the timeout; `reset_timeout` moves it to now plus the tree's
//! timeout. At the deadline an initialized tree completes `TimedOut`; an orphan is dropped
//! silently and counted.
//!
//! ## Shape
//!
//! `hash(root)` picks a shard; each shard has a lock-free [`ledger`] (one slot per
//! pending root) and, owned by whoever runs the reaper pass, a [`TimerWheel`] of slot
//! timers. Writers never touch a wheel: a new slot's deadline goes on one of the shard's
//! lock-free *inbox* rings and the reaper schedules it; a completed slot goes on one of its
//! *retired* rings and the reaper frees it ([`reaper`], [`ring`]). Each kind has a ring per
//! lane, and a thread starts at its own lane's, so two threads working in one shard do not
//! share a ring's tail. `reset_timeout` only stores the new,
//! later deadline; when the wheel yields the slot, the reaper re-checks the real deadline and
//! reschedules (Caffeine's re-check); it also marks the slot's state, so a reaper that read
//! the old deadline just before cannot then time the tree out. Completion is claimed by one
//! CAS that sets DONE on the slot, by whichever of the acking, failing or reaping thread gets
//! there first; that thread also retires the slot.
//!
//! One reaper thread serves every shard ([`reaper`]). It sleeps until an atomic
//! next-expiration time; a writer whose deadline is sooner lowers it and unparks the reaper.
//!
//! `max_pending` is kept as credits in per-thread stripes ([`credits`]): a new entry takes
//! one, its completion gives one back, each a single RMW on a line its thread mostly has to
//! itself, and the bound stays exact.
//!
//! ## Memory reclamation
//!
//! Every operation runs pinned ([`grace`]: a per-thread pin word, with the barrier moved to
//! the reaper by `membarrier` where Linux offers it, or a loom-visible stand-in under
//! the model checker). A completed slot is freed (returned to EMPTY) only
//! after a grace period, so a lookup that found it can never see it reused by another root.
//!
//! ## Memory per pending root
//!
//! Everything but the wheels' timer nodes is allocated and touched when the acker is built,
//! for `max_pending`; the timer nodes follow the roots pending. Where the bytes go with a
//! `u32` payload, 8 shards and `max_pending` = 1M (the stress harness's memory phase, which
//! runs in manual mode and measures about 120 B per root as RSS growth):
//!
//! | what | size | per pending root at max_pending |
//! |---|---|---|
//! | bucket line pair: key, XOR (8 B each) and state (1 B) per slot, one overflow count per 7 slots | 18.3 B per slot | 23.0 B: the table has 1.26 slots per root (a quarter of headroom, bucket rounding), and up to 2 MiB of huge-page rounding per acker |
//! | slot (base, start, timeout: 8 B each; payload 4 B, padded to 8) | 32 B per slot | 40.3 B |
//! | inbox rings (an [`arrival`] word), two per shard | 16 B per slot manual, 2 B threaded | 20.2 B manual, 2.5 B threaded |
//! | retired rings (slot + 1), two per shard | 4 B per slot | 5.0 B |
//! | the reaper's slot-to-node index | 4 B per slot | 5.0 B |
//! | timer-wheel node (links, generation, deadline, slot) | 24 B per pending root | 24 B |
//!
//! So about 100 B per root with a reaper thread and 118 B in manual mode. The table alone is
//! 50 B per slot: a 64-bit key, a 64-bit XOR and a first-message time for `elapsed` are
//! needed by the contract, and nanosecond deadlines that a reset and a per-tree timeout can
//! each move need two words more. (Keeping the XOR and state beside the keys rather than in
//! the slot costs 1.8 B per slot, the bucket's overflow word and padding, for an ack that
//! misses once rather than twice.)

mod arrival;
#[allow(dead_code)] // used by the second-generation Acker (issue 20), being built
pub(crate) mod batches;
mod buckets;
mod credits;
mod fences;
pub(crate) mod grace;
mod lean;
mod ledger;
mod reaper;
mod ring;
#[allow(dead_code)]
pub(crate) mod word;
// The second-generation ledger, built beside the first; the Acker switches to it once it
// has timers and growth (issue 20).
#[allow(dead_code)]
pub(crate) mod roots;
mod table;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{duration_nanos, Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::sync::{thread, AtomicBool, AtomicU64, Mutex, Ordering};
#[cfg(doc)]
use crate::wheel::TimerWheel;
use ledger::{Claim, HashLayout, Hashed, Ledger, DONE, FAILED, INIT, LANE, SLOTS_PER_BUCKET};
use ring::Ring;
use std::sync::Arc;

/// How a tree ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Init seen and every edge acked: the value reached 0.
    Acked,
    /// A fail arrived (and the tree was not acked first).
    Failed,
    /// The deadline passed first.
    TimedOut,
}

/// One finished tree, handed to `on_complete` exactly once.
#[derive(Debug)]
pub struct Completion<T> {
    /// The tree's root id.
    pub root: u64,
    /// What init attached.
    pub payload: T,
    /// How it ended.
    pub outcome: Outcome,
    /// From the first message seen for this root (init, ack or fail) to the completion.
    pub elapsed: Duration,
}

/// Returned by init; the payload always comes back, nothing is lost.
#[derive(Debug)]
pub enum InitError<T> {
    /// `max_pending` trees are pending, or every bucket the root may use is full.
    ///
    /// Completed trees keep their slots until the reaper retires them and no thread can
    /// still see them, so when the reaper or a preempted thread lags behind a high
    /// completion rate (more busy threads than cores, a small `max_pending`) their tombstones
    /// can fill a root's buckets below `max_pending`. An init (or an orphan ack or fail) that
    /// finds that waits for them to be freed, and is refused only if that takes longer than
    /// 100 ms. It gets `Full` at once when `max_pending` is reached, when the buckets are
    /// full of live trees, in a manual acker (whose slots only `expire` retires) and in an
    /// `on_complete` on the reaper thread.
    ///
    /// New deadlines reach the reaper through a bounded ring per shard (a quarter of the
    /// shard's slots; a slot each in manual mode). A message that finds its shard's ring full,
    /// because the reaper has fallen that far behind, waits for it the same way.
    Full(T),
    /// The root was already initialized.
    Duplicate(T),
    /// `shutdown` was called.
    Shutdown(T),
}

impl<T> InitError<T> {
    /// The payload handed back.
    pub fn into_payload(self) -> T {
        match self {
            InitError::Full(p) | InitError::Duplicate(p) | InitError::Shutdown(p) => p,
        }
    }
}

impl<T> fmt::Display for InitError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InitError::Full(_) => {
                "acker is full: max_pending trees are pending, or this root's buckets are"
            }
            InitError::Duplicate(_) => "root already initialized",
            InitError::Shutdown(_) => "acker is shut down",
        })
    }
}

impl<T: fmt::Debug> std::error::Error for InitError<T> {}

/// Counters since the acker was built.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AckerStats {
    /// Entries held now (initialized or not).
    pub pending: usize,
    /// Trees completed `Acked`.
    pub acked: u64,
    /// Trees completed `Failed`.
    pub failed: u64,
    /// Trees completed `TimedOut`.
    pub timed_out: u64,
    /// Entries never initialized, dropped at their deadline.
    pub orphans_expired: u64,
    /// Inits and orphan acks/fails refused for capacity.
    pub rejected_full: u64,
    /// `on_complete` calls that panicked (caught).
    pub callback_panics: u64,
}

type Callback<T> = Box<dyn Fn(Completion<T>) + Send + Sync>;

/// Configures and builds an [`Acker`].
pub struct AckerBuilder<T> {
    timeout: Duration,
    resolution: Duration,
    shards: Option<usize>,
    max_pending: usize,
    clock: Option<Box<dyn Clock>>,
    on_complete: Option<Callback<T>>,
    /// The fewest slots the tables hold in all ([`MIN_TABLE_SLOTS`]; tests of crowded
    /// tables set 0).
    min_slots: usize,
    /// Build on the second-generation core (`lean/`).
    second: bool,
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

/// The longest timeout: deadlines must stay within the wrapping timeline's 2^63 ns horizon.
const MAX_TIMEOUT_NS: u64 = 1 << 62;
/// Slot indices are `u32` with `u32::MAX` reserved as the lists' end; a one-shard table
/// holds under 1.5 x max_pending slots (or the floor, `MIN_TABLE_SLOTS`, or 8 buckets), so
/// 2^30 keeps every index below it.
const MAX_PENDING: usize = 1 << 30;
/// The coarsest tick, 2^43 ns (about 2.4 h): the wheels' coarsest level then spans 2^62 ns,
/// the most a wrapping timeline's due test can tell apart (`wheel::MAX_SHIFT`).
const MAX_RESOLUTION_NS: u64 = 1 << crate::wheel::MAX_SHIFT;
const MAX_SHARDS: usize = 1 << 16;

/// The fewest slots an acker's tables hold in all, whatever `max_pending` (about 4 MB
/// with a `u32` payload).
///
/// A table sized to a small `max_pending` runs crowded: its live trees, and the tombstones
/// of those just completed, share a few buckets, so (the likeliest cause; aligning slots to
/// 64 bytes changed nothing) the reaper's frees keep writing the bucket lines that the acking
/// threads probe, and searches walk into overflow buckets. Measured
/// with 1 024 trees in flight and `max_pending` 1 100 (8 shards of 165 slots), one thread
/// spent 177 ns per operation; with 65 536 slots, 122; the 2-thread figures were 175 and
/// 118. A million-slot table (1 M `max_pending`) is not affected.
#[cfg(not(any(loom, miri)))]
const MIN_TABLE_SLOTS: usize = 1 << 16;
/// Loom models and Miri work on tiny tables (Miri interprets every slot's initialisation).
#[cfg(any(loom, miri))]
const MIN_TABLE_SLOTS: usize = 0;

impl<T: Send + 'static> AckerBuilder<T> {
    fn new() -> Self {
        AckerBuilder {
            timeout: Duration::from_secs(30),
            resolution: Duration::from_millis(1),
            shards: None,
            max_pending: 1 << 20,
            clock: None,
            on_complete: None,
            min_slots: MIN_TABLE_SLOTS,
            second: std::env::var_os("ACKWHEEL_CORE").is_none_or(|v| v != "first"),
        }
    }

    /// Builds on the second-generation core (`true`) or the first. A private switch while
    /// the first is still beside the second (issue 20, until it is deleted); the default is
    /// the second, or the first when the environment has `ACKWHEEL_CORE=first` (for running
    /// every test and the stress harness on both).
    #[doc(hidden)]
    pub fn second_generation(mut self, second: bool) -> Self {
        self.second = second;
        self
    }

    /// Tables of exactly 1.25x `max_pending` slots (bucket rounding aside), without the
    /// [`MIN_TABLE_SLOTS`] floor, for tests that need buckets to fill up.
    #[cfg(test)]
    pub(crate) fn crowded(mut self) -> Self {
        self.min_slots = 0;
        self
    }

    /// The default tree timeout; 30 s unless set.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The wheels' tick, rounded up to a power of two of nanoseconds; default ~1 ms. Above
    /// 2^43 ns (about 2.4 h) `build` refuses it.
    pub fn resolution(mut self, resolution: Duration) -> Self {
        self.resolution = resolution;
        self
    }

    /// Number of shards, rounded up to a power of two; default: a power of two >= 4 x cores.
    /// 0 is an error.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The most entries (initialized trees and orphans) held at once, across all shards;
    /// default 1 << 20. It is an exact upper bound.
    ///
    /// Each shard's table has about 1.25x its share of slots in 7-slot buckets, and the
    /// tables have at least 65 536 slots in all (about 4 MB with a `u32` payload),
    /// because crowded tables are slow. A root whose home bucket is full takes a slot in
    /// one of the next 63 buckets, so an init is refused below the bound only when all 64
    /// buckets (448 slots) it may use are taken: random roots fill tables of 64k to 4M to
    /// the brim without one refusal. A completed tree's slot is recycled by the
    /// reaper after a grace period, so what completes while the reaper thread is
    /// descheduled still holds room: at a high rate, leave room for what completes in a few
    /// tens of milliseconds.
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// The time source; [`MonotonicClock`] unless set.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Called exactly once per initialized root, on the completing thread. It may call back
    /// into the acker. A panic in it is caught and counted.
    ///
    /// A callback that owns an `Acker` handle keeps the acker alive (and its reaper running)
    /// until [`Acker::shutdown`] is called.
    pub fn on_complete(mut self, f: impl Fn(Completion<T>) + Send + Sync + 'static) -> Self {
        self.on_complete = Some(Box::new(f));
        self
    }

    /// Starts the one reaper thread.
    pub fn build(self) -> Result<Acker<T>, ConfigError> {
        if self.second {
            return self.build_second(false);
        }
        let acker = self.build_inner(false)?;
        reaper::spawn(&acker)?;
        Ok(acker)
    }

    /// No thread: the owner drives expiry with [`Acker::expire`]. For tests and simulation.
    pub fn build_manual(self) -> Result<Acker<T>, ConfigError> {
        if self.second {
            return self.build_second(true);
        }
        self.build_inner(true)
    }

    /// Checks the parameters both cores share: `(timeout ns, resolution ns, shards)`.
    fn checked(&self) -> Result<(u64, u64, usize), ConfigError> {
        let timeout = duration_nanos(self.timeout);
        if timeout == 0 {
            return Err(ConfigError::Zero { param: "timeout" });
        }
        if self.resolution.is_zero() {
            return Err(ConfigError::Zero {
                param: "resolution",
            });
        }
        if duration_nanos(self.resolution) > MAX_RESOLUTION_NS {
            return Err(ConfigError::TooLarge {
                param: "resolution",
                got: format!("{:?}", self.resolution),
                max: format!("{:?}", Duration::from_nanos(MAX_RESOLUTION_NS)),
            });
        }
        let resolution = duration_nanos(self.resolution).next_power_of_two();
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

    fn build_second(self, manual: bool) -> Result<Acker<T>, ConfigError> {
        let (timeout_ns, resolution_ns, shards) = self.checked()?;
        let max_timeout = lean::MAX_TIMEOUT_TICKS.saturating_mul(resolution_ns);
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
        let config = lean::Config {
            tables: shards,
            max_pending: self.max_pending,
            timeout_ns,
            resolution_ns,
            clock: self
                .clock
                .unwrap_or_else(|| Box::new(MonotonicClock::new())),
            on_complete: self.on_complete,
            manual,
        };
        Ok(Acker {
            core: Core::Second(lean::Handle::start(config)?),
        })
    }

    fn build_inner(self, manual: bool) -> Result<Acker<T>, ConfigError> {
        let (timeout, _, shards) = self.checked()?;
        if timeout > MAX_TIMEOUT_NS {
            return Err(ConfigError::TooLarge {
                param: "timeout",
                got: format!("{:?}", self.timeout),
                max: format!("{:?}", Duration::from_nanos(MAX_TIMEOUT_NS)),
            });
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A quarter over each shard's fair share: roots overflow into the next buckets, so a
        // bucket that fills early does not refuse anyone while the table has room, and
        // tombstones waiting for the reaper do not crowd out live roots. (An eighth would
        // save about 8 B per root. With 15-slot buckets random roots were then refused
        // from 93-99 % of max_pending, even with 32 buckets to choose from; with 7-slot
        // buckets and 128 to choose from they fill 200k and 1M tables without a refusal,
        // but the tombstone margin halves and the small-table tests would need new
        // geometry, so it is left for now.) And at least the floor, so that a small table
        // is not crowded (`MIN_TABLE_SLOTS`).
        let share = self.max_pending.div_ceil(shards);
        let layout = HashLayout::new(
            shards.trailing_zeros(),
            (share + share / 4)
                .max(self.min_slots / shards)
                .div_ceil(SLOTS_PER_BUCKET),
        );
        let buckets = layout.buckets();
        let slots = buckets * SLOTS_PER_BUCKET;
        let clock = self
            .clock
            .unwrap_or_else(|| Box::new(MonotonicClock::new()));
        let now = clock.now();
        let resolution = self.resolution;
        let resolution_ns = duration_nanos(resolution).max(1).next_power_of_two();
        let inner = Inner {
            layout,
            shards: Ledger::shards(shards, buckets)
                .into_iter()
                .map(|ledger| Shard::new(ledger, manual))
                .collect(),
            wheels: Mutex::new(
                (0..shards)
                    .map(|_| reaper::Timers::new(slots, now, resolution))
                    .collect(),
            ),
            clock,
            timeout,
            resolution: resolution_ns,
            tick_shift: resolution_ns.trailing_zeros(),
            credits: credits::Credits::new(self.max_pending, credits::Credits::stripes_for(cores)),
            counters: (0..credits::Credits::stripes_for(cores))
                .map(|_| CachePadded::new(Counters::default()))
                .collect(),
            on_complete: self.on_complete,
            next_wake: CachePadded::new(AtomicU64::new(now.wrapping_add(reaper::FAR))),
            shutdown: AtomicBool::new(false),
            manual,
            reaper_thread: std::sync::OnceLock::new(),
            idle_wakeups: AtomicU64::new(0),
            grace: grace::Grace::new(),
            // A sixty-fourth of a shard's table, so tombstones never take much room.
            retire_batch: (slots / 64).clamp(8, 4096) as u32,
        };
        Ok(Acker {
            core: Core::First(Arc::new(Handle {
                inner: Arc::new(inner),
                reaper: std::sync::Mutex::new(None),
            })),
        })
    }
}

/// Counters, summed by `stats()`. One set per credit stripe, each thread counting in its
/// own (as it takes and gives credits), so that threads completing trees in the same shards
/// do not pass one cache line back and forth (per shard, two threads did).
/// [`Counters::of`] picks the calling thread's.
#[derive(Debug, Default)]
struct Counters {
    acked: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    orphans_expired: AtomicU64,
    rejected_full: AtomicU64,
    callback_panics: AtomicU64,
}

impl Counters {
    /// The calling thread's counters.
    #[inline]
    fn of<T>(inner: &Inner<T>) -> &Counters {
        Counters::own(&inner.counters)
    }

    /// The calling thread's set among `all` (its credit stripe's).
    #[inline]
    fn own(all: &[CachePadded<Counters>]) -> &Counters {
        let own: &CachePadded<Counters> = credits::own_stripe(all);
        own
    }

    /// The stats: every set's counts summed, with `pending`.
    fn sum(all: &[CachePadded<Counters>], pending: usize) -> AckerStats {
        let mut stats = AckerStats {
            pending,
            ..AckerStats::default()
        };
        for c in all {
            stats.acked += c.acked.load(Ordering::SeqCst);
            stats.failed += c.failed.load(Ordering::SeqCst);
            stats.timed_out += c.timed_out.load(Ordering::SeqCst);
            stats.orphans_expired += c.orphans_expired.load(Ordering::SeqCst);
            stats.rejected_full += c.rejected_full.load(Ordering::SeqCst);
            stats.callback_panics += c.callback_panics.load(Ordering::SeqCst);
        }
        stats
    }
}

#[derive(Debug)]
struct Shard<T> {
    ledger: Ledger<T>,
    /// Deadlines for the reaper to schedule ([`arrival`] words), in [`LANES`] rings: an
    /// opener starts at its credit stripe's, so that threads opening slots in the same shard
    /// do not share a ring's tail and cells (with two threads on one ring, the tail's CAS
    /// and the load before it were three quarters of `claim_new`). An adjust word goes on
    /// the ring its slot's open word went on (the state's [`LANE`] flag), so the reaper
    /// reads it after that open word.
    inbox: Box<[Ring<u64>]>,
    /// Completed slots for the reaper to free (slot + 1), in [`LANES`] rings, a completer
    /// starting at its credit stripe's for the same reason (its `fetch_add` and cell store
    /// were two thirds of `finish` with two threads on one ring).
    retired: Box<[Ring<u32>]>,
}

/// Rings per shard for each kind of news (see [`Shard::inbox`]). Two, because a slot's
/// inbox lane is one flag of its state.
const LANES: usize = 2;

/// An inbox ticket: the lane and the ticket number in its ring.
#[derive(Clone, Copy, Debug)]
struct Ticket {
    lane: usize,
    number: u64,
}

/// The state flag that records an open word on `lane`.
fn lane_flag(lane: usize) -> u32 {
    if lane == 0 {
        0
    } else {
        LANE
    }
}

/// The lane of a published slot's open word, from its state ([`lane_flag`]'s inverse).
fn lane_of(state: u32) -> usize {
    usize::from(state & LANE != 0)
}

impl<T> Shard<T> {
    fn new(ledger: Ledger<T>, manual: bool) -> Self {
        let slots = ledger.capacity();
        Shard {
            ledger,
            // The reaper thread drains the inboxes every pass, and is woken when a lane
            // reaches `retire_batch` (a 64th of the shard's slots), so a quarter of the slots
            // between the lanes is room for its passes to lag several times over (an opener
            // whose lane is full takes the other; an adjust word waits for room on its open
            // word's lane); only then do writers wait for it (and after `ROOM_WAIT`, are
            // refused). In manual mode only `expire` drains them, and nothing waits: a cell
            // per slot in each lane, since each slot brings one open word until `expire`
            // frees it and one thread's open words may all be on one lane, so only the rare
            // adjust words (on that lane too) could fill it before `max_pending` is reached,
            // as with one ring of a cell per slot.
            inbox: (0..LANES)
                .map(|_| {
                    Ring::new(if manual {
                        slots
                    } else {
                        (slots / (4 * LANES)).max(64)
                    })
                })
                .collect(),
            // A slot is on one of them at most once (it is freed only after the reaper has
            // taken it off), so with a cell per slot between them, plus one each, they are
            // never all full at once: a completer whose lane is full finds room in another.
            retired: (0..LANES).map(|_| Ring::new(slots / LANES + 1)).collect(),
        }
    }
}

/// How long an operation refused room by tombstones waits for them before it gives up
/// (`Inner::make_room`): many scheduler time slices. 20 ms was not always enough with six
/// busy threads on two cores (four acking, two spinning).
const ROOM_WAIT: Duration = Duration::from_millis(100);
/// Waits that only yield before the sleeping ones.
const ROOM_YIELDS: u32 = 8;
/// One sleeping wait.
const ROOM_SLEEP: Duration = Duration::from_micros(50);

/// An operation's waits for room so far (`Inner::make_room`).
#[derive(Default)]
struct RoomWait {
    waits: u32,
    started: Option<std::time::Instant>,
}

/// A completion claimed by an operation, delivered once the operation has unpinned.
type Done<T> = Option<Completion<T>>;

/// Why a message could not get room: the root's buckets are full (or `max_pending`
/// reached), or the shard's inbox rings are (for an adjust word, its slot's lane is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Room {
    Window,
    Inbox,
}

/// What [`Inner::claim_new`] found or made.
enum Entry {
    /// The root's live slot.
    Found(usize),
    /// A new slot, CLAIMED, with its credit and an inbox ticket for its open word: the caller
    /// must [`Inner::open`] it.
    New { slot: usize, ticket: Ticket },
    /// No room of that kind.
    Full(Room),
}

/// What an ack's XOR left in the value ([`Inner::xor_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckedValue {
    /// Not 0: nothing to complete.
    NonZero,
    /// 0, with init's XOR in it: INIT was set before the ack's XOR.
    ZeroWithInit,
    /// 0, but INIT was not set before the ack's XOR: the zero may be a held orphan's
    /// (a duplicated ack cancelling its first copy) and predate init's XOR.
    ZeroBeforeInit,
}

struct Inner<T> {
    layout: HashLayout,
    shards: Box<[Shard<T>]>,
    /// The shards' wheels and timer bookkeeping, owned by whoever runs a reaper pass.
    wheels: Mutex<Vec<reaper::Timers>>,
    clock: Box<dyn Clock>,
    /// Default tree timeout, ns.
    timeout: u64,
    /// Wheel tick, ns (a power of two).
    resolution: u64,
    /// log2 of `resolution`, for [`arrival`] words.
    tick_shift: u32,
    /// The `max_pending` bound: one credit per entry that may still be held.
    credits: credits::Credits,
    /// See [`Counters`]: a power-of-two number of them.
    counters: Box<[CachePadded<Counters>]>,
    on_complete: Option<Callback<T>>,
    /// The earliest time the reaper must run again (see `reaper`).
    next_wake: CachePadded<AtomicU64>,
    shutdown: AtomicBool,
    manual: bool,
    reaper_thread: std::sync::OnceLock<thread::Thread>,
    /// Reaper wake-ups that found nothing to do (for the stress harness's idle check).
    idle_wakeups: AtomicU64,
    /// When retired slots may be freed.
    grace: grace::Grace,
    /// One of a shard's inbox or retired rings this long wakes the reaper to schedule or
    /// free what it holds. (Per ring, not half as long: with one thread, which uses one
    /// lane, half woke the reaper twice as often.)
    retire_batch: u32,
}

/// The part of the acker shared by user handles only; dropping the last one stops the reaper.
struct Handle<T: Send + 'static> {
    inner: Arc<Inner<T>>,
    reaper: std::sync::Mutex<Option<thread::JoinHandle<()>>>,
}

impl<T: Send + 'static> Drop for Handle<T> {
    fn drop(&mut self) {
        reaper::stop(&self.inner, &self.reaper);
    }
}

/// Storm-style XOR tracking of tuple trees: sharded lock-free ledgers, one hierarchical
/// wheel per shard, one reaper thread. Clone is a cheap shared handle; Send + Sync.
///
/// ```
/// use ackwheel::{Acker, ManualClock, Outcome};
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// let done = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&done);
/// let clock = ManualClock::new(0);
/// let acker: Acker<&str> = Acker::builder()
///     .timeout(Duration::from_secs(30))
///     .clock(clock.clone())
///     .on_complete(move |c| sink.lock().unwrap().push((c.root, c.outcome)))
///     .build_manual()
///     .unwrap();
///
/// // A spout emits root 7 with two edges; each bolt acks one of them.
/// acker.init(7, 0b01 ^ 0b10, "tuple payload").unwrap();
/// assert!(!acker.ack(7, 0b01));
/// assert!(acker.ack(7, 0b10)); // the value reached 0: this call completed the tree
///
/// // Root 8 loses an ack and times out.
/// acker.init(8, 0b11, "lost").unwrap();
/// clock.advance(Duration::from_secs(31));
/// assert_eq!(acker.expire(), 1);
/// assert_eq!(*done.lock().unwrap(), [(7, Outcome::Acked), (8, Outcome::TimedOut)]);
/// ```
pub struct Acker<T: Send + 'static = u32> {
    core: Core<T>,
}

/// Which core an acker runs on: the first generation, or the second (`lean/`), chosen by
/// the builder's private switch until the second replaces the first (issue 20).
enum Core<T: Send + 'static> {
    First(Arc<Handle<T>>),
    Second(Arc<lean::Handle<T>>),
}

impl<T: Send + 'static> Clone for Acker<T> {
    fn clone(&self) -> Self {
        Acker {
            core: match &self.core {
                Core::First(h) => Core::First(Arc::clone(h)),
                Core::Second(h) => Core::Second(Arc::clone(h)),
            },
        }
    }
}

impl<T: Send + 'static> fmt::Debug for Acker<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let handle = match &self.core {
            Core::First(h) => h,
            Core::Second(h) => return fmt::Debug::fmt(&h.lean, f),
        };
        let inner = &handle.inner;
        f.debug_struct("Acker")
            .field("shards", &inner.shards.len())
            .field("pending", &inner.credits.held())
            .field("max_pending", &inner.credits.max())
            .field("manual", &inner.manual)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Acker<T> {
    /// A builder with the defaults: 30 s timeout, ~1 ms resolution, 4 x cores shards,
    /// 1 << 20 pending.
    pub fn builder() -> AckerBuilder<T> {
        AckerBuilder::new()
    }

    /// The first core's handle. Every public method returns early for the second core, so
    /// only the first core's code paths call this.
    fn handle(&self) -> &Arc<Handle<T>> {
        match &self.core {
            Core::First(h) => h,
            Core::Second(_) => unreachable!("a first-core path on the second core"),
        }
    }

    fn inner(&self) -> &Inner<T> {
        &self.handle().inner
    }

    /// The second core, if this acker runs on it.
    #[inline]
    fn second(&self) -> Option<&lean::Lean<T>> {
        match &self.core {
            Core::First(_) => None,
            Core::Second(h) => Some(&h.lean),
        }
    }

    /// Storm's ACKER_INIT: XORs `xor` into the root's value and attaches the payload.
    /// If acks (or a fail) arrived first, it completes now when the value is 0 (Acked wins)
    /// or a fail was seen (Failed).
    pub fn init(&self, root: u64, xor: u64, payload: T) -> Result<(), InitError<T>> {
        if let Some(lean) = self.second() {
            return lean.init(root, xor, payload, None);
        }
        let timeout = self.inner().timeout;
        self.init_for(root, xor, payload, timeout)
    }

    fn init_for(&self, root: u64, xor: u64, payload: T, timeout: u64) -> Result<(), InitError<T>> {
        if let Some(lean) = self.second() {
            return lean.init(root, xor, payload, Some(timeout));
        }
        let mut done = None;
        let result = self.inner().init(root, xor, payload, timeout, &mut done);
        self.inner().deliver(done);
        result
    }

    /// [`init`](Self::init) with this tree's own timeout (also used by `reset_timeout`).
    /// A zero timeout, or one beyond 2^62 ns, is clamped to 1 ns or 2^62 ns.
    pub fn init_with_timeout(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Duration,
    ) -> Result<(), InitError<T>> {
        let timeout = duration_nanos(timeout).clamp(1, MAX_TIMEOUT_NS);
        self.init_for(root, xor, payload, timeout)
    }

    /// Storm's ACKER_ACK. `true` iff this call completed the tree (Acked). An ack for an
    /// unknown root is held as an orphan until its init arrives or its deadline passes.
    pub fn ack(&self, root: u64, xor: u64) -> bool {
        if let Some(lean) = self.second() {
            return lean.ack(root, xor);
        }
        let mut done = None;
        self.inner().ack(root, xor, &mut done);
        self.inner().deliver(done)
    }

    /// Storm's ACKER_FAIL. `true` iff this call completed the tree (Failed).
    pub fn fail(&self, root: u64) -> bool {
        if let Some(lean) = self.second() {
            return lean.fail(root);
        }
        let mut done = None;
        self.inner().fail(root, &mut done);
        self.inner().deliver(done)
    }

    /// Storm's ACKER_RESET_TIMEOUT: deadline = now + the tree's timeout. `true` iff the root
    /// has an uncompleted entry (initialized or not); then the new deadline holds: the tree
    /// does not time out before it, even if the old one was passing at that moment.
    pub fn reset_timeout(&self, root: u64) -> bool {
        if let Some(lean) = self.second() {
            return lean.reset_timeout(root);
        }
        self.inner().reset_timeout(root)
    }

    /// Entries held now (initialized or not).
    pub fn pending(&self) -> usize {
        if let Some(lean) = self.second() {
            return lean.pending();
        }
        self.inner().credits.held()
    }

    /// Counters since the acker was built.
    pub fn stats(&self) -> AckerStats {
        if let Some(lean) = self.second() {
            return lean.stats();
        }
        Counters::sum(&self.inner().counters, self.pending())
    }

    /// Manual mode: one reaper pass at `clock.now()`; returns the completions it delivered.
    /// On an acker built with `build()` it does nothing and returns 0.
    pub fn expire(&self) -> usize {
        if let Some(lean) = self.second() {
            return lean.expire();
        }
        let inner = self.inner();
        if !inner.manual {
            return 0;
        }
        let mut delivered = 0;
        loop {
            let pass = reaper::run_once(&self.handle().inner, inner.clock.now());
            delivered += pass.delivered;
            if !pass.more {
                return delivered;
            }
        }
    }

    /// Reaper wake-ups that found nothing due (a measure of idle cost).
    #[doc(hidden)]
    pub fn idle_wakeups(&self) -> u64 {
        if let Some(lean) = self.second() {
            return lean.idle_wakeups();
        }
        self.inner().idle_wakeups.load(Ordering::SeqCst)
    }

    /// Panics caught in the reaper's passes (a clock that panicked) and reaper threads lost
    /// to one; always 0 on the first core, whose reaper does not survive them.
    #[doc(hidden)]
    pub fn reaper_panics(&self) -> u64 {
        self.second().map_or(0, lean::Lean::reaper_panics)
    }

    /// Slots the acker's tables hold now (the second core's follow what is pending; the
    /// first core's are fixed at build): for tests and the stress harness's memory report.
    #[doc(hidden)]
    pub fn table_slots(&self) -> usize {
        match &self.core {
            Core::Second(handle) => handle.lean.slots(),
            Core::First(_) => {
                let inner = self.inner();
                inner.shards.iter().map(|s| s.ledger.capacity()).sum()
            }
        }
    }

    /// Table migrations started so far, to grow and to shrink (0 on the first core).
    #[doc(hidden)]
    pub fn table_migrations(&self) -> (u64, u64) {
        self.second().map_or((0, 0), lean::Lean::migrations)
    }

    /// Whether pins use asymmetric fences (`membarrier`) rather than a SeqCst fence each.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn asymmetric_fences(&self) -> bool {
        if self.second().is_some() {
            return fences::Fences::detect() == fences::Fences::Asymmetric;
        }
        self.inner().grace.fences() == grace::Fences::Asymmetric
    }

    /// Grace-period snapshots whose barrier failed (each leaves retired slots waiting).
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn grace_barrier_failures(&self) -> u64 {
        if self.second().is_some() {
            return 0; // no grace periods
        }
        self.inner().grace.barrier_failures()
    }

    /// Timers in the reaper's wheels: with the inboxes drained, one per pending entry. Lets
    /// the loom models check that no timer outlives its slot's occupant.
    #[doc(hidden)]
    pub fn scheduled_timers(&self) -> usize {
        if let Some(lean) = self.second() {
            return lean.scheduled_timers();
        }
        let all = self
            .inner()
            .wheels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.iter().map(reaper::Timers::len).sum()
    }

    /// The `(shard, bucket)` a root lives in: lets the loom models pick roots that compete
    /// for the same slots.
    #[doc(hidden)]
    pub fn placement(&self, root: u64) -> (usize, usize) {
        if let Some(lean) = self.second() {
            return lean.placement(root);
        }
        let h = self.inner().layout.hash(root);
        (h.shard, h.bucket)
    }

    /// Stops and joins the reaper, then hands back every initialized, uncompleted tree.
    /// Later inits fail with [`InitError::Shutdown`].
    pub fn shutdown(&self) -> Vec<(u64, T)> {
        if let Core::Second(h) = &self.core {
            return h.shutdown();
        }
        let inner = self.inner();
        reaper::stop(inner, &self.handle().reaper);
        let _wheels = inner.wheels.lock().unwrap_or_else(|e| e.into_inner());
        let mut handed_back = Vec::new();
        for (index, shard) in inner.shards.iter().enumerate() {
            let ledger = &shard.ledger;
            for slot in 0..ledger.capacity() {
                // An RMW read: see `settle_after_init` for the race with a concurrent init.
                if let Some(payload) = inner.take_back(index, slot, ledger.state_rmw(slot)) {
                    handed_back.push((inner.root_of(index, slot), payload));
                }
            }
        }
        handed_back
    }
}

impl<T: Send + 'static> Inner<T> {
    /// Takes a credit for one more entry, if that stays within `max_pending`.
    fn reserve(&self) -> bool {
        self.credits.take()
    }

    fn root_of(&self, shard: usize, slot: usize) -> u64 {
        let (bucket, stored) = self.shards[shard].ledger.placed(slot);
        self.layout.root(Hashed {
            shard,
            bucket,
            stored,
        })
    }

    /// The root's live slot, or a new one with its credit (within `max_pending`) and its
    /// inbox ticket; a new slot that gets either not is backed out.
    fn claim_new(&self, h: Hashed) -> Entry {
        let shard = &self.shards[h.shard];
        match shard.ledger.find_or_claim(h) {
            Claim::Found(slot) => Entry::Found(slot),
            Claim::Full => Entry::Full(Room::Window),
            Claim::Claimed(slot) => {
                if !self.reserve() {
                    shard.ledger.back_out(slot);
                    return Entry::Full(Room::Window);
                }
                // The calling thread's lane, or the other when it is full.
                let own = credits::stripe_index();
                let ticket = (own..own + LANES).find_map(|lane| {
                    let lane = lane % LANES;
                    let number = shard.inbox[lane].reserve()?;
                    Some(Ticket { lane, number })
                });
                match ticket {
                    Some(ticket) => Entry::New { slot, ticket },
                    None => {
                        self.credits.give();
                        shard.ledger.back_out(slot);
                        Entry::Full(Room::Inbox)
                    }
                }
            }
        }
    }

    /// After `Entry::Full` with fewer than `max_pending` entries held: the root's window is
    /// taken by tombstones, completed slots that the reaper has not retired yet or whose
    /// grace period has not ended. Both wait for other threads to get CPU time: the reaper,
    /// and any thread preempted while pinned, which holds the grace period back for its
    /// whole time slice. With more busy threads than cores that is routine, and a small
    /// table fills with tombstones at millions of trees per second (measured: 2 threads,
    /// `max_pending` 16 384, inits refused with 2 048 pending after ~10k trees). So the
    /// operation wakes the reaper (whose pass frees what the grace period allows) and gives
    /// up the CPU, then claims again: a short
    /// wait on the reaper is backpressure, a refusal at an eighth of `max_pending` is a lie.
    ///
    /// The caller must not be pinned: its own pin would hold the grace period back. `false`
    /// when waiting cannot help, and the message is refused: in manual mode (only `expire`
    /// retires slots), after `shutdown` (the reaper has stopped), on the reaper thread (it
    /// would wait for itself), when the acker is really full, when the window holds no
    /// tombstone (it is full of live trees: skewed or chosen roots), or after
    /// [`ROOM_WAIT`]. The first waits are yields; a yield need not
    /// let a descheduled thread run (measured: 64 yields took 80 µs and freed nothing), so
    /// later ones sleep.
    ///
    /// A full inbox ring (`Room::Inbox`: the reaper has not drained a ring's worth of new
    /// deadlines) is waited out the same way.
    fn make_room(&self, h: Hashed, room: Room, wait: &mut RoomWait) -> bool {
        if cfg!(loom)
            || self.manual
            || self.shutdown.load(Ordering::SeqCst)
            || reaper::is_reaper(self)
            || (room == Room::Window
                && (self.credits.exhausted()
                    || !self.shards[h.shard].ledger.window_has_tombstones(h)))
        {
            return false;
        }
        let started = *wait.started.get_or_insert_with(std::time::Instant::now);
        if started.elapsed() >= ROOM_WAIT {
            return false;
        }
        wait.waits += 1;
        reaper::wake_now(self);
        if wait.waits <= ROOM_YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(ROOM_SLEEP);
        }
        true
    }

    /// After `Entry::Full`: unpins and waits for room ([`make_room`](Self::make_room)).
    /// `Some`, pinned again, to claim again; `None` when the message is refused (counted,
    /// unless the acker is shutting down).
    fn wait_for_room<'a>(
        &'a self,
        pinned: grace::Pin<'a>,
        h: Hashed,
        room: Room,
        wait: &mut RoomWait,
    ) -> Option<grace::Pin<'a>> {
        drop(pinned);
        if self.make_room(h, room, wait) {
            return Some(self.grace.pin());
        }
        if !self.shutdown.load(Ordering::SeqCst) {
            self.refuse();
        }
        None
    }

    /// Counts a message refused for want of room. It does not wake the reaper: when
    /// tombstones were what filled the window, `make_room` has woken it already, and
    /// otherwise (at `max_pending`, a window of live trees) a pass cannot help.
    fn refuse(&self) {
        Counters::of(self)
            .rejected_full
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Writes a newly claimed slot's times, hands its open word to the reaper with the
    /// inbox ticket `claim_new` took, and makes it live with `flags`.
    ///
    /// The word goes first, so that in its lane it precedes anything about this occupant
    /// (an adjust word, which follows the lane flag that `publish` sets; its completion is
    /// on another ring, see the reaper's pass).
    fn open(
        &self,
        shard: &Shard<T>,
        slot: usize,
        ticket: Ticket,
        now: u64,
        timeout: u64,
        flags: u32,
    ) {
        let deadline = now.wrapping_add(timeout);
        shard.ledger.set_times(slot, now, timeout);
        let word = arrival::open(slot, deadline, timeout, self.tick_shift);
        let queued = shard.inbox[ticket.lane].put(ticket.number, word);
        shard.ledger.publish(slot, flags | lane_flag(ticket.lane));
        reaper::wake_for(self, deadline);
        if queued == u64::from(self.retire_batch) {
            // A long inbox wakes the reaper as long retired rings do.
            reaper::wake_now(self);
        }
    }

    /// Hands a slot whose DONE this thread set to the reaper, which frees it after a grace
    /// period.
    fn retire(&self, shard: usize, slot: usize) {
        let lanes = &self.shards[shard].retired;
        let mut lane = credits::stripe_index();
        let (retired, ticket) = loop {
            let retired = &lanes[lane % LANES];
            if let Some(ticket) = retired.reserve() {
                break (retired, ticket);
            }
            lane += 1;
            if lane % LANES == 0 {
                // Every lane looked full. They cannot all be (see `Shard::new`): another
                // completer's reservation or a drain is in flight; let it finish.
                thread::yield_now();
            }
        };
        if retired.put(ticket, slot as u32 + 1) == u64::from(self.retire_batch) {
            // Tombstones hold their bucket's slots until the reaper frees them: wake it
            // now rather than at the next deadline, which may be a whole timeout away.
            reaper::wake_now(self);
        }
    }

    fn init(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: u64,
        done: &mut Done<T>,
    ) -> Result<(), InitError<T>> {
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(InitError::Shutdown(payload));
        }
        let h = self.layout.hash(root);
        let shard = &self.shards[h.shard];
        let ledger = &shard.ledger;
        ledger.prefetch_home::<true>(h);
        // Read before anything changes: a `Clock` that panics then leaves no slot CLAIMED
        // (others would wait for it forever).
        let now = self.clock.now();
        let mut guard = self.grace.pin();
        let mut wait = RoomWait::default();
        loop {
            match self.claim_new(h) {
                Entry::Full(room) => {
                    let Some(pin) = self.wait_for_room(guard, h, room, &mut wait) else {
                        return Err(self.refusal(payload));
                    };
                    guard = pin;
                }
                Entry::New { slot, ticket } => {
                    ledger.write_payload(slot, payload);
                    ledger.set_value(slot, xor);
                    self.open(shard, slot, ticket, now, timeout, INIT);
                    // A fresh slot becomes visible with INIT already set (one RMW), so no ack
                    // or fail came first, and any that races in now sees INIT and completes
                    // the tree itself. Only an init whose own XOR is 0 completes here (a tree
                    // with no edges): the value it stored is the value before any ack.
                    return self.settle_after_init(h.shard, slot, done, Some(xor));
                }
                Entry::Found(slot) => {
                    // An orphan (or a live tree): it is already counted. The deadline counts
                    // from the first message, or from the latest `reset_timeout`, with the
                    // tree's timeout: init sets only the timeout and a racing reset only the
                    // base, so neither undoes the other. A longer timeout than the orphan's
                    // needs nothing: the reaper's re-check finds it when the old deadline
                    // fires. A shorter one needs an adjust word, whose inbox ticket is taken
                    // first so that a full inbox refuses the init before it changes anything,
                    // on the lane of the slot's open word (found READY, so its lane flag is
                    // set), which the reaper has read or reads first.
                    let ticket = if timeout < ledger.timeout(slot) {
                        let lane = lane_of(ledger.state(slot));
                        match shard.inbox[lane].reserve() {
                            Some(number) => Some(Ticket { lane, number }),
                            None => {
                                let room = Room::Inbox;
                                let Some(pin) = self.wait_for_room(guard, h, room, &mut wait)
                                else {
                                    return Err(self.refusal(payload));
                                };
                                guard = pin;
                                continue;
                            }
                        }
                    } else {
                        None
                    };
                    let adjust = |slot| {
                        if let Some(ticket) = ticket {
                            shard.inbox[ticket.lane].put(ticket.number, arrival::adjust(slot));
                        }
                    };
                    match ledger.claim_init(slot) {
                        Ok(_) => {}
                        Err(state) => {
                            // The word is put all the same (a ticket must be): an adjust
                            // for a slot that needs none moves no timer later.
                            adjust(slot);
                            if state & DONE != 0 {
                                continue; // the orphan just expired
                            }
                            return Err(InitError::Duplicate(payload));
                        }
                    }
                    ledger.write_payload(slot, payload);
                    ledger.set_timeout(slot, timeout);
                    ledger.xor(slot, xor);
                    ledger.set_flags(slot, INIT);
                    if ticket.is_some() {
                        adjust(slot);
                        reaper::wake_for(self, ledger.deadline(slot));
                    }
                    return self.settle_after_init(h.shard, slot, done, None);
                }
            }
        }
    }

    /// An init refused for room: `Full`, or `Shutdown` if that is why.
    fn refusal(&self, payload: T) -> InitError<T> {
        if self.shutdown.load(Ordering::SeqCst) {
            InitError::Shutdown(payload)
        } else {
            InitError::Full(payload)
        }
    }

    /// After INIT is published: complete now if the value is 0 (Acked wins) or a fail was
    /// held. INIT is set before these reads and acks/fails write before reading INIT, so of
    /// init and the last ack (or the fail) at least one sees the other.
    ///
    /// Then the race with `shutdown`: init checked the flag before claiming, but shutdown
    /// may have begun since and scanned past this slot before INIT was set. INIT is set
    /// (an RMW on the state) before this reads the flag, and shutdown sets the flag before
    /// its scan reads each state with an RMW, so one of the two sees the other: shutdown
    /// hands the tree back, or init takes it back here and returns `Shutdown(payload)`.
    /// Whichever sets DONE owns the payload.
    ///
    /// `fresh` is the value a new entry was published with: no ack or fail can precede it,
    /// so there is nothing to re-read, and the race above is settled by the acks themselves.
    fn settle_after_init(
        &self,
        shard: usize,
        slot: usize,
        done: &mut Done<T>,
        fresh: Option<u64>,
    ) -> Result<(), InitError<T>> {
        let ledger = &self.shards[shard].ledger;
        self.claim_completion(shard, slot, done, |state| {
            if fresh.unwrap_or_else(|| ledger.value(slot)) == 0 {
                Some(Outcome::Acked)
            } else if state & FAILED != 0 {
                Some(Outcome::Failed)
            } else {
                None
            }
        });
        if done.is_some() || !self.shutdown.load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.take_back(shard, slot, ledger.state(slot)) {
            Some(payload) => Err(InitError::Shutdown(payload)),
            // Handed back by shutdown's scan, or completed by a racing ack or fail.
            None => Ok(()),
        }
    }

    /// Ends an initialized, uncompleted tree without a completion, for `shutdown` and an
    /// init that lost the race with it: the CAS that sets DONE makes the caller the only one
    /// to take the payload, which comes back instead of going to `on_complete`. `None` when
    /// the slot (as `state` first reads) is not initialized or is already DONE.
    fn take_back(&self, shard: usize, slot: usize, mut state: u32) -> Option<T> {
        let ledger = &self.shards[shard].ledger;
        while state & INIT != 0 && state & DONE == 0 {
            match ledger.claim_done(slot, state) {
                Ok(()) => {
                    let payload = ledger.take_payload(slot);
                    self.credits.give();
                    self.retire(shard, slot);
                    return Some(payload);
                }
                Err(now) => state = now,
            }
        }
        None
    }

    /// The one way an operation completes a tree: while the slot is not DONE, `decide`
    /// names the outcome the current state calls for (or `None`: nothing to do); the CAS
    /// that sets DONE makes this thread the only completer, and the completion goes to
    /// `done` for delivery after unpinning. A lost CAS (another flag changed) decides again.
    fn claim_completion(
        &self,
        shard: usize,
        slot: usize,
        done: &mut Done<T>,
        decide: impl Fn(u32) -> Option<Outcome>,
    ) {
        let ledger = &self.shards[shard].ledger;
        let mut state = ledger.state(slot);
        let mut now = None;
        while state & DONE == 0 {
            let Some(outcome) = decide(state) else { return };
            // The completion's time is read before the CAS: a `Clock` that panics then
            // leaves the tree pending rather than DONE with nobody to finish it.
            let now = *now.get_or_insert_with(|| self.clock.now());
            match ledger.claim_done(slot, state) {
                Ok(()) => {
                    *done = Some(self.finish(shard, slot, outcome, now));
                    return;
                }
                Err(moved) => state = moved,
            }
        }
    }

    fn ack(&self, root: u64, xor: u64, done: &mut Done<T>) {
        let h = self.layout.hash(root);
        let shard = &self.shards[h.shard];
        let ledger = &shard.ledger;
        ledger.prefetch_home::<false>(h);
        let mut guard = self.grace.pin();
        if let Some(slot) = ledger.find(h) {
            // The common path: one hash, one probe, a state load and one fetch_xor on the
            // bucket's second line.
            let acked = self.xor_in(h.shard, slot, xor);
            self.complete_acked(h.shard, slot, acked, done);
            return;
        }
        // No entry: hold the ack as an orphan. The clock is read before claiming (see `init`).
        let now = self.clock.now();
        let mut wait = RoomWait::default();
        loop {
            match self.claim_new(h) {
                Entry::Found(slot) => {
                    let acked = self.xor_in(h.shard, slot, xor);
                    self.complete_acked(h.shard, slot, acked, done);
                }
                Entry::New { slot, ticket } => {
                    // Not yet published: nobody else reads or writes the value, and without
                    // INIT there is nothing to complete.
                    ledger.xor(slot, xor);
                    self.open(shard, slot, ticket, now, self.timeout, 0);
                }
                Entry::Full(room) => {
                    if let Some(pin) = self.wait_for_room(guard, h, room, &mut wait) {
                        guard = pin;
                        continue;
                    }
                }
            }
            return;
        }
    }

    /// An ack's half that changes the value: XORs `xor` into the slot and says whether the
    /// value is now 0 and whether that zero is known to hold init's XOR.
    ///
    /// The state is read *before* the XOR. Init XORs its value in and only then sets INIT
    /// (both SeqCst RMWs), so an INIT this load sees was set after init's XOR, which
    /// therefore happens before our `fetch_xor` and precedes it in the value's modification
    /// order: the value our `fetch_xor` returns contains it. An INIT read *after* the XOR
    /// proves nothing about the zero: a duplicated ack may cancel its first copy on a held
    /// orphan (value 0) just before init XORs its value in and sets INIT.
    #[inline]
    fn xor_in(&self, shard: usize, slot: usize, xor: u64) -> AckedValue {
        let ledger = &self.shards[shard].ledger;
        let init_seen = ledger.state(slot) & INIT != 0;
        match (ledger.xor(slot, xor), init_seen) {
            (0, true) => AckedValue::ZeroWithInit,
            (0, false) => AckedValue::ZeroBeforeInit,
            _ => AckedValue::NonZero,
        }
    }

    /// An ack's second half, after [`xor_in`](Self::xor_in): completes the tree `Acked` if
    /// the zero counts.
    ///
    /// * `ZeroWithInit`: it does, and the value is not read again. The ack that reached 0 is
    ///   the one that completes the tree, as it would be if acks were applied one at a time:
    ///   a duplicate ack that XORs in right after it is, in that order, an ack arriving after
    ///   completion, and must not cancel the completion.
    /// * `ZeroBeforeInit`: only if INIT is set now and the value, re-read with an RMW
    ///   (which comes after init's XOR in the modification order, as INIT does), is still 0.
    ///   If INIT is not set yet, init's `settle_after_init` reads the value after setting
    ///   INIT and completes the tree itself: init sets INIT then reads the value with an RMW,
    ///   we XORed the value then read the state, so one of the two sees the other (see
    ///   [`Ledger::value`]). A duplicate that XORs in between leaves the tree to time out,
    ///   which is what a duplicated ack is owed; the zero before init never completes it.
    fn complete_acked(&self, shard: usize, slot: usize, acked: AckedValue, done: &mut Done<T>) {
        let ledger = &self.shards[shard].ledger;
        match acked {
            AckedValue::NonZero => {}
            AckedValue::ZeroWithInit => {
                self.claim_completion(shard, slot, done, |_| Some(Outcome::Acked));
            }
            AckedValue::ZeroBeforeInit => {
                self.claim_completion(shard, slot, done, |state| {
                    (state & INIT != 0 && ledger.value(slot) == 0).then_some(Outcome::Acked)
                });
            }
        }
    }

    fn fail(&self, root: u64, done: &mut Done<T>) {
        let mut guard = self.grace.pin();
        let h = self.layout.hash(root);
        let shard = &self.shards[h.shard];
        let ledger = &shard.ledger;
        let mut wait = RoomWait::default();
        let slot = loop {
            if let Some(slot) = ledger.find(h) {
                break slot;
            }
            // The clock is read before claiming (see `init`).
            let now = self.clock.now();
            match self.claim_new(h) {
                Entry::Found(slot) => break slot,
                Entry::New { slot, ticket } => {
                    self.open(shard, slot, ticket, now, self.timeout, FAILED);
                    return;
                }
                Entry::Full(room) => {
                    let Some(pin) = self.wait_for_room(guard, h, room, &mut wait) else {
                        return;
                    };
                    guard = pin;
                }
            }
        };
        ledger.set_flags(slot, FAILED);
        // Without INIT the fail is held: init re-checks FAILED after publishing INIT.
        self.claim_completion(h.shard, slot, done, |state| {
            (state & INIT != 0).then_some(Outcome::Failed)
        });
    }

    fn reset_timeout(&self, root: u64) -> bool {
        let _guard = self.grace.pin();
        let h = self.layout.hash(root);
        let ledger = &self.shards[h.shard].ledger;
        let Some(slot) = ledger.find(h) else {
            return false;
        };
        // The base only moves later, so the deadline does too: the reaper finds it when the
        // scheduled deadline fires and reschedules it, no hand-off needed. RESET then tells a
        // reaper that may have read the old deadline to read it again (`reap`): the reset
        // either lands before the reaper's DONE CAS, which then fails, or finds DONE.
        ledger.reset_base(slot, self.clock.now());
        ledger.mark_reset(slot) & DONE == 0
    }

    /// Takes the payload of a slot whose DONE this thread just set, counts the outcome and
    /// retires the slot; the caller delivers the completion. `now` (read before the DONE
    /// CAS) ends `elapsed`.
    fn finish(&self, shard_index: usize, slot: usize, outcome: Outcome, now: u64) -> Completion<T> {
        let done = self.complete(shard_index, slot, outcome, now);
        self.credits.give();
        let counters = Counters::of(self);
        let counter = match outcome {
            Outcome::Acked => &counters.acked,
            Outcome::Failed => &counters.failed,
            Outcome::TimedOut => &counters.timed_out,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.retire(shard_index, slot);
        done
    }

    /// [`finish`](Self::finish) but for the bookkeeping (the credit, the outcome's count and
    /// retiring the slot), which the reaper does once per pass and shard for the trees it
    /// times out, and in its own lists rather than through the retired rings it drains.
    fn complete(
        &self,
        shard_index: usize,
        slot: usize,
        outcome: Outcome,
        now: u64,
    ) -> Completion<T> {
        let shard = &self.shards[shard_index];
        let ledger = &shard.ledger;
        let root = self.root_of(shard_index, slot);
        let payload = ledger.take_payload(slot);
        let elapsed =
            Duration::from_nanos(now.wrapping_sub(ledger.start(slot)).min(i64::MAX as u64));
        Completion {
            root,
            payload,
            outcome,
            elapsed,
        }
    }

    /// Runs `on_complete` for a completion this thread claimed, after its pin is released
    /// (a slow callback must not hold up memory reclamation). `true` iff there was one.
    fn deliver(&self, done: Done<T>) -> bool {
        let Some(completion) = done else {
            return false;
        };
        if let Some(f) = &self.on_complete {
            if catch_unwind(AssertUnwindSafe(|| f(completion))).is_err() {
                Counters::of(self)
                    .callback_panics
                    .fetch_add(1, Ordering::SeqCst);
            }
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
