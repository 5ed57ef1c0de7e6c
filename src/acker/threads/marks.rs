//! The marks of each thread's acker operations in progress: a word in its [`Record`] (its
//! depth and the outermost operations it has begun), stored with plain stores and a light
//! fence, read by the rare side behind a heavy fence. Three protocols wait on them.
//!
//! An entry is one load and one store of the record's `active` word (the depth in its low
//! half, the outermost operations begun in its high half: "Grace periods"), the light
//! fence, and one load of the acker's *gates* ([`CLOSED`], [`MOVING`]), which are both
//! clear on every operation's path but shutdown's and a re-anchoring's.
//!
//! ## Closing the callback
//!
//! Shutdown must be able to drop the acker's `on_complete` (a callback that holds a handle
//! of its own acker otherwise keeps the acker alive in a cycle), but not while a thread may
//! still call it. Each operation therefore marks its thread *active* in its record
//! for its length (its depth, plain stores, and a light fence), then reads the `CLOSED`
//! gate; the callback may be called only by an operation that found it open. Shutdown sets
//! `CLOSED`, runs the heavy fence, and waits until no other thread is active: the same
//! Dekker pair as the grace periods', so an operation either finished (or will finish) with the
//! callback before shutdown drops it, or saw it closed.
//!
//! ## Grace periods
//!
//! The same marks retire tables
//! ([`generations`](crate::acker::engine::tables::generations)): after a promotion makes an
//! old table unreachable, [`Threads::grace`] runs the heavy fence and notes every thread
//! inside an operation, with the count of outermost operations it has begun; the old table
//! is freed once each of those threads was seen outside that operation (its depth 0, or its
//! count moved on). A thread stores its depth before it loads a table, so one seen at depth
//! 0 after the fence loads the new table. Threads without a record (exiting ones)
//! count in a shared counter with an RMW, and a grace period waits for it to read 0.
//!
//! ### Why not `crossbeam-epoch` or `seize`
//!
//! The marks serve three protocols, and two of them (closing the callback, re-anchoring)
//! *wait* until no thread is inside, and re-anchoring also turns entering operations back:
//! no reclamation crate offers that, so a crate would add a second per-thread word that
//! every operation writes, for a rare event (a table retires once per migration). Here an
//! operation's mark is plain stores and a compiler fence: none of a tree's 7 locked
//! instructions (`python3 benches/instructions/count.py acker`). `crossbeam-epoch` pins
//! with a `lock cmpxchg` and collects garbage on the pinning thread every 128 pins; when a
//! table's retirement used it, its pin was 37 % of an in-cache ack by `perf`, and dropping
//! it took a probe from 95 to 87 ns an operation on one thread and 72 to 66 on two. `seize`
//! can enter as cheaply (with `membarrier` too), but it leaves with a locked `xchg`, and
//! the last thread to leave frees a retired table: a worker's ack could end by
//! unmapping a table. Not measured: `seize` itself.
//!
//! ## Re-anchoring
//!
//! The acker's stored ticks are `u32`s read against a published anchor
//! ([`anchor`](crate::acker::engine::time)); after a stall the anchor must move and the
//! stored ticks with it, while no operation reads or writes them. The re-anchoring thread
//! sets `MOVING`, runs the heavy fence and waits until every other thread is *quiescent*:
//! outside any operation, or *paused* inside one ([`Threads::pause`]: its depth stored in
//! `paused`) where it holds nothing of the tables: in the callback (and a payload's drop)
//! that delivers a completion, or in a wait (for room, for another re-anchorer). Each step
//! that leaves quiescence (an outermost entry, an entry nested in a paused operation, a
//! pause's end) stores its depth (or restores `paused`), runs the light fence and reads
//! the gates; if `MOVING` is set, it undoes its store and waits until it is clear. The same
//! Dekker pair again: the re-anchorer sees the thread busy and waits for it, or the thread
//! sees `MOVING` and waits for the re-anchorer.
//!
//! Pauses nest: a callback (paused at depth 1) that calls the acker enters at depth 2, and
//! when that call completes a tree it pauses again for the tree's callback. A pause keeps
//! the `paused` it replaced and restores it when it ends (pauses on one thread end in the
//! reverse order they began), so once the nested call returns the thread is paused at
//! depth 1 again, as quiescent as before it. A pause that ended by clearing `paused`
//! instead would leave the rest of the outer callback looking busy, and a re-anchorer
//! would wait for user code that may itself wait for a thread the re-anchorer holds.
//!
//! An entry nested in an operation that is *not* paused (a reaper pass's look at the
//! tables inside its own operation) never waits: that thread was seen busy, so the
//! re-anchorer is still waiting for it and has swept nothing; the nested operation runs
//! before the sweep, as part of the outer one. Waiting there would wait for a re-anchorer
//! that waits for the same thread. So the re-anchorer waits only for threads inside the
//! acker's own code that is not paused, which finishes without waiting on anyone, and no
//! callback, nested call or wait can deadlock with it.
//!

use super::{Record, Threads};
use crate::sync::{fence, Arc, AtomicU64, Ordering};

/// A gate of [`Threads`]: shutdown has closed the callback ("Closing the callback").
pub(super) const CLOSED: u8 = 1;
/// A gate of [`Threads`]: time is being re-anchored ("Re-anchoring").
pub(super) const MOVING: u8 = 2;

/// The depth in a record's `active` word: the operations in progress on its thread.
#[inline]
pub(super) fn depth(active: u64) -> u32 {
    active as u32 // the low half
}

/// The outermost operations begun, wrapping, in a record's `active` word.
#[inline]
fn begun(active: u64) -> u32 {
    (active >> 32) as u32
}

/// A record's `active` word after one more entry: the depth one up and, for an outermost
/// entry (depth 0), the operations begun too. Branch-free: one load and one store an entry.
#[inline]
fn entered(active: u64) -> u64 {
    let outer = u64::from(depth(active) == 0);
    // Wrapping: the count of operations begun wraps in the high half, and the depth below
    // it never carries into it (it is far below 2^32).
    active.wrapping_add(1 | outer << 32)
}

/// An acker operation in progress on the calling thread; see [`Threads::enter`].
#[derive(Debug)]
pub struct Active {
    /// The thread's `active` word (its depth in the low half), or [`Threads::shared`].
    depth: *const AtomicU64,
    /// `depth` is the count shared by threads without a record. Otherwise it is the
    /// `active` field of the thread's record, reached through a pointer to the whole record
    /// (so that [`record`](Self::record) may go back to it).
    shared: bool,
    /// The callback was open when the operation began: it may call it.
    pub open: bool,
}

impl Active {
    /// The calling thread's record the operation entered with; `None` for a thread
    /// without a record.
    #[inline]
    pub(super) fn record(&self) -> Option<&Record> {
        if self.shared {
            return None;
        }
        // Safety: `depth` points at the `active` field of the record the operation entered
        // with, derived from a pointer to the whole record (`enter_with`), so stepping back
        // by the field's offset is that record; it is alive as in `drop` (the records
        // this thread's `LOCAL` keeps), and the reference lives no longer than this
        // `Active`, which lives within one operation on this thread.
        Some(unsafe {
            &*self
                .depth
                .byte_sub(std::mem::offset_of!(Record, active))
                .cast::<Record>()
        })
    }
}

impl Drop for Active {
    #[inline]
    fn drop(&mut self) {
        // Safety: the counter is in a record this thread's `LOCAL` keeps alive, or
        // in the `Threads` of the acker the operation runs on, and an `Active` lives within
        // one operation on this thread (it is not `Send`).
        let depth = unsafe { &*self.depth };
        if self.shared {
            depth.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        // Relaxed load: only this thread writes it. Release: the operation (its callback
        // included) happens before a shutdown or a grace period that reads the lower depth.
        // The depth is at least 1 here: the low half does not borrow from the high one.
        depth.store(depth.load(Ordering::Relaxed) - 1, Ordering::Release);
    }
}

/// The calling thread quiescent (see [`Threads::pause`]) until this drops.
#[derive(Debug)]
pub struct Paused<'a> {
    threads: &'a Threads,
    record: Option<&'a Record>,
    /// The `paused` this pause replaced, restored when it ends: the depth of an outer
    /// operation paused around this one (a callback that called the acker, whose call
    /// completed a tree and paused for that callback), or 0. Pauses on a thread end in the
    /// reverse order they began, so restoring it leaves the thread as quiescent as it was
    /// before: paused in the outer callback once the nested call has ended.
    previous: u32,
}

impl Drop for Paused<'_> {
    #[inline]
    fn drop(&mut self) {
        let Some(record) = self.record else {
            return;
        };
        // Relaxed load: only this thread writes it.
        let depth = depth(record.active.load(Ordering::Relaxed));
        // Relaxed: ordered before the gates' load by the light fence (module docs).
        record.paused.store(self.previous, Ordering::Relaxed);
        self.threads.fences.light();
        // Acquire: as in `enter_with`, a sweep that ended happens before what follows.
        if self.threads.gates.load(Ordering::Acquire) & MOVING != 0 {
            self.threads
                .resume_after_moved(record, depth, self.previous);
        }
    }
}

impl Threads {
    /// The rest of a [`Paused`]'s drop when a re-anchoring was under way: quiescent again
    /// at `depth` until it ends, then as the drop's first try, restoring `previous`. Apart,
    /// and cold: every callback's pause ends in the drop's fast path.
    #[cold]
    #[inline(never)]
    fn resume_after_moved(&self, record: &Record, depth: u32, previous: u32) {
        loop {
            // Release: as in `pause`.
            record.paused.store(depth, Ordering::Release);
            self.wait_moved();
            // Relaxed: ordered before the gates' load by the light fence (module docs).
            record.paused.store(previous, Ordering::Relaxed);
            self.fences.light();
            // Acquire: as in `enter_with`.
            if self.gates.load(Ordering::Acquire) & MOVING == 0 {
                return;
            }
        }
    }
}

/// A grace period under way: the threads that were inside an operation when it began.
/// See [`Threads::grace`].
#[derive(Debug)]
pub struct Grace {
    busy: Vec<(Arc<Record>, u32)>,
    /// Threads without a record were inside operations.
    shared: bool,
    /// The barrier failed: nothing is known yet; the next check snapshots again.
    unfenced: bool,
}

impl Threads {
    /// [`enter`](Self::enter) on `record`, which must be the calling thread's.
    #[inline]
    pub fn enter_with(&self, record: &Record) -> Active {
        // Relaxed load: only this thread writes it; Relaxed store: ordered before the
        // gates' load (and the operation's loads of tables) by the light fence.
        let was = record.active.load(Ordering::Relaxed);
        record.active.store(entered(was), Ordering::Relaxed);
        self.fences.light();
        // Ordered after the depth store by the light fence (module docs). Acquire: a
        // `MOVING` cleared by `end_moving` orders the re-anchorer's sweep before this
        // operation's reads of the tables (a Relaxed load let loom's model race them).
        let gates = self.gates.load(Ordering::Acquire);
        let open = gates == 0 || self.enter_gated(record, was, gates);
        Active {
            // Through a pointer to the whole record: `record` steps back from it.
            depth: std::ptr::from_ref(record)
                .wrapping_byte_add(std::mem::offset_of!(Record, active))
                .cast::<AtomicU64>(),
            shared: false,
            open,
        }
    }

    /// [`enter_with`](Self::enter_with) after its load of the gates found one set, with its
    /// record's `active` word `was` at its entry stored one entry up: a re-anchoring to
    /// wait out ([`enter_moving`](Self::enter_moving)); whether the callback is still open.
    /// Out of line, as the common entry finds no gate.
    #[cold]
    #[inline(never)]
    fn enter_gated(&self, record: &Record, was: u64, gates: u8) -> bool {
        let mut gates = gates;
        if gates & MOVING != 0 {
            self.enter_moving(record, was);
            // Relaxed: ordered after the depth store by the light fence (module docs), as
            // the first load; the callback may have been closed while this entry waited.
            gates = self.gates.load(Ordering::Relaxed);
        }
        gates & CLOSED == 0
    }

    /// [`enter_with`](Self::enter_with) after its first look found a re-anchoring under
    /// way, with the record's `active` word `was` at its entry stored one entry up: the
    /// rest of its loop. The same steps in the same order: each round either stays entered
    /// or undoes its store, waits, stores it again and looks again.
    fn enter_moving(&self, record: &Record, was: u64) {
        let depth_was = depth(was);
        loop {
            // Nested in an operation that is not paused ("Re-anchoring"): the re-anchorer
            // counts this thread busy and waits for that operation, so its sweep has not
            // begun and cannot begin before this one ends or pauses. Relaxed: only this
            // thread writes `paused`.
            if depth_was > 0 && record.paused.load(Ordering::Relaxed) != depth_was {
                return;
            }
            // Quiescent again (its depth as before: 0, or its callback's; the count of
            // operations begun as before too) while the re-anchorer works
            // ("Re-anchoring"). Release: as when an operation ends.
            record.active.store(was, Ordering::Release);
            self.wait_moved();
            // Relaxed: as in `enter_with`, ordered by the light fence.
            record.active.store(entered(was), Ordering::Relaxed);
            self.fences.light();
            // Acquire: as in `enter_with`.
            if self.gates.load(Ordering::Acquire) & MOVING == 0 {
                return;
            }
        }
    }

    /// Waits (spin, yield, sleep) until no re-anchoring is under way.
    fn wait_moved(&self) {
        let mut backoff = crate::sync::Backoff::default();
        // Acquire: what the re-anchorer wrote before it cleared `MOVING` happens before
        // this thread's next reads of the tables.
        while self.gates.load(Ordering::Acquire) & MOVING != 0 {
            backoff.wait();
        }
    }

    /// Marks the calling thread quiescent ("Re-anchoring") until the returned guard drops:
    /// around a callback, and around a wait inside an operation that holds nothing the
    /// re-anchorer rewrites. Dropping it waits for a re-anchoring under way to finish.
    #[inline]
    pub fn pause(&self) -> Paused<'_> {
        self.pause_on(self.own())
    }

    /// [`pause`](Self::pause) inside the operation `active` marks: on the record it entered
    /// with, which is the calling thread's (no lookup).
    #[inline]
    pub fn pause_in<'a>(&'a self, active: &'a Active) -> Paused<'a> {
        self.pause_on(active.record())
    }

    /// [`pause`](Self::pause) on `record`, which must be the calling thread's (loom's
    /// models pass it explicitly, as to [`enter_with`](Self::enter_with)).
    #[inline]
    #[cfg(any(test, loom))] // the tests and loom models only
    pub fn pause_with<'a>(&'a self, record: &'a Record) -> Paused<'a> {
        self.pause_on(Some(record))
    }

    #[inline]
    fn pause_on<'a>(&'a self, record: Option<&'a Record>) -> Paused<'a> {
        let mut previous = 0;
        if let Some(record) = record {
            // Relaxed loads: only this thread writes them. Release: the operation's
            // accesses so far happen before a re-anchorer that reads it (Acquire) and then
            // sweeps.
            previous = record.paused.load(Ordering::Relaxed);
            let depth = depth(record.active.load(Ordering::Relaxed));
            record.paused.store(depth, Ordering::Release);
        }
        Paused {
            threads: self,
            record,
            previous,
        }
    }

    /// Re-anchoring: makes every later operation wait at its entry (and every callback at
    /// its return), then waits until every other thread is quiescent. `false` when a thread
    /// without a record (an exiting one) is inside an operation, or the barrier
    /// could not run: then nothing is excluded (call [`end_moving`](Self::end_moving) and
    /// give up, or try again).
    pub fn begin_moving(&self) -> bool {
        self.gates.fetch_or(MOVING, Ordering::Relaxed); // Relaxed: ordered by the heavy fence
        if !self.heavy() {
            return false;
        }
        let own = self.own().map(|b| b as *const Record);
        let busy: Vec<Arc<Record>> = (self.all.lock().unwrap().iter())
            .filter(|b| Some(Arc::as_ptr(b)) != own)
            .cloned()
            .collect();
        let mut backoff = crate::sync::Backoff::default();
        // Acquire (both): reads the owner's release of its depth or pause, so what its
        // operation did happens before the re-anchorer's sweep.
        let quiescent = |b: &Arc<Record>| {
            let depth = depth(b.active.load(Ordering::Acquire));
            depth == 0 || b.paused.load(Ordering::Acquire) == depth
        };
        for record in &busy {
            while !quiescent(record) {
                if self.shared.load(Ordering::SeqCst) > 0 {
                    return false;
                }
                backoff.wait();
            }
        }
        // Threads without a record cannot pause: any inside an operation is busy.
        self.shared.load(Ordering::SeqCst) == 0
    }

    /// Ends a re-anchoring: operations waiting at their entry go on.
    pub fn end_moving(&self) {
        // Release: the sweep's writes happen before the waiting threads' reads (Acquire in
        // `wait_moved`).
        self.gates.fetch_and(!MOVING, Ordering::Release);
    }

    /// Shutdown: closes the callback, then reports whether it may be dropped: `true` once
    /// no other thread is in an operation that found it open. `false` while one is (call
    /// again), or when the calling thread is itself in an operation (shutdown from inside
    /// the callback: it must not be dropped under its own feet).
    pub fn close(&self, caller_active: bool) -> bool {
        self.gates.fetch_or(CLOSED, Ordering::Relaxed); // Relaxed: ordered by the heavy fence
        if !self.heavy() || caller_active {
            return false; // without the barrier, a depth read as 0 proves nothing
        }
        // Acquire: reads each thread's release of its depth, so its callback happened
        // before.
        let others =
            (self.all.lock().unwrap().iter()).any(|b| depth(b.active.load(Ordering::Acquire)) > 0);
        !others && self.shared.load(Ordering::SeqCst) == 0
    }

    /// Begins a grace period, after the caller made something unreachable for operations
    /// that begin from now on (a retired table, [`engine`](crate::acker::engine)): notes
    /// the threads inside an operation now. Once [`grace_over`](Self::grace_over), every
    /// operation that could have reached it has ended.
    ///
    /// The same Dekker pair as the callback's close ("Closing the callback"): an operation
    /// stores its depth, runs the light fence and then loads the tables; the caller's
    /// store, then the heavy fence, then the depth loads. An operation whose depth this
    /// reads as 0 loads the tables after the store.
    pub fn grace(&self) -> Grace {
        if !self.heavy() {
            // Without the barrier a depth read as 0 proves nothing: the period is over
            // only after a later snapshot, behind a barrier that ran, says so.
            return Grace {
                busy: Vec::new(),
                shared: false,
                unfenced: true,
            };
        }
        // Acquire (all): reads each thread's release of its depth, so what its operation
        // read of the old table happened before the caller frees it.
        let busy = (self.all.lock().unwrap().iter())
            .filter_map(|b| {
                let active = b.active.load(Ordering::Acquire);
                (depth(active) > 0).then(|| (Arc::clone(b), begun(active)))
            })
            .collect();
        Grace {
            busy,
            shared: self.shared.load(Ordering::SeqCst) > 0,
            unfenced: false,
        }
    }

    /// Whether every thread that was inside an operation when `grace` began has left it
    /// (its depth is 0, or it began another outermost one since).
    pub fn grace_over(&self, grace: &mut Grace) -> bool {
        if grace.unfenced {
            *grace = self.grace();
            return false;
        }
        // Acquire (both): as in `grace`.
        grace.busy.retain(|(b, was_begun)| {
            let active = b.active.load(Ordering::Acquire);
            depth(active) > 0 && begun(active) == *was_begun
        });
        if grace.shared {
            // Threads without a record cannot be told apart: wait for none to be
            // inside.
            grace.shared = self.shared.load(Ordering::SeqCst) > 0;
        }
        grace.busy.is_empty() && !grace.shared
    }

    /// Looks again whether the callback is open, for an operation that goes on past a
    /// message whose callback ran inside it (a record's chunk, `Acker::apply`): that
    /// callback may have shut the acker down, and the operation's next messages must then
    /// change nothing, as the same calls made one at a time after it would not.
    #[inline]
    pub fn reopen(&self, active: &mut Active) {
        // Relaxed: a close from this thread (a callback's shutdown) is seen in program
        // order. One from another thread waits for this operation to end before it goes
        // on; reading it here or not are both orders a message entering now could see.
        active.open = self.gates.load(Ordering::Relaxed) & CLOSED == 0;
    }

    /// Marks an operation of a thread without a record: one shared count, an RMW
    /// (rare: exiting threads; every thread under loom).
    pub(super) fn enter_shared(&self) -> Active {
        loop {
            self.shared.fetch_add(1, Ordering::SeqCst);
            // The count's side of the Dekker pairs with `begin_moving` and `close` (their
            // gate's RMW, heavy fence, count load). A SeqCst RMW then a SeqCst load would
            // do in the C++20 model, but loom treats SeqCst accesses as AcqRel and only
            // fences join its total order; the fence makes the code loom checks the code
            // that runs, and this path is rare (exiting threads).
            fence(Ordering::SeqCst);
            if self.gates.load(Ordering::SeqCst) & MOVING == 0 {
                break;
            }
            self.shared.fetch_sub(1, Ordering::SeqCst);
            self.wait_moved();
        }
        Active {
            depth: &self.shared as *const AtomicU64,
            shared: true,
            // SeqCst: after the count's RMW and the fence, as a record's light fence
            // orders its depth store.
            open: self.gates.load(Ordering::SeqCst) & CLOSED == 0,
        }
    }
}
