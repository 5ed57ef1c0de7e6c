//! Blocks of zeroed memory that go back to the system when dropped: the acker's tables, the
//! reaper's per-table tick records and the async acker's slab pages.
//!
//! A block at least `map_at` bytes long is a private anonymous mapping of its own (on
//! Linux): zero pages that cost memory only once written, unmapped at once on drop. Blocks
//! from the allocator would stay with it after a burst: glibc keeps freed blocks below its
//! mmap threshold, which rises as large blocks are freed (to 32 MiB), and trims a heap only
//! from its top, so a few live blocks above the freed ones hold them all. Smaller blocks,
//! and every block under Miri or off Linux, come from the allocator's zeroed memory.
//!
//! ## Pages written at once
//!
//! A table that grows is filled as soon as it exists: the migration moves every entry into
//! it. Left to fault one page at a time, its first read of a page maps the shared zero page
//! and the first write then copies it, with a TLB flush each: `perf` put a third of a
//! filling thread's time there. So a growing table's successor asks the kernel to fault
//! every page in writable at once (`MADV_POPULATE_WRITE`, Linux 5.14; older kernels refuse
//! the advice and the pages come one fault at a time). Filling 1M trees took a median of
//! 1.02 s against 1.24 without it (`cargo run --release -p stress`, its `burst plain` line,
//! 5 alternating pairs). A shrinking table's successor is populated when it is smaller
//! than a huge page or its roots will reach nearly every huge page of it
//! (`shrink_faults_in` in the tables' growth): a larger, sparser one's pages would be
//! memory held after a burst that the sparse table never needed.
//!
//! ## Huge pages only at once
//!
//! Only a populated mapping asks for huge pages. One left to fault as it is written (the
//! successor an init that found no room builds on its own thread, a sparse shrink's) keeps
//! 4 KiB pages: a huge one's first write zeroes 2 MiB, and where the kernel has none free
//! it compacts memory first (`defrag` is `madvise` by default), in the writer's call. In
//! the shared-deadline stress phase, whose million trees fill the acker to its bound, a
//! `track` whose init found no room took 13-15 such faults and 4-5 ms on its core, in
//! about one run in three. The few tables built that way do without huge pages' TLB reach
//! until their next migration.

use std::marker::PhantomData;
use std::mem;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Populated mappings this large are aligned to a huge page and ask for transparent huge
/// pages: a lookup lands on a random line, and with 4 KiB pages nearly every lookup in a
/// large table also misses the TLB (the ack at 1M pending: 147 ns without). Mappings left
/// to fault as they are written keep 4 KiB pages (module docs, "Huge pages only at once").
pub(crate) const HUGE: usize = 2 << 20;

/// `madvise`'s advice to fault a range in writable at once (Linux 5.14; older kernels
/// refuse it, and the pages then come one fault at a time). Not every `libc` names it.
#[cfg(all(target_os = "linux", not(miri)))]
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// A private anonymous mapping of at least `bytes` (zero pages, page-aligned): its base and
/// length, or `None` if the kernel has none to give. With `populate`, every page is
/// faulted in writable before it returns, and one of [`HUGE`] bytes or more starts on a
/// huge-page boundary and asks for huge pages first (advice: where the kernel has none,
/// it has 4 KiB pages).
#[cfg(all(target_os = "linux", not(miri)))]
fn map(bytes: usize, populate: bool) -> Option<(*mut u8, usize)> {
    const PAGE: usize = 4096;
    let len = bytes.checked_next_multiple_of(PAGE)?;
    let huge = populate && len >= HUGE;
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
        if populate {
            populate_write(raw, len);
        }
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
    if populate {
        populate_write(base, len);
    }
    Some((base, len))
}

/// Faults in the `len` bytes mapped at `base` writable, in one call (module docs, "Pages
/// written at once"); a kernel without the advice leaves them to fault one by one.
#[cfg(all(target_os = "linux", not(miri)))]
fn populate_write(base: *mut u8, len: usize) {
    // Safety: advice on a range of a mapping this module just made; it changes no byte
    // (the pages stay zero) and its failure leaves the pages as they were.
    unsafe { libc::madvise(base.cast(), len, MADV_POPULATE_WRITE) };
}

/// Where a block came from, to give it back.
enum Source {
    /// From the global allocator: the block and its layout.
    Heap(*mut u8, std::alloc::Layout),
    /// Mapped: the mapping and its length.
    #[cfg(all(target_os = "linux", not(miri)))]
    Mapped(*mut u8, usize),
}

/// A block of zeroed bytes, owned (module docs).
pub(crate) struct Zeroed {
    base: NonNull<u8>,
    source: Source,
}

// Safety: a `Zeroed` owns its bytes like a `Box<[u8]>` (the raw pointers only say where
// they are); what lives in them is its owner's business.
unsafe impl Send for Zeroed {}
// Safety: as above; `&Zeroed` gives only the address.
unsafe impl Sync for Zeroed {}

impl Zeroed {
    /// `bytes` (at least 1) zero bytes aligned to `align` (a power of two), mapped if
    /// `bytes >= map_at` and `align` is at most a page (module docs); with `populate`, a
    /// mapping's pages are faulted in at once ("Pages written at once").
    pub(crate) fn new(bytes: usize, align: usize, map_at: usize, populate: bool) -> Self {
        assert!(bytes > 0 && align.is_power_of_two());
        #[cfg(all(target_os = "linux", not(miri)))]
        if bytes >= map_at && align <= 4096 {
            if let Some((base, mapped)) = map(bytes, populate) {
                return Zeroed {
                    base: NonNull::new(base).expect("mmap returned null"),
                    source: Source::Mapped(base, mapped),
                };
            }
            // Out of mappings: the allocator may still manage.
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = (map_at, populate);
        // The allocator's zeroed memory (calloc: fresh pages are not written) is only
        // 16-byte aligned; asking for more makes it write the zeros. So: slack, and the
        // first aligned address in it.
        let slack = if align > 16 { align } else { 0 };
        let layout = std::alloc::Layout::from_size_align(
            bytes.checked_add(slack).expect("block size overflows"),
            16,
        )
        .expect("block size overflows");
        // Safety: the layout has a non-zero size.
        let block = unsafe { std::alloc::alloc_zeroed(layout) };
        if block.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let offset = block.align_offset(align);
        debug_assert!(offset <= slack);
        Zeroed {
            // Safety: `offset <= slack`, so the `bytes` from there are in the block.
            base: NonNull::new(unsafe { block.add(offset) }).expect("non-null block"),
            source: Source::Heap(block, layout),
        }
    }

    /// The first byte.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Gives a mapping's pages back to the system and keeps its addresses
    /// (`MADV_DONTNEED`): its bytes read as zero again, and cost memory only once written.
    /// Unlike unmapping, this leaves the address space's layout alone, so it takes the
    /// address space's lock only for reading, beside other threads' page faults rather
    /// than ahead of them. A block from the allocator is left as it is. So afterwards each
    /// byte is either as it was or zero.
    #[cfg_attr(any(loom, not(feature = "tokio")), allow(dead_code))]
    pub(crate) fn give_back(&mut self) {
        match self.source {
            Source::Heap(..) => {}
            #[cfg(all(target_os = "linux", not(miri)))]
            Source::Mapped(base, bytes) => {
                // Safety: advice on the whole of a mapping this block owns, with nothing
                // referring into it (`&mut self`); its pages become zero pages, valid
                // bytes. Its failure leaves the pages as they were.
                unsafe { libc::madvise(base.cast(), bytes, libc::MADV_DONTNEED) };
            }
        }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        match self.source {
            // Safety: the block `alloc_zeroed` gave for this very layout, freed once.
            Source::Heap(block, layout) => unsafe { std::alloc::dealloc(block, layout) },
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

/// `len` values of `T` in a [`Zeroed`] block, each all zero to begin with: a slice for
/// types whose all-zero bytes are their empty state. The values are never dropped (every
/// user's are atomics, plain numbers and `MaybeUninit` cells, whose owners take out what
/// needs dropping).
pub(crate) struct Slice<T> {
    block: Zeroed,
    len: usize,
    _values: PhantomData<T>,
}

// Safety: a `Slice` owns its values like a `Box<[T]>` (the block's pointer only says where
// they are).
unsafe impl<T: Send> Send for Slice<T> {}
// Safety: as above; `&Slice` gives `&[T]`.
unsafe impl<T: Sync> Sync for Slice<T> {}

impl<T> Slice<T> {
    /// Whether the values' block is a mapping of its own (tests of who maps what).
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.block.source, Source::Mapped(..))
    }

    /// `len` zero values aligned to `align` (at least `T`'s own), from a block made as
    /// [`Zeroed::new`] makes it.
    ///
    /// # Safety
    ///
    /// All-zero bytes are a valid `T`.
    pub(crate) unsafe fn new(len: usize, align: usize, map_at: usize, populate: bool) -> Self {
        let bytes = mem::size_of::<T>()
            .checked_mul(len)
            .expect("block size overflows")
            .max(1);
        Slice {
            block: Zeroed::new(bytes, align.max(mem::align_of::<T>()), map_at, populate),
            len,
            _values: PhantomData,
        }
    }

    /// [`Zeroed::give_back`] for the values' block: each value is afterwards either as it
    /// was or all zero, both valid (`new`'s contract).
    #[cfg_attr(any(loom, not(feature = "tokio")), allow(dead_code))]
    pub(crate) fn give_back(&mut self) {
        self.block.give_back();
    }
}

impl<T> Deref for Slice<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // Safety: the block holds `len` values of `T`, aligned, each valid from its zero
        // bytes on (`new`'s contract) and owned by `self`.
        unsafe { std::slice::from_raw_parts(self.block.as_ptr().cast(), self.len) }
    }
}

impl<T> DerefMut for Slice<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // Safety: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.block.as_ptr().cast(), self.len) }
    }
}

/// How many of the system's pages behind the `bytes` at `base` (page-aligned) are
/// resident, and how many there are (`mincore`): for tests of what memory a block holds.
#[cfg(all(test, target_os = "linux", not(miri)))]
pub(crate) fn resident(base: *const u8, bytes: usize) -> (usize, usize) {
    let mut flags = vec![0u8; bytes.div_ceil(4096)];
    // Safety: the caller's range is mapped (a live block's); `flags` has a byte for each
    // of its pages.
    let rc = unsafe { libc::mincore(base as *mut _, bytes, flags.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore failed");
    (flags.iter().filter(|&&f| f & 1 == 1).count(), flags.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zero_and_aligned_from_either_source() {
        for (bytes, align, map_at) in [
            (1, 1, 64),
            (100, 128, 1 << 20),
            (5000, 4096, 4096),
            (3 << 20, 128, 64 << 10),
        ] {
            if cfg!(miri) && bytes > 1 << 16 {
                continue;
            }
            for populate in [false, true] {
                let block = Zeroed::new(bytes, align, map_at, populate);
                assert_eq!(block.as_ptr() as usize % align, 0);
                // Safety: `bytes` bytes from the base are the block's, initialized (zero).
                let all = unsafe { std::slice::from_raw_parts(block.as_ptr(), bytes) };
                assert!(all.iter().all(|&b| b == 0));
                #[cfg(all(target_os = "linux", not(miri)))]
                if bytes >= HUGE && populate {
                    assert_eq!(block.as_ptr() as usize % HUGE, 0, "huge-page aligned");
                }
            }
        }
    }

    /// Only a populated mapping asks for huge pages (module docs, "Huge pages only at
    /// once"): the kernel marks the advice `hg` in the mapping's flags.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn only_populated_mappings_ask_for_huge_pages() {
        let advised = |block: &Zeroed| -> bool {
            let at = block.as_ptr() as usize;
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for line in smaps.lines() {
                let range = line
                    .split_whitespace()
                    .next()
                    .and_then(|r| r.split_once('-'));
                if let Some((from, to)) = range.filter(|_| !line.starts_with("VmFlags")) {
                    if let (Ok(from), Ok(to)) = (
                        usize::from_str_radix(from, 16),
                        usize::from_str_radix(to, 16),
                    ) {
                        inside = (from..to).contains(&at);
                        continue;
                    }
                }
                if inside && line.starts_with("VmFlags:") {
                    return line.split_whitespace().any(|flag| flag == "hg");
                }
            }
            panic!("no mapping holds {at:#x}");
        };
        let left = Zeroed::new(3 << 20, 128, 64 << 10, false);
        let populated = Zeroed::new(3 << 20, 128, 64 << 10, true);
        assert!(
            !advised(&left),
            "a mapping left to fault asked for huge pages"
        );
        // A kernel built without transparent huge pages refuses the advice.
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            assert!(
                advised(&populated),
                "a populated mapping did not ask for huge pages"
            );
        }
    }
}
