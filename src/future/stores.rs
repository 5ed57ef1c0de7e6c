//! What the async acker's inner [`Acker`](crate::Acker) holds for each tree, and where that
//! points: a [`Held`] cell number, into one of two slabs ([`slab`](crate::future::slab)),
//! tracked trees' waiter cells ([`waiter`](crate::future::waiter)) and stream trees'
//! payloads.

use std::sync::Arc;
use std::time::Duration;

use super::slab::{Slab, Slot, Spot};
use super::waiter::{Cell, Cells, Waiter};
use crate::Outcome;

/// A tree's payload inside the inner acker: the number of the cell that holds what the tree
/// carries ([`build`](crate::future::async_acker::build), "Delivery"), with [`STREAMED`]
/// set for a stream tree's slot, clear for a tracked tree's waiter. Owns nothing itself:
/// the acker delivers or hands back each one exactly once, and whoever gets it ends its
/// cell ([`Stores::end`]).
pub(super) struct Held(u32);

/// [`Held`]'s bit for a stream tree; the slabs' numbers have 31 bits.
const STREAMED: u32 = 1 << 31;
const _: () = assert!(super::slab::NUMBER_BITS == 31);

/// The cells of the trees in the inner acker: tracked trees' waiters, and stream trees'
/// payloads.
pub(super) struct Stores<T> {
    pub(super) waiters: Arc<Cells<T>>,
    streamed: Arc<Slab<Slot<T>>>,
}

impl<T> Clone for Stores<T> {
    fn clone(&self) -> Self {
        Stores {
            waiters: Arc::clone(&self.waiters),
            streamed: Arc::clone(&self.streamed),
        }
    }
}

impl Held {
    /// A tracked tree's: its waiter cell.
    pub(super) fn tracked(spot: Spot<Cell<impl Sized>>) -> Self {
        Held(spot.number())
    }

    /// A stream tree's: its payload's slot.
    pub(super) fn streamed(spot: Spot<Slot<impl Sized>>) -> Self {
        Held(spot.number() | STREAMED)
    }

    pub(super) fn is_streamed(&self) -> bool {
        self.0 & STREAMED != 0
    }

    /// The order a burst of timeouts is delivered in: the cell's number, which the slabs
    /// hand out in about the order trees are started (each thread fills pages of its own
    /// in turn), so that the tasks woken are reached in about the order they were created
    /// (`acker/engine/deliver.rs`, "A burst's order").
    pub(super) fn order(&self) -> u32 {
        self.0
    }
}

impl<T> Stores<T> {
    /// Two empty slabs.
    pub(super) fn new() -> Self {
        Stores {
            waiters: Arc::new(Cells::new()),
            streamed: Arc::new(Slab::new()),
        }
    }

    /// Completes the tree `held` carries: a tracked tree's waiter is completed (its task
    /// woken, or the payload dropped if its future is gone), and `None` returned; a stream
    /// tree's payload is returned, for the stream, and its slot given back.
    ///
    /// # Safety
    ///
    /// `held` came from the inner acker, which delivers each tree once.
    #[inline]
    pub(super) unsafe fn complete(
        &self,
        held: Held,
        outcome: Outcome,
        elapsed: Duration,
    ) -> Option<T> {
        if held.is_streamed() {
            // Safety: the acker held the number of a live slot (the caller's contract).
            return Some(unsafe { Self::take_streamed(self.streamed.spot(held.0 & !STREAMED)) });
        }
        // Safety: the acker held the number of a live waiter cell, and made no other
        // `Waiter` of it.
        unsafe { Waiter::at(&self.waiters, held.0) }.complete(outcome, elapsed);
        None
    }

    /// A stream tree's slot holding `payload`; the payload back when every number is in
    /// use.
    pub(super) fn put_streamed(&self, payload: T) -> Result<Spot<Slot<T>>, T> {
        let Some(spot) = Slab::insert(&self.streamed) else {
            return Err(payload);
        };
        // Safety: a cell just inserted is ours.
        unsafe { spot.cell().0.with_mut(|p| (*p).write(payload)) };
        Ok(spot)
    }

    /// A stream tree's payload, and its slot given back.
    ///
    /// # Safety
    ///
    /// `spot` holds a payload (`put_streamed`), and is not used again.
    pub(super) unsafe fn take_streamed(spot: Spot<Slot<T>>) -> T {
        // Safety: the caller's contract.
        let payload = unsafe { spot.cell().0.with_mut(|p| (*p).assume_init_read()) };
        // Safety: emptied above, not used again.
        unsafe { Slab::remove(spot) };
        payload
    }

    /// Ends the cell of a tree that ends without a completion (handed back by `shutdown`):
    /// its payload; a tracked tree's future resolves to `Closed`.
    ///
    /// # Safety
    ///
    /// `held` came from the inner acker, which hands each tree's payload out once.
    pub(super) unsafe fn end(&self, held: Held) -> T {
        if held.is_streamed() {
            // Safety: the acker held the number of a live slot (the caller's contract).
            unsafe { Self::take_streamed(self.streamed.spot(held.0 & !STREAMED)) }
        } else {
            // Safety: the acker held the number of a live waiter cell, and made no other
            // `Waiter` of it.
            unsafe { Waiter::at(&self.waiters, held.0) }.into_payload()
        }
    }

    /// The slabs keep no empty page for later (the last handle is going).
    pub(super) fn close(&self) {
        self.waiters.close();
        self.streamed.close();
    }
}
