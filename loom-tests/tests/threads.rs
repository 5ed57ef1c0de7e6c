//! Loom models of what each thread keeps per acker (`src/acker/threads/`) and of the
//! reaper's registration of new roots: an operation registering a root (its slot, its
//! group's dirty bit, the summary's tick: `src/acker/timers/dirty.rs`) against the reaper's
//! scan and against its idle check before it sleeps (`wake.rs`); re-anchoring's exclusion
//! of operations (`marks.rs`: an operation, a callback's pause and a nested call, an
//! operation of a thread without a record, against `begin_moving`); and the hands of
//! credits (`src/acker/bound.rs`: a hand reclaimed from an ended owner, hands against the
//! bound).
//!
//! As in the grace models, loom runs the marks with `Fences::Symmetric` (a SeqCst fence on
//! each side); the asymmetric form's argument is in the module docs.
#![cfg(loom)]

use ackwheel::threads::{Credits, DirtyGroups, Fences, Registered, Threads};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::sized;

/// What was registered before the race: nothing since the last scan, or another root of
/// the same group with the summary at `tick` (its bit set).
#[derive(Clone, Copy, Debug)]
enum Before {
    Nothing,
    AMate { tick: u32 },
}

fn registered_before(before: Before, groups: &DirtyGroups, threads: &Threads) {
    if let Before::AMate { tick } = before {
        assert!(groups.mark(0));
        threads.registered(tick);
    }
}

/// An operation registers a new root (its slot stored, the light fence, then its group
/// marked and the summary lowered to `by`, as `Engine::file_timers` does) while the reaper
/// scans (the summary taken, then the group's bits, the heavy fence, then the slot read, as
/// a pass does). Either the
/// scan sees the root, or the root waits for the next scan: its bit set and the summary
/// set no later than `by`. (Planted: with `registering` a no-op, no light fence, the two
/// models with a mate's bit set fail: the operation reads the mate's bit, the scan reads
/// the slot empty.)
fn scan_never_misses(before: Before, by: u32) {
    loom::model(move || {
        let groups = Arc::new(DirtyGroups::new(1));
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        registered_before(before, &groups, &threads);
        let root = Arc::new(AtomicBool::new(false));
        let operation = {
            let (groups, threads, root) =
                (Arc::clone(&groups), Arc::clone(&threads), Arc::clone(&root));
            thread::spawn(move || {
                root.store(true, Ordering::SeqCst); // the word's CAS
                threads.registering();
                groups.mark(0);
                threads.registered(by)
            })
        };
        threads.take_dirty();
        let bits = groups.take(0);
        assert!(threads.scanned());
        let seen = bits != 0 && root.load(Ordering::SeqCst);
        operation.join().unwrap();
        let waits = groups.is_marked(0)
            && threads
                .earliest_due()
                .is_some_and(|due| (by.wrapping_sub(due) as i32) >= 0);
        assert!(
            seen || waits,
            "{before:?}: the root is neither scanned nor left for the next scan"
        );
    });
}

#[test]
fn batches_a_first_registration_vs_a_scan_misses_no_root() {
    scan_never_misses(Before::Nothing, 5);
}

#[test]
fn batches_a_registration_into_a_dirty_group_vs_a_scan_misses_no_root() {
    scan_never_misses(Before::AMate { tick: 3 }, 5);
}

#[test]
fn batches_an_earlier_registration_into_a_dirty_group_vs_a_scan_misses_no_root() {
    scan_never_misses(Before::AMate { tick: 9 }, 5);
}

/// The model of the reaper's sleep against a registration (`wake.rs`): the operation
/// registers a root due at the reaper by `by` while the reaper checks before it sleeps.
/// Either the reaper sees a tick no later than `by` (and sleeps no later) or the operation
/// is told to wake it for `by`. (Planted: a `lower` that leaves a set summary alone fails
/// the earlier registration's model, the reaper reading the mate's later tick.)
fn never_slept_past(before: Before, by: u32) {
    loom::model(move || {
        let groups = Arc::new(DirtyGroups::new(1));
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        registered_before(before, &groups, &threads);
        let operation = {
            let (groups, threads) = (Arc::clone(&groups), Arc::clone(&threads));
            thread::spawn(move || {
                groups.mark(0);
                threads.registered(by)
            })
        };
        let seen = threads.park_check(0);
        let woke = operation.join().unwrap();
        assert!(
            seen.is_some_and(|due| (by.wrapping_sub(due) as i32) >= 0)
                || woke == Registered::WakeReaper { by },
            "{before:?}: the reaper would sleep past tick {by} ({seen:?}), and no one would \
             wake it"
        );
    });
}

#[test]
fn batches_a_first_registration_vs_park_check_is_never_slept_past() {
    never_slept_past(Before::Nothing, 5);
}

#[test]
fn batches_an_earlier_registration_vs_park_check_is_never_slept_past() {
    never_slept_past(Before::AMate { tick: 9 }, 5);
}

/// Two operations that may call the callback race shutdown's close: one that found the
/// callback open must end before close reports it droppable (the cell stands for the
/// callback: loom reports a use and the drop that are not ordered), whichever side of the
/// close it started on.
#[test]
fn batches_an_open_callback_is_never_dropped_under_an_operation() {
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let callback = Arc::new(loom::cell::UnsafeCell::new(1u32));
        let op = {
            let (threads, callback) = (Arc::clone(&threads), Arc::clone(&callback));
            thread::spawn(move || {
                let record = threads.register();
                for _ in 0..2 {
                    let active = threads.enter_with(&record);
                    if active.open {
                        callback.with(|c| {
                            // Safety: (of the model) the protocol under test orders this
                            // read before the drop below; loom reports it if it does not.
                            let value = unsafe { *c };
                            assert_eq!(value, 1);
                        });
                    }
                }
            })
        };
        while !threads.close(false) {
            thread::yield_now();
        }
        // Shutdown drops the callback.
        callback.with_mut(|c| {
            // Safety: (of the model) `close` returned true, so no operation is open; loom
            // reports the race if the protocol lets one read the cell now.
            unsafe { *c = 0 }
        });
        op.join().unwrap();
    });
}

/// Which of two orders a model's executions showed, across all of loom's runs of it (plain
/// `std` atomics: loom does not reset them), so a model can check that it explored both.
struct Seen {
    before: std::sync::atomic::AtomicBool,
    after: std::sync::atomic::AtomicBool,
}

impl Seen {
    const fn new() -> Self {
        Seen {
            before: std::sync::atomic::AtomicBool::new(false),
            after: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Notes one execution's order: `after` when the event came after the other side's.
    fn note(&self, after: bool) {
        let which = if after { &self.after } else { &self.before };
        which.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn both(&self) -> bool {
        self.before.load(std::sync::atomic::Ordering::Relaxed)
            && self.after.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The stored ticks: one cell per operating thread (operations of different threads touch
/// different slots; the acker's atomics order those among themselves, not this protocol),
/// all of which the re-anchorer's sweep rewrites.
type Ticks = Arc<Vec<loom::cell::UnsafeCell<u64>>>;

fn ticks(threads: usize) -> Ticks {
    Arc::new(
        (0..threads)
            .map(|_| loom::cell::UnsafeCell::new(0))
            .collect(),
    )
}

/// What the re-anchorer's sweep adds to every stored tick.
const SWEEP: u64 = 100;

/// An operation's access of its thread's stored ticks: reads them, checks the value is one
/// that a whole number of sweeps and operations leave, rewrites them; `true` when the
/// sweep had already run.
fn touch(ticks: &loom::cell::UnsafeCell<u64>) -> bool {
    ticks.with_mut(|t| {
        // Safety: (of the model) the protocol under test keeps the re-anchorer's sweep out
        // while the calling thread is inside an operation that is not paused; loom reports
        // the two accesses as a causality violation if it does not. Only this thread's
        // operations touch this cell otherwise.
        let value = unsafe { *t };
        assert!(value % SWEEP < SWEEP / 2, "{value}");
        // Safety: as above.
        unsafe { *t = value + 1 };
        value >= SWEEP
    })
}

/// The sweep: every stored tick rewritten.
fn sweep(ticks: &Ticks) {
    for cell in ticks.iter() {
        cell.with_mut(|t| {
            // Safety: (of the model) every other thread is quiescent until `end_moving`;
            // loom reports the race if an operation is not.
            unsafe { *t += SWEEP };
        });
    }
}

/// Each thread's stored ticks, once every thread is done.
fn totals(ticks: &Ticks) -> Vec<u64> {
    // Safety: every thread is done.
    ticks.iter().map(|c| c.with(|t| unsafe { *t })).collect()
}

/// The re-anchorer: `begin_moving`, the sweep, `end_moving`, as `Engine::reanchor` does
/// (`engine/time.rs`). `begin_moving` must succeed where every thread has a record
/// (loom's fences are symmetric, so the heavy side cannot fail).
fn reanchor(threads: &Threads, ticks: &Ticks) {
    assert!(
        threads.begin_moving(),
        "no thread without a record is inside"
    );
    sweep(ticks);
    threads.end_moving();
}

/// One thread's operations (`op`, given the registry and one thread's stored ticks, which
/// it touches three times) beside a re-anchoring on the model's main thread.
fn beside_a_reanchoring(op: impl FnOnce(&Threads, &Ticks) + Send + 'static) {
    let threads = Arc::new(Threads::new(Fences::Symmetric));
    let ticks = ticks(1);
    let thread = {
        let (threads, ticks) = (Arc::clone(&threads), Arc::clone(&ticks));
        thread::spawn(move || op(&threads, &ticks))
    };
    reanchor(&threads, &ticks);
    thread.join().unwrap();
    assert_eq!(totals(&ticks), [SWEEP + 3]);
}

/// Re-anchoring (`src/acker/threads/marks.rs`, "Re-anchoring") against two threads'
/// operations: one thread's operation reads and rewrites its stored ticks (a loom cell)
/// between `enter_with` and the drop of its `Active`, then starts a second thread, which
/// does so twice (quiescent in between, so the sweep may fall between its two operations);
/// the re-anchorer rewrites every thread's ticks between `begin_moving` and `end_moving`.
/// Each thread registers its own record, so the re-anchorer's snapshot of the
/// records holds none, one or both of them. Loom reports any two accesses not
/// ordered by the protocol, and the model checks that operations ran on both sides of the
/// sweep.
///
/// The second thread starts after the first one's operation, not beside it: loom 0.7
/// schedules yielding threads unfairly, and two operations waiting in `wait_moved` at once
/// can take turns forever while the re-anchorer they wait for never runs again ("Model
/// exceeded maximum number of branches", at any preemption bound).
///
/// Fails (a causality violation on a cell) with the gates' check in `enter_with` removed,
/// with its load of the gates Relaxed (a `MOVING` cleared by `end_moving` then does not
/// order the sweep before the operation), or with `begin_moving`'s loads of `active`
/// Relaxed (an operation's accesses then do not happen before the sweep that saw it end).
/// (Planted: the gates' load in `enter_with` Relaxed, and apart `begin_moving`'s load of
/// `active` Relaxed: each fails at the bound.)
#[test]
fn reanchor_excludes_an_operation() {
    static SEEN: Seen = Seen::new();
    // 4 preemptions: about 3 s on one core of the 2-core machine (42 s at 6); exhaustively
    // about 7 minutes (`loom_tests::sized`).
    sized(loom::model::Builder::new(), 4).check(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let ticks = ticks(2);
        let op = |i: usize, times: usize, threads: &Arc<Threads>, ticks: &Ticks| {
            let record = threads.register();
            for _ in 0..times {
                let _active = threads.enter_with(&record);
                SEEN.note(touch(&ticks[i]));
            }
        };
        let first = {
            let (threads, ticks) = (Arc::clone(&threads), Arc::clone(&ticks));
            thread::spawn(move || {
                op(0, 1, &threads, &ticks);
                let second = thread::spawn(move || op(1, 2, &threads, &ticks));
                second.join().unwrap();
            })
        };
        // Twice: an operation that waited out the first may meet the second.
        reanchor(&threads, &ticks);
        reanchor(&threads, &ticks);
        first.join().unwrap();
        assert_eq!(totals(&ticks), [2 * SWEEP + 1, 2 * SWEEP + 2]);
    });
    assert!(
        SEEN.both(),
        "the model never ran an operation on both sides of the sweep"
    );
}

/// A thread paused in a callback does not hold a re-anchoring up, and the three ways out of
/// quiescence it takes stay out of the sweep: the outer operation (depth 1) touches the
/// stored ticks, pauses for its callback, which calls back into the acker (a nested
/// `enter_with`, depth 2) and touches them, returns (the pause drops), and the outer
/// operation touches them again before it ends. The re-anchorer as above. Loom reports
/// any two accesses at once, and the two sides waiting for each other (both spin with
/// yields, so as "Model exceeded maximum number of branches" rather than "deadlock"). The
/// model checks that the nested call ran on both sides of the sweep.
///
/// Fails: as a race with the re-check of `MOVING` in `Paused::drop` removed (the resumed
/// outer operation touches the cell during the sweep), with the gates' check in
/// `enter_with` removed (the nested call does), or with the pause's store of `paused`
/// Relaxed (the outer operation's first touch then does not happen before the sweep that
/// saw it paused; the older model above, which does not touch the cell before its pause,
/// passes then); at loom's branch limit if `begin_moving` counted a paused thread as busy:
/// the nested entry waits for the re-anchorer, which waits for the thread.
#[test]
fn reanchor_waits_for_nothing_paused_in_a_callback() {
    static SEEN: Seen = Seen::new();
    loom::model(|| {
        beside_a_reanchoring(|threads, ticks| {
            let record = threads.register();
            let outer = threads.enter_with(&record);
            touch(&ticks[0]);
            let paused = threads.pause_with(&record);
            // The callback calls back into the acker.
            let nested = threads.enter_with(&record);
            SEEN.note(touch(&ticks[0]));
            drop(nested);
            // The callback returns; the outer operation resumes.
            drop(paused);
            touch(&ticks[0]);
            drop(outer);
        });
    });
    assert!(
        SEEN.both(),
        "the nested call never ran on both sides of the sweep"
    );
}

/// Nested pauses against a re-anchoring: the outer operation (depth 1) touches the stored
/// ticks and pauses for its callback; the callback calls the acker (depth 2), which touches
/// them, completes a tree and pauses for that tree's callback; the nested callback returns
/// and the nested call touches them once more and ends. The outer callback then waits for
/// the re-anchoring to finish (as a callback waiting for another thread that the
/// re-anchorer holds at its entry would) before it returns and the outer operation touches
/// the ticks a last time. Loom reports two accesses at once, and the two sides waiting for
/// each other as "Model exceeded maximum number of branches" (both spin with yields). The
/// model checks that the nested call ran on both sides of the sweep.
///
/// Fails at the branch limit with `Paused::drop` storing 0 instead of the `paused` it
/// replaced: the thread then sits at depth 1 with nothing paused for the rest of its outer
/// callback, and the re-anchorer waits for it while it waits for the re-anchorer.
#[test]
fn reanchor_waits_for_nothing_paused_after_a_nested_callback() {
    static SEEN: Seen = Seen::new();
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let ticks = ticks(1);
        let swept = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (threads, ticks, swept) =
                (Arc::clone(&threads), Arc::clone(&ticks), Arc::clone(&swept));
            thread::spawn(move || {
                let record = threads.register();
                let outer = threads.enter_with(&record);
                touch(&ticks[0]);
                let paused = threads.pause_with(&record);
                // The callback calls the acker, and that call completes a tree.
                let nested = threads.enter_with(&record);
                SEEN.note(touch(&ticks[0]));
                drop(threads.pause_with(&record));
                touch(&ticks[0]);
                drop(nested);
                // Acquire: pairs with the re-anchorer's store below (the model's own flag).
                while !swept.load(loom::sync::atomic::Ordering::Acquire) {
                    thread::yield_now();
                }
                drop(paused);
                touch(&ticks[0]);
                drop(outer);
            })
        };
        reanchor(&threads, &ticks);
        // Release: the sweep happens before the callback's wait ends.
        swept.store(true, loom::sync::atomic::Ordering::Release);
        thread.join().unwrap();
        assert_eq!(totals(&ticks), [SWEEP + 4]);
    });
    assert!(
        SEEN.both(),
        "the nested call never ran on both sides of the sweep"
    );
}

/// A nested entry in an operation that is not paused (a reaper pass's look at the tables
/// inside its own operation) against a re-anchoring: the outer operation (depth 1) touches
/// the stored ticks, enters again (depth 2) and touches them, leaves, touches them once
/// more and ends. The re-anchorer as above. The nested entry must not wait for the
/// re-anchorer, which waits for the thread; and the whole outer operation, the nested one
/// with it, stays out of the sweep. Loom reports two accesses at once; the two sides
/// waiting for each other show as "Model exceeded maximum number of branches". The model
/// checks that the operation ran on both sides of the sweep.
///
/// Fails at loom's branch limit with the nested-entry check of `enter_with` (in
/// `enter_moving`) removed (the nested entry then waits for `MOVING` to clear, and the
/// re-anchorer for the thread); as a race if that check let a paused operation's nested
/// entry go on (the callback model above).
#[test]
fn reanchor_waits_for_an_operation_whose_nested_entry_goes_on() {
    static SEEN: Seen = Seen::new();
    loom::model(|| {
        beside_a_reanchoring(|threads, ticks| {
            let record = threads.register();
            let outer = threads.enter_with(&record);
            let after = touch(&ticks[0]);
            let nested = threads.enter_with(&record);
            let inside = "the sweep ran inside the operation";
            assert_eq!(touch(&ticks[0]), after, "{inside}");
            drop(nested);
            assert_eq!(touch(&ticks[0]), after, "{inside}");
            drop(outer);
            SEEN.note(after);
        });
    });
    assert!(
        SEEN.both(),
        "the operation never ran on both sides of the sweep"
    );
}

/// An operation on a thread without a record (`Threads::enter` under loom: the
/// shared count, `enter_shared`) against `begin_moving`: the thread runs two operations,
/// each reading and rewriting the stored ticks; either `begin_moving` reports `false` (a
/// shared operation was inside, or may have been: the caller gives up and sweeps nothing)
/// or no operation touches the stored ticks during the sweep. The model checks that both
/// outcomes occur. (No thread with a record beside it: two threads that may wait in
/// `wait_moved` at once can starve the re-anchorer under loom's scheduler, as in
/// `reanchor_excludes_an_operation`.)
///
/// Fails (a causality violation) with the fence in `enter_shared` removed (loom models
/// SeqCst loads and RMWs as AcqRel, so the count's RMW and the gates' load alone do not
/// pair with `begin_moving`'s heavy fence there), with the `MOVING` check in
/// `enter_shared` removed, or with `begin_moving`'s last check of the shared count removed.
#[test]
fn reanchor_gives_up_or_excludes_a_thread_without_a_record() {
    static GAVE_UP: Seen = Seen::new();
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let ticks = ticks(1);
        let shared = {
            let (threads, ticks) = (Arc::clone(&threads), Arc::clone(&ticks));
            thread::spawn(move || {
                for _ in 0..2 {
                    let _active = threads.enter();
                    touch(&ticks[0]);
                }
            })
        };
        let moved = threads.begin_moving();
        if moved {
            sweep(&ticks);
        }
        threads.end_moving();
        GAVE_UP.note(!moved);
        shared.join().unwrap();
        let swept = if moved { SWEEP } else { 0 };
        assert_eq!(totals(&ticks), [swept + 2]);
    });
    assert!(
        GAVE_UP.both(),
        "begin_moving never both succeeded and gave up"
    );
}

/// Hands of credits (`src/acker/bound.rs`, "Hands"): an owner takes a chunk into its hand,
/// uses one, gives it back and ends (abandons its record) while another thread reclaims
/// abandoned hands. The reclaimer takes a hand only once its owner is gone, and then all
/// of it: afterwards the stripes and hands hold every credit, none made and none lost (a
/// reclaim of a live hand, which the owner then overwrites, would make credits).
#[test]
fn credits_a_hand_is_reclaimed_only_from_an_ended_owner() {
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let credits = Arc::new(Credits::with_chunk(8, 2, 2, Arc::clone(&threads)));
        let record = threads.register();
        let owner = {
            let (credits, record) = (Arc::clone(&credits), Arc::clone(&record));
            thread::spawn(move || {
                assert!(credits.take_in(record.hand()));
                credits.give_in(record.hand(), 1);
                Threads::abandon(&record);
            })
        };
        credits.reclaim();
        owner.join().unwrap();
        assert_eq!(credits.free(), 8, "credits made or lost");
        credits.reclaim();
        assert_eq!(record.hand().load(loom::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(credits.free(), 8);
    });
}

/// Hands of credits against the bound: a thread takes one credit (a chunk of two into its
/// hand) and ends, while another takes three, its third once its own chunk is used up:
/// from the other stripe, or the ended thread's hand, or refused. Never more than the
/// bound's four taken in all, and every credit not taken is in a stripe or a hand.
#[test]
fn credits_hands_never_exceed_the_bound() {
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let credits = Arc::new(Credits::with_chunk(4, 2, 2, Arc::clone(&threads)));
        let (ending, taking) = (threads.register(), threads.register());
        let ender = {
            let (credits, record) = (Arc::clone(&credits), Arc::clone(&ending));
            thread::spawn(move || {
                let took = credits.take_in(record.hand());
                Threads::abandon(&record);
                usize::from(took)
            })
        };
        let took = (0..3).filter(|_| credits.take_in(taking.hand())).count();
        let took = took + ender.join().unwrap();
        assert!(took <= 4, "{took} credits taken of 4");
        assert_eq!(credits.free() + took, 4, "credits made or lost");
    });
}

/// Counts in records (`src/acker/stats.rs`): an owner counts trees in its record's set with
/// plain stores and ends, while the reaper prunes the records and drops the abandoned one,
/// folding its counts into the shared set first. A sum meanwhile never
/// sees a count twice (a record is in the list or folded, never both), and a sum after both
/// sees every count once: the fold reads the owner's last store (it happens before the
/// owner's `abandoned`, which the fold read).
#[test]
fn counts_of_an_ended_owner_are_folded_once() {
    loom::model(|| {
        let threads = Arc::new(Threads::new(Fences::Symmetric));
        let record = threads.register();
        let owner = {
            let (threads, record) = (Arc::clone(&threads), Arc::clone(&record));
            thread::spawn(move || {
                record.count_acked(1);
                record.count_acked(2);
                Threads::abandon(&record);
                drop(threads);
            })
        };
        threads.prune_ended();
        let seen = threads.acked();
        assert!(seen <= 3, "a sum saw {seen} of 3: a count doubled");
        owner.join().unwrap();
        threads.prune_ended();
        assert_eq!(threads.acked(), 3, "counts lost or doubled");
        assert_eq!(threads.records(), 0, "the ended owner's record stayed");
    });
}
