//! One tracked tree's completion, as a future: [`TreeCompletion`], which
//! [`AsyncAcker::track`](crate::future::AsyncAcker::track) returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::waiter::Receiver;
use super::Closed;
use crate::Completion;

/// One tree's completion, from [`AsyncAcker::track`](crate::future::AsyncAcker::track): a
/// future that resolves once, with `Ok` when the tree completes (whatever its
/// [`Outcome`](crate::Outcome)), or `Err(Closed)` when the acker shut down (or every handle
/// was dropped) first, the payload then having gone back through
/// [`AsyncAcker::shutdown`](crate::future::AsyncAcker::shutdown) (or been dropped).
///
/// Dropping it does not affect the tree; its completion is then dropped silently when it
/// comes. Polling it again after it resolved returns `Err(Closed)`.
///
/// ```
/// use ackwheel::{Acker, Outcome};
/// use std::time::Duration;
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// rt.block_on(async {
///     let (acker, _completions) = Acker::<&str>::builder()
///         .timeout(Duration::from_millis(50))
///         .build_async(16)
///         .unwrap();
///     let tree = acker.track(1, 0b01 ^ 0b10, "request").unwrap();
///     acker.ack(1, 0b01); // the other edge is lost
///     let done = tree.await.unwrap();
///     assert_eq!((done.outcome, done.payload), (Outcome::TimedOut, "request"));
///     assert!(done.elapsed >= Duration::from_millis(50));
/// });
/// ```
pub struct TreeCompletion<T> {
    root: u64,
    rx: Receiver<T>,
}

impl<T> TreeCompletion<T> {
    /// The future of tree `root`, whose waiter cell `rx` receives from.
    pub(super) fn new(root: u64, rx: Receiver<T>) -> Self {
        TreeCompletion { root, rx }
    }

    /// The tree's root id.
    pub fn root(&self) -> u64 {
        self.root
    }
}

impl<T> fmt::Debug for TreeCompletion<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TreeCompletion")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl<T> Future for TreeCompletion<T> {
    type Output = Result<Completion<T>, Closed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let root = self.root;
        // `TreeCompletion` is Unpin: its receiver only points to the waiter cell.
        self.rx.poll(cx).map(|resolved| {
            resolved
                .map(|(payload, outcome, elapsed)| Completion {
                    root,
                    payload,
                    outcome,
                    elapsed,
                })
                .map_err(|()| Closed)
        })
    }
}
