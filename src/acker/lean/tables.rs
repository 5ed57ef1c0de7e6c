//! The generations of one table: the current [`Roots`], its successor while entries move
//! (`roots/migrate.rs`), and the retired ones waiting for their grace period.
//!
//! ## Ownership
//!
//! A [`Table`] owns its current generation and, while a migration is under way, the
//! successor (reachable as `current.successor()`). Promotion makes the successor current
//! and hands the old generation to the caller, which retires it: it stays readable (its
//! words MOVED or EMPTY, its `next` still leading on) until every operation that could
//! have loaded it has ended (`batches.rs`, [`Batches::grace`](super::Batches::grace)),
//! and is freed then.
//!
//! Operations load `current` only inside an acker operation (`Batches::enter`), so the
//! reference they get lives as long as the operation.

use std::marker::PhantomData;

use crate::acker::roots::Roots;
use crate::sync::{AtomicPtr, Mutex, Ordering};

/// One table's generations.
pub(super) struct Table<T> {
    current: AtomicPtr<Roots<T>>,
    /// Held to start a migration, and by shutdown's scan so that none starts under it.
    migrations: Mutex<()>,
    _owns: PhantomData<Roots<T>>,
}

impl<T> Table<T> {
    pub(super) fn new(roots: Roots<T>) -> Self {
        Table {
            current: AtomicPtr::new(Box::into_raw(Box::new(roots))),
            migrations: Mutex::new(()),
            _owns: PhantomData,
        }
    }

    /// The current generation.
    ///
    /// # Safety
    /// Called inside an acker operation (`Batches::enter`), and the result used only
    /// within it: a retired generation is freed only after every such operation ended.
    #[inline]
    pub(super) unsafe fn current(&self) -> &Roots<T> {
        // SeqCst: the grace period's Dekker pair with the promotion's store (`batches.rs`).
        // Safety: never null; freed only as the caller's contract says.
        unsafe { &*self.current.load(Ordering::SeqCst) }
    }

    /// Starts moving `from` (which must be current, with no migration yet) to a new
    /// table of `groups` groups, unless `stopping()` (checked under the lock that
    /// shutdown's scan holds). When another thread is starting one, waits for it if
    /// `wait`, else gives up. `true` when `from` is migrating when this returns (whoever
    /// started it) or is no longer current.
    pub(super) fn start_migration(
        &self,
        from: &Roots<T>,
        groups: usize,
        wait: bool,
        stopping: impl Fn() -> bool,
    ) -> bool {
        let _guard = match self.migrations.try_lock() {
            Ok(guard) => guard,
            Err(_) if wait => self.hold_migrations(),
            Err(_) => return false,
        };
        let current = self.current.load(Ordering::SeqCst);
        if !std::ptr::eq(current, from) || from.successor().is_some() {
            return true;
        }
        if stopping() {
            return false;
        }
        debug_assert!(groups >= 2 && groups.is_power_of_two());
        let next = Box::into_raw(Box::new(from.successor_of(groups)));
        // Safety: the table owns `next` from here (as `from`'s successor, then as current)
        // and frees it only after `from` (see `Drop` and the module docs); one migration
        // per generation (checked above, under the lock).
        unsafe { from.begin_move(next) };
        true
    }

    /// After `from`'s last group moved: makes its successor current. Returns `from`, now
    /// the caller's to retire and free after a grace period.
    pub(super) fn promote(&self, from: &Roots<T>) -> Option<Box<Roots<T>>> {
        let next = from.successor()? as *const Roots<T> as *mut Roots<T>;
        let old = from as *const Roots<T> as *mut Roots<T>;
        self.current
            .compare_exchange(old, next, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            // Safety: the table owned `old` as current, and the CAS handed it over, once.
            .map(|old| unsafe { Box::from_raw(old) })
    }

    /// Holds off new migrations (shutdown's scan).
    pub(super) fn hold_migrations(&self) -> crate::sync::MutexGuard<'_, ()> {
        self.migrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots in the current generation and its successor.
    ///
    /// # Safety
    /// As for [`current`](Self::current).
    pub(super) unsafe fn slots(&self) -> usize {
        // Safety: the caller's.
        let current = unsafe { self.current() };
        current.slots() + current.successor().map_or(0, Roots::slots)
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        let current = *self.current.get_mut();
        // Safety: `&mut self`: no operation is under way; the table owns its current
        // generation and that generation's successor (never promoted, so owned by nobody
        // else), each freed once here.
        unsafe {
            let next = (*current).successor().map(|n| n as *const Roots<T> as *mut Roots<T>);
            drop(Box::from_raw(current));
            if let Some(next) = next {
                drop(Box::from_raw(next));
            }
        }
    }
}
