//! Waiting for the next due bucket: [`ExpiryQueue::wait`], `ExpiryQueue::wait_async` (the
//! `tokio` feature) and [`ExpiryQueue::close`].
//!
//! # The wake-up protocol
//!
//! A waiter that finds the queue non-empty sleeps until next-expiration, a time nothing
//! but the clock can bring closer (updates never move next-expiration), so it needs no
//! wake-up except from `close`. A waiter that finds the queue empty sleeps with no timeout,
//! and the `update` that inserts an element must wake it. That is a store/check race, closed
//! like a Dekker pair whose second half is a mutex:
//!
//! * the waiter *announces* itself (`idle += 1`) and only then checks every element shard
//!   for emptiness, and stays announced until it wakes;
//! * an inserting `update` writes the element under its shard's lock, releases it and only
//!   then reads `idle`; when it is non-zero it wakes every waiter.
//!
//! If the waiter's check of the element's shard came before the insert, that shard's mutex
//! orders the waiter's announcement before the updater's read of `idle`, which therefore
//! sees it (a waiter leaves `idle` only after it wakes, and re-checks after that). If the
//! check came after, the waiter sees the element and does not sleep. So a waiter never
//! sleeps on an empty check that an insert missed.
//!
//! The wake itself cannot be lost either. A blocking waiter holds the wait mutex from
//! before its check until the condvar releases it inside `wait`, and the waker takes that
//! mutex to notify, so the notify comes either before the check (which then sees the
//! element, written before the notify) or while the waiter is blocked. An async waiter
//! creates its `Notified` before its check; `Notify::notify_waiters` completes every
//! `Notified` created before it, and one created after it sees the insert through the
//! Notify's own release/acquire state, so again the check sees the element.
//!
//! `close` is the same pattern on a flag: it sets `closed`, then takes the mutex to notify
//! and calls `notify_waiters`; waiters read `closed` after taking the mutex (blocking) or
//! after creating their `Notified` (async).
//!
//! Updates pay one load of `idle` per insertion; only while a waiter sleeps on an empty
//! queue (so, typically, for the first insert after the queue emptied) does an update take
//! the wait mutex.

use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::PoisonError;
use std::time::Duration;

use super::{lock, ExpiryQueue};
use crate::sync::{AtomicBool, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// The queue's waiting state: the closed flag, the count of waiters sleeping on an empty
/// queue and what they sleep on.
pub(super) struct Waiters {
    /// Set by `close`, never cleared.
    closed: AtomicBool,
    /// Waiters announced as (about to be) asleep on an empty queue; see the module docs.
    idle: AtomicUsize,
    /// Held by a blocking waiter from its checks into `Condvar::wait`, and by every waker
    /// while it notifies, so no notify falls between a check and the sleep.
    lock: Mutex<()>,
    condvar: Condvar,
    #[cfg(feature = "tokio")]
    notify: ::tokio::sync::Notify,
    /// Returns from a sleep, by any waiter, for whatever reason (tests and diagnostics).
    /// std's atomic even under loom: it observes the protocol and is no part of it.
    wakeups: StdAtomicU64,
}

/// An announcement in `Waiters::idle`, withdrawn on drop (so also when an async wait is
/// cancelled or a blocking one unwinds).
struct Idle<'a>(&'a AtomicUsize);

impl<'a> Idle<'a> {
    fn announce(idle: &'a AtomicUsize) -> Self {
        // SeqCst, and ordered before the emptiness check by program order; the updater's
        // read of it is ordered after the check by the shard mutex (module docs).
        idle.fetch_add(1, Ordering::SeqCst);
        Idle(idle)
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Waiters {
    pub(super) fn new() -> Self {
        Waiters {
            closed: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            lock: Mutex::new(()),
            condvar: Condvar::new(),
            #[cfg(feature = "tokio")]
            notify: ::tokio::sync::Notify::new(),
            wakeups: StdAtomicU64::new(0),
        }
    }

    /// Called by `update` after it inserted an element and released the element's shard
    /// lock: wakes the waiters sleeping on an empty queue, if any.
    pub(super) fn inserted(&self) {
        if self.idle.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    #[cfg(test)]
    pub(super) fn wakeups(&self) -> u64 {
        // Relaxed: a statistic; nothing is read through it.
        self.wakeups.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        let guard = lock(&self.lock);
        self.condvar.notify_all();
        drop(guard);
        #[cfg(feature = "tokio")]
        self.notify.notify_waiters();
    }

    fn woke(&self) {
        // Relaxed: a statistic; nothing is read through it.
        self.wakeups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sleeps until notified (or a spurious wake-up).
    fn sleep<'a>(&self, guard: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
        let guard = self
            .condvar
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner);
        self.woke();
        guard
    }

    /// Sleeps until notified or `limit` passed. (Under loom the limit is not modelled and
    /// this is a plain `sleep`: models must not rely on it.)
    fn sleep_for<'a>(&self, guard: MutexGuard<'a, ()>, limit: Duration) -> MutexGuard<'a, ()> {
        let (guard, _) = self
            .condvar
            .wait_timeout(guard, limit)
            .unwrap_or_else(PoisonError::into_inner);
        self.woke();
        guard
    }
}

/// What a waiter found on one look at the queue.
enum Look<'a> {
    Closed,
    /// Empty; the announcement must be held until the waiter wakes.
    Empty(Idle<'a>),
    Due,
    /// Non-empty and not due: sleep at most this long, then look again.
    NotDue(Duration),
}

impl<E: Eq + std::hash::Hash + Clone + Send + Sync + 'static> ExpiryQueue<E> {
    /// Ends waiting: every current and future [`wait`](Self::wait) (and `wait_async`)
    /// returns `false` at once.
    ///
    /// Closing affects waiting only: `update`, `touch`, `remove` and `poll` keep working
    /// after it, so the owner may drain what is left. Idempotent; it cannot be undone.
    /// Cost: a store, the wait mutex and a notify of every sleeping waiter, which the
    /// calling thread wakes itself.
    pub fn close(&self) {
        self.waiters.close();
    }

    /// `true` once [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.waiters.is_closed()
    }

    /// Blocks the calling thread until a [`poll`](Self::poll) would take a bucket, then
    /// returns `true`; returns `false` once the queue is [closed](Self::close).
    ///
    /// A poll would take a bucket when the queue is non-empty and the clock has reached
    /// [`next_expiration`](Self::next_expiration). So:
    ///
    /// * while the queue is **empty** the thread sleeps with no timeout and no periodic
    ///   wake-up, until an [`update`](Self::update) inserts an element (the inserting
    ///   thread wakes it; the wake-up cannot be lost) or `close` is called;
    /// * while it is **non-empty** the thread sleeps until `next_expiration()` (re-checking
    ///   at least once an interval), and returns at once when it is already due. Catch-up
    ///   stays ZooKeeper's, one bucket per poll: after a pause, or after the queue was
    ///   empty for a while, `wait` returns at once until `poll` has caught up, once per
    ///   interval that went by (each such `poll` is a CAS and a lock, mostly of an empty
    ///   bucket).
    ///
    /// It does not poll: several threads may wait, all return, and the bucket goes to
    /// whichever polls first (the others' polls come back empty or take the next bucket).
    ///
    /// Sleeps assume the queue's [`Clock`](crate::Clock) counts real nanoseconds, like
    /// [`MonotonicClock`](crate::MonotonicClock). With a
    /// [`ManualClock`](crate::ManualClock) a wait on a non-empty queue cannot see manual
    /// time move, so it re-checks every interval of real time: keep test intervals short.
    ///
    /// Cost per return: the wait mutex, one lock of each element shard for the emptiness
    /// check, and a clock reading.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ackwheel::ExpiryQueue;
    ///
    /// let queue = Arc::new(ExpiryQueue::new(Duration::from_millis(5)).unwrap());
    /// let expirer = {
    ///     let queue = Arc::clone(&queue);
    ///     std::thread::spawn(move || {
    ///         let mut expired = Vec::new();
    ///         while queue.wait() {
    ///             for session in queue.poll() {
    ///                 expired.push(session); // close the session here
    ///             }
    ///             if expired.len() == 2 {
    ///                 queue.close();
    ///             }
    ///         }
    ///         expired
    ///     })
    /// };
    /// queue.update("session-1", Duration::from_millis(10)); // wakes the expirer
    /// queue.update("session-2", Duration::from_millis(20));
    /// let mut expired = expirer.join().unwrap();
    /// expired.sort_unstable();
    /// assert_eq!(expired, ["session-1", "session-2"]);
    /// ```
    pub fn wait(&self) -> bool {
        let mut guard = lock(&self.waiters.lock);
        loop {
            guard = match self.look() {
                Look::Closed => return false,
                Look::Due => return true,
                Look::Empty(idle) => {
                    let guard = self.waiters.sleep(guard);
                    drop(idle);
                    guard
                }
                Look::NotDue(limit) => self.waiters.sleep_for(guard, limit),
            };
        }
    }

    /// [`wait`](Self::wait) for tokio tasks: resolves to `true` once a
    /// [`poll`](Self::poll) would take a bucket, to `false` once the queue is
    /// [closed](Self::close). Same rules as `wait`: no timer at all while the queue is
    /// empty (the inserting `update` wakes the task through a `tokio::sync::Notify`); a
    /// `tokio::time::sleep` until next-expiration (at most an interval) while it is not.
    ///
    /// Must run inside a tokio runtime with the time driver enabled (tokio's `sleep`
    /// panics otherwise). Cancel-safe: dropping the future withdraws the waiter and loses
    /// nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ackwheel::ExpiryQueue;
    ///
    /// let queue = Arc::new(ExpiryQueue::new(Duration::from_millis(5)).unwrap());
    /// let expirer = tokio::spawn({
    ///     let queue = Arc::clone(&queue);
    ///     async move {
    ///         let mut expired = Vec::new();
    ///         while queue.wait_async().await {
    ///             expired.extend(queue.poll());
    ///             if !expired.is_empty() {
    ///                 queue.close();
    ///             }
    ///         }
    ///         expired
    ///     }
    /// });
    /// queue.update(7, Duration::from_millis(10));
    /// assert_eq!(expirer.await.unwrap(), [7]);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn wait_async(&self) -> bool {
        loop {
            // Created before the look: a `notify_waiters` from here on completes it.
            let notified = self.waiters.notify.notified();
            match self.look() {
                Look::Closed => return false,
                Look::Due => return true,
                Look::Empty(idle) => {
                    notified.await;
                    drop(idle);
                }
                Look::NotDue(limit) => first_of(notified, ::tokio::time::sleep(limit)).await,
            }
            self.waiters.woke();
        }
    }

    /// How many times waiters returned from a sleep (notified, timed out or spuriously);
    /// stays put while waiters sleep on an empty queue.
    #[cfg(test)]
    pub(crate) fn wakeups(&self) -> u64 {
        self.waiters.wakeups()
    }

    /// One look at the queue for a waiter. Reads `closed` first: once it is set, nothing
    /// else matters.
    fn look(&self) -> Look<'_> {
        if self.waiters.is_closed() {
            return Look::Closed;
        }
        let idle = Idle::announce(&self.waiters.idle);
        if self.is_empty() {
            return Look::Empty(idle);
        }
        drop(idle);
        match self.wait_time() {
            wait if wait.is_zero() => Look::Due,
            wait => Look::NotDue(wait.min(self.interval())),
        }
    }
}

/// Completes when either future does.
#[cfg(feature = "tokio")]
async fn first_of(
    a: impl std::future::Future<Output = ()>,
    b: impl std::future::Future<Output = ()>,
) {
    use std::task::Poll;
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}
