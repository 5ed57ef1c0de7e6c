//! The end of a tree's entry: its payload taken by the thread whose CAS completed it, its
//! slot freed, and shutdown's take-back of a LIVE tree.

use super::Roots;
use crate::acker::word::Key;

impl<T> Roots<T> {
    /// Shutdown: takes back the initialized tree of `key` in `slot` (LIVE to DONE, its
    /// payload taken, its slot freed). `None` when the slot holds no LIVE tree of `key`
    /// (completed by someone, not initialized, or taken back already: one CAS decides).
    pub fn take_back(&self, slot: usize, key: Key) -> Option<T> {
        let mut word = self.word(slot).load();
        loop {
            if word.frozen_for(key) {
                word = self.await_moved(slot, word); // then it is the successor's to take
                continue;
            }
            if !word.holds(key) {
                return None;
            }
            let done = word.taken_back()?;
            match self.word(slot).cas(word, done) {
                // Safety: our CAS set DONE from LIVE: the completion is ours, taken and
                // freed once, here.
                Ok(()) => unsafe {
                    let payload = self.take(slot);
                    self.free(slot);
                    return Some(payload);
                },
                Err(now) => word = now,
            }
        }
    }

    /// Moves the payload out of a slot whose DONE this thread set.
    ///
    /// # Safety
    /// `slot` is the slot of a [`Completed`] this thread's call claimed, and its payload
    /// has not been taken: once per completion.
    pub unsafe fn take(&self, slot: usize) -> T {
        // The caller's CAS made the slot DONE from LIVE or JOINING, which only the settle
        // CAS after the payload write enters (the caller's CAS read from it, SeqCst).
        self.payload(slot).0.with(|cell| {
            // Safety: the cell is written (above), and DONE makes the caller its only
            // reader, once (the caller's contract).
            unsafe { (*cell).assume_init_read() }
        })
    }

    /// Returns a DONE slot to EMPTY.
    ///
    /// # Safety
    /// `slot` is the slot of a [`Completed`] this thread's call claimed, its payload has
    /// been taken ([`take`](Self::take)), and it is freed once: after this the slot may
    /// hold another root, whose payload a second `take` would steal.
    pub unsafe fn free(&self, slot: usize) {
        let word = self.word(slot).load();
        debug_assert_eq!(
            word.state(),
            crate::acker::word::State::DONE,
            "freeing a live slot"
        );
        // Nobody else changes a DONE word: no transition leaves DONE but this one.
        let freed = self.empty(slot, word);
        debug_assert!(freed.is_ok());
    }
}
