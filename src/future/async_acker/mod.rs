//! Awaiting a tree, or taking completions as a stream: [`AsyncAcker`], the handle that
//! [`AckerBuilder::build_async`](crate::AckerBuilder::build_async) returns, what its
//! handles share, and how its trees end ("Ending", below). The building, and how the inner
//! acker delivers each completion to its tree's future or to the stream, are in [`build`]
//! ("Delivery"); a tree's start, and why the buffer loses nothing, in [`start`].
//!
//! ## Ending
//!
//! `shutdown` closes the semaphore (waiting inits return [`InitError::Shutdown`]), hands
//! back every pending tree (their `TreeCompletion`s resolve to
//! [`Closed`](crate::future::Closed)) and drops the inner callback, which holds the queue's
//! sender with the batches of a burst still being delivered on the runtime
//! ([`build`], "A burst on the workers"): the stream ends once they are done and it is
//! drained.
//! Dropping every handle without `shutdown` ends things the same way, except that the
//! pending payloads are dropped: the last handle's drop shuts the inner acker down and
//! drops what it hands back (the table holds only numbers, which own nothing), then closes
//! the slabs, whose last pages go with the last cells.

// `pub(super)` for the docs' links from the rest of `future` ("Delivery").
pub(super) mod build;
mod start;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::tokio::sync::Semaphore;

use super::stores::{Held, Stores};
use super::tree_completion::TreeCompletion;

use crate::{Acker, AckerStats, InitError};

/// An [`Acker`] for tokio, built by
/// [`AckerBuilder::build_async`](crate::AckerBuilder::build_async): each tree's completion
/// is delivered to the [`Completions`](crate::future::Completions) stream, or, for a tree
/// started with [`track`](Self::track), to that tree's own [`TreeCompletion`] future. Clone
/// is a cheap shared handle; Send + Sync.
///
/// `track`, `ack`, `fail` and `reset_timeout` never wait; only `init`, whose completion
/// goes to the stream, is async, to wait for buffer room.
///
/// # Buffer
///
/// `buffer` permits bound the trees whose completions go to the stream: an `init` takes
/// one, and it is given back when the tree's completion is taken from the stream, or when
/// the init is refused or `shutdown` takes the tree back. So those trees plus completions
/// waiting in the stream never exceed `buffer`: the completion callback (on an acking
/// thread or the reaper) always has room and never waits, and no completion is dropped.
/// When no permit is free, [`init`](Self::init) waits for one (first come, first served)
/// and [`try_init`](Self::try_init) returns [`InitError::Full`]. A tree started with
/// [`track`](Self::track) takes no permit (its completion has a place of its own): only the
/// inner acker's `max_pending` bounds those, refusing them `Full` at once, so a tracked
/// tree's deadline counts from the call that started it. Orphans (acks or fails that
/// arrive before their init) take no permit.
///
/// A task that both inits untracked trees and consumes the stream can wait forever on a
/// full buffer: consume on another task, or use `try_init`.
///
/// # Costs
///
/// Beyond the [`Acker`]'s: per stream tree one semaphore acquire and release (an atomic
/// each when the semaphore is not contended) and a push and pop of the stream's queue (a
/// small allocation per block of 32) and a cell holding the payload; a tracked tree has its
/// waiter instead (32 B for a `u32` payload: the payload, the awaiting task's waker, the
/// elapsed time and a state word). Either cell comes from the acker's own slab (a lock of
/// the thread's shard to take one, of the cell's shard to give it back), whose pages go
/// back to the system once empty; the inner table holds only the cell's 4-byte number, so
/// it costs what a plain `Acker<u32>`'s does.
///
/// ```
/// use ackwheel::{Acker, InitError, Outcome};
/// use std::time::Duration;
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// rt.block_on(async {
///     let (acker, mut completions) = Acker::<&str>::builder()
///         .timeout(Duration::from_secs(5))
///         .build_async(2)
///         .unwrap();
///
///     // One tree awaited by its caller: two edges, acked by whoever processed them.
///     let tree = acker.track(1, 0b01 ^ 0b10, "request").unwrap();
///     acker.ack(1, 0b01);
///     acker.ack(1, 0b10);
///     let done = tree.await.unwrap();
///     assert_eq!((done.root, done.outcome, done.payload), (1, Outcome::Acked, "request"));
///
///     // Untracked trees complete into the stream; each holds a permit until taken.
///     acker.init(2, 0b100, "job").await.unwrap();
///     acker.init(3, 0b100, "job").await.unwrap();
///     assert!(matches!(acker.try_init(4, 1, "refused"), Err(InitError::Full("refused"))));
///     acker.fail(2);
///     let failed = completions.next().await.unwrap();
///     assert_eq!((failed.root, failed.outcome), (2, Outcome::Failed));
///
///     assert_eq!(acker.shutdown().await, [(3, "job")]);
///     assert!(completions.next().await.is_none());
/// });
/// ```
pub struct AsyncAcker<T: Send + 'static> {
    shared: Arc<Shared<T>>,
}

/// What every handle shares; its drop, with the last handle, ends the trees still pending.
struct Shared<T: Send + 'static> {
    acker: Acker<Held>,
    permits: Arc<Semaphore>,
    buffer: usize,
    stores: Stores<T>,
}

impl<T: Send + 'static> Drop for Shared<T> {
    /// Every handle is gone: the pending trees end as `shutdown` would end them, their
    /// payloads dropped (the table's numbers own nothing, so this is the only place they
    /// go), and the slabs keep nothing for later.
    fn drop(&mut self) {
        self.permits.close();
        // Every cell ended and the slabs closed before any payload is dropped: a payload
        // whose drop panics must not leave a cell, and with it a page and a slab, behind.
        let payloads: Vec<T> = (self.acker.shutdown().into_iter())
            // Safety: handed back by the acker, once.
            .map(|(_, held)| unsafe { self.stores.end(held) })
            .collect();
        self.stores.close();
        drop(payloads);
    }
}

impl<T: Send + 'static> Clone for AsyncAcker<T> {
    fn clone(&self) -> Self {
        AsyncAcker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Send + 'static> fmt::Debug for AsyncAcker<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncAcker")
            .field("acker", &self.shared.acker)
            .field("buffer", &self.shared.buffer)
            .field("room", &self.room())
            .finish()
    }
}

impl<T: Send + 'static> AsyncAcker<T> {
    /// Waits for buffer room, then inits the tree as [`Acker::init`] does; its completion
    /// goes to the [`Completions`](crate::future::Completions) stream.
    ///
    /// Cancel safe: dropped while waiting, it inits nothing (and the payload is dropped).
    ///
    /// # Errors
    ///
    /// Those of [`Acker::init`], each with the payload; [`InitError::Shutdown`] too when
    /// `shutdown` is called while it waits.
    pub async fn init(&self, root: u64, xor: u64, payload: T) -> Result<(), InitError<T>> {
        self.start(root, xor, payload, None).await
    }

    /// [`init`](Self::init) with this tree's own timeout, as [`Acker::init_with_timeout`].
    pub async fn init_with_timeout(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Duration,
    ) -> Result<(), InitError<T>> {
        self.start(root, xor, payload, Some(timeout)).await
    }

    /// [`init`](Self::init) without waiting: [`InitError::Full`] when the buffer has no
    /// room.
    pub fn try_init(&self, root: u64, xor: u64, payload: T) -> Result<(), InitError<T>> {
        self.try_start(root, xor, payload, None)
    }

    /// [`try_init`](Self::try_init) with this tree's own timeout.
    pub fn try_init_with_timeout(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Duration,
    ) -> Result<(), InitError<T>> {
        self.try_start(root, xor, payload, Some(timeout))
    }

    /// Inits the tree as [`Acker::init`] does, at once; its completion resolves the
    /// returned [`TreeCompletion`] and does not go to the stream.
    ///
    /// A tracked tree takes no buffer permit ([`AsyncAcker`], "Buffer"), so this never
    /// waits: the tree's deadline counts from this call. A `TreeCompletion` dropped before
    /// its tree completes does not cancel the tree: the completion is dropped when it comes
    /// (payload included), silently, and the stream never sees it.
    ///
    /// An extra cost: one cell of 32 B for a `u32` payload (the tree's waiter, which holds
    /// the payload and the awaiting task's waker) from the acker's own slab, given back
    /// when both the tree and the `TreeCompletion` are done.
    ///
    /// What it may run besides: when a pass of the acker's reaper is due (its timer's
    /// tick has begun and no other pass runs), this call runs the pass's timeouts in the
    /// thread's place, a bounded share of them (a few dozen groups of trees; the next
    /// call or the thread takes the next), never waiting for a lock another pass holds,
    /// so that the tasks it wakes join this worker's queue. Those wake the tasks of other
    /// trees, put their completions on the stream, and drop the payloads of trees
    /// whose `TreeCompletion` or stream is gone: their `Drop` runs on the calling thread, so
    /// a caller that holds a lock a payload's `Drop` takes must not call it. The same holds
    /// for [`init`](Self::init) and [`try_init`](Self::try_init). A clock that panics
    /// during that check is caught: the call returns as if the reaper were on time.
    ///
    /// # Errors
    ///
    /// Those of [`Acker::init`], each with the payload: [`InitError::Full`] at the inner
    /// acker's `max_pending`, [`InitError::Duplicate`], [`InitError::Shutdown`].
    pub fn track(
        &self,
        root: u64,
        xor: u64,
        payload: T,
    ) -> Result<TreeCompletion<T>, InitError<T>> {
        self.start_tracked(root, xor, payload, None)
    }

    /// [`track`](Self::track) with this tree's own timeout, as
    /// [`Acker::init_with_timeout`].
    pub fn track_with_timeout(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Duration,
    ) -> Result<TreeCompletion<T>, InitError<T>> {
        self.start_tracked(root, xor, payload, Some(timeout))
    }

    /// [`Acker::ack`]: `true` iff this call completed the tree (Acked).
    pub fn ack(&self, root: u64, xor: u64) -> bool {
        self.shared.acker.ack(root, xor)
    }

    /// [`Acker::fail`]: `true` iff this call completed the tree (Failed).
    pub fn fail(&self, root: u64) -> bool {
        self.shared.acker.fail(root)
    }

    /// [`Acker::apply`]: acks, fails and resets in order, with the memory of the next ones
    /// fetched ahead; how many trees the acks and fails completed (their completions go to
    /// their futures and the stream as one by one). Never waits.
    pub fn apply(&self, messages: &[crate::Message]) -> usize {
        self.shared.acker.apply(messages)
    }

    /// [`Acker::apply_each`]: [`apply`](Self::apply), with each message's result.
    pub fn apply_each(&self, messages: &[crate::Message], each: impl FnMut(usize, bool)) {
        self.shared.acker.apply_each(messages, each)
    }

    /// [`Acker::reset_timeout`]: `true` iff the root has an uncompleted entry.
    pub fn reset_timeout(&self, root: u64) -> bool {
        self.shared.acker.reset_timeout(root)
    }

    /// [`Acker::pending`]: entries held now, initialized or not.
    pub fn pending(&self) -> usize {
        self.shared.acker.pending()
    }

    /// [`Acker::stats`]: counters since the acker was built.
    pub fn stats(&self) -> AckerStats {
        self.shared.acker.stats()
    }

    /// [`Acker::covered_roots`] of the inner acker, for the stress harness's memory
    /// figures: not API. (The inner acker itself is not handed out: its payloads are cell
    /// numbers, which only this acker may end.)
    #[doc(hidden)]
    #[cfg(any(test, loom, feature = "internals"))]
    pub fn covered_roots(&self) -> usize {
        self.shared.acker.covered_roots()
    }

    /// [`Acker::memory_parts`] of the inner acker, as
    /// [`covered_roots`](Self::covered_roots).
    #[doc(hidden)]
    #[cfg(any(test, loom, feature = "internals"))]
    pub fn memory_parts(&self) -> [usize; 4] {
        self.shared.acker.memory_parts()
    }

    /// Free buffer permits now: how many `init`s would not wait (`max_pending` aside).
    pub fn room(&self) -> usize {
        self.shared.permits.available_permits()
    }

    /// Stops the acker and hands back every initialized, uncompleted tree's payload, as
    /// [`Acker::shutdown`]. Inits waiting for room, and every later init or track, return
    /// [`InitError::Shutdown`]; the pending trees' [`TreeCompletion`]s resolve to
    /// [`Closed`](crate::future::Closed); the [`Completions`](crate::future::Completions)
    /// stream yields what it holds, then ends.
    ///
    /// The inner shutdown joins the reaper thread (about one tick of the resolution when
    /// the reaper is idle, longer while it delivers a large burst of timeouts): it runs on
    /// tokio's blocking pool, so the task's worker thread is not blocked meanwhile. Called
    /// outside a tokio runtime, or on one that is shutting down, it runs in place.
    pub async fn shutdown(&self) -> Vec<(u64, T)> {
        self.shared.permits.close();
        if let Ok(runtime) = ::tokio::runtime::Handle::try_current() {
            let this = self.clone();
            if let Ok(handed_back) = runtime
                .spawn_blocking(move || this.shutdown_blocking())
                .await
            {
                return handed_back;
            }
            // The blocking pool refused the job (the runtime is shutting down, or the
            // job panicked): shutdown is idempotent, so run it here.
        }
        self.shutdown_blocking()
    }

    /// [`shutdown`](Self::shutdown) for synchronous code: blocks the calling thread while
    /// it joins the reaper thread. Inside async code, await `shutdown` instead.
    pub fn shutdown_blocking(&self) -> Vec<(u64, T)> {
        // First, so that no init takes a permit it would then hold in a tree shutdown has
        // already missed: the inner acker refuses those with `Shutdown` anyway.
        self.shared.permits.close();
        let mut streamed = 0;
        let handed_back = self
            .shared
            .acker
            .shutdown()
            .into_iter()
            .map(|(root, held)| {
                streamed += usize::from(held.is_streamed());
                // Safety: handed back by the acker, once.
                (root, unsafe { self.shared.stores.end(held) })
            })
            .collect();
        self.shared.permits.add_permits(streamed);
        handed_back
    }
}

#[cfg(test)]
mod tests;
