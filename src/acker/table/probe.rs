//! A root's probe window: [`Table::search`] walks from the root's home group while the
//! groups it passes have a non-zero overflow count, [`Table::claim`] reserves an EMPTY
//! slot, counts itself into the groups it passed and CASes its word in, and
//! [`Table::empty`] undoes both (module docs of [`table`](crate::acker::table), "Finding a
//! root").

use super::group::masks;
use super::{Effects, Key, Side, Stamp, Table, Word, CROWDED_DISTANCE, GROUP_SLOTS, MAX_PROBE};
use crate::sync::{store_raced, AtomicUsize, Ordering};

/// Whether a claim takes a credit ([`bound`](crate::acker::bound)), and from which hand.
#[derive(Clone, Copy, Debug)]
pub(super) enum Credit<'a> {
    /// None: an entry moved by growth keeps the credit it holds.
    Kept,
    /// One: from this hand (the operation's thread's), or with `None` from the stripes.
    Take(Option<&'a AtomicUsize>),
}

/// Why [`Table::claim`] claimed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unclaimed {
    /// The slot's word had changed: look again.
    Raced,
    /// No EMPTY slot in the root's window could be reserved.
    NoRoom,
    /// `max_pending` entries are held.
    NoCredit,
}

/// An EMPTY slot `d` groups past a root's home.
#[derive(Clone, Copy, Debug)]
pub(super) struct Vacancy {
    pub(super) slot: usize,
    pub(super) d: usize,
}

/// What [`Table::search`] found.
pub(super) enum Search {
    Found(usize, Word),
    /// The root's entry is FROZEN: a mover is copying it to the successor.
    Frozen(usize, Word),
    /// No entry; the first EMPTY slot the search passed, if any.
    Missing(Option<Vacancy>),
}

impl<T> Table<T> {
    /// How many groups past `key`'s home `slot` is.
    pub(super) fn distance(&self, key: Key, slot: usize) -> usize {
        self.wrap(slot / GROUP_SLOTS + self.groups - self.home(key))
    }

    pub(super) fn window(&self) -> usize {
        MAX_PROBE.min(self.groups - 1)
    }

    /// The groups of a walk of `home`'s window, each with its distance from `home`: `home`
    /// first, then the next one while the group just visited has a non-zero overflow count,
    /// at most [`window`](Self::window) groups past `home`. The count is read when the walk
    /// is asked for the next group, so after the caller has read the words of the one it
    /// visited: a search that sees a word can reach it (module docs of
    /// [`table`](crate::acker::table)).
    #[inline]
    pub(super) fn walk(&self, home: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut at: Option<(usize, usize)> = None;
        std::iter::from_fn(move || {
            let next = match at {
                None => (0, home),
                Some((d, group)) => {
                    if d == self.window() || self.overflow[group].load(Ordering::SeqCst) == 0 {
                        return None;
                    }
                    (d + 1, self.wrap(group + 1))
                }
            };
            at = Some(next);
            Some(next)
        })
    }

    /// Adds `delta` (1 or -1) to the overflow counts of the `d` groups from `home` on.
    fn count_overflow(&self, home: usize, d: usize, delta: i32) {
        for group in (0..d).map(|j| self.wrap(home + j)) {
            self.overflow[group].fetch_add(delta as u16, Ordering::SeqCst);
        }
    }

    /// Looks for `key`'s entry (the first in probe order, but for `skip`) and, on the way,
    /// for the first EMPTY slot, where a new entry could go.
    // Always: in the frame of init's path and a message's general path
    // ([`init_or`](Self::init_or)).
    #[inline(always)]
    pub(super) fn search(&self, key: Key, skip: Option<usize>) -> Search {
        let home = self.home(key);
        self.prefetch_home(home, false);
        let mut vacancy = None;
        // `walk(home)` written out, as in `find_displaced`: the iterator's state cost a
        // search a dozen instructions more.
        let (mut group, mut d) = (home, 0);
        loop {
            // Masks of the group's words of the key (any state) and of its EMPTY words:
            // most groups hold no word of the key, and then only the first EMPTY matters.
            let looked = self.group(group).load_then(self.cpu, |words| {
                let (mine, empty) = masks(&words, key);
                match mine {
                    0 => Err(empty),
                    _ => Self::entry_in(&words, group, mine, key, skip).ok_or(empty),
                }
            });
            let empty = match looked {
                Ok(found) => return found,
                Err(empty) => empty,
            };
            if vacancy.is_none() && empty != 0 {
                let slot = group * GROUP_SLOTS + empty.trailing_zeros() as usize;
                vacancy = Some(Vacancy { slot, d });
            }
            if d == self.window() || self.overflow[group].load(Ordering::SeqCst) == 0 {
                return Search::Missing(vacancy);
            }
            pause_point!(SearchedGroup);
            d += 1;
            group = self.wrap(group + 1);
        }
    }

    /// [`search`](Self::search)'s look at the words of `group` whose key is `key`'s (the
    /// bits of `mine`): the first that is the root's entry (but for `skip`), or FROZEN.
    /// Apart, so that the words are indexed (through memory) only in a group that has one.
    #[inline(never)]
    fn entry_in(
        words: &[Word; GROUP_SLOTS],
        group: usize,
        mut mine: u32,
        key: Key,
        skip: Option<usize>,
    ) -> Option<Search> {
        while mine != 0 {
            let i = mine.trailing_zeros() as usize;
            mine &= mine - 1;
            let (slot, w) = (group * GROUP_SLOTS + i, words[i]);
            if w.holds(key) && Some(slot) != skip {
                return Some(Search::Found(slot, w));
            }
            if w.frozen_for(key) {
                return Some(Search::Frozen(slot, w));
            }
        }
        None
    }

    /// Whether `key`'s root has an entry other than `mine` (an uncompleted or FROZEN word
    /// of its key): what `search(key, Some(mine))` finds or not, for a claimer's twin
    /// check, through the same groups and the same loads in the same order, without the
    /// vacancy's bookkeeping or a `Search` to return (a claim's twin check is on every new
    /// tree's path).
    #[inline]
    pub(super) fn has_twin(&self, key: Key, mine: usize) -> bool {
        self.walk(self.home(key)).any(|(_, group)| {
            self.group(group).load_then(self.cpu, |words| {
                // The words of the key but `mine` (a mask of none outside its group).
                let own = u32::from(mine / GROUP_SLOTS == group);
                let others = masks(&words, key).0 & !(own << (mine % GROUP_SLOTS));
                others != 0 && Self::entry_in(&words, group, others, key, None).is_some()
            })
        })
    }

    /// Starts loading into the cache what a search from home `group` reads, or its caller
    /// writes, after the group's words: the group's overflow count (a search that finds no
    /// entry reads it next) and the slots' side data (a claim reserves its slot's times
    /// and writes its timeout and payload there). In a large table each is a miss of its
    /// own: started with the words' load, they overlap it instead of following it (the
    /// side data's prefetch took 5 % off a tree at 1M pending). With `words`, the group's
    /// words too: a batch asks for a later message's lines long before it loads them
    /// (`Acker::apply`).
    #[inline(always)]
    fn prefetch_home(&self, group: usize, words: bool) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        if let (Some(count), Some(line)) = (self.overflow.get(group), self.lines.get(group)) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // Safety: a prefetch only hints the cache; it reads nothing the program sees
            // and cannot fault, and every address is inside an element of its slice.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(count).cast());
                _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&line.sides).cast());
                if words {
                    _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&line.group).cast());
                }
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        let _ = (group, words);
    }

    /// Asks for everything a message for `key` reads first (its home group's words, its
    /// overflow count and side data, and the next group's words, where a root displaced
    /// from home most often lives and where a new root's search goes on when home is
    /// full) to be brought towards the caches, without waiting (`Acker::apply`,
    /// `Acker::init_each`).
    #[inline]
    pub fn prefetch(&self, key: Key) {
        let home = self.home(key);
        self.prefetch_home(home, true);
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        if let Some(next) = self.lines.get(self.wrap(home + 1)) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // Safety: as in `prefetch_home`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&next.group).cast()) };
        }
    }

    /// Asks for `slot`'s line, its group's words and side data (what
    /// [`key_in`](Self::key_in) and [`deadline`](Self::deadline) read), without waiting;
    /// nothing for a slot past the table's end.
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        if let Some(line) = self.lines.get(slot / GROUP_SLOTS) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // Safety: as in `prefetch_home`.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&line.group).cast());
                _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&line.sides).cast());
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        let _ = slot;
    }

    /// Entries of `key`'s root in probe order, but for `skip`: the first, with its word.
    /// (A FROZEN entry is not one: its mover merges it with any twin in the successor.)
    pub(super) fn find_other(&self, key: Key, skip: Option<usize>) -> Option<(usize, Word)> {
        match self.search(key, skip) {
            Search::Found(slot, word) => Some((slot, word)),
            Search::Missing(_) | Search::Frozen(..) => None,
        }
    }

    /// The key of the root in `slot`, if the slot holds a LIVE, HELD or FROZEN entry.
    pub fn key_in(&self, slot: usize) -> Option<Key> {
        let word = self.word(slot).load_on(self.cpu);
        (word.holds(word.key()) || word.frozen_for(word.key())).then(|| word.key())
    }

    /// The root's entry (the first in probe order), with its word.
    #[inline]
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn find(&self, key: Key) -> Option<(usize, Word)> {
        self.find_other(key, None)
    }

    /// Reserves `vacancy`, the EMPTY slot a search just saw, or else the first EMPTY slot
    /// of `key`'s window that it can reserve, stamping its times with `stamp`
    /// ([`times`](crate::acker::table::times)), takes a credit, and CASes `word` in. A
    /// claim far from home (or none for want of room) marks `effects` crowded.
    pub(super) fn claim(
        &self,
        key: Key,
        word: Word,
        vacancy: Option<Vacancy>,
        effects: &mut Effects,
    ) -> Result<usize, Unclaimed> {
        // First, before anything is taken: making the stamp may read a clock that panics.
        let stamp = effects.stamp();
        let credit = Credit::Take(effects.hand());
        let claimed = self.claim_with(key, word, vacancy, stamp, credit, |side| {
            // Relaxed: published by the claim CAS, before which no one reads it.
            side.timeout.store(0, Ordering::Relaxed);
        });
        match claimed {
            Ok((_, d)) if d < CROWDED_DISTANCE => {}
            Ok(_) | Err(Unclaimed::NoRoom) => effects.set_crowded(),
            Err(_) => {}
        }
        claimed.map(|(slot, _)| slot)
    }

    /// [`claim`](Self::claim)'s work: reserves a slot with `stamp`, takes a credit as
    /// `credit` says, runs `fill` on the slot's side data (its timeout, a moved entry's
    /// payload), then CASes `word` in. The slot and its distance from home.
    pub(super) fn claim_with(
        &self,
        key: Key,
        word: Word,
        vacancy: Option<Vacancy>,
        stamp: Stamp,
        credit: Credit<'_>,
        fill: impl FnOnce(&Side<T>),
    ) -> Result<(usize, usize), Unclaimed> {
        let home = self.home(key);
        let reserve = |slot: usize| {
            self.times_of(slot)
                .compare_exchange(0, stamp.bits(), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        };
        let credits = match credit {
            Credit::Take(hand) => self.credits.as_deref().map(|credits| (credits, hand)),
            Credit::Kept => None,
        };
        if let Some((credits, hand)) = credits {
            if !credits.take_with(hand) {
                return Err(Unclaimed::NoCredit); // max_pending entries held
            }
        }
        let give_credit = || {
            if let Some((credits, hand)) = credits {
                credits.give_with(hand);
            }
        };
        let Some(Vacancy { slot, d }) = vacancy
            .filter(|v| reserve(v.slot))
            .or_else(|| self.vacancy(home, reserve))
        else {
            give_credit();
            return Err(Unclaimed::NoRoom);
        };
        let (cell, side) = self.parts(slot);
        fill(side);
        // The counts first: a search that sees the word must be able to reach it.
        self.count_overflow(home, d, 1);
        match cell.cas_on(self.cpu, Word::EMPTY, word) {
            Ok(()) => Ok((slot, d)),
            Err(_) => {
                // Cannot happen: times are 0 only while the word is EMPTY and unreserved
                // (a claim reserves before its word leaves EMPTY, `empty` resets the times
                // after its word is EMPTY), and no one changes an EMPTY word unreserved.
                // Were it to, the reservation goes back and the caller looks again.
                debug_assert!(false, "a reserved slot's word left EMPTY");
                self.count_overflow(home, d, -1);
                // Release: as in `empty`.
                store_raced(&side.times, 0, Ordering::Release);
                give_credit();
                Err(Unclaimed::Raced)
            }
        }
    }

    /// The first EMPTY slot in the window of the roots whose home is `home` that `reserve`
    /// reserves.
    fn vacancy(&self, home: usize, reserve: impl Fn(usize) -> bool) -> Option<Vacancy> {
        (0..=self.window()).find_map(|d| {
            let group = self.wrap(home + d);
            let words = self.group(group).load(self.cpu);
            let i = (0..GROUP_SLOTS)
                .find(|&i| words[i] == Word::EMPTY && reserve(group * GROUP_SLOTS + i))?;
            Some(Vacancy {
                slot: group * GROUP_SLOTS + i,
                d,
            })
        })
    }

    /// Empties a slot whose word was `word` (an orphan dropped, a twin merged, a tree
    /// freed) and takes its overflow counts off. `Err(now)` when the word moved.
    pub(super) fn empty(&self, slot: usize, word: Word) -> Result<(), Word> {
        self.word(slot).cas_on(self.cpu, word, Word::EMPTY)?;
        self.release(slot, word.key());
        Ok(())
    }

    /// The end of an emptied entry of `key` in `slot`: its overflow counts come off, then
    /// its reservation ends and its credit goes back. Inline: every completion ends here.
    #[inline]
    pub(super) fn release(&self, slot: usize, key: Key) {
        self.release_in(slot, self.side(slot), key, None);
    }

    /// [`release`](Self::release) of `slot`, whose side data is `side`, its credit given
    /// to `hand` (the calling thread's), or to the stripes when `None`.
    #[inline]
    pub(super) fn release_in(
        &self,
        slot: usize,
        side: &Side<T>,
        key: Key,
        hand: Option<&AtomicUsize>,
    ) {
        self.count_overflow(self.home(key), self.distance(key, slot), -1);
        // Last: the slot's reservation ends ([`times`](crate::acker::table::times)), and
        // its credit goes back. Release: a claimer whose reservation CAS reads this 0 then
        // sees the EMPTY word and the counts above; nothing here is a store-then-load pair,
        // so no SeqCst (a plain store, not a locked exchange, on x86).
        store_raced(&side.times, 0, Ordering::Release);
        if let Some(credits) = &self.credits {
            credits.give_with(hand);
        }
    }
}
