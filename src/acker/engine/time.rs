//! Time in ticks: the clock's reading at build is the epoch, a tick is a power of two of
//! nanoseconds (the resolution), and tick 0 is never used (module docs of
//! [`engine`](crate::acker::engine), "Times"). Callers read the tick through
//! [`TimeBase::caller_full`], which takes it from the time-stamp
//! counter where it can be trusted; the reaper reads the clock itself.
//!
//! ## The anchor
//!
//! The anchor: the full tick every stored `u32` tick is read against, so that no gap
//! between reaper passes and no life of a tree makes one alias.
//!
//! A slot keeps its base (and through it its deadline) as a `u32` tick, and the dirty
//! groups' summary its tick so; 2^32 ticks are 72 minutes at the finest resolution. Each
//! is decoded as the full tick nearest the *anchor*, a full tick published in
//! [`TimeBase::anchor`], which is right while every stored tick lies within 2^31 ticks of
//! it. The invariant, and what keeps it:
//!
//! * **Writers stay near it.** A tick is stored only by a thread inside an operation, and
//!   it stamps with [`TimeBase::write_tick`]: its tick, no more than 2^30 ticks behind the
//!   anchor (a clock that stepped back further stamps later, never earlier: a deadline can
//!   only move out), and below the anchor plus [`REANCHOR_AFTER`] (2^29 ticks); a writer
//!   that finds its clock further on re-anchors first. So stored bases are at most 2^29
//!   ticks ahead of the anchor, and a deadline (a base plus at most 2^30 ticks) at most
//!   1.5 x 2^30.
//! * **Passes move it with what is pending.** Each reaper pass raises the anchor to its
//!   time and times out what is due, so a pending tree's base is never more than about
//!   2^30 ticks (its timeout) behind it. A pass that finds its time 2^29 ticks or more past
//!   the anchor re-anchors instead. The reaper thread sleeps at most 2^28 ticks at a time
//!   while anything is pending (about three days at the default 1 ms, four and a half
//!   minutes at 1 µs), so a healthy acker never needs more.
//! * **Re-anchoring rewrites what a jump left behind.** After a stall (a stopped process, a
//!   paused VM, a manual clock moved far ahead) or a long idle spell, the thread that finds
//!   the clock 2^29 ticks or more past the anchor moves it there ([`TimeBase::reanchor`]):
//!   while every other thread is kept out of the tables
//!   ([`marks`](crate::acker::threads::marks), "Re-anchoring"), it decodes every stored
//!   base at the old anchor, raises those more than 2^30 ticks behind the new one to that
//!   floor (their deadlines had passed and still have: the next pass times them out, late
//!   by the stall and never early), puts every start in a form decodable at the new anchor
//!   ([`times`](crate::acker::table::times)), forgets the wheel's filed `u32` ticks and
//!   makes a set summary of the dirty groups due at once (the next pass scans them); then
//!   publishes the new anchor. It costs a walk of every table, once per stall.
//!
//! Readers then decode against the anchor, not against their own clock: `elapsed` is
//! right whatever the clock reads now, and the reaper judges each deadline in full ticks
//! against its clock, so a tree is never timed out before its deadline on the clock that
//! stamped it, whatever the clock did in between.
//!
//! One corner stays: a re-anchoring needs every thread's marks
//! ([`marks`](crate::acker::threads::marks)); if the heavy fence cannot run, or a thread
//! without a record (one whose thread-locals are gone) is inside an operation, it
//! gives up, and the writer stamps at most 2^30 ticks past the old anchor (its deadline
//! then comes early by the rest of the jump). Neither happens on a Linux machine with
//! `membarrier` and threads that are not exiting.

use std::sync::{Mutex as StdMutex, TryLockError};
use std::time::Duration;

use super::MAX_TIMEOUT_TICKS;
use crate::acker::table::Stamp;
use crate::acker::threads::Threads;
use crate::acker::timers::ticks::Tick;
use crate::clock::tsc;
use crate::clock::Clock;
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

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
            let nanos = ticks << self.shift;
            // Under a second (most trees): no division into seconds and nanoseconds.
            if nanos < 1_000_000_000 {
                return Duration::new(0, nanos as u32);
            }
            return Duration::from_nanos(nanos);
        }
        let nanos = u128::from(ticks) << self.shift;
        // Past `Duration::MAX` (2^64 ticks of 2^30 ns and more): the longest there is.
        match u64::try_from(nanos / 1_000_000_000) {
            Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
            Err(_) => Duration::MAX,
        }
    }
}

/// Ticks past the anchor at which a writer, or a pass, re-anchors first (module docs).
pub(super) const REANCHOR_AFTER: u64 = 1 << 29;

/// The most ticks a writer stamps behind the anchor (a clock that stepped back): a pending
/// tree's base is then at most about 2^30 ticks behind it, as a healthy reaper keeps it.
const MOST_BEHIND: u64 = 1 << 30;

/// The most ticks a writer stamps past the anchor when a re-anchoring could not be done
/// (module docs, last paragraph): a deadline then still decodes.
const MOST_AHEAD: u64 = 1 << 30;

/// The engine's time: the clock, how its readings map to ticks, and the anchor every stored
/// tick is read against (module docs). A re-anchoring's rewrite of the tables and the
/// reaper's wheel is the engine's (`Engine::rebase`).
pub(super) struct TimeBase {
    pub(super) clock: Box<dyn Clock>,
    /// The clock is [`MonotonicClock`](crate::MonotonicClock) and callers may take their
    /// ticks from the time-stamp counter ([`tsc`]).
    pub(super) tsc_ticks: bool,
    pub(super) ticks: TickScale,
    /// The full tick every stored `u32` tick is read against (module docs).
    anchor: CachePadded<AtomicU64>,
    /// One re-anchoring at a time (`std`'s lock: loom does not model them).
    reanchoring: StdMutex<()>,
    /// Re-anchorings done (a statistic, for tests and the stress harness).
    pub(super) reanchored: AtomicU64,
}

impl TimeBase {
    /// Time on `clock` in ticks of `ticks`, anchored at the epoch's tick.
    pub(super) fn new(clock: Box<dyn Clock>, tsc_ticks: bool, ticks: TickScale) -> Self {
        let now = ticks.full(ticks.epoch);
        TimeBase {
            clock,
            tsc_ticks,
            ticks,
            anchor: CachePadded::new(AtomicU64::new(now)),
            reanchoring: StdMutex::new(()),
            reanchored: AtomicU64::new(0),
        }
    }
}

impl TimeBase {
    /// The full tick now, read on the clock itself (the reaper's read: callers take
    /// [`caller_full`](Self::caller_full)).
    #[inline]
    pub(super) fn clock_full(&self) -> u64 {
        self.ticks.full(self.clock.now())
    }

    /// [`clock_full`](Self::clock_full) as a stored tick (tests).
    #[cfg(test)]
    pub(super) fn tick_now(&self) -> Tick {
        self.clock_full() as Tick
    }

    /// [`caller_full`](Self::caller_full) as a stored tick.
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
        self.clock_full()
    }

    /// The anchor: the full tick every stored `u32` tick is read against (module docs).
    #[inline]
    pub(super) fn anchor(&self) -> u64 {
        self.anchor.load(Ordering::SeqCst)
    }

    /// The full tick a writer stamps with (module docs): the caller's tick, at least the
    /// anchor, re-anchoring first (`rewrite`, [`reanchor`](Self::reanchor)) when it is
    /// [`REANCHOR_AFTER`] or more past it. Called inside an operation, where it holds
    /// nothing of the tables: its entry, or the top of a retry.
    // Always: in the operation's frame
    // ([`Table::init_or`](crate::acker::table::Table::init_or)).
    #[inline(always)]
    pub(super) fn write_tick(&self, threads: &Threads, rewrite: impl FnOnce(u64, u64)) -> u64 {
        let tick = self.caller_full();
        let anchor = self.anchor();
        if tick < anchor.saturating_add(REANCHOR_AFTER) {
            return tick.max(anchor.saturating_sub(MOST_BEHIND));
        }
        self.reanchored_tick(tick, threads, rewrite)
    }

    /// [`write_tick`](Self::write_tick)'s tick `tick` once it is far past the anchor: a
    /// re-anchoring first, then the tick within reach of the anchor as it is now (module
    /// docs, last paragraph). Cold, and out of the writers' frames.
    #[cold]
    #[inline(never)]
    fn reanchored_tick(&self, tick: u64, threads: &Threads, rewrite: impl FnOnce(u64, u64)) -> u64 {
        self.reanchor(tick, threads, rewrite);
        let anchor = self.anchor();
        tick.clamp(
            anchor.saturating_sub(MOST_BEHIND),
            anchor.saturating_add(MOST_AHEAD),
        )
    }

    /// Whether a pass at full tick `now` would re-anchor
    /// ([`advance_anchor`](Self::advance_anchor)).
    pub(super) fn needs_reanchoring(&self, now: u64) -> bool {
        now >= self.anchor().saturating_add(REANCHOR_AFTER)
    }

    /// Raises the anchor to the full tick `now` of a pass: at once when it is less than
    /// [`REANCHOR_AFTER`] ahead (what is pending then is within reach of both), by a
    /// re-anchoring (`rewrite`, [`reanchor`](Self::reanchor)) otherwise. Called inside the
    /// pass's operation, before it locks the wheel.
    pub(super) fn advance_anchor(
        &self,
        now: u64,
        threads: &Threads,
        rewrite: impl FnOnce(u64, u64),
    ) {
        if self.needs_reanchoring(now) {
            self.reanchor(now, threads, rewrite);
        } else if now > self.anchor() {
            // fetch_max: two manual passes at once must not move it back.
            self.anchor.fetch_max(now, Ordering::SeqCst);
        }
    }

    /// Moves the anchor to `to` (module docs): one re-anchoring at a time, every other
    /// thread of `threads` kept out of the tables while `rewrite(from, to)` rewrites what
    /// is stored (the engine's tables and the reaper's wheel, `Engine::rebase`), then the
    /// new anchor published. Called inside an operation that holds nothing of the tables,
    /// and not under the wheel's lock. A thread that finds another at it waits, quiescent,
    /// and then finds the anchor moved.
    // Never inlined: once per stall, and its frame would weigh on every writer's.
    #[inline(never)]
    pub(super) fn reanchor(&self, to: u64, threads: &Threads, rewrite: impl FnOnce(u64, u64)) {
        let mut backoff = crate::sync::Backoff::default();
        let _one = loop {
            match self.reanchoring.try_lock() {
                Ok(guard) => break guard,
                Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    // Quiescent while waiting: the one at it waits for every busy thread.
                    let _paused = threads.pause();
                    backoff.wait();
                }
            }
        };
        let from = self.anchor();
        if to < from.saturating_add(REANCHOR_AFTER) {
            return; // another thread moved it meanwhile
        }
        if threads.begin_moving() {
            rewrite(from, to);
            self.anchor.fetch_max(to, Ordering::SeqCst);
            self.reanchored.fetch_add(1, Ordering::Relaxed); // Relaxed: a statistic
        }
        threads.end_moving();
    }
}

/// The stamp a new entry gets at full tick `tick` (a writer's, module docs): its start and
/// its base.
#[inline]
pub(super) fn stamp_at(tick: u64) -> Stamp {
    Stamp::new(tick as Tick, tick as Tick)
}
