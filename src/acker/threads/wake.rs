//! Waking the reaper.
//!
//! The acker's summary of its dirty groups holds the earliest tick by which the reaper must
//! scan them ([`dirty`](crate::acker::timers::dirty)), and the reaper sleeps no later than
//! that tick. An operation that registers a root makes the summary's tick earlier (or sets
//! it, the first since a scan) with a SeqCst CAS, fences, and reads `idle`; the reaper
//! stores `idle`, fences, and reads the summary before it sleeps. Of the two, one sees the
//! other: either the reaper's sleep ends by the new tick, or the operation learns that the
//! reaper is idle and wakes it if its published timer ends after that tick
//! (`Engine::reaper_sleeps_past`). A registration whose tick is no earlier than the
//! summary's (the roots of one timeout, registered in order: nearly all) neither fences
//! nor wakes.

use super::Threads;
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::{fence, Ordering};

/// What a registration asks of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// Nothing to wake.
    Quiet,
    /// The reaper is idle (parked, or asleep on a timer), and the registration made `by`
    /// the earliest tick by which it must scan the dirty groups: wake it if it sleeps past
    /// `by` (module docs).
    WakeReaper {
        /// The registered root's scan's tick.
        by: Tick,
    },
}

impl Threads {
    /// After an operation marked a root's group dirty: the reaper must scan by `by` (the
    /// root's scan's tick: [`dirty`](crate::acker::timers::dirty), "When to scan"). Whether the reaper is idle, parked or asleep on a
    /// timer, when that made the summary's tick earlier (module docs).
    #[inline]
    pub fn registered(&self, by: Tick) -> Registered {
        if !self.dirty.lower(by) {
            return Registered::Quiet;
        }
        self.wake_check(by)
    }

    /// After the summary's tick became `by`: whether the reaper is idle (module docs).
    #[cold]
    fn wake_check(&self, by: Tick) -> Registered {
        fence(Ordering::SeqCst); // orders the tick's store before the `idle` load (docs)
        if self.idle.load(Ordering::Relaxed) {
            Registered::WakeReaper { by }
        } else {
            Registered::Quiet
        }
    }

    /// The reaper, before it sleeps past the next tick: marks itself idle and returns the
    /// tick by which it must scan the dirty groups, if any was marked since its last scan
    /// (module docs). When that tick has come by `now`, it stays awake (unidles): its next
    /// pass is due now.
    pub fn park_check(&self, now: Tick) -> Option<Tick> {
        self.idle.store(true, Ordering::Relaxed); // Relaxed: ordered by the fence below.
        fence(Ordering::SeqCst); // against the registering operation's fence (module docs)
        let due = self.dirty.due();
        if due.is_some_and(|due| reached(due, now)) {
            self.unidle();
        }
        due
    }

    /// The tick by which the reaper must scan the dirty groups, if any was marked since its
    /// last scan (a hint: a registration under way may be missed; `park_check` is the
    /// race-free check).
    pub fn earliest_due(&self) -> Option<Tick> {
        self.dirty.due()
    }

    /// A scan of the dirty groups begins: the summary is cleared, and its tick returned if
    /// any group was marked since the last scan ([`dirty`](crate::acker::timers::dirty)).
    pub fn take_dirty(&self) -> Option<Tick> {
        self.dirty.take()
    }

    /// The light side of the registration's Dekker pair, between an operation's CAS that
    /// created a root and its load of the root's group's bit (free where `membarrier`
    /// works: [`dirty`](crate::acker::timers::dirty), "Why no root is missed").
    #[inline(always)]
    pub fn registering(&self) {
        self.fences.light();
    }

    /// The heavy side of the registration's Dekker pair, between a scan's swaps of the bits
    /// and its reads of the groups' slots: `false` when the barrier could not be run
    /// (counted), and the scan must not trust what it would read.
    pub fn scanned(&self) -> bool {
        self.heavy()
    }

    /// A re-anchoring to the tick `to` ([`anchor`](crate::acker::engine::time)): a tick
    /// stored in the summary would not decode after it, so a summary that is set becomes
    /// due at `to`, and the next pass scans.
    pub fn rebase_dirty(&self, to: Tick) {
        if self.dirty.take().is_some() {
            self.dirty.lower(to);
        }
    }

    /// The reaper is awake.
    pub fn unidle(&self) {
        self.idle.store(false, Ordering::Relaxed); // Relaxed: a hint for registrations.
    }
}
