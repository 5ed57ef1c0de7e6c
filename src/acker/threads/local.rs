//! The per-thread lookup: each thread keeps its batch for every acker it created entries
//! in (`LOCAL`), and the last one it used (`LAST`) answers the common case, one acker on
//! many calls, with one thread-local read. Under loom, where the models pass batches
//! explicitly, nothing is per-thread.

#[cfg(not(loom))]
use std::cell::{Cell, RefCell};

#[cfg(not(loom))]
use super::Record;
use super::{Active, Entry, Pushed, Threads};
use crate::acker::timers::ticks::Tick;
#[cfg(not(loom))]
use crate::sync::{Arc, Ordering};

/// A thread's batches, one per acker it created entries in. Dropping it (thread exit)
/// abandons them; the reaper takes over what is left in them.
#[cfg(not(loom))]
#[derive(Default)]
struct Local {
    threads: Vec<(usize, Arc<Record>)>,
}

#[cfg(not(loom))]
impl Drop for Local {
    fn drop(&mut self) {
        // `LAST` must not name a batch this drop may free (an acker id is never reused, so
        // nothing else can make it name a freed one).
        LAST.set((0, std::ptr::null()));
        self.threads.iter().for_each(|(_, b)| Threads::abandon(b));
    }
}

#[cfg(not(loom))]
thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
    /// The last lookup: an acker's id and its batch (kept alive by `LOCAL`).
    static LAST: Cell<(usize, *const Record)> = const { Cell::new((0, std::ptr::null())) };
}

#[cfg(not(loom))]
impl Threads {
    /// [`push_to`](Self::push_to) on the calling thread's batch for this acker (registered
    /// at its first push).
    #[inline]
    pub fn push(
        &self,
        entry: Entry,
        hand_off: Tick,
        now: Tick,
        live: impl FnMut(&Entry) -> bool,
    ) -> Pushed {
        let (id, last) = LAST.get();
        if id == self.id {
            // Safety: `LAST` names a batch that this thread's `LOCAL` holds an `Arc` of (it
            // is set only from there, and `LOCAL` drops no batch while `LAST` names it).
            return self.push_to(unsafe { &*last }, entry, hand_off, now, live);
        }
        let Some(record) = self.local() else {
            // The thread is exiting and its batches are gone: straight to the reaper.
            self.hand_off(std::iter::once(entry));
            return self.wake_check();
        };
        LAST.set((self.id, Arc::as_ptr(&record)));
        self.push_to(&record, entry, hand_off, now, live)
    }

    /// Marks an acker operation in progress on the calling thread until the returned
    /// `Active` drops; its `open` says whether the operation may call the callback.
    #[inline]
    pub fn enter(&self) -> Active {
        match self.own() {
            Some(record) => self.enter_with(record),
            // The thread is exiting (a thread-local's destructor acks): it has no batch to
            // mark, so it counts in the shared count, which shutdown's close waits for as
            // it waits for a batch's depth. Its completions go to the callback like any.
            None => self.enter_shared(),
        }
    }

    /// Whether the calling thread is in an acker operation (a callback calling shutdown).
    pub fn caller_active(&self) -> bool {
        // Relaxed: this thread's own counter.
        self.own()
            .is_some_and(|b| b.active.load(Ordering::Relaxed) > 0)
    }

    /// The calling thread's batch (registered at its first use).
    #[inline]
    pub(super) fn own(&self) -> Option<&Record> {
        let (id, last) = LAST.get();
        if id == self.id {
            // Safety: as in `push`: `LOCAL` keeps the batch `LAST` names alive, and the
            // reference is used only while this thread runs the caller.
            return Some(unsafe { &*last });
        }
        let record = self.local()?;
        LAST.set((self.id, Arc::as_ptr(&record)));
        // Safety: as above: `LOCAL` holds an `Arc` of it for as long as this thread runs.
        Some(unsafe { &*Arc::as_ptr(&record) })
    }

    #[cold]
    fn local(&self) -> Option<Arc<Record>> {
        LOCAL
            .try_with(|local| {
                let mut local = local.borrow_mut();
                if let Some((_, record)) = local.threads.iter().find(|(id, _)| *id == self.id) {
                    return Arc::clone(record);
                }
                // Records of ackers that are gone (only this thread still holds them) go
                // now.
                local.threads.retain(|(_, b)| Arc::strong_count(b) > 1);
                let record = self.register();
                local.threads.push((self.id, Arc::clone(&record)));
                record
            })
            .ok()
    }
}

#[cfg(loom)]
impl Threads {
    /// Under loom: one shared count of operations in progress.
    pub fn enter(&self) -> Active {
        self.enter_shared()
    }

    /// Under loom nothing is per-thread.
    pub fn caller_active(&self) -> bool {
        false
    }

    /// Under loom nothing is per-thread.
    pub(super) fn own(&self) -> Option<&super::Record> {
        None
    }

    /// Under loom, where the models drive [`push_to`](Self::push_to) with explicit
    /// batches, an entry filed without one goes straight to the inbox.
    pub fn push(
        &self,
        entry: Entry,
        _hand_off: Tick,
        _now: Tick,
        _live: impl FnMut(&Entry) -> bool,
    ) -> Pushed {
        self.hand_off(std::iter::once(entry));
        self.wake_check()
    }
}
