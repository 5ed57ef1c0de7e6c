//! The stream of completions: [`Completions`], and the completions waiting in its queue,
//! each with its tree's buffer permit ([`Queued`]).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::tokio::sync::{mpsc, Semaphore};

use super::Closed;
use crate::Completion;

/// A completion waiting in the stream's queue; its tree's permit stays taken until the
/// consumer takes it, or it is dropped.
pub(super) struct Queued<T> {
    /// `Some` until taken.
    pub(super) completion: Option<Completion<T>>,
    pub(super) permits: Arc<Semaphore>,
}

impl<T> Queued<T> {
    /// The completion; dropping the rest gives the permit back.
    fn take(mut self) -> Completion<T> {
        self.completion
            .take()
            .expect("a queued completion is taken once")
    }
}

impl<T> Drop for Queued<T> {
    /// Taken, or nobody will take it (the stream was dropped): the permit goes back.
    fn drop(&mut self) {
        self.permits.add_permits(1);
    }
}

/// The completions of every tree not started with `track`, in the order they completed
/// (per completing thread; across threads, the order in which they reached the queue).
/// A [`Stream`](futures_core::Stream) with a single consumer, from
/// [`AckerBuilder::build_async`](crate::AckerBuilder::build_async).
///
/// Taking a completion gives its tree's buffer permit back
/// ([`AsyncAcker`](crate::future::AsyncAcker), "Buffer"): a stream nobody reads stops the
/// inits once `buffer` completions wait in it. It ends (`None`) after
/// [`AsyncAcker::shutdown`](crate::future::AsyncAcker::shutdown), or after every
/// `AsyncAcker` handle was dropped, once what it held has been taken. Dropping it drops
/// what it holds and every later untracked completion, giving their permits back.
///
/// ```
/// use ackwheel::Acker;
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// rt.block_on(async {
///     let (acker, mut completions) = Acker::<u32>::builder().build_async(16).unwrap();
///     // A task of its own, so that the inits below can wait for room while it runs.
///     let consumer = tokio::spawn(async move {
///         let mut total = 0;
///         while let Some(c) = completions.next().await {
///             total += c.payload;
///         }
///         total // the stream ended: the acker shut down
///     });
///     for root in 1..=100 {
///         // Waits while 16 trees are pending or their completions not yet taken.
///         acker.init(root, root, 1).await.unwrap();
///         acker.ack(root, root);
///     }
///     assert!(acker.shutdown().await.is_empty());
///     assert_eq!(consumer.await.unwrap(), 100);
/// });
/// ```
pub struct Completions<T> {
    rx: mpsc::UnboundedReceiver<Queued<T>>,
    ended: bool,
}

impl<T> fmt::Debug for Completions<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completions")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<T> Completions<T> {
    /// The stream that [`build_async`](crate::AckerBuilder::build_async) returns: what `rx`
    /// receives.
    pub(super) fn new(rx: mpsc::UnboundedReceiver<Queued<T>>) -> Self {
        Completions { rx, ended: false }
    }

    /// The next completion, waiting for one; `None` once the stream has ended. Cancel
    /// safe: dropped while waiting, it takes nothing.
    pub async fn next(&mut self) -> Option<Completion<T>> {
        std::future::poll_fn(|cx| self.poll_take(cx)).await
    }

    /// The next completion if one is waiting: `Ok(None)` when none is, `Err(Closed)` once
    /// the stream has ended.
    pub fn try_next(&mut self) -> Result<Option<Completion<T>>, Closed> {
        match self.rx.try_recv() {
            Ok(queued) => Ok(Some(queued.take())),
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => {
                self.ended = true;
                Err(Closed)
            }
        }
    }

    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Option<Completion<T>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        self.rx.poll_recv(cx).map(|queued| {
            self.ended = queued.is_none();
            queued.map(Queued::take)
        })
    }
}

impl<T> futures_core::Stream for Completions<T> {
    type Item = Completion<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_take(cx)
    }
}

impl<T> futures_core::FusedStream for Completions<T> {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}
