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
//! memory only once a slot on it is used. Large tables are mapped and unmapped directly, so
//! that a retired generation's memory goes back to the system at once (the allocator would
//! keep freed blocks below its mmap threshold, which rises as freed blocks grow).

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use super::{SlotWord, GROUP_SLOTS};
use crate::sync::{AtomicU32, AtomicU64, UnsafeCell};

/// A slot's payload cell: written by the init that claimed or joined the slot, read once by
/// the thread whose CAS completed the tree (see `Roots`' `Sync` impl).
pub(super) struct Payload<T>(pub(super) UnsafeCell<MaybeUninit<T>>);

/// A slot's side data.
pub(super) struct Side<T> {
    /// The times and the slot's reservation (`times.rs`).
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
/// smallest a full acker makes (`lean/`'s `MIN_TABLE_SLOTS`: 64 KiB of lines for a `u32`
/// payload), so that building an acker touches none of them (calloc wrote 1 MiB for the
/// default 16 tables) and each goes back to the system when it is dropped.
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
const MAP_AT: usize = 64 << 10;

/// Mappings this large are aligned to a huge page and ask for transparent huge pages: a
/// lookup lands on a random line, and with 4 KiB pages nearly every lookup in a large
/// table also misses the TLB (the ack at 1M pending: 147 ns without, see `map`).
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
const HUGE: usize = 2 << 20;

/// A private anonymous mapping of at least `bytes` (zero pages, page-aligned, so
/// line-aligned): its base and length, or `None` if the kernel has none to give. One of
/// [`HUGE`] bytes or more starts on a huge-page boundary and asks for huge pages (advice:
/// where the kernel has none, it has 4 KiB pages).
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
fn map(bytes: usize) -> Option<(*mut u8, usize)> {
    const PAGE: usize = 4096;
    let len = bytes.checked_next_multiple_of(PAGE)?;
    let huge = len >= HUGE;
    // Room to slide to the next huge-page boundary, trimmed after.
    let span = if huge { len.checked_add(HUGE)? } else { len };
    // Safety: an anonymous private mapping of `span` bytes, no file, no fixed address: the
    // kernel hands back zero pages, page-aligned, or MAP_FAILED.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let raw = raw.cast::<u8>();
    if !huge {
        return Some((raw, len));
    }
    let head = raw.align_offset(HUGE);
    let tail = span - head - len;
    // Safety: both ranges are page-aligned parts of the mapping just made (`head` and `len`
    // are page multiples), outside the `len` bytes kept; each unmapped once.
    unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if tail > 0 {
            libc::munmap(raw.add(head + len).cast(), tail);
        }
    }
    // Safety: `head` bytes into the mapping, inside it (head < HUGE <= span - len).
    let base = unsafe { raw.add(head) };
    // Safety: advice on the part of the mapping kept, of its own length; it cannot fail
    // in a way that matters (the pages are then 4 KiB ones).
    unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
    Some((base, len))
}

/// The alignment of the first line: two cache lines, the adjacent-line prefetcher's unit.
#[cfg(not(loom))]
const LINE_ALIGN: usize = 128;

/// `n` lines, all zero. Dereferences to the slice.
pub(super) struct Lines<T> {
    #[cfg(not(loom))]
    lines: NonNull<Line<T>>,
    #[cfg(not(loom))]
    len: usize,
    /// Where the memory came from, to give it back.
    #[cfg(not(loom))]
    source: Source,
    /// Under loom, whose atomics are not plain memory, lines built one by one.
    #[cfg(loom)]
    boxed: Box<[Line<T>]>,
    #[cfg(loom)]
    _never: std::marker::PhantomData<NonNull<()>>,
}

#[cfg(not(loom))]
enum Source {
    /// From the global allocator: the block and its layout.
    Heap(*mut u8, std::alloc::Layout),
    /// Mapped: the mapping and its length.
    #[cfg(all(target_os = "linux", not(miri)))]
    Mapped(*mut u8, usize),
}

// Safety: `Lines` owns its lines like a `Box<[Line<T>]>`, which is Send and Sync exactly
// when `Line<T>` is (the raw pointers only say where the memory is).
unsafe impl<T> Send for Lines<T> where Line<T>: Send {}
// Safety: as above.
unsafe impl<T> Sync for Lines<T> where Line<T>: Sync {}

impl<T> Lines<T> {
    /// `n` (at least 1) lines, each all zero: every word EMPTY, every side free.
    #[cfg(not(loom))]
    pub(super) fn zeroed(n: usize) -> Self {
        assert!(n > 0, "a table has lines");
        let bytes = std::mem::size_of::<Line<T>>()
            .checked_mul(n)
            .expect("table size overflows");
        #[cfg(all(target_os = "linux", not(miri)))]
        if bytes >= MAP_AT {
            if let Some((base, mapped)) = map(bytes) {
                return Lines {
                    lines: NonNull::new(base.cast()).expect("mmap returned null"),
                    len: n,
                    source: Source::Mapped(base, mapped),
                };
            }
            // Out of mappings: the allocator may still manage.
        }
        // The allocator's zeroed memory (calloc: fresh pages are not written) is only
        // 16-byte aligned; asking for more makes it write the zeros. So: slack, and the
        // first line-aligned address in it.
        let layout = std::alloc::Layout::from_size_align(bytes + LINE_ALIGN, 16)
            .expect("table size overflows");
        // Safety: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let offset = base.align_offset(LINE_ALIGN);
        debug_assert!(offset < LINE_ALIGN);
        Lines {
            // Safety: `offset < LINE_ALIGN`, so the `bytes` from there are in the block.
            lines: NonNull::new(unsafe { base.add(offset) }.cast()).expect("non-null block"),
            len: n,
            source: Source::Heap(base, layout),
        }
    }

    /// Under loom: `n` lines built by their constructors.
    #[cfg(loom)]
    pub(super) fn zeroed(n: usize) -> Self {
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
        {
            // All zero is a valid `Line<T>`: EMPTY words, zero atomics, uninitialized
            // payload cells; and its parts are atomics and cells, so shared access is sound.
            // Safety: `lines` points at `len` such lines, line-aligned, owned by `self`.
            unsafe { std::slice::from_raw_parts(self.lines.as_ptr(), self.len) }
        }
    }
}

#[cfg(not(loom))]
impl<T> Drop for Lines<T> {
    fn drop(&mut self) {
        // The parts need no drop of their own (atomics, and payload cells whose values
        // `Roots` drops or moves out before): the memory goes back as it came.
        match self.source {
            // Safety: the block `alloc_zeroed` gave for this very layout, freed once.
            Source::Heap(base, layout) => unsafe { std::alloc::dealloc(base, layout) },
            #[cfg(all(target_os = "linux", not(miri)))]
            Source::Mapped(base, bytes) => {
                // Safety: the mapping `mmap` made of this length, unmapped once; nothing
                // refers into it any more (`&mut self`).
                let rc = unsafe { libc::munmap(base.cast(), bytes) };
                debug_assert_eq!(rc, 0, "munmap failed");
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lines_are_zero_and_line_aligned_from_either_source() {
        // Heap, mapped, and mapped on a huge-page boundary (natively; Miri has no mmap).
        for n in [1, 3, 4096, if cfg!(miri) { 5 } else { 20_000 }] {
            let lines = Lines::<u32>::zeroed(n);
            assert_eq!(lines.len(), n);
            assert_eq!(lines.as_ptr() as usize % LINE_ALIGN, 0);
            #[cfg(all(target_os = "linux", not(miri)))]
            if n * std::mem::size_of::<Line<u32>>() >= HUGE {
                assert_eq!(lines.as_ptr() as usize % HUGE, 0, "huge-page aligned");
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
}
