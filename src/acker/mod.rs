//! The Acker: Storm-style XOR tracking of tuple trees.
//!
//! The rules a user relies on (orphans, Acked wins, deadlines from the first message,
//! capacity, shutdown) and the costs are on the public [`Acker`] type's docs; this module's
//! docs are about how it is built. Its section "A tree's path" is the one telling of what
//! happens to a tree from its first message to its completion; the other pages and
//! modules point here.
//!
//! ## The rooms
//!
//! This is the one map of the Acker's rooms; the README and `docs/design.md` point here.
//! The public API is this file's [`Acker`], its configuration in [`builder`]
//! ([`AckerBuilder`], checked at build) and a tree's end in [`outcome`] ([`Outcome`],
//! [`Completion`], [`InitError`]); the work is done in these rooms, each with its rules in
//! its module docs:
//!
//! * [`engine`]: the engine every call delegates to, [`engine::Engine`], which holds three
//!   parts, each a type with its own state, and runs the operations (its `mod.rs`; many
//!   messages in one call, [`engine::batched`]):
//!   - the tables, `Tables` ([`engine::tables`]): each shard's chain of table generations
//!     ([`engine::tables::generations`]: the current one and its successors while it
//!     migrates), where a root lives ([`engine::tables::layout`]: a bijective mix picks its
//!     shard and its key, and turns them back into the id), growth and shrinking
//!     ([`engine::tables::growth`]), and the way back from a timer entry to its slot;
//!   - time, `TimeBase` ([`engine::time`]): the clock, ticks of the resolution, the callers'
//!     tick, and the anchor every stored tick is read against, with its re-anchoring;
//!   - the reaper, `Reaper` ([`engine::reaper`]): its wheel of group timers
//!     ([`engine::reaper::wheel`]), one pass (`reaper/pass.rs`), its thread's loop and
//!     sleep decision (`reaper/thread.rs`), the callers that run a pass in its place
//!     (`reaper/callers.rs`), a manual acker's driver (`reaper/driver.rs`), the wakes a
//!     push makes (`reaper/hooks.rs`) and what the tests use to stand in for it
//!     (`reaper/probes.rs`).
//!
//!   Between them: an operation's effects finished, a created entry registered by its
//!   group's dirty bit ([`engine::filing`]), completions delivered, a burst's timeouts in order
//!   ([`engine::deliver`]), and shutdown ([`engine::shutdown`]).
//! * [`table`]: one lock-free hash table of roots, [`table::Table`]. A slot is one 16-byte
//!   word, key, state and XOR value together ([`table::word`]), changed only by a 128-bit
//!   CAS. Slots are reused at once: no grace period, no reclamation. Its files: a group's
//!   atomic accesses and its match of a key (`group.rs`), the probe window (`probe.rs`),
//!   init (`init.rs`), twin claims (`twins.rs`), a slot's times, the reaper's check at a
//!   deadline and resets (`times.rs`), taking a payload (`taking.rs`), migration to a
//!   successor (`migrate.rs`), the lines in memory (`lines.rs`), what an operation did,
//!   `Effects` (`effects.rs`).
//! * [`timers`]: time in `u32` ticks that wrap ([`timers::ticks`]); how a new entry
//!   reaches the reaper, a dirty bit per group ([`timers::dirty`]); and what the reaper
//!   keeps: one timer per group of slots, not per tree ([`timers::groups`]), in a compact
//!   hierarchical wheel ([`timers::wheel`]).
//! * [`threads`]: what each thread keeps per acker, a [`threads::Record`] registered in the
//!   acker's [`threads::Threads`]: the marks of its operations in progress, on which the
//!   grace periods, the callback's closing and re-anchoring rest ([`threads::marks`])
//!   (asymmetric fences, [`crate::sync::fences`]), its hand of credits and its counts; and
//!   the reaper's wake-up ([`threads::wake`]).
//! * [`bound`]: `max_pending`, kept as credits in stripes and threads' hands: a claim
//!   takes one, emptying the slot gives it back, and the bound stays exact.
//! * [`manual`] (a manual acker's next expiration, for whoever drives its passes),
//!   [`batched`] (the batched API: [`Acker::apply`] and its kin, of [`Message`]s),
//!   [`stats`] (the counters) and `probes` (what the tests, the loom models and the
//!   benches ask of an `Acker` beyond its API, hidden).
//!
//! Beside this module, the crate's parts the Acker stands on: the 128-bit atomic
//! (`sync/atomic_u128.rs`, its CAS and load inlined) and the asymmetric fences; the
//! callers' ticks from the time-stamp counter, never behind the clock
//! ([`crate::clock::tsc`]); zeroed blocks that go back to the system when dropped, for the
//! tables' lines, the reaper's filed ticks and the slab's pages ([`crate::zeroed`]); and,
//! with the `tokio` feature, the async face, `crate::future` (its `mod.rs` names what each
//! of its files holds).
//!
//! ## A tree's path
//!
//! ```text
//!  init / ack / fail / reset_timeout      (any thread, no lock; apply: many in one call)
//!     |
//!     |  mix(root): its shard (a chain of table generations), its key, its home group
//!     v
//!  +-- table (16 or more) ----------------------------------------------+
//!  | group: one 64-byte line of 4 slot words (key | state | XOR), and   |
//!  |        the 64 B beside it: each slot's times, timeout, payload     |
//!  | doubles past 3/4 load, shrinks while under 1/8                     |
//!  +--------------------------------------------------------------------+
//!     |  a created entry (a new root, an orphan)          ^
//!     v                                                   |  a due group's line read,
//!  its group's dirty bit, and the acker's summary:        |  what is due timed out
//!     |  a quarter of the timeout before the earliest     |
//!     |  deadline registered since the reaper's last scan |
//!     v                                                   |
//!  the reaper: scans the dirty groups by that tick,       |
//!  one timer per group of slots, in its wheel ------------+
//! ```
//!
//! * **Placement.** Every call first marks its operation in its thread's record
//!   ([`threads::marks`]: grace periods, the callback's closing and re-anchoring wait on
//!   those marks) and hashes the root with a bijective mix ([`engine::tables::layout`]; a
//!   bijection, so a completion can name its root). The hash picks the root's shard, a
//!   chain of table generations ([`engine::tables::generations`]), and its key there; the
//!   key's top bits pick its *home group* in the current generation: one 64-byte line of
//!   four slot words, with their side data (times, own timeout, payload) on the line beside
//!   it, which the adjacent-line prefetcher fetches with it ([`table::lines`]). A root
//!   lives in its home group or, when that was full, in one of the next groups of its probe
//!   window, which a search walks only while a group's overflow count says roots were
//!   displaced past it ([`table`], "Finding a root").
//! * **init** ([`Acker::init`]; the table's `init.rs`): it joins the root's HELD entry if
//!   messages came first, or claims a slot: a credit from [`bound`], the slot's times
//!   reserved with the tick of this first message ([`table::times`]), then one 128-bit CAS
//!   of an EMPTY word to JOINING, with the key and the XOR in ([`table::word`]). A search
//!   for a twin follows ([`table`], "Twin claims"); then init writes the payload and
//!   settles the word LIVE, or completes the tree at once: `Acked` if held acks cancel its
//!   XOR (Acked wins, even over a held fail), `Failed` if a fail was held. What it did
//!   comes back as [`table::Effects`], and the engine registers an entry it created by
//!   its group's dirty bit ([`timers::dirty`]).
//! * **ack** ([`Acker::ack`]): a search for the root's word and one 128-bit CAS that XORs
//!   the value in. Key, state and value change together, so an ack never lands on the
//!   slot's next root (no grace period guards a slot's reuse: [`table`], "No grace
//!   period"), and only a LIVE word, whose init XOR is in, can complete (no false
//!   `Acked`). The CAS that brings a LIVE word to 0 writes it EMPTY in the same step:
//!   that thread owns the completion.
//! * **Orphans**: an ack or fail whose root has no entry claims a HELD one (the value, and
//!   the flag F for a fail; no payload), registered as a new tree is and with its deadline
//!   counted from that first message; the init that comes later
//!   joins it. Two threads that claim one new root at once make *twins*, merged lock-free
//!   ([`table`], "Twin claims").
//! * **fail** ([`Acker::fail`]) completes a LIVE tree `Failed` with one CAS; before init
//!   is settled it is held as F. **reset_timeout** ([`Acker::reset_timeout`]) moves the
//!   slot's base tick to now and sets R on the word, so that a reaper about to time the
//!   tree out on its old deadline fails its CAS ([`table::times`]).
//! * **Completion** ([`engine::deliver`]): the thread whose CAS completed the tree (an
//!   ack's, a fail's, an init's, or the reaper's for a timeout) takes the payload and
//!   frees the slot (its times back to 0, its credit back to its thread's hand) before anything
//!   that can panic, counts the completion (the tree has left `pending()`), and then calls
//!   `on_complete`, on that thread.
//! * **Timers** ([`timers::dirty`]): a new entry sets its group's dirty bit (a load, and a
//!   `lock or` once a group a scan) and lowers the acker's summary to the tick its scan is
//!   due at, a quarter of the timeout (at most 67 ms) before its deadline, when that is
//!   the earliest registered since the reaper's last scan. So a tree that completes before
//!   its group's next scan costs its slot's lines and a bit: no shared queue, no lock, no
//!   allocation, no work of the reaper's of its own.
//! * **Timeout** ([`engine::reaper`], "A pass"): when the summary's tick comes the reaper
//!   scans the dirty groups, and gives each a timer, one per group of slots rather than
//!   per root ([`timers::groups`]), filed in its wheel ([`engine::reaper::wheel`],
//!   [`timers::wheel`]) at the earliest deadline of the group's roots. It sleeps until the
//!   next due tick begins; then, for each due group, it reads the
//!   group's line and judges each slot ([`table::Judge`], `Table::expire`): a slot that no
//!   longer holds its root is passed over, a tree whose deadline has come is CASed EMPTY
//!   and completes `TimedOut` (delivered as an ack's completion is), an orphan is dropped
//!   and counted, and the earliest deadline left files the group again. A deadline is the
//!   base plus the timeout in ticks, rounded up, plus one tick, judged in full ticks on the
//!   reaper's own clock ([`engine`], "Times"): never early, and at most a tick late while
//!   the reaper gets a core. On the async acker, the callers that start trees run a due
//!   pass themselves when they can ([`engine::reaper`], "Callers first").
//! * **Growth** ([`engine::tables::growth`]): a claim that lands far from home, or finds no
//!   room, reports its table crowded, and past 3/4 load the table starts moving to a
//!   successor twice its size ([`table::migrate`]). Every operation on a migrating table
//!   moves a group before its own work (its moved roots registered, as new ones are), the
//!   reaper finishes the rest (filing the groups it moves straight on its
//!   wheel) and promotes the successor, and the old table is freed after a grace period
//!   ([`threads::marks`], "Grace periods"). The reaper shrinks a table whose load stayed
//!   under 1/8 ([`engine`], "The bound, and growth").
//! * **Messages in batches** ([`Acker::apply`], [`engine::batched`]) take this path one
//!   message after another, a chunk of them in one operation, with the home lines of the
//!   next chunk prefetched while the current one is applied.
//! * **Shutdown** ([`engine::shutdown`]; [`engine`], "Shutdown") stops the reaper, hands
//!   back every initialized tree's payload, drops the orphans, and closes the callback;
//!   every later message changes nothing.
//!
//! ## Memory per pending root
//!
//! Nothing is allocated for `max_pending`: the tables start small, follow what is pending
//! and shrink after it falls. What a pending root costs, measured beside the peers, is one
//! table in `docs/design.md` ("Memory per pending root"), with the command that produces
//! it and the parts it is made of.

pub(crate) mod bound;
mod builder;
pub(crate) mod threads;
#[cfg_attr(not(feature = "tokio"), allow(unused_imports))]
pub(crate) use bound::stripe_index;
mod batched;
mod engine;
mod manual;
mod message;
mod outcome;
#[cfg(any(test, loom, feature = "internals"))]
mod probes;
mod stats;
pub(crate) mod table;
mod timers;
/// The dirty bits, for the `threads` loom models.
#[cfg(loom)]
pub use timers::dirty::DirtyGroups;

use std::fmt;
use std::time::Duration;

pub use builder::AckerBuilder;
use builder::MAX_TIMEOUT_NS;
pub use message::Message;
pub(crate) use outcome::{BurstHandOver, Callback};
pub use outcome::{Completion, InitError, Outcome};
pub use stats::AckerStats;

use crate::clock::duration_nanos;
use std::sync::Arc;

/// Storm-style XOR tracking of tuple trees: sharded lock-free tables that follow what is
/// pending, lazy timers, one reaper thread. Clone is a cheap shared handle; Send + Sync.
///
/// # The rules
///
/// * **A tree is a root id and a 64-bit value**, the XOR of init's `xor` and every ack's
///   `xor`. Give every edge (every tuple, every sub-task) a random 64-bit id
///   ([`edge_id`](crate::edge_id())): init with the XOR of the first edges, and have each
///   edge's ack carry its own id XORed with the ids of the edges it emitted. The value is 0
///   exactly when every edge has been acked, except with probability 2^-64 per message
///   (Storm's argument). Small or sequential ids break this: `1 ^ 2 ^ 3 == 0`.
/// * **Completion** happens once per initialized root, on the thread whose call made it
///   (an ack, a fail, init itself, or the reaper for a timeout), through `on_complete`:
///   `Acked` when init has been seen and the value is 0; `Failed` on `fail` of an
///   initialized tree; `TimedOut` when its deadline passes first. The call that completed
///   a tree returns `true`.
/// * **Orphans**: acks and fails that arrive before init (another thread's message
///   overtook it) are held in an entry of their own. When init arrives it completes at
///   once if the value is then 0 (*Acked wins*, even over a held fail) or a fail was held
///   (`Failed`); otherwise the tree goes on. An orphan whose init never comes is dropped
///   silently at its deadline and counted in [`AckerStats::orphans_expired`]; a late ack
///   of a finished tree becomes such an orphan. Orphans count in [`pending`](Self::pending)
///   and against `max_pending` until they expire. An init that finds an orphan of its
///   root merges it and is counted in [`AckerStats::orphans_joined`].
/// * **Deadlines** count from the root's *first message* (init, or the first orphan ack),
///   plus the tree's timeout ([`init_with_timeout`](Self::init_with_timeout), else the
///   builder's). [`reset_timeout`](Self::reset_timeout) moves it to now plus the timeout.
///   Times are kept in ticks of the builder's `resolution` (about 1 ms by default; about
///   262 µs for `build_async`, the `tokio` feature's): a tree never times
///   out before its deadline and at most a tick or two after it when the reaper is not
///   starved, and [`Completion::elapsed`] is accurate to a tick (a `TimedOut` tree never
///   reports less than its timeout; past 2^29 ticks of life it may read long by one part
///   in 2^23).
/// * **Time never aliases.** Deadlines and `elapsed` are right whatever the gap between two
///   reaper passes (a process stopped in a debugger, a paused VM, a laptop asleep, a
///   [`ManualClock`](crate::ManualClock) moved years ahead: the first pass after it times
///   out what came due, late by the stall and never early) and however long resets keep a
///   tree alive. A clock that steps back times nothing out before its deadline as read on
///   that clock. After a stall of 2^29 ticks or more (about 6 days at 1 ms, 9 minutes at
///   1 µs), the first call or pass that sees it rewrites the stored times once, keeping
///   other calls waiting for that walk of the tables ([`reanchorings`](Self::reanchorings)
///   counts them); a healthy acker never needs it.
/// * **Capacity**: `max_pending` bounds trees plus orphans, exactly. Beyond it init
///   returns [`InitError::Full`] with the payload, and an orphan ack is refused (counted in
///   `rejected_full`). Nothing is allocated for the bound.
/// * **Shutdown** stops and joins the reaper and hands back every initialized, pending
///   tree's payload; later inits return [`InitError::Shutdown`], later acks and fails do
///   nothing, and nothing is pending. Every error hands the payload back: nothing is lost.
/// * **Delivery**: a tree stops counting in [`pending`](Self::pending) when its completion
///   is decided, just before `on_complete` runs; [`wait_delivered`](Self::wait_delivered)
///   waits for the callbacks of what has completed.
///
/// # Choosing roots
///
/// A root names one tree for as long as any message of it may still arrive. Messages are
/// keyed by the root alone, so an ack that arrives after its tree completed (a duplicated
/// or retried ack, one delayed in a queue) is held as an orphan until its deadline, and an
/// init of the same root before then merges it: the new tree's value then never reaches 0
/// and it times out though every one of its own edges was acked. The acker cannot tell
/// such an ack from one that overtook its init, which it must merge. So:
///
/// * **Do not reuse a root** while a message of its earlier use may still arrive: at least
///   a timeout after the tree completed, longer if messages can be delayed further.
/// * **Use a random root per tree** ([`edge_id`](crate::edge_id()) gives one), not a
///   request id that a client's retry repeats; keep your own id in the payload.
/// * **Watch [`AckerStats::orphans_joined`]** against the inits: merges are normal when
///   sub-tasks overtake their init, but a rise together with `timed_out` points at reused
///   roots.
///
/// # Costs
///
/// * **Threads**: [`build`](AckerBuilder::build) starts one reaper thread per acker. It
///   sleeps until the next deadline and does not wake at all while nothing is pending
///   ([`idle_wakeups`](Self::idle_wakeups) stays flat).
///   [`build_manual`](AckerBuilder::build_manual) starts none: call
///   [`expire`](Self::expire) yourself.
/// * **Memory**: under 1 MiB before the first tree; the tables start small, grow with what
///   is pending and shrink after it falls. A tree holds a 32-byte slot with a `u32`
///   payload (a payload of 5 to 16 B makes it 48 B), and, once it lives past about 64
///   ticks, a share of its group's timer. What a pending tree costs in all, measured beside
///   a map with a timer wheel, is one table in the repository's `docs/design.md`, "Memory
///   per pending root".
/// * **Time**: a message is a hash, a load of the root's 64-byte line and one 128-bit
///   compare-and-swap (no lock, no allocation); a tree that completes within about 64
///   ticks never reaches the reaper.
///
/// How it works inside, in the repository: a tree's path through the tables and the
/// timers is told in the module docs of `src/acker/mod.rs`; what it costs, time, the
/// protocols and their loom models are on one page, `docs/how-it-works.md`.
///
/// # Naming the payload type
///
/// `Acker::builder()` cannot see the payload type inside an `on_complete` closure that
/// uses it (a method call on `c.payload` is error E0282); name it on the builder, as
/// `Acker::<String>::builder()`, or on the closure's argument, `|c: Completion<String>|`.
///
/// # Example
///
/// ```
/// use ackwheel::{edge_id, Acker, ManualClock, Outcome};
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
/// let (a, b) = (edge_id(), edge_id());
/// acker.init(7, a ^ b, "tuple payload").unwrap();
/// assert!(!acker.ack(7, a));
/// assert!(acker.ack(7, b)); // the value reached 0: this call completed the tree
///
/// // An ack that overtook its init is held; init then completes the tree at once.
/// let c = edge_id();
/// assert!(!acker.ack(9, c));
/// assert_eq!(acker.pending(), 1);
/// acker.init(9, c, "raced").unwrap();
///
/// // Root 8 loses an ack and times out.
/// acker.init(8, edge_id() ^ edge_id(), "lost").unwrap();
/// clock.advance(Duration::from_secs(31));
/// assert_eq!(acker.expire(), 1);
/// assert_eq!(
///     *done.lock().unwrap(),
///     [(7, Outcome::Acked), (9, Outcome::Acked), (8, Outcome::TimedOut)]
/// );
/// ```
pub struct Acker<T: Send + 'static = u32> {
    handle: Arc<engine::Handle<T>>,
}

impl<T: Send + 'static> Clone for Acker<T> {
    fn clone(&self) -> Self {
        Acker {
            handle: Arc::clone(&self.handle),
        }
    }
}

impl<T: Send + 'static> fmt::Debug for Acker<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.handle.engine, f)
    }
}

impl<T: Send + 'static> Acker<T> {
    /// A builder with the defaults: 30 s timeout, ~1 ms resolution (~262 µs for
    /// `build_async`, the `tokio` feature's), 4 x cores shards, 1 << 20 pending.
    pub fn builder() -> AckerBuilder<T> {
        AckerBuilder::new()
    }

    #[inline]
    fn engine(&self) -> &engine::Engine<T> {
        &self.handle.engine
    }

    /// Storm's ACKER_INIT: XORs `xor` into the root's value and attaches the payload.
    /// If acks (or a fail) arrived first, it completes now when the value is 0 (Acked wins)
    /// or a fail was seen (Failed): `Ok` either way, and the completion goes to
    /// `on_complete` on this thread.
    ///
    /// Every error hands the payload back: [`InitError::Duplicate`] for a root already
    /// initialized and pending, [`InitError::Full`] at `max_pending`,
    /// [`InitError::Shutdown`] after [`shutdown`](Self::shutdown).
    ///
    /// ```
    /// use ackwheel::{edge_id, Acker, InitError};
    ///
    /// let acker: Acker<String> = Acker::builder().max_pending(1).build_manual().unwrap();
    /// acker.init(1, edge_id(), "first".to_string()).unwrap();
    /// let again = acker.init(1, edge_id(), "again".to_string());
    /// assert_eq!(again, Err(InitError::Duplicate("again".to_string())));
    /// let full = acker.init(2, edge_id(), "no room".to_string()).unwrap_err();
    /// assert_eq!(full.into_payload(), "no room"); // nothing is lost
    /// ```
    pub fn init(&self, root: u64, xor: u64, payload: T) -> Result<(), InitError<T>> {
        self.engine().init(root, xor, payload, None)
    }

    /// [`init`](Self::init) with this tree's own timeout (also used by `reset_timeout`).
    /// A zero timeout, or one beyond 2^62 ns, is clamped to 1 ns or 2^62 ns (and then to
    /// 2^30 - 2 ticks of the resolution).
    pub fn init_with_timeout(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Duration,
    ) -> Result<(), InitError<T>> {
        self.engine()
            .init(root, xor, payload, Some(own_timeout_ns(timeout)))
    }

    /// [`init`](Self::init) (with `timeout` as
    /// [`init_with_timeout`](Self::init_with_timeout) takes it), then the reaper's pass
    /// here if it is due to callers, judged at the init's own tick: the async acker's start
    /// of a tree ([`reaper`](crate::acker::engine::reaper), "Callers first").
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn init_then_help(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Option<Duration>,
    ) -> Result<(), InitError<T>> {
        self.engine()
            .init_then_help(root, xor, payload, timeout.map(own_timeout_ns))
    }

    /// Storm's ACKER_ACK. `true` iff this call completed the tree (Acked). An ack for an
    /// unknown root is held as an orphan until its init arrives or its deadline passes.
    pub fn ack(&self, root: u64, xor: u64) -> bool {
        self.engine().ack(root, xor)
    }

    /// Storm's ACKER_FAIL. `true` iff this call completed the tree (Failed).
    pub fn fail(&self, root: u64) -> bool {
        self.engine().fail(root)
    }

    /// Storm's ACKER_RESET_TIMEOUT: deadline = now + the tree's timeout. `true` iff the
    /// root has an uncompleted entry (initialized or not); then the new deadline holds: the
    /// tree does not time out before it, even if the old one was passing at that moment.
    ///
    /// ```
    /// use ackwheel::{Acker, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(0);
    /// let acker: Acker = Acker::builder()
    ///     .timeout(Duration::from_secs(10))
    ///     .clock(clock.clone())
    ///     .build_manual()
    ///     .unwrap();
    /// acker.init(5, 0xfeed, 0).unwrap();
    /// clock.advance(Duration::from_secs(8));
    /// assert!(acker.reset_timeout(5)); // still working on it: 10 s from now
    /// clock.advance(Duration::from_secs(8));
    /// assert_eq!(acker.expire(), 0); // 16 s after init, 8 s after the reset
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(acker.expire(), 1);
    /// assert!(!acker.reset_timeout(5)); // gone
    /// ```
    pub fn reset_timeout(&self, root: u64) -> bool {
        self.engine().reset_timeout(root)
    }

    /// Orphans held now: entries of acks or fails whose init has not come (nor their
    /// deadline), so `pending() - orphans_held()` is the trees pending. A growing count
    /// means acks for roots that were never initialized, or late acks of completed trees.
    ///
    /// It walks every slot of the tables (a few milliseconds per million slots), so it is
    /// kept out of [`stats`](Self::stats): call it for a dashboard every few seconds, not
    /// per request. An init that met a twin of its new entry counts for an instant (its
    /// entry is HELD until the twins are merged and it joins).
    ///
    /// ```
    /// use ackwheel::Acker;
    ///
    /// let acker: Acker = Acker::builder().build_manual().unwrap();
    /// acker.init(1, 0b11, 0).unwrap();
    /// acker.ack(2, 0b1); // an ack that overtook its init
    /// assert_eq!((acker.pending(), acker.orphans_held()), (2, 1));
    /// acker.init(2, 0b1, 0).unwrap(); // init arrives: the tree completes at once
    /// assert_eq!((acker.pending(), acker.orphans_held()), (1, 0));
    /// ```
    pub fn orphans_held(&self) -> usize {
        self.engine().orphans_held()
    }

    /// Entries held now: initialized trees not yet completed, and orphans (acks or fails
    /// whose init has not come, held until it does or their deadline passes). Exact, and
    /// never above `max_pending`. A tree stops counting when its completion is decided,
    /// just before its `on_complete` runs: to wait until every completion has also been
    /// delivered, call [`wait_delivered`](Self::wait_delivered) after seeing 0. After
    /// [`shutdown`](Self::shutdown) has returned it is 0.
    pub fn pending(&self) -> usize {
        self.engine().pending()
    }

    /// Returns once every completion decided before the call has been delivered: each of
    /// their `on_complete` calls has returned (or its panic was caught). A completion is
    /// decided, and stops counting in [`pending`](Self::pending), just before its callback
    /// runs, so a caller that waits for `pending() == 0` and then for this has seen every
    /// callback of those trees. It waits only for the acker calls under way at the moment
    /// (each delivers what it completed before it returns), not for later ones; called from
    /// inside `on_complete` it cannot wait for its own caller and returns at once.
    ///
    /// ```
    /// use ackwheel::Acker;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let delivered = Arc::new(AtomicUsize::new(0));
    /// let seen = Arc::clone(&delivered);
    /// let acker: Acker = Acker::builder()
    ///     .on_complete(move |_| {
    ///         seen.fetch_add(1, Ordering::SeqCst);
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let workers: Vec<_> = (1..=4u64)
    ///     .map(|root| {
    ///         let acker = acker.clone();
    ///         acker.init(root, root, 0).unwrap();
    ///         std::thread::spawn(move || acker.ack(root, root))
    ///     })
    ///     .collect();
    /// while acker.pending() > 0 {
    ///     std::thread::yield_now();
    /// }
    /// acker.wait_delivered();
    /// assert_eq!(delivered.load(Ordering::SeqCst), 4);
    /// # for w in workers { w.join().unwrap(); }
    /// ```
    pub fn wait_delivered(&self) {
        self.engine().wait_delivered()
    }

    /// Counters since the acker was built, and what is pending now. Sums a few per-thread
    /// counters: cheap enough to call every second for a dashboard.
    ///
    /// ```
    /// use ackwheel::Acker;
    ///
    /// let acker: Acker = Acker::builder().build_manual().unwrap();
    /// acker.init(1, 0b11, 0).unwrap();
    /// acker.ack(1, 0b11);
    /// let stats = acker.stats();
    /// assert_eq!((stats.acked, stats.pending), (1, 0));
    /// println!("{stats}"); // pending 0, acked 1, failed 0, ...
    /// ```
    pub fn stats(&self) -> AckerStats {
        self.engine().stats()
    }

    /// Manual mode: one reaper pass at `clock.now()`; returns the timeouts it delivered
    /// (orphans it dropped are counted in the stats, not here). On an acker built with
    /// `build()` it does nothing and returns 0: the reaper thread runs the passes.
    ///
    /// A pass times out every tree whose deadline has passed, drops expired orphans, and
    /// moves growing tables on; call it at least once per `resolution` tick to keep
    /// timeouts punctual (see the crate's `tokio` feature for a task that sleeps exactly).
    pub fn expire(&self) -> usize {
        self.engine().expire()
    }

    /// Reaper wake-ups that found nothing to do, since build: what an idle acker costs.
    ///
    /// The reaper sleeps until the next deadline, at most a quarter of the timeout (and at
    /// most 67 ms or 64 ticks of the resolution, whichever is longer) while trees are
    /// pending, so that starting a tree never has to wake it; and not at all when nothing
    /// is pending. So on an idle acker this stays flat, and with long-lived trees pending
    /// and nothing due it climbs by one per such sleep (15 a second at `build`'s 1 ms
    /// resolution); a count that climbs faster while nothing
    /// is due is a bug worth reporting. (A manual acker's driven passes count here too.)
    pub fn idle_wakeups(&self) -> u64 {
        self.engine().idle_wakeups()
    }

    /// Times the acker re-anchored its clock since build: once after each stall (a
    /// stopped process, a paused VM, a clock moved far ahead) of 2^29 ticks of the
    /// resolution or more, when it rewrites its stored times so that none aliases (about
    /// 6 days at the default 1 ms, 9 minutes at 1 µs). A healthy acker whose reaper runs
    /// never needs one.
    pub fn reanchorings(&self) -> u64 {
        self.engine().reanchored()
    }

    /// Process-wide memory barriers (Linux `membarrier`) that failed, since build.
    ///
    /// Operations mark themselves with a plain store and the reaper (or a growing table)
    /// runs one heavy barrier before it reads the marks, or the slots of the groups that
    /// new trees made dirty. A failed barrier is not an error for any caller: the table it
    /// would have freed, the new trees' timers it would have filed, or the shutdown it
    /// would have let finish wait for the next barrier that runs. Non-zero means the kernel refused the call (a seccomp filter,
    /// for example): memory is freed later than it could be. Always 0 where the acker uses
    /// plain fences instead (no `membarrier`).
    pub fn grace_barrier_failures(&self) -> u64 {
        self.engine().barrier_failures()
    }

    /// Stops and joins the reaper, then hands back every initialized, uncompleted tree as
    /// `(root, payload)`. Later inits fail with [`InitError::Shutdown`]. Acks and fails
    /// that race it are applied (a tree one completes is delivered rather than handed
    /// back); once it has returned they change nothing and return `false`, the orphans it
    /// found are dropped (counted in [`AckerStats::orphans_expired`]), and
    /// [`pending`](Self::pending) is 0. (Called from inside `on_complete`, it cannot wait
    /// for the call it is in: it hands back what it found, and what that call does after is
    /// not covered.) Every concurrent `shutdown` returns only after the reaper has stopped.
    /// It also drops `on_complete` once no call can reach it, so a callback that holds a
    /// clone of its own acker does not keep it alive.
    ///
    /// ```
    /// use ackwheel::Acker;
    ///
    /// let acker: Acker<&str> = Acker::builder().build().unwrap();
    /// acker.init(1, 0b1, "in flight").unwrap();
    /// assert_eq!(acker.shutdown(), [(1, "in flight")]);
    /// assert!(acker.init(2, 0b1, "late").is_err());
    /// ```
    pub fn shutdown(&self) -> Vec<(u64, T)> {
        self.handle.shutdown()
    }
}

/// A tree's own timeout as init takes it, in nanoseconds: zero, or beyond 2^62 ns, clamped
/// to 1 ns or 2^62 ns ([`Acker::init_with_timeout`]).
fn own_timeout_ns(timeout: Duration) -> u64 {
    duration_nanos(timeout).clamp(1, MAX_TIMEOUT_NS)
}

#[cfg(all(test, not(loom)))]
mod tests;
