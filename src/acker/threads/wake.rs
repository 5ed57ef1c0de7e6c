//! Waking the reaper.
//!
//! Each hand-off list publishes the earliest tick by which the reaper must have one of its
//! entries (the tick before that entry's deadline: [`Due`](super::Due)), and the inbox the
//! earliest of what owners handed it; the reaper sleeps no later than the earliest of them
//! ([`handoff`](super::handoff), "Waking the reaper when it is due"). A push that makes
//! its hand-off list's tick earlier (or the list non-empty), and a hand-off that makes the
//! inbox's earlier, stores it, fences, and reads `idle`; the reaper stores `idle`, fences,
//! and reads every hand-off list's and the inbox's before it sleeps. Of the two, one sees
//! the other: either the reaper's sleep ends by the new tick, or the pusher learns that
//! the reaper is idle and wakes it if its published timer ends after that tick
//! (`Engine::reaper_sleeps_past`). A push whose entry is due no sooner than the list's
//! earliest (entries of one timeout, filed in order: nearly all) neither fences nor wakes.

use super::handoff::earliest;
use super::{Pushed, Record, Threads};
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::{fence, Arc, Ordering};

impl Threads {
    /// After a push or hand-off that made `lowered` the earliest tick of its hand-off list
    /// or of the inbox (`None`: it made none earlier): whether the reaper is idle, parked
    /// or asleep on a timer.
    #[inline]
    pub fn wake_check(&self, lowered: Option<Tick>) -> Pushed {
        let Some(by) = lowered else {
            return Pushed::Filed;
        };
        fence(Ordering::SeqCst); // orders the tick's store before the `idle` load (docs)
        if self.idle.load(Ordering::Relaxed) {
            Pushed::WakeReaper { by }
        } else {
            Pushed::Filed
        }
    }

    /// The reaper, before it sleeps past the next tick: marks itself idle and returns the
    /// earliest tick by which it must have an entry, if any waits (module docs). When that
    /// tick has come by `now`, it stays awake (unidles): its next pass is due now.
    pub fn park_check(&self, now: Tick) -> Option<Tick> {
        self.idle.store(true, Ordering::Relaxed); // Relaxed: ordered by the fence below.
        fence(Ordering::SeqCst); // against the pusher's fence (module docs)
        let due = self.earliest_in(&self.all.lock().unwrap());
        if due.is_some_and(|due| reached(due, now)) {
            self.unidle();
        }
        due
    }

    /// The earliest tick by which the reaper must have an entry waiting in a hand-off list
    /// or the inbox, if any waits (a hint: a push under way may be missed; `park_check` is
    /// the race-free check).
    pub fn earliest_due(&self) -> Option<Tick> {
        self.earliest_in(&self.all.lock().unwrap())
    }

    /// [`earliest_due`](Self::earliest_due) without waiting for the hand-off lists' list:
    /// `busy` while another thread holds it.
    pub fn earliest_due_or(&self, busy: Tick) -> Option<Tick> {
        match self.all.try_lock() {
            Ok(all) => self.earliest_in(&all),
            Err(_) => Some(busy),
        }
    }

    fn earliest_in(&self, all: &[Arc<Record>]) -> Option<Tick> {
        // Relaxed (all): hints, or ordered by `park_check`'s fence.
        let inbox = (self.inbox_len.load(Ordering::Relaxed) > 0)
            .then(|| self.inbox_due.load(Ordering::Relaxed));
        all.iter()
            .filter(|r| r.len.load(Ordering::Relaxed) > 0)
            .map(|r| r.due.load(Ordering::Relaxed))
            .chain(inbox)
            .reduce(earliest)
    }

    /// The reaper is awake.
    pub fn unidle(&self) {
        self.idle.store(false, Ordering::Relaxed); // Relaxed: a hint for pushers.
    }
}
