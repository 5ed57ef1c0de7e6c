//! The one place atomics, cells and threads come from.
//!
//! Under `--cfg loom` every primitive is loom's, so the model checker sees each access;
//! otherwise they are std's. The std [`UnsafeCell`] here carries loom's `with` / `with_mut`
//! API so that code written against it compiles unchanged under both, and every raw access
//! to shared memory goes through a closure that loom can observe.

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::{
    sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        Ordering,
    },
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::{
    sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        Ordering,
    },
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::cell::UnsafeCell;

/// `atomic.store(value, order)`, for a store that other threads' RMWs race (a slot's times:
/// a reset's CAS against the store that frees them). Under loom it is a `swap`: loom 0.7
/// can let a thread's load after its own store read another thread's RMW that it ran
/// *before* that store (tokio-rs/loom#389; write-read coherence broken), an execution no
/// machine has, and a model then fails on it. An RMW is always ordered after the last
/// write, so the swap gives loom the real semantics.
#[inline(always)]
pub(crate) fn store_raced(atomic: &AtomicU64, value: u64, order: Ordering) {
    #[cfg(loom)]
    atomic.swap(value, order);
    #[cfg(not(loom))]
    atomic.store(value, order);
}

/// std's `UnsafeCell` with loom's closure-based accessors.
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    pub(crate) fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A 128-bit atomic. On x86_64 with `cmpxchg16b` and AVX (checked once at run time) a CAS
/// is an inlined `lock cmpxchg16b` and a load an inlined `vmovdqa`; elsewhere, and under
/// Miri, portable-atomic's. See `atomic_u128.rs`.
#[cfg(not(loom))]
mod atomic_u128;
mod backoff;
pub(crate) mod fences;
pub(crate) mod slice;
/// A spin lock for short, mostly uncontended critical sections (under loom, loom's mutex).
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) mod spin;

#[cfg(not(loom))]
pub(crate) use atomic_u128::{AtomicU128, Cpu};
pub(crate) use backoff::Backoff;
#[cfg_attr(not(feature = "tokio"), allow(unused_imports))]
pub(crate) use spin::{Guard, Lock};

/// Under loom, a stand-in for the 128-bit atomic, which loom does not model: a value behind
/// a loom mutex. Every operation takes the lock, so the stand-in is linearizable, which is
/// what the real word's SeqCst operations give (the slot word uses nothing weaker).
///
/// It is stronger than the real word in one way: a load takes the lock too, so it
/// synchronizes like an acquire *and* a release, and a model cannot catch data that is
/// published only by a load. The table never relies on that (a payload is read only after a
/// CAS to DONE that read from the settle CAS). A stand-in of interned values behind a loom
/// `AtomicUsize` would be exact, but loom models SeqCst as acquire/release, so the twin
/// search's store-then-load argument would fail spuriously in it.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

/// Under loom, the stand-in's one path: nothing to find.
#[cfg(loom)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cpu;

#[cfg(loom)]
impl Cpu {
    pub(crate) fn get() -> Cpu {
        Cpu
    }
}

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(value: u128) -> Self {
        AtomicU128(loom::sync::Mutex::new(value))
    }

    pub(crate) fn load(&self, _: Cpu, _: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn load_each<const N: usize, R>(
        words: &[AtomicU128; N],
        cpu: Cpu,
        order: Ordering,
        then: impl FnOnce([u128; N]) -> R,
    ) -> R {
        then(std::array::from_fn(|i| words[i].load(cpu, order)))
    }

    pub(crate) fn compare_exchange(
        &self,
        _: Cpu,
        current: u128,
        new: u128,
        _: Ordering,
        _: Ordering,
    ) -> Result<u128, u128> {
        let mut value = self.0.lock().unwrap();
        if *value == current {
            *value = new;
            Ok(current)
        } else {
            Err(*value)
        }
    }
}

/// The hash builder for every map whose layout the loom models can observe.
///
/// Loom replays schedules and needs every execution of a model to be deterministic; std's
/// `RandomState` seeds each map differently, which would change shard choices and iteration
/// orders between replays. Under loom the hasher is therefore fixed.
#[cfg(loom)]
pub(crate) type RandomState =
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
#[cfg(not(loom))]
pub(crate) type RandomState = std::collections::hash_map::RandomState;

/// Asks the allocator to return its free memory to the system: glibc's `malloc_trim`, which
/// gives back the free pages of every arena, also those below a block still in use (its
/// `free` only gives back the top of an arena). Nothing elsewhere (another C library,
/// Miri, loom): their allocators have no such call, or none is needed.
pub(crate) fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri), not(loom)))]
    {
        // Safety: `malloc_trim` takes a byte count to keep at the top of the main arena
        // and touches only the allocator's own free lists, under its own locks; any thread
        // may call it at any time.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
