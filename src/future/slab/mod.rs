//! Cells numbered by a `u32`, in pages whose memory goes back to the system once empty:
//! where the async acker keeps a tree's waiter (or a stream tree's payload), so that the
//! inner acker's table holds only the cell's number.
//!
//! ## Why a slab of its own
//!
//! The table keeps a payload beside its slot: a payload of at most 4 B makes a slot's side
//! data 16 B and a line of four slots 128 B, where any payload of 5 to 16 B (a pointer, or
//! a `u32` with an enum's tag) makes it 32 B and the line 192 B: 64 B of table per pending
//! root instead of 43. A number in 4 B keeps the async table at the plain acker's size.
//! And a waiter cell of 32 B is a 48-byte block from glibc, whose free blocks, freed from
//! other threads than the one that allocated them, stay scattered among live ones after a
//! burst (a megabyte or two of RSS held for good). Here a cell costs its size plus 1 bit,
//! and a page whose cells are all free gives their memory back at once.
//!
//! `sharded-slab` numbers its entries too, but never frees a page, so after a burst it
//! would keep the burst's memory, and its keys are `usize`.
//!
//! ## Layout
//!
//! A cell's number is its page's number shifted left by `bits`, plus its offset in the
//! page: pages of 2^`bits` cells, about 4 KiB of cells each. A two-level directory of
//! atomic pointers maps page numbers to pages, so that any thread finds a cell from its
//! number without a lock. Numbers fit in 31 bits ([`NUMBER_BITS`]); the async acker keeps
//! the 32nd for which slab a number is in.
//!
//! ## Who may touch what
//!
//! * A **cell** belongs to whoever took its number from [`Slab::insert`] until it is given
//!   back with [`Slab::remove`]: the slab never touches a cell's contents, only which
//!   cells are free.
//! * A page's **book** (which cells are free, how many are live, where it is listed) is
//!   guarded by the lock of the page's *shard* (a spin lock, [`spin`](crate::sync::spin): a
//!   tracked request takes two, and its release is a plain store). Each thread inserts into
//!   a shard of its own (its stripe, as the acker's credits are spread: the first threads
//!   each get their own), so inserts from different threads do not contend; a remove locks
//!   the shard of the cell's page, wherever it runs.
//! * A **page** whose last live cell is removed is kept while the slab is open: one empty
//!   page per shard as it is (so that a light load does not fault a page in per request),
//!   the others *bare*, their cells' memory given back to the system and their mapping
//!   kept (below), listed in their shard for its next new page. [`Slab::close`] frees
//!   them, and a page emptied after it is freed at once.
//! * The **directory** is written under the page-numbers lock, and read without a lock by
//!   whoever holds a live number: the page was installed (a Release store) before its
//!   first cell was handed out, and the number reached its holder through whatever handed
//!   it over.
//! * The **slab** itself lives as long as its owners' `Arc`s and one held by each page, so
//!   that a cell outlives every handle of the acker safely.
//!
//! Locks are taken in one order: a shard's, then the page numbers'.
//!
//! ## Memory given back, mapping kept
//!
//! A page's cells are a mapping of their own, and an emptied page gives its memory back
//! with `madvise(MADV_DONTNEED)` rather than `munmap`. Unmapping changes the address
//! space's layout, under its lock held for writing, which every other thread's page fault
//! and mapping in the process may then wait for, and it flushes the other cores' TLBs.
//! When a million trees time out at once, their tasks free a million cells, 2,000 pages:
//! unmapped, that was about a thousand `munmap`s a second on the workers that run those
//! tasks. The advice takes the lock only for reading, and a bare page is reused before any
//! page is mapped. In the stress run's shared-deadline phase (12 alternating pairs), the
//! million's last timeout came 1.52 s after the deadline in the median rather than 2.07,
//! 0.83 times `tokio::time::timeout`'s in the same runs rather than 1.04, though a later
//! set of 6 runs put it at 0.89-1.31 times tokio's (how late that is turns mostly on the
//! runtime's scheduling: `docs/how-it-works.md`). What a bare page still holds is its
//! bookkeeping (about 150 B, against its 16 KiB of cells) and its addresses.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use crate::sync::{
    Arc, AtomicBool, AtomicPtr, Guard, Lock, Mutex, MutexGuard, Ordering, UnsafeCell,
};
#[cfg(not(loom))]
use crate::zeroed::Slice;

/// A cell's empty state, in every cell of a new page.
///
/// # Safety
///
/// Outside loom, all-zero bytes are a valid `Self`, the same as `fresh()`: a page's cells
/// are zero pages from the system ([`Zeroed`](crate::zeroed::Zeroed)). Under loom, whose
/// atomics are not plain memory, they are built by `fresh`.
pub unsafe trait Fresh {
    #[cfg_attr(not(loom), allow(dead_code))]
    fn fresh() -> Self;
}

/// A plain payload cell: a stream tree's payload while it is pending.
pub struct Slot<T>(pub UnsafeCell<MaybeUninit<T>>);

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

// Safety: an uninitialized payload is any bytes.
unsafe impl<T> Fresh for Slot<T> {
    fn fresh() -> Self {
        Slot(UnsafeCell::new(MaybeUninit::uninit()))
    }
}

/// Bits of a cell's number (module docs): the async acker keeps the 32nd. Under loom, few,
/// so that a model sees pages come and go.
#[cfg(not(loom))]
pub const NUMBER_BITS: u32 = 31;
#[cfg(loom)]
pub const NUMBER_BITS: u32 = 8;

/// Page numbers per directory chunk.
#[cfg(not(loom))]
const CHUNK_BITS: u32 = 12;
#[cfg(loom)]
const CHUNK_BITS: u32 = 2;

/// The bytes of cells a page holds: each page is a mapping of its own
/// ([`Zeroed`](crate::zeroed::Zeroed)), one `mmap` and `munmap` per this many bytes of
/// cells (512 of 32 B).
const PAGE_BYTES: usize = 16 << 10;

/// Cells of `size` bytes per page, as a power of two: [`PAGE_BYTES`] of them, 16 to 4096.
/// Under loom, 2 cells a page.
const fn page_bits(size: usize) -> u32 {
    if cfg!(loom) {
        return 1;
    }
    let cells = PAGE_BYTES / if size == 0 { 1 } else { size };
    let bits = if cells == 0 { 0 } else { cells.ilog2() };
    if bits < 4 {
        4
    } else if bits > 12 {
        12
    } else {
        bits
    }
}

/// A page of cells: `bits` of the number.
struct Page<C> {
    /// Keeps the slab alive while the page is (module docs).
    slab: Arc<Slab<C>>,
    number: u32,
    shard: usize,
    book: UnsafeCell<Book>,
    cells: Cells<C>,
}

/// A page's cells: zero pages from the system, or under loom (whose atomics are not plain
/// memory) cells built one by one.
#[cfg(not(loom))]
type Cells<C> = Slice<C>;
#[cfg(loom)]
type Cells<C> = Box<[C]>;

/// `len` fresh cells: a mapping of their own (a page goes back to the system once empty,
/// module docs).
#[cfg(not(loom))]
fn fresh_cells<C: Fresh>(len: usize) -> Cells<C> {
    // Safety: all-zero bytes are a fresh `C` (`Fresh`'s contract).
    unsafe { Slice::new(len, 1, 0, false) }
}

#[cfg(loom)]
fn fresh_cells<C: Fresh>(len: usize) -> Cells<C> {
    (0..len).map(|_| C::fresh()).collect()
}

/// Gives an empty page's cells' memory back to the system, keeping their addresses (module
/// docs). Under loom, whose cells are not a mapping, nothing.
#[cfg(not(loom))]
fn give_back<C>(cells: &mut Cells<C>) {
    cells.give_back();
}

#[cfg(loom)]
fn give_back<C>(_: &mut Cells<C>) {}

/// A page's bookkeeping, under its shard's lock.
struct Book {
    /// One bit per cell, set while the cell is free.
    free: Box<[u64]>,
    /// One bit per word of `free`, set while that word has a free cell (a page has at most
    /// 64 words: 4,096 cells), so that the lowest free cell is two `trailing_zeros` away.
    /// The slab's insert and remove cost a tracked request 181 instructions when a take
    /// scanned the words from a hint, 157 with this (`benches/instructions/count.py
    /// track`).
    words: u64,
    live: usize,
    /// Where the page is in its shard's `partial` list, or [`UNLISTED`].
    at: usize,
}

const UNLISTED: usize = usize::MAX;

impl Book {
    fn new(cells: usize) -> Self {
        let words = cells.div_ceil(64);
        debug_assert!((1..=64).contains(&words), "{cells} cells in a page");
        let free = (0..words)
            .map(|w| {
                let here = (cells - w * 64).min(64);
                if here == 64 {
                    u64::MAX
                } else {
                    (1u64 << here) - 1
                }
            })
            .collect();
        Book {
            free,
            words: u64::MAX >> (64 - words),
            live: 0,
            at: UNLISTED,
        }
    }

    /// Takes the lowest free cell, `None` when there is none (the page is listed as
    /// partial, so there is one).
    fn take(&mut self) -> Option<usize> {
        // With no word free, 64: past the last word.
        let w = self.words.trailing_zeros() as usize;
        let word = self.free.get_mut(w)?;
        let bit = word.trailing_zeros() as usize;
        *word &= *word - 1;
        if *word == 0 {
            self.words &= !(1 << w);
        }
        self.live += 1;
        Some(w * 64 + bit)
    }

    fn give(&mut self, offset: usize) {
        let w = offset / 64;
        self.free[w] |= 1 << (offset % 64);
        self.words |= 1 << w;
        self.live -= 1;
    }
}

/// A shard's pages with free cells, its one kept empty page, and its empty pages whose
/// memory went back (module docs).
struct Shard<C> {
    partial: Vec<NonNull<Page<C>>>,
    spare: Option<NonNull<Page<C>>>,
    bare: Vec<NonNull<Page<C>>>,
}

/// The page numbers in use, and which are free to reuse.
struct Numbers {
    next: u32,
    free: Vec<u32>,
}

type Chunk<C> = Box<[AtomicPtr<Page<C>>]>;

/// Cells `C` numbered by a `u32` (module docs).
pub struct Slab<C> {
    shards: Box<[CachePadded<Lock<Shard<C>>>]>,
    numbers: Mutex<Numbers>,
    directory: Box<[AtomicPtr<Chunk<C>>]>,
    /// Cells per page, as a power of two.
    bits: u32,
    /// Keep one empty page per shard (module docs); cleared by `close`.
    open: AtomicBool,
}

// Safety: the slab hands cells (and, through them, `C`s) to whichever thread holds a
// number; pages and books move between threads only under the locks (module docs).
unsafe impl<C: Send> Send for Slab<C> {}
// Safety: as above; `&Slab` gives access to cells only through numbers, whose holder owns
// the cell.
unsafe impl<C: Send> Sync for Slab<C> {}

/// Where a cell is: its page and offset, and its number.
pub struct Spot<C> {
    page: NonNull<Page<C>>,
    offset: usize,
    number: u32,
}

impl<C> std::fmt::Debug for Spot<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spot")
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

impl<C> Clone for Spot<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Spot<C> {}

// Safety: a spot is a cell's address; what may be done through it is the holder's contract
// (module docs).
unsafe impl<C: Send> Send for Spot<C> {}
// Safety: as above.
unsafe impl<C: Send> Sync for Spot<C> {}

impl<C> Spot<C> {
    pub fn number(self) -> u32 {
        self.number
    }

    /// The cell.
    ///
    /// # Safety
    ///
    /// The cell is live (not yet removed) for as long as the reference is used.
    pub unsafe fn cell<'a>(self) -> &'a C {
        // Safety: a live cell's page lives (module docs), its cells never move, and a
        // spot's offset is below the page's cell count (`insert` and `spot` make it so).
        unsafe { self.page.as_ref().cells.get_unchecked(self.offset) }
    }
}

impl<C> Slab<C> {
    fn shard(&self, index: usize) -> Guard<'_, Shard<C>> {
        self.shards[index].lock()
    }

    fn numbers(&self) -> MutexGuard<'_, Numbers> {
        self.numbers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<C: Fresh> Slab<C> {
    /// An empty slab: no page until the first insert.
    pub fn new() -> Self {
        let bits = page_bits(std::mem::size_of::<C>());
        let pages = 1usize << (NUMBER_BITS - bits);
        let chunks = pages.div_ceil(1 << CHUNK_BITS);
        let shards = if cfg!(loom) {
            2
        } else {
            std::thread::available_parallelism()
                .map_or(4, |n| n.get())
                .saturating_mul(2)
                .clamp(2, 64)
                .next_power_of_two()
        };
        Slab {
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Lock::new(Shard {
                        partial: Vec::new(),
                        spare: None,
                        bare: Vec::new(),
                    }))
                })
                .collect(),
            numbers: Mutex::new(Numbers {
                next: 0,
                free: Vec::new(),
            }),
            directory: (0..chunks)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            bits,
            open: AtomicBool::new(true),
        }
    }

    /// A free cell, now the caller's; `None` when every number is in use. A cell of a new
    /// page is [`Fresh`]; a reused one is as its last owner left it, and the caller writes
    /// what it needs. What the last owner did comes before (it removed the cell under this
    /// shard's lock, which the insert takes: a page is listed in its own shard only).
    pub fn insert(slab: &Arc<Self>) -> Option<Spot<C>> {
        let this = &**slab;
        let index = crate::acker::stripe_index() & (this.shards.len() - 1);
        let mut shard = this.shard(index);
        let page = match shard.partial.last() {
            Some(&page) => page,
            None => {
                let page = match shard.spare.take().or_else(|| shard.bare.pop()) {
                    Some(page) => page,
                    None => Self::new_page(slab, index)?,
                };
                list(&mut shard, page);
                page
            }
        };
        // Safety: the page is listed in this shard, whose lock we hold: it is live, and its
        // book is ours.
        let (offset, full) = unsafe {
            let page_ref = page.as_ref();
            page_ref.book.with_mut(|book| {
                let book = &mut *book;
                let offset = book.take();
                (offset, book.live == page_ref.cells.len())
            })
        };
        let offset = offset?; // a listed page has a free cell; never None
        if full {
            unlist(&mut shard, page);
        }
        drop(shard);
        // Safety: live, as above (it holds a live cell now).
        let number = unsafe { page.as_ref().number } << this.bits | offset as u32;
        Some(Spot {
            page,
            offset,
            number,
        })
    }

    /// A new page for shard `index`, installed in the directory; `None` when every page
    /// number is in use.
    fn new_page(slab: &Arc<Self>, index: usize) -> Option<NonNull<Page<C>>> {
        let this = &**slab;
        let cells = 1usize << this.bits;
        let mut numbers = this.numbers();
        let number = match numbers.free.pop() {
            Some(number) => number,
            None if numbers.next < 1 << (NUMBER_BITS - this.bits) => {
                numbers.next += 1;
                numbers.next - 1
            }
            None => return None,
        };
        let page = Box::new(Page {
            slab: Arc::clone(slab),
            number,
            shard: index,
            book: UnsafeCell::new(Book::new(cells)),
            cells: fresh_cells(cells),
        });
        let page = NonNull::from(Box::leak(page));
        let chunk = &this.directory[(number >> CHUNK_BITS) as usize];
        // Relaxed: chunks are installed under the numbers' lock, which we hold.
        let mut entries = chunk.load(Ordering::Relaxed);
        if entries.is_null() {
            let fresh: Chunk<C> = (0..1usize << CHUNK_BITS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect();
            entries = Box::into_raw(Box::new(fresh));
            // Release: a reader that finds the chunk (Acquire) finds it whole.
            chunk.store(entries, Ordering::Release);
        }
        // Safety: a chunk, once installed, lives as long as the slab.
        let entry = unsafe { &(*entries)[(number & ((1 << CHUNK_BITS) - 1)) as usize] };
        // Release: a thread that reads the page from the directory (Acquire) sees it whole;
        // one handed a number sees it through whatever handed the number over anyway.
        entry.store(page.as_ptr(), Ordering::Release);
        Some(page)
    }

    /// The cell numbered `number`.
    ///
    /// # Safety
    ///
    /// `number` came from this slab's `insert` and its cell has not been removed.
    pub unsafe fn spot(&self, number: u32) -> Spot<C> {
        let page = number >> self.bits;
        // Acquire: pairs with the Release stores that installed the chunk and the page.
        let chunk = self.directory[(page >> CHUNK_BITS) as usize].load(Ordering::Acquire);
        debug_assert!(!chunk.is_null(), "cell {number} of no page");
        // Safety: the page is live (the caller's contract), so its chunk was installed.
        let entry = unsafe { &(*chunk)[(page & ((1 << CHUNK_BITS) - 1)) as usize] };
        let page = entry.load(Ordering::Acquire);
        debug_assert!(!page.is_null(), "cell {number} of a freed page");
        Spot {
            // Safety: a live page's entry holds it.
            page: unsafe { NonNull::new_unchecked(page) },
            offset: (number & ((1 << self.bits) - 1)) as usize,
            number,
        }
    }

    /// Stops keeping empty pages and frees the ones kept: once every cell is removed, every
    /// page is freed, and with them the slab (module docs). Called when the acker's last
    /// handle goes.
    pub fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
        for index in 0..self.shards.len() {
            let (spare, bare) = {
                let mut shard = self.shard(index);
                (shard.spare.take(), std::mem::take(&mut shard.bare))
            };
            for page in spare.into_iter().chain(bare) {
                // Safety: an empty page, out of every list: ours alone. The caller's
                // handle keeps the slab alive past the page's `Arc`.
                unsafe { free_page(page) };
            }
        }
    }
}

/// Frees an empty, unlisted page and takes it out of the directory. Its `Arc` of the slab
/// goes last, and may be the slab's last: the caller holds no reference into the page or
/// (unless through an `Arc` of its own) the slab.
///
/// # Safety
///
/// No cell of `page` is live, and it is in no shard's lists: nobody else can reach it.
unsafe fn free_page<C>(page: NonNull<Page<C>>) {
    // Safety: leaked by `new_page`; nobody else can reach it (the caller's contract).
    let Page { slab, number, .. } = *unsafe { Box::from_raw(page.as_ptr()) };
    {
        let mut numbers = slab.numbers();
        let chunk = slab.directory[(number >> CHUNK_BITS) as usize].load(Ordering::Relaxed);
        // Safety: the page was installed, so its chunk was, and chunks live as long as the
        // slab.
        let entry = unsafe { &(*chunk)[(number & ((1 << CHUNK_BITS) - 1)) as usize] };
        // Relaxed: nobody holds a number of this page (the caller's contract).
        entry.store(std::ptr::null_mut(), Ordering::Relaxed);
        numbers.free.push(number);
    }
    drop(slab);
}

impl<C: Fresh> Slab<C> {
    /// Gives the cell at `spot` back: its contents must already be gone (taken or dropped).
    /// A page left empty is freed, or kept as its shard's spare.
    ///
    /// # Safety
    ///
    /// The caller owns the cell (module docs) and does not touch it again.
    pub unsafe fn remove(spot: Spot<C>) {
        let page = spot.page;
        // Safety: the cell is live, so its page is, and with it the slab; neither reference
        // is used once the page may be freed (below).
        let (slab, index) = unsafe {
            (
                &*std::ptr::addr_of!((*page.as_ptr()).slab),
                page.as_ref().shard,
            )
        };
        let mut shard = slab.shard(index);
        // Safety: the page's book is guarded by this shard's lock, which we hold.
        let (was_full, empty) = unsafe {
            let page_ref = page.as_ref();
            page_ref.book.with_mut(|book| {
                let book = &mut *book;
                let was_full = book.live == page_ref.cells.len();
                book.give(spot.offset);
                (was_full, book.live == 0)
            })
        };
        if was_full {
            list(&mut shard, page);
        }
        if !empty {
            return;
        }
        unlist(&mut shard, page);
        // SeqCst: `close` clears `open` and then takes each shard's kept pages under its
        // lock; a page kept after that would be kept forever, so the flag is read under
        // the lock, and `close`, taking the lock after its store, sees this page.
        if slab.open.load(Ordering::SeqCst) {
            if shard.spare.is_none() {
                shard.spare = Some(page);
                return;
            }
            // Outside the lock: a system call, which other threads' inserts and removes
            // in this shard need not wait for.
            drop(shard);
            // Safety: empty and unlisted, so nobody else can reach it.
            give_back(unsafe { &mut (*page.as_ptr()).cells });
            shard = slab.shard(index);
            // SeqCst: as above.
            if slab.open.load(Ordering::SeqCst) {
                shard.bare.push(page);
                return;
            }
        }
        drop(shard);
        // Safety: empty and unlisted, so nobody else can reach it; `slab` is not used
        // after.
        unsafe { free_page(page) };
    }
}

/// Lists `page` as having free cells.
fn list<C>(shard: &mut Shard<C>, page: NonNull<Page<C>>) {
    let at = shard.partial.len();
    shard.partial.push(page);
    set_at(page, at);
}

/// Records where `page` is listed.
fn set_at<C>(page: NonNull<Page<C>>, at: usize) {
    // Safety: the page is live and its shard's lock held (by `list` and `unlist`'s
    // callers), which guards its book.
    unsafe { page.as_ref().book.with_mut(|book| (*book).at = at) };
}

/// Takes `page` out of the list of pages with free cells.
fn unlist<C>(shard: &mut Shard<C>, page: NonNull<Page<C>>) {
    // Safety: the page is live and this shard's, whose lock the caller holds.
    let at = unsafe {
        page.as_ref()
            .book
            .with_mut(|book| std::mem::replace(&mut (*book).at, UNLISTED))
    };
    if at == UNLISTED {
        return;
    }
    shard.partial.swap_remove(at);
    if let Some(&moved) = shard.partial.get(at) {
        set_at(moved, at);
    }
}

impl<C> std::fmt::Debug for Slab<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slab")
            .field("shards", &self.shards.len())
            .field("cells_per_page", &(1usize << self.bits))
            .finish_non_exhaustive()
    }
}

impl<C: Fresh> Default for Slab<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Drop for Slab<C> {
    fn drop(&mut self) {
        // Every page held an `Arc` of the slab, so none is left; the chunks are.
        for chunk in self.directory.iter() {
            let entries = chunk.load(Ordering::Relaxed);
            if !entries.is_null() {
                // Safety: installed by `new_page` from a box, and nobody else holds the
                // slab.
                drop(unsafe { Box::from_raw(entries) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
