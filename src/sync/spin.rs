//! A lock for short critical sections on uncontended data: the async acker's slab shards
//! (`future::slab`, with the `tokio` feature), where each thread mostly takes a lock of its
//! own.

#[cfg(not(loom))]
use super::Backoff;
#[cfg(not(loom))]
use super::{AtomicBool, Ordering};
#[cfg(loom)]
use super::{Mutex, MutexGuard};

/// A spin lock whose release is a plain store, where a `std` mutex's is a
/// locked swap (it must learn whether to wake a sleeper). A tracked request takes it twice
/// (its waiter's insert and remove): by callgrind (`benches/instructions/count.py track`:
/// one thread, 1k requests in flight, 4 inline acks each) a request costs 13 locked
/// instructions and 2,702 in all with this lock, 15 and 2,733 with the mutex, 11 and 2,644
/// with the waiter from glibc's malloc (whose thread cache takes no lock). Each thread
/// inserts into a shard of its own and holds the lock for a few dozen instructions, so a
/// waiter seldom waits, and then for little: it spins, then yields, then sleeps
/// ([`Backoff`]), so a preempted holder is never starved. Under loom, loom's mutex, so that
/// the models see the lock.
#[cfg(not(loom))]
pub(crate) struct Lock<T> {
    held: AtomicBool,
    value: std::cell::UnsafeCell<T>,
}

#[cfg(not(loom))]
impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Lock {
            held: AtomicBool::new(false),
            value: std::cell::UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> Guard<'_, T> {
        let mut backoff = Backoff::default();
        // Acquire: the previous holder's accesses (published by its Release store) come
        // before ours. Relaxed on failure: nothing is read.
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.held.load(Ordering::Relaxed) {
                backoff.wait();
            }
        }
        Guard { lock: self }
    }
}

/// A held [`Lock`].
#[cfg(not(loom))]
pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
}

#[cfg(not(loom))]
impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Safety: the lock is held, so the value is ours.
        unsafe { &*self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> std::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // Safety: as above.
        unsafe { &mut *self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // Release: our accesses come before the next holder's (its Acquire CAS).
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(loom)]
pub(crate) struct Lock<T>(Mutex<T>);

#[cfg(loom)]
pub(crate) type Guard<'a, T> = MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Lock(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> Guard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// Safety: a `Lock` hands its value to one thread at a time, as a mutex does.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for Lock<T> {}
