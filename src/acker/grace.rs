//! Grace periods: when a completed slot may be freed for another root.
//!
//! Every operation that looks a root up runs *pinned*. A slot that completes is retired by
//! the reaper, and freed (back to EMPTY, next generation) only once every operation that was
//! pinned when it was retired has unpinned. An operation that starts later can still find the
//! tombstone's key, but it reads DONE and skips it; it can never hold the slot index across a
//! reuse. This is what keeps a late ack from XORing into a newer tree.
//!
//! * Normally the grace period is crossbeam-epoch's: `pin` is an epoch pin and the free is a
//!   deferred closure. Each acker has a `Collector` of its own rather than the process-wide
//!   default one: the default collector's garbage queue is shared with every other acker
//!   and crate in the process and drained a few bags per collection, so a busy neighbour
//!   could delay this acker's frees for a long time, and its tombstones would fill buckets
//!   (inits refused as `Full` well below `max_pending`). A thread keeps one `LocalHandle`
//!   per acker it has used, in a thread-local list pruned of ackers that are gone.
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

#[cfg(not(loom))]
thread_local! {
    /// This thread's epoch handles, one per acker it has used, each with a token that dies
    /// with its acker.
    static HANDLES: std::cell::RefCell<Vec<(std::sync::Weak<()>, crossbeam_epoch::LocalHandle)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

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

/// The acker's grace-period state.
#[derive(Debug, Default)]
pub(super) struct Grace {
    /// This acker's epoch collector.
    #[cfg(not(loom))]
    collector: crossbeam_epoch::Collector,
    /// Alive as long as the acker: thread-local handles hold it weakly.
    #[cfg(not(loom))]
    alive: Arc<()>,
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
        return (self.pin_epoch(), std::marker::PhantomData);
        #[cfg(loom)]
        {
            self.active.fetch_add(1, crate::sync::Ordering::SeqCst);
            Pin(&self.active)
        }
    }

    /// Helps the grace period along: tries to advance the epoch, and runs the frees that are
    /// due. The caller must not be pinned (its own pin would hold the epoch back). Under loom
    /// the stand-in frees at the reaper's next pass instead.
    pub(super) fn collect(&self) {
        #[cfg(not(loom))]
        self.pin_epoch().flush();
    }

    /// An epoch pin on this acker's collector, through this thread's handle for it.
    #[cfg(not(loom))]
    fn pin_epoch(&self) -> crossbeam_epoch::Guard {
        if cfg!(miri) {
            // Under Miri (Tree Borrows), dropping a `Collector` that threads have registered
            // with is reported as UB inside crossbeam-epoch 0.9.21 itself (its `List` drop
            // finalizing `Local`s). The process-wide collector is never dropped, so Miri
            // checks this crate's code through it instead.
            return crossbeam_epoch::pin();
        }
        let pinned = HANDLES.try_with(|handles| {
            let mut handles = handles.borrow_mut();
            if let Some((_, handle)) = handles
                .iter()
                .find(|(_, handle)| handle.collector() == &self.collector)
            {
                return handle.pin();
            }
            // First use of this acker on this thread: drop the handles of ackers that are
            // gone, then register.
            handles.retain(|(alive, _)| alive.strong_count() > 0);
            let handle = self.collector.register();
            let guard = handle.pin();
            handles.push((Arc::downgrade(&self.alive), handle));
            guard
        });
        // During thread-local teardown: a one-off handle (the guard keeps it registered).
        pinned.unwrap_or_else(|_| self.collector.register().pin())
    }
}

/// Frees `slots` of `shard` once no operation pinned now can still be looking at them.
pub(super) fn reclaim<T: Send + 'static>(inner: &Arc<Inner<T>>, shard: usize, slots: Vec<u32>) {
    if slots.is_empty() {
        return;
    }
    #[cfg(not(loom))]
    {
        let guard = inner.grace.pin_epoch();
        // The deferred free may run after this pass, on any thread, even after the acker is
        // gone (then there is nothing left to free): it holds the acker weakly, so the
        // collector's queue, which the acker owns, does not keep the acker alive.
        let weak = Arc::downgrade(inner);
        guard.defer(move || {
            if let Some(inner) = weak.upgrade() {
                let ledger = &inner.shards[shard].ledger;
                for slot in slots {
                    ledger.free(slot as usize);
                }
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
