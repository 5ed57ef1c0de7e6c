//! The end of a tree's entry: its payload taken by the thread whose CAS completed it, its
//! slot freed, and shutdown's take-back of a LIVE tree.

use super::lines::Side;
use super::{Stamp, Table, Tick};
use crate::acker::table::word::Key;
use crate::sync::AtomicUsize;

impl<T> Table<T> {
    /// Shutdown: takes back the initialized tree of `key` in `slot` (LIVE to completed, its
    /// payload taken, its slot freed). `None` when the slot holds no LIVE tree of `key`
    /// (completed by someone, not initialized, or taken back already: one CAS decides).
    pub fn take_back(&self, slot: usize, key: Key) -> Option<T> {
        let mut word = self.word(slot).load_on(self.cpu);
        loop {
            if word.frozen_for(key) {
                word = self.await_moved(slot, word); // then it is the successor's to take
                continue;
            }
            if !word.holds(key) {
                return None;
            }
            let done = word.taken_back()?;
            match self.word(slot).cas_on(self.cpu, word, done) {
                // Safety: our CAS completed the tree from LIVE: the completion is ours,
                // taken and freed once, here.
                Ok(()) => unsafe {
                    let payload = self.take(slot);
                    self.free(slot, key);
                    return Some(payload);
                },
                Err(now) => word = now,
            }
        }
    }

    /// Shutdown, after the callback closed: drops `slot`'s HELD entry of `key` (messages
    /// whose init never came). `false` when the slot holds no HELD entry of `key`.
    pub fn discard(&self, slot: usize, key: Key) -> bool {
        let mut word = self.word(slot).load_on(self.cpu);
        loop {
            if word.frozen_for(key) {
                word = self.await_moved(slot, word); // then it is the successor's
                continue;
            }
            if !word.holds(key) || word.state().phase() != Some(super::Phase::Held) {
                return false;
            }
            match self.empty(slot, word) {
                Ok(()) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// Ends a completion this thread claimed in `slot`, with one indexing of the slot: reads
    /// its times and own timeout for the completion's report
    /// ([`completed_times`](Self::completed_times)), takes the payload
    /// ([`take`](Self::take)), then frees the slot ([`free`](Self::free)), its credit given
    /// to `hand` (the calling thread's hand of credits), or to the stripes when `None`.
    ///
    /// # Safety `slot` and `key` are those of a [`Completed`](super::Completed) this
    /// thread's call claimed, not yet taken nor freed: once per completion (as for `take`
    /// and `free`).
    #[inline]
    pub unsafe fn end(
        &self,
        slot: usize,
        key: Key,
        hand: Option<&AtomicUsize>,
    ) -> (Option<Stamp>, Option<Tick>, T) {
        let side = self.side(slot);
        let (stamp, own_timeout) = Self::completed_times(side);
        // Safety: the caller's contract: this completion's payload, taken once.
        let payload = unsafe { Self::take_in(side) };
        // Safety: the same completion, freed once, after its take.
        unsafe { self.free_in(slot, side, key, hand) };
        (stamp, own_timeout, payload)
    }

    /// Moves the payload out of a slot whose completion this thread claimed.
    ///
    /// # Safety `slot` is the slot of a [`Completed`](super::Completed) this thread's call
    /// claimed, and its payload has not been taken: once per completion.
    pub unsafe fn take(&self, slot: usize) -> T {
        // Safety: the caller's contract.
        unsafe { Self::take_in(self.side(slot)) }
    }

    /// [`take`](Self::take) from the slot whose side data is `side`.
    ///
    /// # Safety As for `take`, of that slot.
    #[inline]
    unsafe fn take_in(side: &Side<T>) -> T {
        // The caller's CAS completed the tree from LIVE or JOINING, which only the settle
        // CAS after the payload write enters (the caller's CAS read from it, SeqCst).
        side.payload.0.with(|cell| {
            // Safety: the cell is written (above), and the slot stays reserved until the
            // caller frees it, so the caller is its only reader, once (the contract).
            unsafe { (*cell).assume_init_read() }
        })
    }

    /// Ends the reservation of a slot whose completion this thread claimed (its word is
    /// EMPTY since that CAS, [`word`](crate::acker::table::word)): takes the root's
    /// overflow counts off, frees the slot for claims and gives its credit back.
    ///
    /// # Safety `slot` and `key` are those of a [`Completed`](super::Completed) this
    /// thread's call claimed, its payload has been taken ([`take`](Self::take)), and it is
    /// freed once: after this the slot may hold another root, whose payload a second `take`
    /// would steal.
    pub unsafe fn free(&self, slot: usize, key: Key) {
        // Safety: the caller's contract.
        unsafe { self.free_in(slot, self.side(slot), key, None) }
    }

    /// [`free`](Self::free) of `slot`, whose side data is `side`.
    ///
    /// # Safety As for `free`.
    #[inline]
    unsafe fn free_in(&self, slot: usize, side: &Side<T>, key: Key, hand: Option<&AtomicUsize>) {
        debug_assert!(
            !self.word(slot).load_on(self.cpu).holds(key),
            "freeing a slot that still holds its root"
        );
        self.release_in(slot, side, key, hand);
    }
}
