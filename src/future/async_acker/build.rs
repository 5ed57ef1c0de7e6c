//! Building the async acker, [`AckerBuilder::build_async`]: its inner acker, whose
//! callback delivers each completion to its tree's future or to the stream.
//!
//! ## Delivery
//!
//! The inner [`Acker`](crate::Acker) carries each tree as a [`Held`]: the 4-byte number of
//! the cell that holds what the tree carries, in one of two slabs
//! ([`slab`](crate::future::slab)): for a tree started with `track`, its waiter cell
//! ([`waiter`](crate::future::waiter)), which holds the payload and the awaiting task's
//! waker; for a tree whose completion goes to the stream, the payload alone. A payload of
//! 4 B keeps the table's side data at 16 B a slot, the plain acker's for a `u32` (anything
//! from 5 to 16 B would make it 32). Its `on_complete` runs on whichever thread completed
//! the tree (an acking thread, or for a timeout the reaper thread or a task starting a
//! tree, which runs the reaper's pass once it is due:
//! [`init_inner`](AsyncAcker::init_inner)) and must not block or await, so it only ever
//! does two non-blocking things: complete its tree's waiter (waking the task that awaits
//! it), or push the completion onto the unbounded queue behind [`Completions`].
//!
//! ## A burst on the workers
//!
//! A burst of timeouts (1,024 or more in one pass of the reaper thread: a million trees
//! sharing a deadline) is not delivered by the thread one wake-up at a time: built inside
//! a multi-thread tokio runtime, the acker keeps its [`Handle`], and the engine hands each
//! burst over in batches (`acker::engine::deliver`, "A burst's
//! hand-over"), each delivered by a task spawned there. Woken from a worker, the burst's
//! tasks join that worker's own queue (what it has no room for goes to the shared queue
//! 128 at a time), as tokio's own timers' do, where the thread's wake-ups each took the
//! shared queue's lock; and the thread no longer takes a core from the workers for the
//! wake-ups. A batch owns its completions, and its drop delivers what
//! it has not (a runtime shut down drops its tasks unpolled, at once, on the thread that
//! spawns them): none is lost. Its delivery holds the waiter slabs and the stream's
//! sender, so the stream ends after the batches under way have delivered.
//!
//! Not on a current-thread runtime, which runs tasks only while a caller drives it (a
//! burst handed to one that nobody drives would wait there), nor when the acker is built
//! outside a runtime: the thread then delivers as before.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use ::tokio::runtime::{Handle, RuntimeFlavor};
use ::tokio::sync::{mpsc, Semaphore};

use super::{AsyncAcker, Shared};
use crate::acker::BurstHandOver;
use crate::future::stores::{Held, Stores};
use crate::future::stream::{Completions, Queued};
use crate::{AckerBuilder, Completion, ConfigError};

/// `build_async`'s resolution unless one is set: 2^18 ns. A tree's deadline is its base
/// tick plus its timeout rounded up to ticks plus one, so a 100 ms timeout at 2^20 ns
/// fired 1.19 ms late on average, where `tokio::time::timeout` rounds the absolute
/// deadline up to its 1 ms tick (0.5 ms). `examples/saturated_timeouts.rs`, a 2-worker
/// runtime kept busy, p50 of the task's resumption after its deadline: 1.46-1.53 ms at
/// 2^20 ns, 0.47-0.66 ms at 2^18 ns, tokio 0.92-1.02 ms in the same runs.
const ASYNC_RESOLUTION: Duration = Duration::from_nanos(1 << 18);

/// The groups of `build_async`'s smallest table: 64 (8 KiB of lines), where the plain
/// acker's is 512. A service's requests are started and acked from any of the runtime's
/// workers, milliseconds apart, with its HTTP work in between, so each message finds its
/// root's line cold: what decides its cost is how much of the tables the roots in flight
/// are spread over, not which thread shares a line (the plain acker's reason for 512, the
/// acker engine's `MIN_TABLE_SLOTS`). A thousand requests in flight sit in 16 tables of 64
/// to 128 groups at a load of a quarter or less, 0.2 MB of lines, where 512 spread them
/// over 1.5 MB, more than this machine's 1 MiB L2. In the project's service bench the
/// acker's functions took 3.5-3.6 % of the server's samples at 128 groups, 0.66-0.76 µs a
/// request, where they took 4.5-4.7 %, 0.86-0.92 µs at 512 (three alternating pairs;
/// `perf record -e cpu-clock` of the server of `http-timeouts serve --tracker track --lost
/// 0.005 --fail 0.005 --sleep-ms 10 --work-us 0` under its `load`); 64 groups took no
/// less CPU than 128 there.
///
/// What 64 saves is memory. 1,024 tracked trees in flight on a 2-worker runtime, their
/// tasks included, hold 840-860 kB of anonymous memory at 64 groups and 1,032-1,040 at 128,
/// whose tables they touched every page of; the map's tracker holds 664-676
/// (`http-timeouts held`, the project's service bench's memory mode). One thread's tracked
/// requests (`examples/track_instructions.rs`, 1k in flight) miss L2 0.08 times a request
/// rather than 0.34, for 2,605 instructions rather than 2,581
/// (`benches/instructions/count.py --cache track`). 32 groups (4 KiB) held 756-764 kB, but
/// cost 2,672-2,689 instructions and 10.15 locked ones a request, against 2,605 and 10.02.
const ASYNC_SMALLEST_GROUPS: usize = 64;

impl<T: Send + 'static> AckerBuilder<T> {
    /// Builds an acker for tokio (the `tokio` feature): an [`AsyncAcker`] whose trees'
    /// completions come out of the returned [`Completions`] stream, or out of the
    /// [`TreeCompletion`](crate::future::TreeCompletion) that [`AsyncAcker::track`] returns
    /// for one tree.
    ///
    /// `buffer` bounds initialized trees plus completions not yet taken from the stream;
    /// when it is reached inits wait or are refused, and no completion is ever dropped
    /// ([`AsyncAcker`], "Buffer"). Every other setting (timeout, resolution, shards,
    /// `max_pending`, clock) applies as for [`build`](AckerBuilder::build), which this
    /// calls: one reaper thread is started. The resolution, unless set, is 2^18 ns (about
    /// 262 µs) rather than `build`'s 2^20 ns: a timeout then wakes its task about as
    /// punctually as `tokio::time::timeout` does on the same runtime, or more (see
    /// [`resolution`](AckerBuilder::resolution)). Callers come first: once the tick a
    /// due timer is set for has begun, the next `track` or `init` runs the reaper's pass
    /// (a bounded share of it) on its own worker, where the tasks it wakes run next; the
    /// reaper thread delivers what they leave a backstop's lag later. So timeouts do not
    /// wait for the scheduler to give that thread a core. Built inside a multi-thread
    /// runtime, the acker hands a burst of timeouts the thread finds (a thousand or more
    /// at once) to tasks spawned on that runtime, which wake the trees' tasks from its
    /// workers; built elsewhere, the thread wakes them itself.
    ///
    /// # Errors
    ///
    /// Those of `build`; [`ConfigError::Zero`] for a `buffer` of 0;
    /// [`ConfigError::TooLarge`] for a `buffer` above tokio's `Semaphore::MAX_PERMITS`;
    /// [`ConfigError::Conflict`] for a builder with
    /// [`on_complete`](AckerBuilder::on_complete) set (the completions go to the stream and
    /// the trees' futures instead).
    ///
    /// ```
    /// use ackwheel::{Acker, Outcome};
    ///
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// rt.block_on(async {
    ///     let (acker, mut completions) = Acker::<&str>::builder().build_async(1024).unwrap();
    ///     acker.init(7, 0b11, "job").await.unwrap();
    ///     acker.ack(7, 0b11);
    ///     let done = completions.next().await.unwrap();
    ///     assert_eq!((done.root, done.payload, done.outcome), (7, "job", Outcome::Acked));
    /// });
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn build_async(
        self,
        buffer: usize,
    ) -> Result<(AsyncAcker<T>, Completions<T>), ConfigError> {
        if buffer == 0 {
            return Err(ConfigError::Zero { param: "buffer" });
        }
        if buffer > Semaphore::MAX_PERMITS {
            return Err(ConfigError::TooLarge {
                param: "buffer",
                got: buffer.to_string(),
                max: Semaphore::MAX_PERMITS.to_string(),
            });
        }
        if self.on_complete.is_some() {
            return Err(ConfigError::Conflict {
                param: "on_complete",
                with: "build_async",
                why: "its completions go to the stream and to track's futures",
            });
        }
        let (queue, rx) = mpsc::unbounded_channel::<Queued<T>>();
        let permits = Arc::new(Semaphore::new(buffer));
        let stores = Stores::new();
        let deliver = Arc::new(Delivery {
            cells: stores.clone(),
            permits: Arc::clone(&permits),
            queue,
        });
        // A current-thread runtime runs tasks only while a caller drives it: a burst
        // handed to it could wait for that indefinitely ("A burst on the workers").
        let burst_hand_over = Handle::try_current()
            .ok()
            .filter(|runtime| runtime.runtime_flavor() != RuntimeFlavor::CurrentThread)
            .map(|runtime| burst_on(runtime, Arc::clone(&deliver)));
        let inner = AckerBuilder::<Held> {
            timeout: self.timeout,
            resolution: Some(self.resolution.unwrap_or(ASYNC_RESOLUTION)),
            shards: self.shards,
            max_pending: self.max_pending,
            clock: self.clock,
            on_complete: Some(Box::new(move |done| deliver.deliver(done))),
            // A burst's wake-ups in about the order the trees were started
            // ([`deliver`](crate::acker::engine::deliver), "A burst's order").
            delivery_order: Some(Held::order),
            burst_hand_over,
            smallest_groups: Some(ASYNC_SMALLEST_GROUPS),
        };
        let acker = AsyncAcker {
            shared: Arc::new(Shared {
                acker: inner.build()?,
                permits,
                buffer,
                stores,
            }),
        };
        Ok((acker, Completions::new(rx)))
    }
}

/// Where the async acker's completions go (module docs, "Delivery"): each tracked tree's
/// waiter cell, or the stream's queue with the permits its completions give back.
struct Delivery<T> {
    cells: Stores<T>,
    permits: Arc<Semaphore>,
    queue: mpsc::UnboundedSender<Queued<T>>,
}

impl<T: Send + 'static> Delivery<T> {
    /// One completion: its waiter completed, or the stream fed.
    fn deliver(&self, done: Completion<Held>) {
        let Completion {
            root,
            payload: held,
            outcome,
            elapsed,
        } = done;
        // Safety: the acker delivers each tree once, with the number of its live cell. A
        // tracked tree's waiter is completed there (a TreeCompletion dropped before its
        // tree completed: the waiter drops the payload); a stream tree's payload comes back
        // for the stream.
        let Some(payload) = (unsafe { self.cells.complete(held, outcome, elapsed) }) else {
            return;
        };
        let queued = Queued {
            completion: Some(Completion {
                root,
                payload,
                outcome,
                elapsed,
            }),
            permits: Arc::clone(&self.permits),
        };
        // An error means the Completions was dropped: the completion is dropped with it,
        // giving its permit back.
        let _ = self.queue.send(queued);
    }
}

/// The hand-over of the reaper thread's bursts: each batch delivered by a task spawned on
/// `runtime` (module docs, "A burst on the workers").
fn burst_on<T: Send + 'static>(runtime: Handle, deliver: Arc<Delivery<T>>) -> BurstHandOver<Held> {
    Box::new(move |batch: Vec<Completion<Held>>| {
        let batch = Batch {
            left: batch.into_iter(),
            deliver: Arc::clone(&deliver),
        };
        // A runtime shut down drops the task at once, here: the batch's drop delivers.
        drop(runtime.spawn(async move { batch.deliver_all() }));
    })
}

/// A batch of a burst's completions not delivered yet: whatever is left when it is dropped
/// (its task dropped by a runtime shutting down, unpolled) is delivered then, so none is
/// lost. A delivery may drop a payload nobody awaits, whose drop may panic: each is caught
/// on its own, as the acker catches its callback's, so that one payload's panic neither
/// loses the rest of the batch nor, raised again from the drop, aborts the process.
struct Batch<T: Send + 'static> {
    left: std::vec::IntoIter<Completion<Held>>,
    deliver: Arc<Delivery<T>>,
}

impl<T: Send + 'static> Batch<T> {
    fn deliver_all(mut self) {
        self.deliver_left();
    }

    fn deliver_left(&mut self) {
        for done in self.left.by_ref() {
            let _ = catch_unwind(AssertUnwindSafe(|| self.deliver.deliver(done)));
        }
    }
}

impl<T: Send + 'static> Drop for Batch<T> {
    fn drop(&mut self) {
        self.deliver_left();
    }
}
