//! Grace periods: when a completed slot may be freed for another root.
//!
//! Every operation that looks a root up runs *pinned*. A slot that completes is retired by
//! the reaper, and freed (back to EMPTY, next generation) only once every operation that was
//! pinned when it was retired has unpinned. An operation that starts later can still find the
//! tombstone's key, but it reads DONE and skips it; it can never hold the slot index across a
//! reuse. This is what keeps a late ack from XORing into a newer tree.
//!
//! * Normally the grace period is crossbeam-epoch's: `pin` is an epoch pin and the free is a
//!   deferred closure.
//! * Under `cfg(loom)` crossbeam-epoch is invisible to the model checker, so a stand-in with
//!   the same guarantee runs instead: `pin` counts the operations in flight on a loom atomic,
//!   and retired slots wait in a limbo list until the reaper sees that count at zero. Every
//!   operation pinned at retirement has then finished, which is exactly the epoch guarantee
//!   the ledger relies on (a weaker one would let the loom models observe a reuse).

use std::sync::Arc;

use super::Inner;

/// Proof that the current operation is pinned; dropping it unpins.
#[cfg(not(loom))]
pub(super) type Pin<'a> = (crossbeam_epoch::Guard, std::marker::PhantomData<&'a ()>);

/// Proof that the current operation is pinned; dropping it unpins.
#[cfg(loom)]
#[derive(Debug)]
pub(super) struct Pin<'a>(&'a crate::sync::AtomicUsize);

#[cfg(loom)]
impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, crate::sync::Ordering::SeqCst);
    }
}

/// The acker's grace-period state (empty outside loom: crossbeam-epoch's is global).
#[derive(Debug, Default)]
pub(super) struct Grace {
    /// Operations pinned now.
    #[cfg(loom)]
    active: crate::sync::AtomicUsize,
    /// Retired `(shard, slot)`s waiting for a moment with nothing pinned.
    #[cfg(loom)]
    limbo: crate::sync::Mutex<Vec<(usize, u32)>>,
}

impl Grace {
    /// Pins the current thread for one operation.
    #[inline]
    pub(super) fn pin(&self) -> Pin<'_> {
        #[cfg(not(loom))]
        return (crossbeam_epoch::pin(), std::marker::PhantomData);
        #[cfg(loom)]
        {
            self.active.fetch_add(1, crate::sync::Ordering::SeqCst);
            Pin(&self.active)
        }
    }
}

/// Frees `slots` of `shard` once no operation pinned now can still be looking at them.
pub(super) fn reclaim<T: Send + 'static>(inner: &Arc<Inner<T>>, shard: usize, slots: Vec<u32>) {
    if slots.is_empty() {
        return;
    }
    #[cfg(not(loom))]
    {
        let guard = crossbeam_epoch::pin();
        // The deferred free may run after this pass, on any thread, even after the last
        // user handle is gone: it keeps the acker's state alive with an Arc of its own.
        let inner = Arc::clone(inner);
        guard.defer(move || {
            let ledger = &inner.shards[shard].ledger;
            for slot in slots {
                ledger.free(slot as usize);
            }
        });
        guard.flush();
    }
    #[cfg(loom)]
    {
        use crate::sync::Ordering;
        let grace = &inner.grace;
        let mut limbo = grace.limbo.lock().unwrap();
        limbo.extend(slots.into_iter().map(|slot| (shard, slot)));
        // Everything in limbo was retired before this read: zero pinned now means every
        // operation that could have found those slots live has finished. An RMW read: a pin
        // after it reads from it, so that operation sees the slots' DONE and skips them.
        if grace.active.fetch_add(0, Ordering::SeqCst) == 0 {
            for (shard, slot) in limbo.drain(..) {
                inner.shards[shard].ledger.free(slot as usize);
            }
        }
    }
}
