//! A tracked tree's waiter: one cell of the async acker's slab
//! ([`slab`](crate::future::slab)), shared by the tree's entry in the acker (the
//! [`Waiter`], whose number is the payload the table holds) and the caller's [`Receiver`]
//! (inside `TreeCompletion`), through which the tree's completion reaches the task that
//! awaits it.
//!
//! It stands where a tokio oneshot channel would, for a quarter of the memory: a
//! completion here is a payload, an outcome and an elapsed time, and the root is the
//! receiver's own, so the cell holds the payload from `track` on, the elapsed nanoseconds,
//! the awaiting task's waker and one state word: 32 B for a `u32` payload, where a oneshot
//! of a `Completion<u32>` is a 112-byte block and its sender a pointer beside the payload
//! in the table.
//!
//! ## The state word
//!
//! | bit | set while |
//! |---|---|
//! | `WAITER` | the tree's side holds the cell |
//! | `RECEIVER` | the caller's side holds the cell |
//! | `REGISTERING` | the receiver is writing its waker (it owns the waker slot) |
//! | `WAKER` | the waker slot holds a waker |
//! | `DONE` | the tree completed: the outcome is in the word, the elapsed time written |
//! | `CLOSED` | the tree ended without a completion (handed back, refused, or dropped) |
//!
//! ## Who may touch what
//!
//! * **The payload** is the waiter's until it sets `DONE` or `CLOSED`, then (after `DONE`)
//!   the receiver's. A waiter that finds the receiver gone drops it itself.
//! * **The elapsed time** is written by the waiter before its `DONE` (a Release RMW) and
//!   read by the receiver after it sees `DONE` (an Acquire load or RMW).
//! * **The waker slot** is the receiver's while `REGISTERING` is set, and the receiver
//!   sets `REGISTERING` only while neither `DONE` nor `CLOSED` is. The waiter takes the
//!   waker when it ends the tree if `WAKER` is set and `REGISTERING` is not; if a
//!   registration is under way, it leaves the slot alone, and the receiver, which finds
//!   `DONE` or `CLOSED` when it clears `REGISTERING`, returns ready without waiting. A
//!   waker still in the slot when the cell is freed is dropped with it.
//! * **The cell** is given back to the slab by whichever side lets go last: a side that
//!   finds the other's bit already clear (with an Acquire load or RMW, which sees the other
//!   side's clearing AcqRel RMW) frees it without clearing its own, so the freeing side's
//!   accesses come after everything the other side did. A tree that completes before its
//!   future is first polled costs one RMW on the tree's side and none on the caller's.
//!
//! Neither side ever waits for the other: the waiter's two RMWs and the receiver's
//! registration are each a bounded number of steps.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::slab::{Fresh, Slab, Spot};
use crate::sync::{Arc, AtomicU32, Ordering, UnsafeCell};
use crate::Outcome;

const WAITER: u32 = 1;
const RECEIVER: u32 = 1 << 1;
const REGISTERING: u32 = 1 << 2;
const WAKER: u32 = 1 << 3;
const DONE: u32 = 1 << 4;
const CLOSED: u32 = 1 << 5;
/// Two bits of outcome, valid once `DONE` is set.
const OUTCOME_SHIFT: u32 = 6;

fn outcome_bits(outcome: Outcome) -> u32 {
    let code = match outcome {
        Outcome::Acked => 0,
        Outcome::Failed => 1,
        Outcome::TimedOut => 2,
    };
    code << OUTCOME_SHIFT
}

fn outcome_of(state: u32) -> Outcome {
    match (state >> OUTCOME_SHIFT) & 3 {
        0 => Outcome::Acked,
        1 => Outcome::Failed,
        _ => Outcome::TimedOut,
    }
}

/// A waiter cell; in the slab, a free cell is [`Fresh`] (state 0, nothing written).
pub(crate) struct Cell<T> {
    state: AtomicU32,
    payload: UnsafeCell<MaybeUninit<T>>,
    /// Nanoseconds from the tree's first message to its completion (module docs); a life
    /// past `u64::MAX` ns (584 years) reads as that.
    elapsed: UnsafeCell<u64>,
    waker: UnsafeCell<MaybeUninit<Waker>>,
}

// Safety: all zero is a state of 0 (no side holds the cell), an elapsed time of 0 and an
// uninitialized payload and waker.
unsafe impl<T> Fresh for Cell<T> {
    fn fresh() -> Self {
        Cell {
            state: AtomicU32::new(0),
            payload: UnsafeCell::new(MaybeUninit::uninit()),
            elapsed: UnsafeCell::new(0),
            waker: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// The waiter cells of one async acker.
pub(crate) type Cells<T> = Slab<Cell<T>>;

/// Gives the cell back to the slab; `state` is its last word, which says whether a waker
/// is left in it. The payload has already been taken or dropped.
///
/// # Safety
///
/// The caller cleared the last of `WAITER` and `RECEIVER` with an AcqRel RMW, or saw the
/// other cleared with Acquire (so it is the only one left to touch the cell).
unsafe fn free<T>(spot: Spot<Cell<T>>, state: u32) {
    if state & WAKER != 0 {
        // Safety: WAKER says the slot holds an initialized waker, and no side took it; the
        // cell is ours alone (the caller's contract).
        unsafe {
            spot.cell()
                .waker
                .with_mut(|w| std::ptr::drop_in_place((*w).as_mut_ptr()))
        };
    }
    // Safety: ours alone, and not touched again.
    unsafe { Slab::remove(spot) };
}

/// A new cell holding `payload`, with both ends held: its spot, from which the waiter's
/// number and, once the tree is in, the [`Receiver`] are made. The payload back when every
/// number is in use.
pub(crate) fn start<T>(cells: &Arc<Cells<T>>, payload: T) -> Result<Spot<Cell<T>>, T> {
    let Some(spot) = Slab::insert(cells) else {
        return Err(payload);
    };
    // Safety: a cell just inserted is ours.
    let cell = unsafe { spot.cell() };
    // Safety: as above.
    cell.payload.with_mut(|p| unsafe { (*p).write(payload) });
    // Relaxed: the cell reaches the other side only through the acker's init (its number
    // in a payload the table publishes with a Release CAS) or the caller's own future.
    cell.state.store(WAITER | RECEIVER, Ordering::Relaxed);
    Ok(spot)
}

/// The payload of a cell whose receiver was never made (its tree's init was refused), and
/// the cell given back.
///
/// # Safety
///
/// `spot` came from [`start`], no [`Receiver`] or [`Waiter`] was made of it, and it is not
/// used again.
#[cfg_attr(loom, allow(dead_code))] // the models end cells through `pair`'s two ends
pub(crate) unsafe fn reclaim<T>(spot: Spot<Cell<T>>) -> T {
    // Safety: nobody else knows the cell (the caller's contract); `start` wrote the
    // payload.
    let payload = unsafe { spot.cell().payload.with_mut(|p| (*p).assume_init_read()) };
    // Safety: as above; no waker was ever registered.
    unsafe { Slab::remove(spot) };
    payload
}

/// A new cell holding `payload`: its two ends. (For the loom models: a slab of its own,
/// closed so that it goes with the cell.)
#[cfg(any(loom, test))]
pub fn pair<T>(payload: T) -> (Waiter<T>, Receiver<T>) {
    let cells = Arc::new(Cells::new());
    let spot = start(&cells, payload).unwrap_or_else(|_| unreachable!("an empty slab"));
    cells.close();
    (Waiter { spot }, Receiver::new(spot))
}

/// The tree's end of a cell: it completes the tree ([`complete`](Self::complete)), or
/// closes it, handing the payload back ([`into_payload`](Self::into_payload)) or dropping
/// it (`Drop`).
pub struct Waiter<T> {
    spot: Spot<Cell<T>>,
}

impl<T> std::fmt::Debug for Waiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").finish_non_exhaustive()
    }
}

// Safety: the waiter moves the payload (a `T`) to whichever thread ends the tree, and
// wakes a `Waker` (Send + Sync) from there; the cell's shared parts are the atomic state
// word and slots handed over through it (module docs).
unsafe impl<T: Send> Send for Waiter<T> {}
// Safety: `&Waiter` gives access to nothing.
unsafe impl<T: Send> Sync for Waiter<T> {}

impl<T> Waiter<T> {
    /// The waiter of cell `number` of `cells`.
    ///
    /// # Safety
    ///
    /// `number` is a cell's from [`start`] that holds `WAITER`, and no other `Waiter` of it
    /// is made.
    #[cfg_attr(loom, allow(dead_code))] // the models hold their waiters
    pub(crate) unsafe fn at(cells: &Cells<T>, number: u32) -> Self {
        // Safety: a live cell (the caller's contract).
        let spot = unsafe { cells.spot(number) };
        Waiter { spot }
    }

    fn cell(&self) -> &Cell<T> {
        // Safety: the cell lives while WAITER is set, which this waiter clears last thing.
        unsafe { self.spot.cell() }
    }

    /// Completes the tree: the receiver resolves to the payload, `outcome` and `elapsed`.
    pub fn complete(self, outcome: Outcome, elapsed: Duration) {
        let this = ManuallyDrop::new(self);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        // Safety: the elapsed slot is the waiter's until DONE (module docs).
        this.cell().elapsed.with_mut(|e| unsafe { *e = nanos });
        this.end(DONE | outcome_bits(outcome));
    }

    /// Closes the tree without a completion and hands its payload back: the receiver
    /// resolves to `Closed`.
    pub fn into_payload(self) -> T {
        let this = ManuallyDrop::new(self);
        let payload = this.cell().payload.with_mut(|p| {
            // Safety: the payload is the waiter's until it sets DONE or CLOSED (module
            // docs), and `end(CLOSED)` below tells the receiver it is gone.
            unsafe { (*p).assume_init_read() }
        });
        this.end(CLOSED);
        payload
    }

    /// Sets `ending` (`DONE` with an outcome, or `CLOSED` with the payload already taken),
    /// wakes the receiver's task, and lets go of the cell. A payload nobody will read (the
    /// receiver is gone) is dropped after the cell is freed: a drop that panics then loses
    /// nothing else.
    fn end(&self, ending: u32) {
        let cell = self.cell();
        // Acquire: a receiver that let go published its last accesses with its RMW.
        let mut state = cell.state.load(Ordering::Acquire);
        loop {
            if state & RECEIVER == 0 {
                // Nobody will read the completion, and RECEIVER never comes back: the
                // cell is this waiter's alone.
                let unread = (ending & DONE != 0).then(|| {
                    // Safety: the payload is still the waiter's: it was never handed over
                    // to a receiver, which is gone.
                    cell.payload
                        .with_mut(|p| unsafe { (*p).assume_init_read() })
                });
                // Safety: RECEIVER is clear, seen with Acquire: no one else touches the
                // cell again.
                unsafe { free(self.spot, state) };
                drop(unread);
                return;
            }
            if state & (WAKER | REGISTERING) != 0 {
                break; // a waker to take, or a registration under way: two steps, below
            }
            // No waker yet (a tree completed before its future was first polled): end the
            // tree and let go of the cell in one exchange; the receiver frees it.
            // AcqRel: Release publishes the elapsed time and the payload's ownership to
            // the receiver, and this side's accesses before it frees the cell.
            match cell.state.compare_exchange_weak(
                state,
                (state | ending) & !WAITER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
        // AcqRel: Release publishes the elapsed time (and, with DONE, the payload's
        // ownership) to a receiver that sees the bit with Acquire; Acquire takes the waker
        // a receiver published when it cleared REGISTERING.
        let before = cell.state.fetch_or(ending, Ordering::AcqRel);
        if before & RECEIVER == 0 {
            // The receiver let go since the load: as at the top of the loop.
            let unread = (ending & DONE != 0).then(|| {
                // Safety: as at the top of the loop.
                cell.payload
                    .with_mut(|p| unsafe { (*p).assume_init_read() })
            });
            // Safety: RECEIVER is clear, seen by an AcqRel RMW: the cell is ours alone.
            unsafe { free(self.spot, before) };
            drop(unread);
            return;
        }
        let waker = (before & (WAKER | REGISTERING) == WAKER).then(|| {
            // Safety: WAKER without REGISTERING: the slot holds a waker that the receiver
            // published and, now that DONE or CLOSED is set, will not touch again.
            cell.waker.with_mut(|w| unsafe { (*w).assume_init_read() })
        });
        let taken = if waker.is_some() { WAKER } else { 0 };
        // AcqRel: Release orders this side's reads of the cell before a receiver that
        // frees it; Acquire orders the receiver's accesses before our free.
        let after = cell.state.fetch_and(!(WAITER | taken), Ordering::AcqRel) & !(WAITER | taken);
        if after & RECEIVER == 0 {
            // Safety: this RMW cleared the last of WAITER and RECEIVER.
            unsafe { free(self.spot, after) };
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for Waiter<T> {
    /// The tree ended without a completion (the acker dropped its entry): the receiver
    /// resolves to `Closed`, and then the payload is dropped (a drop that panics leaves
    /// the cell ended).
    fn drop(&mut self) {
        // Safety: the payload is the waiter's until it sets DONE or CLOSED (module docs),
        // and `end(CLOSED)` below tells the receiver it is gone.
        let payload = self
            .cell()
            .payload
            .with_mut(|p| unsafe { (*p).assume_init_read() });
        self.end(CLOSED);
        drop(payload);
    }
}

/// What a cell resolves to: the tree's completion, or `Err(())` if it ended without one.
pub type Resolved<T> = Result<(T, Outcome, Duration), ()>;

/// The caller's end of a cell, polled by `TreeCompletion`.
pub struct Receiver<T> {
    spot: Spot<Cell<T>>,
    /// Resolved already: the payload (if any) was taken; later polls return `Err`.
    ended: bool,
}

// Safety: the receiver takes a `T` out of the cell on whichever thread polls it, and
// touches the waker slot only while it owns it (module docs).
unsafe impl<T: Send> Send for Receiver<T> {}
// Safety: `&Receiver` gives access to nothing.
unsafe impl<T: Send> Sync for Receiver<T> {}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

// Nothing in a receiver is pinned: it points to its cell.
impl<T> Unpin for Receiver<T> {}

impl<T> Receiver<T> {
    /// The caller's end of the cell at `spot`, from [`start`]; made once, after the tree's
    /// init succeeded.
    pub(crate) fn new(spot: Spot<Cell<T>>) -> Self {
        Receiver { spot, ended: false }
    }

    /// The cell, borrowed apart from `self` (so that `ended` can be set meanwhile).
    fn cell<'a>(&self) -> &'a Cell<T> {
        // Safety: the cell lives while RECEIVER is set, which this receiver clears last
        // thing (in `drop`, after its last use of this reference).
        unsafe { self.spot.cell() }
    }

    /// The completion, once the waiter has ended the tree; until then registers the task's
    /// waker (replacing one that would not wake the same task).
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Resolved<T>> {
        if self.ended {
            return Poll::Ready(Err(()));
        }
        let cell = self.cell();
        // Acquire: pairs with the waiter's Release RMW that set DONE or CLOSED.
        let mut state = cell.state.load(Ordering::Acquire);
        loop {
            if state & (DONE | CLOSED) != 0 {
                return Poll::Ready(self.resolve(state));
            }
            // Acquire: as the load above, when the exchange fails on DONE or CLOSED.
            match cell.state.compare_exchange_weak(
                state,
                state | REGISTERING,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => state = actual,
            }
        }
        let had = state & WAKER != 0;
        // Safety: REGISTERING makes the slot ours (module docs); WAKER says whether it
        // holds a waker (ours, from an earlier poll).
        cell.waker.with_mut(|w| unsafe {
            if !had {
                (*w).write(cx.waker().clone());
            } else if !(*w).assume_init_ref().will_wake(cx.waker()) {
                *(*w).assume_init_mut() = cx.waker().clone();
            }
        });
        // Clears REGISTERING and sets WAKER (if it was not), leaving the other bits.
        // AcqRel: Release publishes the waker to the waiter, which takes it after an
        // Acquire RMW that sees WAKER without REGISTERING; Acquire sees the elapsed time
        // if the waiter ended the tree meanwhile.
        let toggle = REGISTERING | if had { 0 } else { WAKER };
        let state = cell.state.fetch_xor(toggle, Ordering::AcqRel);
        if state & (DONE | CLOSED) != 0 {
            // The waiter ended the tree while we registered and left the slot alone: no
            // wake-up will come, and none is needed.
            return Poll::Ready(self.resolve(state));
        }
        Poll::Pending
    }

    /// What an ended cell (`state` has DONE or CLOSED, seen with Acquire) resolves to.
    fn resolve(&mut self, state: u32) -> Resolved<T> {
        self.ended = true;
        if state & DONE == 0 {
            return Err(());
        }
        let cell = self.cell();
        let payload = cell.payload.with_mut(|p| {
            // Safety: after DONE the payload and the elapsed time are the receiver's to
            // read (module docs), and `ended` keeps them from being read twice.
            unsafe { (*p).assume_init_read() }
        });
        // Safety: as above.
        let nanos = cell.elapsed.with(|e| unsafe { *e });
        Ok((payload, outcome_of(state), Duration::from_nanos(nanos)))
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let cell = self.cell();
        // Acquire: as in `poll`; and a waiter that let go published its last accesses with
        // its RMW.
        let mut state = cell.state.load(Ordering::Acquire);
        // A completion nobody took: the payload is ours (module docs). It is moved out
        // before RECEIVER is cleared, since the waiter may free the cell after, and
        // dropped once the cell is let go (a drop that panics then loses nothing else).
        let mut unread = None;
        loop {
            if state & DONE != 0 && !self.ended {
                self.ended = true;
                // Safety: after DONE the payload is the receiver's; `ended` is now set.
                unread = Some(
                    cell.payload
                        .with_mut(|p| unsafe { (*p).assume_init_read() }),
                );
            }
            if state & WAITER == 0 {
                // The waiter let go (WAITER never comes back): the cell is ours alone.
                // Safety: WAITER is clear, seen with Acquire; this receiver is the other
                // holder and is going.
                unsafe { free(self.spot, state) };
                break;
            }
            // AcqRel: Release orders our accesses before the waiter, which frees the cell
            // now; Acquire as the load. A failure (the waiter set DONE or let go
            // meanwhile) goes round again.
            match cell.state.compare_exchange_weak(
                state,
                state & !RECEIVER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => state = actual,
            }
        }
        drop(unread);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    /// A payload that counts its drops.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_completion_wakes_the_registered_task_and_resolves_once() {
        let (woken, w) = waker();
        let (waiter, mut rx) = pair(7u32);
        let mut cx = Context::from_waker(&w);
        assert!(rx.poll(&mut cx).is_pending());
        assert!(
            rx.poll(&mut cx).is_pending(),
            "a second poll keeps the waker"
        );
        waiter.complete(Outcome::TimedOut, Duration::from_nanos(123_456_789));
        assert_eq!(woken.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        match rx.poll(&mut cx) {
            Poll::Ready(Ok((7, Outcome::TimedOut, d))) => {
                assert_eq!(d, Duration::from_nanos(123_456_789))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(rx.poll(&mut cx), Poll::Ready(Err(()))));
    }

    #[test]
    fn every_payload_is_dropped_once_whichever_side_goes_first() {
        for case in 0..5 {
            let drops = Arc::new(AtomicUsize::new(0));
            let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
            let (_, w) = waker();
            let mut cx = Context::from_waker(&w);
            match case {
                // The receiver gone first, then a completion: the waiter drops it.
                0 => {
                    let _ = rx.poll(&mut cx);
                    drop(rx);
                    waiter.complete(Outcome::Acked, Duration::ZERO);
                }
                // A completion nobody polls: the receiver's drop drops it.
                1 => {
                    waiter.complete(Outcome::Failed, Duration::ZERO);
                    drop(rx);
                }
                // Taken by a poll: dropped by whoever holds it then.
                2 => {
                    waiter.complete(Outcome::Acked, Duration::ZERO);
                    let Poll::Ready(Ok((payload, ..))) = rx.poll(&mut cx) else {
                        panic!("not ready")
                    };
                    drop(rx);
                    assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0);
                    drop(payload);
                }
                // Closed by the tree's side: dropped there, the receiver sees Closed.
                3 => {
                    drop(waiter);
                    assert!(matches!(rx.poll(&mut cx), Poll::Ready(Err(()))));
                }
                // Handed back: the caller holds it; the receiver sees Closed.
                _ => {
                    let payload = waiter.into_payload();
                    assert!(matches!(rx.poll(&mut cx), Poll::Ready(Err(()))));
                    drop(rx);
                    assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 0);
                    drop(payload);
                }
            }
            assert_eq!(
                drops.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "case {case}"
            );
        }
    }

    /// A payload whose drop panics.
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the payload's drop panics");
        }
    }

    /// A payload whose drop panics ends its cell all the same, whichever side drops it: the
    /// receiver resolves and the cell is freed (the last cell of a closed slab frees the
    /// slab). A drop run before the cell ends would, by panicking, leave it live for good.
    #[test]
    fn a_panicking_payload_drop_still_ends_and_frees_the_cell() {
        for case in 0..3 {
            let cells = Arc::new(Cells::new());
            let freed = Arc::downgrade(&cells);
            let spot = start(&cells, Bomb).unwrap_or_else(|_| unreachable!("an empty slab"));
            cells.close();
            drop(cells);
            let (waiter, mut rx) = (Waiter { spot }, Receiver::new(spot));
            let (_, w) = waker();
            let mut cx = Context::from_waker(&w);
            let quietly = |f: &mut dyn FnMut()| {
                let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                assert!(panicked.is_err(), "case {case}: the payload's drop ran");
            };
            match case {
                // Closed by the tree's side: the receiver still sees Closed.
                0 => {
                    let mut waiter = Some(waiter);
                    quietly(&mut || drop(waiter.take()));
                    assert!(matches!(rx.poll(&mut cx), Poll::Ready(Err(()))));
                    drop(rx);
                }
                // Completed after the receiver went: the waiter drops what nobody reads.
                1 => {
                    drop(rx);
                    let mut waiter = Some(waiter);
                    quietly(&mut || {
                        waiter
                            .take()
                            .unwrap()
                            .complete(Outcome::Acked, Duration::ZERO)
                    });
                }
                // A completion nobody polled: the receiver's drop drops it.
                _ => {
                    waiter.complete(Outcome::Acked, Duration::ZERO);
                    let mut rx = Some(rx);
                    quietly(&mut || drop(rx.take()));
                }
            }
            assert!(freed.upgrade().is_none(), "case {case}: the cell was freed");
        }
    }

    #[test]
    fn the_cell_is_32_bytes_for_a_u32_payload() {
        assert_eq!(std::mem::size_of::<Cell<u32>>(), 32);
    }

    #[test]
    fn a_completion_races_polls_and_drops_across_threads() {
        let rounds = if cfg!(miri) { 8 } else { 2_000u32 };
        for round in 0..rounds {
            let drops = Arc::new(AtomicUsize::new(0));
            let (waiter, mut rx) = pair(Counted(Arc::clone(&drops)));
            let completer = std::thread::spawn(move || {
                waiter.complete(Outcome::Acked, Duration::from_nanos(u64::from(round)))
            });
            let (woken, w) = waker();
            let mut cx = Context::from_waker(&w);
            let mut got = false;
            while !got {
                match rx.poll(&mut cx) {
                    Poll::Ready(Ok((payload, Outcome::Acked, _))) => {
                        drop(payload);
                        got = true;
                    }
                    Poll::Ready(other) => panic!("{:?}", other.is_ok()),
                    Poll::Pending => {
                        if round % 2 == 0 {
                            break; // dropped while pending
                        }
                        while woken.0.load(std::sync::atomic::Ordering::SeqCst) == 0
                            && !completer.is_finished()
                        {
                            std::hint::spin_loop();
                        }
                    }
                }
            }
            drop(rx);
            completer.join().unwrap();
            assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1);
        }
    }
}
