//! A manual [`Acker`]'s expiry run by a tokio task instead of a reaper thread.

use std::ops::ControlFlow;
use std::sync::Arc;

use ::tokio::sync::Notify;
use ::tokio::task::JoinHandle;

use crate::Acker;

/// Runs the expiry of `acker`, built with
/// [`build_manual`](crate::AckerBuilder::build_manual), on a task of the current tokio
/// runtime, in place of the reaper thread [`build`](crate::AckerBuilder::build) starts.
///
/// The task runs the reaper thread's passes and sleeps as that thread does: until the tick
/// by which it must scan the groups of new trees, the next deadline or the tables' next
/// housekeeping, whichever comes first ([`Acker::next_expiration`]), and with nothing pending
/// until woken. An init made while it sleeps past the new tree's deadline wakes it (through
/// a hook called where the thread would be unparked), so no deadline waits for it; an idle
/// acker costs it no wake-ups. The owner may still call [`Acker::expire`] as well.
///
/// The task ends when the acker is [shut down](Acker::shutdown) or its last handle is
/// dropped (the task does not keep it alive). One driver per acker: on an acker that has
/// one already, or a reaper thread, the task returned has nothing to do and ends at once.
///
/// ## Thread or task
///
/// The default reaper thread is usually the better choice. A pass may run `on_complete`
/// for every tree that timed out, and move entries of a table being migrated: work that
/// would hold a runtime worker for its length, delaying every task queued behind it (on a
/// current-thread runtime, all of them). One parked thread costs no CPU while idle, and it
/// takes no share of the runtime's workers. The task is the right choice where no thread
/// may be started (a sandbox, a platform without threads), or to keep everything on a
/// current-thread runtime, with quick callbacks.
///
/// Deadlines are the acker's clock's, and the task sleeps on tokio's timer: both must be
/// real time ([`MonotonicClock`](crate::MonotonicClock), the default, with a runtime whose
/// time is not paused). A [`ManualClock`](crate::ManualClock) is driven by
/// [`Acker::expire`] instead.
///
/// # Panics
///
/// Outside a tokio runtime. The runtime must have its time driver enabled (the task's
/// sleeps panic otherwise).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use ackwheel::{Acker, Outcome};
/// use std::time::Duration;
///
/// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
/// let acker: Acker<&str> = Acker::builder()
///     .timeout(Duration::from_millis(20))
///     .on_complete(move |c| {
///         let _ = tx.send((c.root, c.outcome));
///     })
///     .build_manual()
///     .unwrap();
/// let expiry = ackwheel::future::spawn_expiry(&acker);
///
/// acker.init(7, 0b11, "lost").unwrap();
/// assert_eq!(rx.recv().await, Some((7, Outcome::TimedOut)));
///
/// acker.shutdown();
/// expiry.await.unwrap();
/// # }
/// ```
pub fn spawn_expiry<T: Send + 'static>(acker: &Acker<T>) -> JoinHandle<()> {
    let notify = Arc::new(Notify::new());
    let waker = Arc::clone(&notify);
    // `notify_one` keeps a permit when the task is not waiting yet: a wake between its
    // decision to sleep and its sleep is not lost.
    if !acker.set_expiry_waker(move || waker.notify_one()) {
        return ::tokio::spawn(async {});
    }
    let driver = acker.expiry_driver();
    ::tokio::spawn(async move {
        loop {
            let ControlFlow::Continue(wait) = driver.step() else {
                return;
            };
            match wait {
                // Again at once, after the runtime's other tasks.
                Some(delay) if delay.is_zero() => ::tokio::task::yield_now().await,
                Some(delay) => {
                    let _ = ::tokio::time::timeout(delay, notify.notified()).await;
                }
                None => notify.notified().await,
            }
            if driver.woken().is_break() {
                return;
            }
        }
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Outcome;
    use std::time::{Duration, Instant};

    type Done = (u64, Outcome, Duration);

    fn manual(timeout: Duration) -> (Acker<u32>, ::tokio::sync::mpsc::UnboundedReceiver<Done>) {
        let (tx, rx) = ::tokio::sync::mpsc::unbounded_channel();
        let acker = Acker::builder()
            .timeout(timeout)
            .on_complete(move |c| {
                let _ = tx.send((c.root, c.outcome, c.elapsed));
            })
            .build_manual()
            .unwrap();
        (acker, rx)
    }

    async fn next(rx: &mut ::tokio::sync::mpsc::UnboundedReceiver<Done>) -> Done {
        ::tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .expect("a completion within 2 s")
            .expect("the channel is open")
    }

    async fn ended(task: JoinHandle<()>) {
        ::tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the task ended within 2 s")
            .expect("the task did not panic");
    }

    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tree_times_out_near_its_deadline() {
        let (acker, mut rx) = manual(Duration::from_millis(50));
        let task = spawn_expiry(&acker);
        let start = Instant::now();
        acker.init(1, 0b11, 10).unwrap();
        let (root, outcome, elapsed) = next(&mut rx).await;
        assert_eq!((root, outcome), (1, Outcome::TimedOut));
        assert!(elapsed >= Duration::from_millis(50), "{elapsed:?}");
        assert!(start.elapsed() >= Duration::from_millis(50));
        // An acked tree does not time out.
        acker.init(2, 0b1, 20).unwrap();
        assert!(acker.ack(2, 0b1));
        assert_eq!(next(&mut rx).await.1, Outcome::Acked);
        acker.shutdown();
        ended(task).await;
    }

    #[::tokio::test(flavor = "current_thread")]
    async fn on_a_current_thread_runtime() {
        let (acker, mut rx) = manual(Duration::from_millis(30));
        let task = spawn_expiry(&acker);
        for root in 1..=3 {
            acker.init(root, 1, 0).unwrap();
        }
        let mut roots: Vec<u64> = Vec::new();
        for _ in 0..3 {
            let (root, outcome, _) = next(&mut rx).await;
            assert_eq!(outcome, Outcome::TimedOut);
            roots.push(root);
        }
        roots.sort_unstable();
        assert_eq!(roots, [1, 2, 3]);
        acker.shutdown();
        ended(task).await;
    }

    /// The task sleeps with nothing pending (no deadline at all) when the init comes:
    /// only the wake hook can serve it.
    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_init_while_the_task_sleeps_with_nothing_pending_is_served() {
        let (acker, mut rx) = manual(Duration::from_secs(3600));
        let task = spawn_expiry(&acker);
        for round in 0..3u64 {
            ::tokio::time::sleep(Duration::from_millis(50)).await; // asleep, nothing pending
            assert_eq!(acker.next_expiration(), None);
            // From a thread of its own (a record of its own) and from this task's.
            if round % 2 == 0 {
                let other = acker.clone();
                std::thread::spawn(move || {
                    other
                        .init_with_timeout(round, 1, 0, Duration::from_millis(20))
                        .unwrap()
                })
                .join()
                .unwrap();
            } else {
                acker
                    .init_with_timeout(round, 1, 0, Duration::from_millis(20))
                    .unwrap();
            }
            let (root, outcome, _) = next(&mut rx).await;
            assert_eq!((root, outcome), (round, Outcome::TimedOut));
        }
        // A short tree while the task sleeps until a long one's deadline.
        acker.init(100, 1, 0).unwrap();
        ::tokio::time::sleep(Duration::from_millis(50)).await;
        acker
            .init_with_timeout(101, 1, 0, Duration::from_millis(20))
            .unwrap();
        assert_eq!(next(&mut rx).await.0, 101);
        acker.shutdown();
        ended(task).await;
    }

    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_driven_acker_does_not_spin() {
        let (acker, mut rx) = manual(Duration::from_millis(20));
        let task = spawn_expiry(&acker);
        acker.init(1, 1, 0).unwrap();
        assert_eq!(next(&mut rx).await.1, Outcome::TimedOut);
        ::tokio::time::sleep(Duration::from_millis(20)).await;
        let before = acker.idle_wakeups();
        ::tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = acker.idle_wakeups() - before;
        assert!(idle <= 2, "{idle} passes with nothing to do in 300 ms");

        // Nor with a tree pending whose deadline is far off.
        acker
            .init_with_timeout(2, 1, 0, Duration::from_secs(3600))
            .unwrap();
        ::tokio::time::sleep(Duration::from_millis(50)).await; // the driver's sleep planned
        let before = acker.idle_wakeups();
        ::tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = acker.idle_wakeups() - before;
        assert!(idle <= 2, "{idle} passes with nothing due in 300 ms");
        acker.shutdown();
        ended(task).await;
    }

    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_or_the_last_handle_ends_the_task() {
        let (acker, _rx) = manual(Duration::from_secs(3600));
        let task = spawn_expiry(&acker);
        acker.init(1, 1, 0).unwrap();
        ::tokio::time::sleep(Duration::from_millis(30)).await; // asleep until 1 h
        assert_eq!(acker.shutdown().len(), 1);
        ended(task).await;

        let (acker, _rx) = manual(Duration::from_secs(3600));
        let task = spawn_expiry(&acker);
        ::tokio::time::sleep(Duration::from_millis(30)).await; // asleep, nothing pending
        drop(acker);
        ended(task).await;
    }

    #[::tokio::test(flavor = "current_thread")]
    async fn one_driver_per_acker_and_none_for_a_threaded_one() {
        let (acker, _rx) = manual(Duration::from_secs(1));
        let first = spawn_expiry(&acker);
        ended(spawn_expiry(&acker)).await;
        assert!(!first.is_finished());
        let threaded: Acker<u32> = Acker::builder().build().unwrap();
        ended(spawn_expiry(&threaded)).await;
        acker.shutdown();
        ended(first).await;
    }
}
