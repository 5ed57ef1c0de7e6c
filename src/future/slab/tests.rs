use super::*;
use std::collections::HashSet;

/// A cell of 256 B: 64 to a page, so that the tests make many pages quickly (under
/// Miri too).
struct Byte(UnsafeCell<[u8; 256]>);
// Safety: a zero byte is a fresh cell.
unsafe impl Fresh for Byte {
    fn fresh() -> Self {
        Byte(UnsafeCell::new([0; 256]))
    }
}

fn pages<C>(slab: &Slab<C>) -> usize {
    let numbers = slab.numbers();
    numbers.next as usize - numbers.free.len()
}

/// A page's book hands out its lowest free cell, every cell once, and a cell given
/// back is the next one taken before any higher one; at each page size a slab makes
/// (16 to 4,096 cells: one word of bits to 64) and one that ends inside a word.
#[test]
fn a_book_takes_the_lowest_free_cell_and_every_cell_once() {
    for cells in [2, 16, 100, 512, 4096] {
        let mut book = Book::new(cells);
        let taken: Vec<usize> = std::iter::from_fn(|| book.take()).collect();
        assert_eq!(taken, (0..cells).collect::<Vec<_>>(), "{cells} cells");
        assert_eq!(book.live, cells);
        // Given back highest first (distinct offsets: 2 cells make 1 and 0 only).
        let mut back = vec![cells - 1, cells / 2, 1, 0];
        back.dedup();
        for &offset in &back {
            book.give(offset);
        }
        assert_eq!(book.live, cells - back.len());
        let again: Vec<usize> = std::iter::from_fn(|| book.take()).collect();
        back.reverse();
        assert_eq!(again, back, "{cells} cells, lowest first");
        assert_eq!(book.take(), None);
    }
}

#[test]
fn numbers_are_distinct_and_find_their_cells() {
    let slab = Arc::new(Slab::<Byte>::new());
    // Several pages' worth (Miri: two at least, of at most 1,024 cells).
    let n = if cfg!(miri) { 1_500 } else { 5_000 };
    let spots: Vec<_> = (0..n).map(|_| Slab::insert(&slab).unwrap()).collect();
    let numbers: HashSet<u32> = spots.iter().map(|s| s.number()).collect();
    assert_eq!(numbers.len(), spots.len());
    for (i, spot) in spots.iter().enumerate() {
        // Safety: live cells, each ours.
        unsafe { spot.cell().0.with_mut(|b| (*b)[0] = i as u8) };
    }
    for (i, spot) in spots.iter().enumerate() {
        // Safety: as above.
        let found = unsafe { slab.spot(spot.number()) };
        assert_eq!(found.number(), spot.number());
        // Safety: a live cell of ours (handed over whole, if by another thread).
        assert_eq!(unsafe { found.cell().0.with(|b| (*b)[0]) }, i as u8);
    }
    for spot in spots {
        // Safety: ours, not touched again.
        unsafe { Slab::remove(spot) };
    }
    slab.close();
}

/// The pages kept empty across the shards: spares, and bare pages.
fn kept<C>(slab: &Slab<C>) -> (usize, Vec<NonNull<Page<C>>>) {
    let (mut spares, mut bare) = (0, Vec::new());
    for index in 0..slab.shards.len() {
        let shard = slab.shard(index);
        spares += usize::from(shard.spare.is_some());
        bare.extend(shard.bare.iter().copied());
    }
    (spares, bare)
}

/// How many of the system's pages behind `page`'s cells are resident.
#[cfg(all(target_os = "linux", not(miri)))]
fn resident<C>(page: NonNull<Page<C>>) -> usize {
    // Safety: a kept page, which only `close` frees; the test has not closed.
    let cells = unsafe { &page.as_ref().cells };
    crate::zeroed::resident(cells.as_ptr().cast(), std::mem::size_of_val::<[C]>(cells)).0
}

#[test]
fn empty_pages_give_their_memory_back_and_are_reused_while_open() {
    let slab = Arc::new(Slab::<Byte>::new());
    let per_page = 1usize << slab.bits;
    let spots: Vec<_> = (0..per_page * 10)
        .map(|_| Slab::insert(&slab).unwrap())
        .collect();
    for spot in &spots {
        // Safety: a live cell of ours; written, so that its memory is resident.
        unsafe { spot.cell().0.with_mut(|b| (*b)[0] = 1) };
    }
    assert_eq!(pages(&slab), 10);
    // Every other cell of every page: no page empties.
    let (odd, even): (Vec<_>, Vec<_>) =
        spots.into_iter().enumerate().partition(|(i, _)| i % 2 == 1);
    for (_, spot) in odd {
        // Safety: a live cell of ours (handed over whole, if by another thread).
        unsafe { Slab::remove(spot) };
    }
    assert_eq!(pages(&slab), 10);
    // Reused before a new page is made.
    let again: Vec<_> = (0..per_page * 5)
        .map(|_| Slab::insert(&slab).unwrap())
        .collect();
    assert_eq!(pages(&slab), 10);
    for spot in again.into_iter().chain(even.into_iter().map(|(_, s)| s)) {
        // Safety: a live cell of ours (handed over whole, if by another thread).
        unsafe { Slab::remove(spot) };
    }
    assert_eq!(pages(&slab), 10, "emptied pages are kept while open");
    let (spares, bare) = kept(&slab);
    assert_eq!(
        (spares, bare.len()),
        (1, 9),
        "one page kept whole for this thread's shard, the others bare"
    );
    #[cfg(all(target_os = "linux", not(miri)))]
    for &page in &bare {
        assert_eq!(resident(page), 0, "a bare page kept its memory");
    }
    // The bare pages are reused before a page is made.
    let refill: Vec<_> = (0..per_page * 10)
        .map(|_| Slab::insert(&slab).unwrap())
        .collect();
    assert_eq!(
        pages(&slab),
        10,
        "a page was made while bare ones were kept"
    );
    assert_eq!(kept(&slab).1.len(), 0);
    for spot in refill {
        // Safety: a live cell of ours.
        unsafe { Slab::remove(spot) };
    }
    let weak = Arc::downgrade(&slab);
    slab.close();
    assert_eq!(pages(&slab), 0);
    drop(slab);
    assert!(
        weak.upgrade().is_none(),
        "no page holds the slab once closed and empty"
    );
}

#[test]
fn a_cell_outlives_the_owners_handle_and_frees_the_slab_last() {
    let slab = Arc::new(Slab::<Byte>::new());
    let weak = Arc::downgrade(&slab);
    let spot = Slab::insert(&slab).unwrap();
    slab.close();
    drop(slab);
    assert!(
        weak.upgrade().is_some(),
        "the live cell's page holds the slab"
    );
    // Safety: a live cell of ours (handed over whole, if by another thread).
    unsafe { Slab::remove(spot) };
    assert!(weak.upgrade().is_none());
}

#[test]
fn threads_insert_and_remove_each_others_cells() {
    let slab = Arc::new(Slab::<Byte>::new());
    let rounds = if cfg!(miri) { 200 } else { 20_000 };
    let (to_other, from_me) = std::sync::mpsc::channel::<Spot<Byte>>();
    let remover = std::thread::spawn(move || {
        for spot in from_me {
            // Safety: handed over whole by the inserting thread.
            unsafe {
                assert_eq!(spot.cell().0.with(|b| (*b)[0]), spot.number() as u8);
                spot.cell().0.with_mut(|b| (*b)[0] = 0);
                Slab::remove(spot);
            }
        }
    });
    let mut mine = Vec::new();
    for i in 0..rounds {
        let spot = Slab::insert(&slab).unwrap();
        // Safety: a live cell of ours (handed over whole, if by another thread).
        unsafe { spot.cell().0.with_mut(|b| (*b)[0] = spot.number() as u8) };
        if i % 3 == 0 {
            mine.push(spot);
        } else {
            to_other.send(spot).unwrap();
        }
    }
    drop(to_other);
    remover.join().unwrap();
    for spot in mine {
        // Safety: a live cell of ours (handed over whole, if by another thread).
        unsafe { Slab::remove(spot) };
    }
    slab.close();
    assert_eq!(pages(&slab), 0);
}
