//! Waking the reaper.
//!
//! The reaper parks with no deadline only when nothing is pending anywhere. A push that
//! makes an empty hand-off list non-empty stores the hand-off list's length, fences, and
//! reads `idle`; the reaper stores `idle`, fences, and reads every hand-off list's length
//! before it parks. Of the two, one sees the other: no entry waits for a reaper that sleeps
//! forever. That fence is paid once per tick per busy thread, not per tree.

use super::{Pushed, Threads};
use crate::sync::{fence, Ordering};

impl Threads {
    /// After a hand-off list became non-empty (or took an entry due soon): whether the
    /// reaper is idle, parked with no deadline or asleep on a timer.
    pub fn wake_check(&self) -> Pushed {
        fence(Ordering::SeqCst); // orders the length store before the `idle` load (docs)
        if self.idle.load(Ordering::Relaxed) {
            Pushed::WakeReaper
        } else {
            Pushed::Filed
        }
    }

    /// The reaper, before it parks with no deadline: marks itself idle and reports whether
    /// any entry waits anywhere (then it must not park).
    pub fn park_check(&self) -> bool {
        self.idle.store(true, Ordering::Relaxed); // Relaxed: ordered by the fence below.
        fence(Ordering::SeqCst); // against the pusher's fence (module docs)
        let waiting = self.inbox_len.load(Ordering::Relaxed) > 0
            || self
                .all
                .lock()
                .unwrap()
                .iter()
                .any(|b| b.len.load(Ordering::Relaxed) > 0);
        if waiting {
            self.unidle();
        }
        waiting
    }

    /// Whether any entry waits in a hand-off list or the inbox (hints: a push under way may
    /// be missed; `park_check` is the race-free check).
    pub fn waiting(&self) -> bool {
        // Relaxed (both): hints.
        self.inbox_len.load(Ordering::Relaxed) > 0
            || self
                .all
                .lock()
                .unwrap()
                .iter()
                .any(|b| b.len.load(Ordering::Relaxed) > 0)
    }

    /// [`waiting`](Self::waiting) without waiting for the hand-off lists' list: `true`
    /// while another thread holds it.
    pub fn waiting_or_busy(&self) -> bool {
        // Relaxed (both): hints.
        self.inbox_len.load(Ordering::Relaxed) > 0
            || self.all.try_lock().map_or(true, |all| {
                all.iter().any(|b| b.len.load(Ordering::Relaxed) > 0)
            })
    }

    /// The reaper is awake.
    pub fn unidle(&self) {
        self.idle.store(false, Ordering::Relaxed); // Relaxed: a hint for pushers.
    }
}
