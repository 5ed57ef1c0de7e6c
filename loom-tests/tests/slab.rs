//! Loom models of the async acker's slab (`src/future/slab/`): cells inserted and removed
//! from two threads at once, on one page and across shards, while pages are made, kept as
//! spares or bare, freed and made again; a cell freed by one thread and reused by another;
//! and `close` racing a remove that empties a page, kept whole or bare.
//!
//! Under loom a page holds 2 cells and there are 2 shards (one per model thread), so a
//! few operations make and free pages. Every cell's contents go through a loom
//! `UnsafeCell`, so two holders of one cell at once are reported; the models check that a
//! number finds its own cell from any thread, and that once every cell is removed and the
//! slab closed no page is left (each page holds an `Arc` of the slab, so the owner's is
//! then the only one).
#![cfg(loom)]

use ackwheel::future::slab::{Slab, Slot, Spot};
use loom::sync::Arc;
use loom::thread;

type Cells = Slab<Slot<usize>>;

/// A cell inserted and written with `value`.
fn put(slab: &Arc<Cells>, value: usize) -> Spot<Slot<usize>> {
    let spot = Slab::insert(slab).expect("room");
    // Safety: a cell just inserted is ours.
    unsafe { spot.cell().0.with_mut(|p| (*p).write(value)) };
    spot
}

/// Reads the cell found from `number` alone, checks it holds `value`, and removes it.
fn take(slab: &Cells, number: u32, value: usize) {
    // Safety: a live number, whose cell the caller owns.
    let spot = unsafe { slab.spot(number) };
    assert_eq!(spot.number(), number);
    // Safety: as above; written by `put`.
    let got = unsafe { spot.cell().0.with(|p| (*p).assume_init_read()) };
    assert_eq!(got, value, "number {number} found another cell");
    // Safety: ours, emptied, not used again.
    unsafe { Slab::remove(spot) };
}

/// Two threads each remove a cell of one page (which empties it) and insert another, one
/// into the same shard and one into its own: no cell is handed out twice, each number finds
/// its cell, and nothing is left once all are removed and the slab closed.
#[test]
fn inserts_and_removes_race_on_one_page_and_across_shards() {
    loom::model(|| {
        let slab = Arc::new(Cells::new());
        let a = put(&slab, 1);
        let b = put(&slab, 2);
        let (an, bn) = (a.number(), b.number());
        assert_ne!(an, bn);
        let other = thread::spawn({
            let slab = Arc::clone(&slab);
            move || {
                take(&slab, an, 1);
                let c = put(&slab, 3);
                c.number()
            }
        });
        take(&slab, bn, 2);
        let d = put(&slab, 4);
        let cn = other.join().unwrap();
        assert_ne!(cn, d.number());
        take(&slab, cn, 3);
        take(&slab, d.number(), 4);
        slab.close();
        assert_eq!(Arc::strong_count(&slab), 1, "a page outlived its cells");
    });
}

/// A remove that empties a page (which would keep it as its shard's spare while the slab is
/// open) races `close`: either way the page is freed, not kept forever.
#[test]
fn close_vs_a_remove_that_empties_a_page() {
    loom::model(|| {
        let slab = Arc::new(Cells::new());
        let a = put(&slab, 7);
        let an = a.number();
        let remover = thread::spawn({
            let slab = Arc::clone(&slab);
            move || take(&slab, an, 7)
        });
        slab.close();
        remover.join().unwrap();
        assert_eq!(Arc::strong_count(&slab), 1, "a spare page survived close");
    });
}

/// A remove that empties a page while its shard already keeps a spare, so that the page
/// goes bare (the shard's lock let go while its memory goes back, then taken again), races
/// `close`, and an insert into that shard races both: either way no cell is handed out
/// twice, and once all is removed and the slab closed no page is left, bare or spare.
#[test]
fn close_vs_a_remove_that_leaves_a_page_bare() {
    loom::model(|| {
        let slab = Arc::new(Cells::new());
        // Two cells a page: `a` and `b` fill one, `c` starts the next.
        let (a, b, c) = (put(&slab, 1), put(&slab, 2), put(&slab, 3));
        let cn = c.number();
        take(&slab, a.number(), 1);
        take(&slab, b.number(), 2); // the first page: this shard's spare
        let remover = thread::spawn({
            let slab = Arc::clone(&slab);
            move || take(&slab, cn, 3) // the second page: bare
        });
        let d = put(&slab, 4);
        slab.close();
        remover.join().unwrap();
        assert_ne!(d.number(), cn);
        take(&slab, d.number(), 4);
        assert_eq!(Arc::strong_count(&slab), 1, "a kept page survived close");
    });
}

/// A cell reused across threads: one thread writes a cell and hands its number over, the
/// other reads it and removes it, while the first inserts again, on the same page of its
/// own shard, and so may be handed the very cell the other is still reading or has just
/// freed. The remover's read must happen before the reuse's write (loom reports it
/// otherwise), and the new cell must never be one still live.
#[test]
fn a_cell_freed_by_one_thread_is_reused_by_another() {
    use loom::sync::atomic::{AtomicU32, Ordering};
    loom::model(|| {
        let slab = Arc::new(Cells::new());
        let handed = Arc::new(AtomicU32::new(u32::MAX));
        let keep = put(&slab, 9); // keeps the page alive: the freed cell goes back to it
        let reader = thread::spawn({
            let (slab, handed) = (Arc::clone(&slab), Arc::clone(&handed));
            move || loop {
                // Acquire: the writer's `put` happens before this thread reads the cell.
                let number = handed.load(Ordering::Acquire);
                if number != u32::MAX {
                    take(&slab, number, 5);
                    return;
                }
                thread::yield_now();
            }
        });
        let first = put(&slab, 5);
        // Release: the cell's contents are published with its number.
        handed.store(first.number(), Ordering::Release);
        let again = put(&slab, 6);
        assert_ne!(again.number(), keep.number());
        reader.join().unwrap();
        take(&slab, again.number(), 6);
        take(&slab, keep.number(), 9);
        slab.close();
        assert_eq!(Arc::strong_count(&slab), 1, "a page outlived its cells");
    });
}
