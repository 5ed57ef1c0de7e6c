//! The generations of one table: the current [`Table`], its successor while entries move
//! ([`migrate`](crate::acker::table::migrate)), and the retired ones waiting for their
//! grace period.
//!
//! ## Ownership
//!
//! A [`Generations`] owns its current generation and the *chain* of successors from it:
//! while a migration is under way the successor is `current.successor()`, and a successor
//! that runs out of room while it is still being filled gets a successor of its own (so no
//! migration ever waits for room that only it could make). Promotion makes the successor
//! current once every group of the current one has moved, and hands the old generation to
//! the caller, which retires it: it stays readable (its words MOVED or EMPTY, its `next`
//! still leading on) until every operation that could have loaded it has ended
//! ([`marks`](crate::acker::threads::marks),
//! [`Threads::grace`](crate::acker::threads::Threads::grace)), and is freed then.
//!
//! Operations load `current` only inside an acker operation (`Threads::enter`), so the
//! reference they get lives as long as the operation.

use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::acker::table::Table;
use crate::acker::timers::ticks::Tick;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, Mutex, Ordering};

/// One table's generations.
pub(in crate::acker::engine) struct Generations<T> {
    current: AtomicPtr<Table<T>>,
    /// Held to start a migration, and by shutdown's scan so that none starts under it.
    migrations: Mutex<()>,
    /// The tick since which the reaper has seen the load low enough to shrink (0: not).
    low_since: AtomicU32,
    /// A caller found the chain's last generation loaded enough to grow, and left the
    /// growth to the reaper thread ([`growth`](crate::acker::engine::tables::growth), "Who
    /// builds a successor").
    growth_asked: AtomicBool,
    _owns: PhantomData<Table<T>>,
}

impl<T> Generations<T> {
    pub(in crate::acker::engine) fn new(table: Table<T>) -> Self {
        Generations {
            current: AtomicPtr::new(Box::into_raw(Box::new(table))),
            migrations: Mutex::new(()),
            low_since: AtomicU32::new(0),
            growth_asked: AtomicBool::new(false),
            _owns: PhantomData,
        }
    }

    /// The current generation.
    ///
    /// # Safety
    /// Called inside an acker operation (`Threads::enter`), and the result used only
    /// within it: a retired generation is freed only after every such operation ended.
    #[inline]
    pub(in crate::acker::engine) unsafe fn current(&self) -> &Table<T> {
        // SeqCst: the grace period's Dekker pair with the promotion's store
        // ([`marks`](crate::acker::threads::marks)). Safety: never null; freed only as the
        // caller's contract says.
        unsafe { &*self.current.load(Ordering::SeqCst) }
    }

    /// Starts moving `from` (the last generation of the chain) to a new table of `groups`
    /// groups, unless `stopping()` (checked under the lock that shutdown's scan holds).
    /// When another thread is starting one, waits for it if `wait`, else gives up.
    /// `Some(true)` when this call started it, `Some(false)` when `from` has a successor
    /// anyway (another thread's) or is retired, `None` when nothing started.
    pub(in crate::acker::engine) fn start_migration(
        &self,
        from: &Table<T>,
        groups: usize,
        wait: bool,
        fault_in: bool,
        stopping: impl Fn() -> bool,
    ) -> Option<bool> {
        let _guard = match self.migrations.try_lock() {
            Ok(guard) => guard,
            Err(_) if wait => self.hold_migrations(),
            Err(_) => return None,
        };
        // Safety: under the operation the caller is in (`from` came from it too).
        let in_chain = chain(unsafe { self.current() }).any(|g| std::ptr::eq(g, from));
        if !in_chain || from.successor().is_some() {
            return Some(false);
        }
        if stopping() {
            return None;
        }
        debug_assert!(groups >= 2);
        let next = Box::into_raw(Box::new(from.successor_of(groups, fault_in)));
        // Safety: the table owns `next` from here (as `from`'s successor, then as current)
        // and frees it only after `from` (see `Drop` and the module docs); one migration
        // per generation (checked above, under the lock).
        unsafe { from.begin_move(next) };
        Some(true)
    }

    /// After `from`'s last group moved: makes its successor current, if `from` is current.
    /// Returns `from`, now the caller's to retire and free after a grace period (a raw
    /// pointer: the caller still holds references into it, so no `Box` claims it yet).
    pub(in crate::acker::engine) fn promote(&self, from: &Table<T>) -> Option<NonNull<Table<T>>> {
        let next = from.successor_ptr();
        if next.is_null() {
            return None;
        }
        let old = from as *const Table<T> as *mut Table<T>;
        // The pointer handed back is the one `current` held (the `Box`'s own), not `old`,
        // which is made from a reference.
        self.current
            .compare_exchange(old, next, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .and_then(NonNull::new)
    }

    /// The reaper's pass at tick `now` saw the load `low` (or not): for how many ticks it
    /// has been low without a break.
    pub(in crate::acker::engine) fn low_for(&self, low: bool, now: Tick) -> Tick {
        // Relaxed (all): a heuristic; two passes at once (manual mode) at worst shrink a
        // table a little early or late.
        if !low {
            self.low_since.store(0, Ordering::Relaxed);
            return 0;
        }
        match self.low_since.load(Ordering::Relaxed) {
            0 => {
                self.low_since.store(now.max(1), Ordering::Relaxed);
                0
            }
            since => now.wrapping_sub(since),
        }
    }

    /// Forgets since when the load was low (a re-anchoring: the tick would not decode).
    pub(in crate::acker::engine) fn forget_low(&self) {
        self.low_since.store(0, Ordering::Relaxed); // Relaxed: a heuristic, as above
    }

    /// For how many ticks before `now` the reaper has seen the load low (0: not low, or
    /// not seen yet).
    pub(in crate::acker::engine) fn low_ticks(&self, now: Tick) -> Tick {
        match self.low_since.load(Ordering::Relaxed) {
            0 => 0,
            since => now.wrapping_sub(since),
        }
    }

    /// Asks the reaper thread to grow the chain: `true` when no request was waiting (the
    /// caller then wakes the thread).
    pub(in crate::acker::engine) fn ask_growth(&self) -> bool {
        // Relaxed (both): a request is a hint, and the thread re-reads the load and the
        // chain it acts on; the wake that follows (`unpark`) makes the flag visible to the
        // pass it starts. The load first: callers keep finding the table crowded until the
        // growth starts, and a request already waiting costs them no locked instruction.
        !self.growth_asked.load(Ordering::Relaxed)
            && !self.growth_asked.swap(true, Ordering::Relaxed)
    }

    /// The reaper: takes the waiting request to grow the chain, if there is one.
    pub(in crate::acker::engine) fn take_growth_request(&self) -> bool {
        // Relaxed (both): as in `ask_growth`.
        self.growth_asked.load(Ordering::Relaxed)
            && self.growth_asked.swap(false, Ordering::Relaxed)
    }

    /// Holds off new migrations (shutdown's scan).
    pub(in crate::acker::engine) fn hold_migrations(&self) -> crate::sync::MutexGuard<'_, ()> {
        self.migrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots in the current generation and its successors.
    ///
    /// # Safety
    /// As for [`current`](Self::current).
    #[cfg(any(test, loom, feature = "internals"))]
    pub(in crate::acker::engine) unsafe fn slots(&self) -> usize {
        // Safety: the caller's.
        chain(unsafe { self.current() }).map(Table::slots).sum()
    }
}

impl<T> Drop for Generations<T> {
    fn drop(&mut self) {
        let mut at = self.current.load(Ordering::SeqCst);
        // Safety: `&mut self`: no operation is under way; the table owns its current
        // generation and the chain of successors from it (never promoted, so owned by
        // nobody else), each freed once here, after its successor pointer is read.
        unsafe {
            while !at.is_null() {
                let next = (*at).successor_ptr();
                drop(Box::from_raw(at));
                at = next;
            }
        }
    }
}

/// A generation and every successor after it, oldest first.
pub(in crate::acker::engine) fn chain<T>(first: &Table<T>) -> impl Iterator<Item = &Table<T>> {
    std::iter::successors(Some(first), |g| g.successor())
}
