//! Loom models of the grace-period protocol the Acker frees slots with
//! (`src/acker/grace.rs`): per-thread pin words, a reaper's snapshot of the pinned ones, and
//! a free only once each of those has changed its word.
//!
//! A "slot" here is a DONE flag and a plain (loom-tracked) cell. A reader does what an ack
//! does: pins, skips the slot if it reads DONE, else reads the cell, unpins. The reaper does
//! what a completion and a pass do: sets DONE, retires the slot into a `Limbo` and advances it
//! until the slot is freed, then writes the cell as the slot's next occupant would. Loom
//! reports a read that is not ordered before that write as a causality violation, which is
//! exactly a late ack touching a reused slot.
//!
//! Loom models the fence the way the C++ model does, so these run the protocol with
//! `Fences::Symmetric` (a SeqCst fence in each pin and in each snapshot). The asymmetric form
//! replaces the pin's fence with `membarrier` on the snapshot's side, which loom cannot model;
//! its argument is in the module docs.
#![cfg(loom)]

use ackwheel::grace::{Fences, Limbo, Registry};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

struct Slot {
    done: AtomicBool,
    cell: UnsafeCell<u64>,
}

impl Slot {
    fn new() -> Arc<Self> {
        Arc::new(Slot {
            done: AtomicBool::new(false),
            cell: UnsafeCell::new(1),
        })
    }

    /// What an operation does with the slot once pinned: skip it if DONE, else use it.
    fn visit(&self) {
        if !self.done.load(Ordering::SeqCst) {
            let value = self.cell.with(|p| {
                // Safety: the protocol under test keeps the free's write after this read;
                // loom reports it if not.
                unsafe { *p }
            });
            assert_eq!(value, 1, "read a slot after it was freed and reused");
        }
    }
}

/// Completes the slot, retires it and advances the limbo (a bounded number of passes, as the
/// reaper would) while the readers run; reuses the slot as soon as it is freed.
fn complete(registry: &Registry, slot: &Slot) -> Limbo<u32> {
    slot.done.store(true, Ordering::SeqCst);
    let mut limbo = Limbo::default();
    limbo.retire([0u32]);
    for _ in 0..2 {
        if advance(registry, slot, &mut limbo) {
            break;
        }
        thread::yield_now();
    }
    limbo
}

/// One reaper pass over the limbo: `true` once the slot has been freed (and reused).
fn advance(registry: &Registry, slot: &Slot, limbo: &mut Limbo<u32>) -> bool {
    limbo.advance(registry, true, |_| {
        slot.cell.with_mut(|p| {
            // Safety: freed, so no reader can still be reading; loom reports it if one is.
            unsafe { *p = 2 }
        });
    });
    limbo.len() == 0
}

/// Once the readers have finished, the slot is freed within two passes (one to see the
/// outstanding snapshot's readers gone, one for a snapshot taken later).
fn finish(registry: &Registry, slot: &Slot, mut limbo: Limbo<u32>) {
    advance(registry, slot, &mut limbo);
    advance(registry, slot, &mut limbo);
    assert_eq!(limbo.len(), 0, "a slot outlived every reader");
}

/// One reader thread racing a completion and reuse. The reader registers before it is
/// spawned (`registered`) or when it starts, then runs `operations` pinned visits.
fn race(registered: bool, operations: usize) {
    loom::model(move || {
        let registry = Arc::new(Registry::new(Fences::Symmetric));
        let slot = Slot::new();
        let early = registered.then(|| registry.register());
        let reader = {
            let (registry, slot) = (Arc::clone(&registry), Arc::clone(&slot));
            thread::spawn(move || {
                let me = early.unwrap_or_else(|| registry.register());
                for _ in 0..operations {
                    me.pin(registry.fences());
                    slot.visit();
                    me.unpin();
                }
            })
        };
        let limbo = complete(&registry, &slot);
        reader.join().unwrap();
        finish(&registry, &slot, limbo);
    });
}

/// One reader, registered beforehand, racing one completion and reuse.
#[test]
fn grace_a_slot_is_reused_only_after_every_reader_that_may_see_it_live() {
    race(true, 1);
}

/// A reader running two operations: the second may begin after the snapshot, when its word
/// has changed but is odd again.
#[test]
fn grace_a_second_operation_after_the_snapshot_never_sees_a_reused_slot() {
    race(true, 2);
}

/// A reader that registers while the reaper runs: its first pin may follow a snapshot that
/// did not list it.
#[test]
fn grace_a_thread_registering_during_a_snapshot_never_sees_a_reused_slot() {
    race(false, 1);
}

/// The control: without a pin the same reader is caught reading a reused slot, so the
/// models above can fail.
#[test]
#[should_panic(expected = "Causality violation")]
fn grace_a_reader_that_does_not_pin_is_caught() {
    loom::model(|| {
        let registry = Arc::new(Registry::new(Fences::Symmetric));
        let slot = Slot::new();
        let reader = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || slot.visit())
        };
        let limbo = complete(&registry, &slot);
        reader.join().unwrap();
        finish(&registry, &slot, limbo);
    });
}
