//! Loom models of the lazy timer batches (`src/acker/batches.rs`): an owner filing entries
//! in its batch while the reaper takes quiet batches over, and the reaper's idle check
//! against a push that makes a batch non-empty, and re-anchoring's exclusion of operations
//! (an operation, a callback's pause and a nested call against `begin_moving`).
//!
//! The batch's entries live in a loom `UnsafeCell`, so an owner and a reaper inside the
//! batch at once is reported as a causality violation; the models also check that every
//! entry reaches the reaper exactly once. As in the grace models, loom runs the pins with
//! `Fences::Symmetric` (a SeqCst fence on each side); the asymmetric form's argument is in
//! the module docs.
#![cfg(loom)]

use ackwheel::batches::{Batches, Entry, Fences, Pushed};
use loom::sync::Arc;
use loom::thread;

fn entry(slot: u32) -> Entry {
    Entry { slot, tag: slot }
}

/// The owner files three entries over two ticks (its second tick's push hands the first
/// tick's entries off) while the reaper, at tick 2, tries to take the batch over. After
/// both, a final manual collection; every entry is collected exactly once.
#[test]
fn batches_owner_vs_takeover_loses_and_duplicates_nothing() {
    loom::model(|| {
        let batches = Arc::new(Batches::new(Fences::Symmetric));
        let batch = batches.register();
        batches.push_to(&batch, entry(1), 1, 1, |_| true);
        let owner = {
            let (batches, batch) = (Arc::clone(&batches), Arc::clone(&batch));
            thread::spawn(move || {
                batches.push_to(&batch, entry(2), 1, 1, |_| true);
                batches.push_to(&batch, entry(3), 2, 2, |_| true);
            })
        };
        let mut got = Vec::new();
        batches.collect(2, false, &mut got);
        owner.join().unwrap();
        batches.collect(2, true, &mut got);
        got.sort_by_key(|e| e.slot);
        assert_eq!(got, vec![entry(1), entry(2), entry(3)]);
    });
}

/// The reaper checks before it parks while the owner files the first entry of an empty
/// batch: either the reaper sees the entry (and stays up) or the owner is told to wake it.
#[test]
fn batches_first_push_vs_park_check_never_strands_an_entry() {
    loom::model(|| {
        let batches = Arc::new(Batches::new(Fences::Symmetric));
        let batch = batches.register();
        let owner = {
            let (batches, batch) = (Arc::clone(&batches), Arc::clone(&batch));
            thread::spawn(move || batches.push_to(&batch, entry(1), 1, 1, |_| true))
        };
        let waiting = batches.park_check();
        let pushed = owner.join().unwrap();
        assert!(
            waiting || pushed == Pushed::WakeReaper,
            "the reaper would sleep with an entry filed and no one to wake it"
        );
    });
}

/// Two operations that may call the callback race shutdown's close: one that found the
/// callback open must end before close reports it droppable (the cell stands for the
/// callback: loom reports a use and the drop that are not ordered), whichever side of the
/// close it started on.
#[test]
fn batches_an_open_callback_is_never_dropped_under_an_operation() {
    loom::model(|| {
        let batches = Arc::new(Batches::new(Fences::Symmetric));
        let callback = Arc::new(loom::cell::UnsafeCell::new(1u32));
        let op = {
            let (batches, callback) = (Arc::clone(&batches), Arc::clone(&callback));
            thread::spawn(move || {
                let batch = batches.register();
                for _ in 0..2 {
                    let active = batches.enter_with(&batch);
                    if active.open {
                        callback.with(|c| {
                            // Safety: (of the model) the protocol under test orders this read
                            // before the drop below; loom reports it if it does not.
                            let value = unsafe { *c };
                            assert_eq!(value, 1);
                        });
                    }
                }
            })
        };
        while !batches.close(false) {
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

/// Re-anchoring (`batches.rs`, "Re-anchoring") against an operation: the re-anchorer
/// writes the stored ticks (a loom cell) between `begin_moving` and `end_moving`; the
/// operation reads and writes them between its entry and its end, twice. Loom reports any
/// access of both at once. (Fails without the `moving` check in `enter_with`, or with its
/// load moved before the light fence.)
#[test]
fn batches_reanchoring_excludes_an_operation() {
    loom::model(|| {
        let batches = Arc::new(Batches::new(Fences::Symmetric));
        let ticks = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let op = {
            let (batches, ticks) = (Arc::clone(&batches), Arc::clone(&ticks));
            thread::spawn(move || {
                let batch = batches.register();
                for _ in 0..2 {
                    let _active = batches.enter_with(&batch);
                    // Safety: (of the model) the protocol keeps the re-anchorer out while
                    // this operation is inside; loom reports it if it does not.
                    ticks.with_mut(|t| unsafe { *t += 1 });
                }
            })
        };
        if batches.begin_moving() {
            // Safety: (of the model) every other thread is quiescent until `end_moving`.
            ticks.with_mut(|t| unsafe { *t += 100 });
        }
        batches.end_moving();
        op.join().unwrap();
        // Safety: both threads are done.
        let total = ticks.with(|t| unsafe { *t });
        assert!(total == 102 || total == 2, "{total}");
    });
}

/// A thread paused in a callback does not hold a re-anchoring up (no deadlock: loom
/// reports one), and what it does after the pause, a nested operation inside the callback
/// and the outer operation's resumption, stays out of the re-anchorer's way. (Fails, as a
/// race, without the re-check of `moving` when a pause ends; as a deadlock if a paused
/// thread counted as busy.)
#[test]
fn batches_reanchoring_waits_for_nothing_paused_in_a_callback() {
    loom::model(|| {
        let batches = Arc::new(Batches::new(Fences::Symmetric));
        let ticks = Arc::new(loom::cell::UnsafeCell::new(0u64));
        let op = {
            let (batches, ticks) = (Arc::clone(&batches), Arc::clone(&ticks));
            thread::spawn(move || {
                let batch = batches.register();
                let _outer = batches.enter_with(&batch);
                {
                    let _paused = batches.pause_with(&batch);
                    // The callback calls back into the acker.
                    let _nested = batches.enter_with(&batch);
                    // Safety: (of the model) as above, for the nested operation.
                    ticks.with_mut(|t| unsafe { *t += 1 });
                }
                // Safety: (of the model) the outer operation resumed after its pause.
                ticks.with_mut(|t| unsafe { *t += 1 });
            })
        };
        if batches.begin_moving() {
            // Safety: (of the model) every other thread is quiescent until `end_moving`.
            ticks.with_mut(|t| unsafe { *t += 100 });
        }
        batches.end_moving();
        op.join().unwrap();
    });
}
