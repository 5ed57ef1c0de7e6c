//! The ledger's fixed-size arrays, on huge pages where the OS offers them.
//!
//! A ledger is one big array of keys and one of slots, sized for `max_pending` up front, and
//! roots land in it at random. With 4 KiB pages nearly every new root's key and slot are on
//! pages the TLB does not cover, and each miss is a page walk (two-dimensional, and so several
//! times dearer, under a hypervisor). So on Linux an array of 1 MiB or more is allocated in
//! whole 2 MiB-aligned pages and advised `MADV_HUGEPAGE` before it is first touched, so that
//! its pages fault in as transparent huge pages: a million-root table is then a few dozen
//! TLB entries.
//! Where that is not available (other systems, THP disabled, Miri, loom), it is an ordinary
//! boxed slice; only speed differs.
//!
//! The shards' ledgers share one array of each kind, each holding a [`Part`] of it: one
//! array rounds up to whole huge pages once, where one per shard would waste up to a huge
//! page per shard and per array (with 8 shards of a 1M-root acker, 17 MiB, 18 B per root).

use std::ops::Deref;
use std::sync::Arc;

/// A fixed-size array, built once, dropped with its owner.
pub(crate) struct Table<T> {
    #[cfg(all(target_os = "linux", not(miri), not(loom)))]
    raw: huge::Raw<T>,
    #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
    boxed: Box<[T]>,
}

impl<T> Table<T> {
    /// `len` elements, element `i` being `init(i)`.
    pub(crate) fn new(len: usize, init: impl FnMut(usize) -> T) -> Self {
        #[cfg(all(target_os = "linux", not(miri), not(loom)))]
        return Table {
            raw: huge::Raw::new(len, init),
        };
        #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
        Table {
            boxed: (0..len).map(init).collect(),
        }
    }
}

impl<T> Deref for Table<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        #[cfg(all(target_os = "linux", not(miri), not(loom)))]
        return self.raw.as_slice();
        #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
        &self.boxed
    }
}

/// One of `Table::split`'s equal, disjoint parts; keeps the whole table alive.
pub(crate) struct Part<T> {
    ptr: *const T,
    len: usize,
    _table: Arc<Table<T>>,
}

// Safety: a `Part` only hands out `&[T]` into a table it co-owns, as `Arc<[T]>` would.
unsafe impl<T: Send + Sync> Send for Part<T> {}
// Safety: as above.
unsafe impl<T: Send + Sync> Sync for Part<T> {}

impl<T> Table<T> {
    /// `parts` elements of `part_len` each, built by `init`, in one table.
    pub(crate) fn split(
        parts: usize,
        part_len: usize,
        init: impl FnMut(usize) -> T,
    ) -> Vec<Part<T>> {
        let table = Arc::new(Table::new(parts * part_len, init));
        let base = table.as_ptr();
        (0..parts)
            .map(|i| Part {
                // Safety: `i * part_len <= parts * part_len`, the table's length, so the
                // pointer is inside the allocation or one past its end (when `part_len` is 0).
                ptr: unsafe { base.add(i * part_len) },
                len: part_len,
                _table: Arc::clone(&table),
            })
            .collect()
    }
}

impl<T> Deref for Part<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // Safety: `ptr..ptr + len` is this part of the table, whose elements are initialized
        // and live as long as `_table`; parts never overlap and only `&` access is given out.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

#[cfg(all(target_os = "linux", not(miri), not(loom)))]
mod huge {
    use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
    use std::ptr::NonNull;

    /// Arrays smaller than one huge page are not worth aligning.
    const HUGE_PAGE: usize = 2 << 20;

    /// An owned `[T]` in its own allocation, in whole [`HUGE_PAGE`]s when at least half that
    /// big.
    pub(super) struct Raw<T> {
        ptr: NonNull<T>,
        len: usize,
        layout: Layout,
    }

    // Safety: `Raw<T>` owns its elements exactly as `Box<[T]>` does.
    unsafe impl<T: Send> Send for Raw<T> {}
    // Safety: as above; shared access only hands out `&[T]`.
    unsafe impl<T: Sync> Sync for Raw<T> {}

    impl<T> Raw<T> {
        pub(super) fn new(len: usize, mut init: impl FnMut(usize) -> T) -> Self {
            let array = Layout::array::<T>(len).expect("table size overflows isize");
            // From half a huge page up, whole huge pages: a 1.4 MiB key array on small pages
            // cost a page walk per probe (measured: ~30% slower trees). Rounding up wastes
            // less than one huge page per array.
            let layout = if array.size() >= HUGE_PAGE / 2 {
                array
                    .align_to(HUGE_PAGE)
                    .expect("2 MiB is a valid alignment")
                    .pad_to_align()
            } else {
                array
            };
            if layout.size() == 0 {
                return Raw {
                    ptr: NonNull::dangling(),
                    len,
                    layout,
                };
            }
            // Safety: the layout has a non-zero size (checked above).
            let ptr = unsafe { alloc(layout) } as *mut T;
            let Some(ptr) = NonNull::new(ptr) else {
                handle_alloc_error(layout)
            };
            if layout.size() >= HUGE_PAGE {
                // Advice only: if the kernel refuses (THP off, old kernel) the table is
                // simply on small pages, so the result is ignored.
                // Safety: the range is exactly our fresh allocation, which nothing else uses.
                unsafe {
                    libc::madvise(ptr.as_ptr().cast(), layout.size(), libc::MADV_HUGEPAGE);
                }
            }
            for i in 0..len {
                // Safety: `i < len`, inside the allocation; each element is written once,
                // before the slice is ever read.
                unsafe { ptr.as_ptr().add(i).write(init(i)) };
            }
            Raw { ptr, len, layout }
        }

        #[inline]
        pub(super) fn as_slice(&self) -> &[T] {
            // Safety: `len` initialized elements from `ptr` (all written in `new`), alive as
            // long as `self`.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> Drop for Raw<T> {
        fn drop(&mut self) {
            // Safety: the elements are initialized and dropped only here, once; the memory
            // was allocated with `self.layout` (and not at all when its size is 0).
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ));
                if self.layout.size() != 0 {
                    dealloc(self.ptr.as_ptr().cast(), self.layout);
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Table;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    struct Counted(u64);

    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn elements_are_built_in_order_and_each_dropped_once() {
        // One table below the huge-page size and one above it (when not under Miri).
        let sizes: &[usize] = if cfg!(miri) {
            &[0, 3]
        } else {
            &[0, 3, 300_000]
        };
        for &len in sizes {
            DROPS.store(0, Ordering::SeqCst);
            let table = Table::new(len, |i| Counted(i as u64 * 7));
            assert_eq!(table.len(), len);
            assert!(table.iter().enumerate().all(|(i, c)| c.0 == i as u64 * 7));
            drop(table);
            assert_eq!(DROPS.load(Ordering::SeqCst), len);
        }
    }

    #[test]
    fn parts_are_disjoint_in_order_and_the_table_outlives_them() {
        static PART_DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted(usize);
        impl Drop for Counted {
            fn drop(&mut self) {
                PART_DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (parts, len) = if cfg!(miri) { (3, 4) } else { (8, 40_000) };
        let mut split = Table::split(parts, len, Counted);
        assert_eq!(split.len(), parts);
        for (p, part) in split.iter().enumerate() {
            assert_eq!(part.len(), len);
            assert!(part.iter().enumerate().all(|(i, c)| c.0 == p * len + i));
        }
        // Dropping all parts but one frees nothing; the last one frees every element once.
        let last = split.pop().unwrap();
        drop(split);
        assert_eq!(PART_DROPS.load(Ordering::SeqCst), 0);
        assert_eq!(last[len - 1].0, parts * len - 1);
        drop(last);
        assert_eq!(PART_DROPS.load(Ordering::SeqCst), parts * len);
    }
}
