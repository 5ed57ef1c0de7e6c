//! Starting a tree: a stream tree's init with its buffer permit, a tracked tree's with its
//! waiter cell, and, after either, the reaper's pass if one is due.
//!
//! ## The buffer, and why it loses nothing
//!
//! The queue is unbounded as a channel and bounded by the permits: a stream tree takes a
//! permit before its init, which stays taken while the tree is pending (it is forgotten,
//! not carried: the table holds only the payload) and while its completion waits in the
//! queue, and is given back when the consumer takes that completion, when the completion
//! is dropped (the stream is gone), when the init is refused, or when `shutdown` hands the
//! tree back. So such trees plus completions waiting in the queue never exceed `buffer`,
//! the callback always has room, and back pressure lands on the inits instead: they wait
//! (`init`) or are refused [`InitError::Full`] (`try_init`). A tracked tree takes no
//! permit: its completion goes into its own waiter cell ([`waiter`]), whose store never
//! waits, so only `max_pending` bounds those trees, and `track` never waits either (it is
//! refused `Full` at the bound): its tree's deadline counts from the call. Orphans (acks
//! or fails before their init) take no permit and produce no completion.

use std::time::Duration;

use ::tokio::sync::{SemaphorePermit, TryAcquireError};

use super::AsyncAcker;
use crate::future::stores::{Held, Stores};
use crate::future::tree_completion::TreeCompletion;
use crate::future::waiter::{self, Receiver};
use crate::InitError;

impl<T: Send + 'static> AsyncAcker<T> {
    pub(super) async fn start(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Option<Duration>,
    ) -> Result<(), InitError<T>> {
        match self.shared.permits.acquire().await {
            Ok(permit) => self.init_streamed(permit, root, xor, payload, timeout),
            Err(_closed) => Err(InitError::Shutdown(payload)),
        }
    }

    pub(super) fn try_start(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Option<Duration>,
    ) -> Result<(), InitError<T>> {
        match self.shared.permits.try_acquire() {
            Ok(permit) => self.init_streamed(permit, root, xor, payload, timeout),
            Err(TryAcquireError::NoPermits) => Err(InitError::Full(payload)),
            Err(TryAcquireError::Closed) => Err(InitError::Shutdown(payload)),
        }
    }

    pub(super) fn start_tracked(
        &self,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Option<Duration>,
    ) -> Result<TreeCompletion<T>, InitError<T>> {
        let spot = waiter::start(&self.shared.stores.waiters, payload).map_err(InitError::Full)?;
        match self.init_inner(root, xor, Held::tracked(spot), timeout) {
            Ok(()) => Ok(TreeCompletion::new(root, Receiver::new(spot))),
            // Safety: refused, so the acker does not hold the number, and no receiver was
            // made.
            Err(refused) => Err(map_payload(refused, |_| unsafe { waiter::reclaim(spot) })),
        }
    }

    /// A stream tree's init with its permit: kept taken (forgotten) once the tree is in,
    /// given back by the guard's drop if the init is refused.
    fn init_streamed(
        &self,
        permit: SemaphorePermit<'_>,
        root: u64,
        xor: u64,
        payload: T,
        timeout: Option<Duration>,
    ) -> Result<(), InitError<T>> {
        let spot = self
            .shared
            .stores
            .put_streamed(payload)
            .map_err(InitError::Full)?;
        match self.init_inner(root, xor, Held::streamed(spot), timeout) {
            Ok(()) => {
                permit.forget();
                Ok(())
            }
            // Safety: refused, so the acker does not hold the number.
            Err(refused) => Err(map_payload(refused, |_| unsafe {
                Stores::take_streamed(spot)
            })),
        }
    }

    /// The init itself; then, if a reaper's pass is due, the pass's timers, here: the
    /// completions it delivers only wake tasks, fill the stream, or drop a payload whose
    /// future or stream is gone.
    fn init_inner(
        &self,
        root: u64,
        xor: u64,
        held: Held,
        timeout: Option<Duration>,
    ) -> Result<(), InitError<Held>> {
        self.shared.acker.init_then_help(root, xor, held, timeout)
    }
}

/// `refused` with its payload turned into the caller's by `payload`.
fn map_payload<T>(refused: InitError<Held>, payload: impl FnOnce(Held) -> T) -> InitError<T> {
    match refused {
        InitError::Full(h) => InitError::Full(payload(h)),
        InitError::Duplicate(h) => InitError::Duplicate(payload(h)),
        InitError::Shutdown(h) => InitError::Shutdown(payload(h)),
    }
}
