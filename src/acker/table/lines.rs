//! A table's memory: one *line* per group, the group's four slot words followed by the same
//! four slots' side data (times, own timeout, payload), in one zeroed allocation.
//!
//! An operation on a root touches its word and, when it creates, completes or moves the
//! entry, the slot's side data too. Kept in arrays of their own, those were four cache
//! lines in four places, and at a million pending roots each was a miss: a new tree's init
//! cost five. Side by side, with lines 128-byte aligned, a `u32` payload's line is the two
//! 64-byte lines the adjacent-line prefetcher fetches together.
//!
//! The memory comes zeroed from the system: every part's all-zero value is its empty state
//! (an EMPTY word, free times, no own timeout, an uninitialized payload), so a page costs
//! memory only once a slot on it is used. Large tables are mapped and unmapped directly
//! ([`Zeroed`](crate::zeroed::Zeroed), as a [`Slice`]), so that a retired generation's
//! memory goes back to the system at once.

use std::mem::MaybeUninit;

use super::{SlotWord, GROUP_SLOTS};
use crate::sync::{AtomicU32, AtomicU64, UnsafeCell};
#[cfg(not(loom))]
use crate::zeroed::Slice;

/// A slot's payload cell: written by the init that claimed or joined the slot, read once by
/// the thread whose CAS completed the tree (see `Table`' `Sync` impl).
pub(super) struct Payload<T>(pub(super) UnsafeCell<MaybeUninit<T>>);

/// A slot's side data.
pub(super) struct Side<T> {
    /// The times and the slot's reservation ([`times`](crate::acker::table::times)).
    pub(super) times: AtomicU64,
    /// The tree's own timeout in ticks, 0 for the acker's default.
    pub(super) timeout: AtomicU32,
    pub(super) payload: Payload<T>,
}

/// A group of words on one cache line. (Under loom, where the words are not plain memory,
/// only the words' own alignment.)
#[cfg_attr(not(loom), repr(C, align(64)))]
#[cfg_attr(loom, repr(C))]
pub(super) struct Group(pub(super) [SlotWord; GROUP_SLOTS]);

/// A group's words and its slots' side data.
#[repr(C)]
pub(super) struct Line<T> {
    pub(super) group: Group,
    pub(super) sides: [Side<T>; GROUP_SLOTS],
}

/// Lines this large or larger are mapped directly (module docs): every table from the
/// smallest an acker makes (the async acker's 64 groups, 8 KiB of lines for a `u32`
/// payload; [`engine`](crate::acker::engine)'s `MIN_TABLE_SLOTS` for the plain acker's), so
/// that building an acker touches none of them (calloc wrote 1 MiB for the default 16
/// tables) and each goes back to the system when it is dropped.
#[cfg(not(loom))]
const MAP_AT: usize = 8 << 10;

/// The alignment of the first line: two cache lines, the adjacent-line prefetcher's unit.
#[cfg(not(loom))]
const LINE_ALIGN: usize = 128;

/// `n` lines, all zero. Dereferences to the slice.
pub(super) struct Lines<T> {
    #[cfg(not(loom))]
    lines: Slice<Line<T>>,
    /// Under loom, whose atomics are not plain memory, lines built one by one.
    #[cfg(loom)]
    boxed: Box<[Line<T>]>,
    #[cfg(loom)]
    _never: std::marker::PhantomData<std::ptr::NonNull<()>>,
}

// Safety: `Lines` owns its lines like a `Box<[Line<T>]>`, which is Send and Sync exactly
// when `Line<T>` is (the raw pointers only say where the memory is).
unsafe impl<T> Send for Lines<T> where Line<T>: Send {}
// Safety: as above.
unsafe impl<T> Sync for Lines<T> where Line<T>: Sync {}

impl<T> Lines<T> {
    /// `n` (at least 1) lines, each all zero: every word EMPTY, every side free. With
    /// `populate`, a mapped table's pages are faulted in at once
    /// ([`zeroed`](crate::zeroed), "Pages written at once").
    #[cfg(not(loom))]
    pub(super) fn zeroed(n: usize, populate: bool) -> Self {
        assert!(n > 0, "a table has lines");
        // Safety: all zero is a valid `Line<T>`: EMPTY words, zero atomics, uninitialized
        // payload cells.
        let lines = unsafe { Slice::new(n, LINE_ALIGN, MAP_AT, populate) };
        Lines { lines }
    }

    /// Under loom: `n` lines built by their constructors.
    #[cfg(loom)]
    pub(super) fn zeroed(n: usize, _populate: bool) -> Self {
        let line = || Line {
            group: Group(std::array::from_fn(|_| SlotWord::new())),
            sides: std::array::from_fn(|_| Side {
                times: AtomicU64::new(0),
                timeout: AtomicU32::new(0),
                payload: Payload(UnsafeCell::new(MaybeUninit::uninit())),
            }),
        };
        Lines {
            boxed: (0..n).map(|_| line()).collect(),
            _never: std::marker::PhantomData,
        }
    }
}

impl<T> std::ops::Deref for Lines<T> {
    type Target = [Line<T>];

    #[inline]
    fn deref(&self) -> &[Line<T>] {
        #[cfg(loom)]
        return &self.boxed;
        #[cfg(not(loom))]
        &self.lines
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lines_are_zero_and_line_aligned_from_either_source() {
        // Heap, mapped, and mapped on a huge-page boundary (natively; Miri has no mmap).
        // (Miri: 64 lines for 4,096; it has no mmap, so both sources are the heap there.)
        for n in [
            1,
            3,
            if cfg!(miri) { 64 } else { 4096 },
            if cfg!(miri) { 5 } else { 20_000 },
        ] {
            let lines = Lines::<u32>::zeroed(n, n % 2 == 0);
            assert_eq!(lines.len(), n);
            assert_eq!(lines.as_ptr() as usize % LINE_ALIGN, 0);
            #[cfg(all(target_os = "linux", not(miri)))]
            if n * std::mem::size_of::<Line<u32>>() >= crate::zeroed::HUGE {
                assert_eq!(
                    lines.as_ptr() as usize % crate::zeroed::HUGE,
                    0,
                    "huge-page aligned"
                );
            }
            for line in lines.iter() {
                assert!(line.group.0.iter().all(|w| w.load().to_bits() == 0));
                assert!(line.sides.iter().all(|s| {
                    s.times.load(crate::sync::Ordering::SeqCst) == 0
                        && s.timeout.load(crate::sync::Ordering::SeqCst) == 0
                }));
            }
        }
        assert_eq!(
            std::mem::size_of::<Line<u32>>(),
            128,
            "a u32 payload's line: 128 B"
        );
    }

    /// The async acker's smallest table, 64 lines (8 KiB for a `u32` payload), is a mapping
    /// of its own, so that building the acker touches none of it; fewer lines come from
    /// the heap.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))] // Miri has no mmap
    fn the_smallest_table_is_mapped() {
        assert!(
            Lines::<u32>::zeroed(64, false).lines.is_mapped(),
            "64 lines"
        );
        assert!(
            !Lines::<u32>::zeroed(63, false).lines.is_mapped(),
            "63 lines"
        );
    }
}
