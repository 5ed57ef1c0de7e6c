//! Growth and shrink: moving a table's entries to its successor, one group at a time,
//! while every operation goes on.
//!
//! ## Migration
//!
//! The acker ([`engine`](crate::acker::engine)) starts a migration by allocating a
//! successor (more groups to grow, fewer to shrink) and storing it in the table's `next`.
//! From then on:
//!
//! * an operation that finds `next` set looks in the old table first and then in the
//!   successor, and creates only in the successor (`create: false` here, then `true`
//!   there); before its own work it moves one group (it *helps*);
//! * a *mover* moves an entry by CASing its HELD or LIVE word to FROZEN, copying word,
//!   times, timeout and payload into a slot it claims in the successor (keeping the entry's
//!   credit), filing a timer for the new slot, CASing FROZEN to MOVED, and merging any twin
//!   the copy has in the successor. Nobody but the mover changes a FROZEN word, and an
//!   operation that meets one waits (briefly: the mover holds no lock, and waits itself
//!   only for a move further on or a merge under way in the successor, its copy's twin
//!   search) and starts again from the acker's current table;
//! * JOINING words are left for a later pass (their owners leave that state in
//!   nanoseconds); a group whose words are all EMPTY or MOVED is *clean* (an EMPTY slot
//!   whose completer has not freed it yet is clean too: its tree is over, and the completer
//!   works inside its operation, so the retired table outlives it; so is a merge's loser
//!   between its EMPTY CAS and its restore, whose restorer then moves it as a new claim,
//!   and whose joiner finds the migration after its join: below), and the call that
//!   makes the last group clean tells its caller, which makes the successor current and
//!   retires the old table (freed after a grace period, [`engine`](crate::acker::engine)).
//!
//! ## Why nothing is left behind
//!
//! An operation that began before `next` was set may still claim a slot in the old table
//! after a mover passed it. So every claim checks `next` after its claim CAS, and if it is
//! set, moves its own new entry at once (`relocate`). The claim and the check are SeqCst,
//! and so are the grower's store of `next` and the movers' loads of the words: either the
//! claim comes first, and a mover that reads the slot later sees the entry, or the check
//! sees `next`. Whoever CASes FROZEN first moves the entry, once.
//!
//! ## Why no root gets two joined entries
//!
//! Twins across the two tables can only be HELD: a creator in the successor searched the
//! old table after `next` was set and missed the root there, so the old table's entry was
//! claimed after that search, by an operation that then sees `next` and moves it. Init
//! checks `next` after the search that found its entry and before its join CAS, again
//! after its join CAS, and after the claim of a new root's entry (JOINING), and keeps no
//! join or claim made after `next` was set (it unjoins, moves the HELD entry over and
//! starts again), so an entry that settles in the old table was joined or claimed before
//! `next` was set, when every creator in the successor would still find it, and every
//! mover after it finds it JOINING or joined. The check after the join is needed for a merge's
//! loser: EMPTY between its merge's EMPTY CAS and its restore (`Landed::Restored`), it is
//! counted clean by a mover that passes then, and the restore puts back the very word an
//! init read before, so that init's join CAS lands after `next` was set, in a group
//! counted clean (an ABA on the word; the schedule is the test
//! `an_init_that_joins_a_restored_merge_loser_during_a_migration_moves_it`). The mover's
//! copy into the successor merges with a HELD twin there as any claim does
//! (`merge_twins`).
//!
//! ## Why a moved tree searches for twins too
//!
//! A LIVE entry's copy searches the successor as a HELD one's does, though a tree was
//! claimed or joined before `next` was set and every creator whose search came after that
//! finds it. A HELD twin of it can still reach the successor first: an ack that searched
//! this table before the tree's claim, claimed its orphan after the tree's twin search, and
//! found `next` set after its claim moves the orphan over without searching here (its copy
//! searches the successor, where the tree is not yet). Only the tree's copy, claimed
//! after it, sees the pair: skipping its search (measured at about 200 instructions a
//! moved root of a fill from empty) left such twins unmerged (the loom model
//! `migrate_orphan_moved_before_its_tree`, in the workspace's `loom-tests`, fails so).

use super::{Credit, Effects, Key, Side, Stamp, Table, Unclaimed, Word, GROUP_SLOTS};
use crate::acker::table::word::State;
use crate::sync::Backoff;
use crate::sync::Ordering;

/// What moving one slot came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// EMPTY or MOVED: nothing (more) to move.
    Clean,
    /// JOINING, or FROZEN by another mover: look again later.
    Busy,
    /// The successor has no room in the root's window: the entry stays here for now.
    NoRoom,
}

impl<T> Table<T> {
    /// The table this one's entries are moving to, once a migration began.
    #[inline]
    pub fn successor(&self) -> Option<&Table<T>> {
        // SeqCst: the claim-then-check pair with the grower's store (module docs).
        let next = self.next.load(Ordering::SeqCst);
        // Safety: a successor, once set, is freed only after this table is retired and then
        // only after every operation that could reach this table has ended (the acker's
        // grace period, [`engine`](crate::acker::engine)): any `&self` we were given
        // outlives the result.
        unsafe { next.as_ref() }
    }

    /// The successor as the raw pointer `begin_move` stored (the `Box`'s own, for the
    /// owner that frees it: a pointer made from a reference may not free).
    pub fn successor_ptr(&self) -> *mut Table<T> {
        self.next.load(Ordering::SeqCst)
    }

    /// Starts a migration to `next`: a fresh table (from
    /// [`successor_of`](Self::successor_of)) that the caller owns and keeps alive as long
    /// as this one is reachable.
    ///
    /// # Safety
    /// `next` is valid until this table is freed, and this is called once per table.
    pub unsafe fn begin_move(&self, next: *mut Table<T>) {
        debug_assert!(self.next.load(Ordering::SeqCst).is_null());
        self.next.store(next, Ordering::SeqCst);
    }

    /// Every group clean: the migration is over (the successor may become current).
    pub fn moved_all(&self) -> bool {
        self.clean_groups.load(Ordering::SeqCst) == self.groups()
    }

    /// Helps a migration under way: moves the group the cursor gives. `true` when this
    /// call made the last group clean (the caller then promotes the successor, once).
    pub fn help_move(&self, effects: &mut Effects) -> bool {
        let Some(next) = self.successor() else {
            return false;
        };
        if self.moved_all() {
            return false;
        }
        // Relaxed: the cursor only spreads helpers over the groups; cleanliness is decided
        // by each group's words.
        let group = self.cursor.fetch_add(1, Ordering::Relaxed) % self.groups();
        self.move_group(group, next, effects)
    }

    /// Moves every group that is not clean yet, once each. `true` when this call made the
    /// last one clean.
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn move_round(&self, effects: &mut Effects) -> bool {
        self.move_groups(0..self.groups(), effects)
    }

    /// `move_round` over `groups` only: a round in parts, each
    /// finished (its timers filed) before the next, keeps what an operation collects
    /// small.
    pub fn move_groups(&self, groups: std::ops::Range<usize>, effects: &mut Effects) -> bool {
        let Some(next) = self.successor() else {
            return false;
        };
        let mut finished = false;
        for group in groups {
            finished |= self.move_group(group, next, effects);
        }
        finished
    }

    fn move_group(&self, group: usize, next: &Table<T>, effects: &mut Effects) -> bool {
        let (word, bit) = (group / 64, 1u64 << (group % 64));
        if self.clean[word].load(Ordering::SeqCst) & bit != 0 {
            return false;
        }
        let mut clean = true;
        for slot in group * GROUP_SLOTS..(group + 1) * GROUP_SLOTS {
            clean &= self.move_slot(slot, next, effects) == Slot::Clean;
        }
        if !clean || self.clean[word].fetch_or(bit, Ordering::SeqCst) & bit != 0 {
            return false;
        }
        self.clean_groups.fetch_add(1, Ordering::SeqCst) + 1 == self.groups()
    }

    /// A new entry this thread claimed here after the migration began: moved now, so that
    /// no mover that passed its group already leaves it behind. When the successor has no
    /// room for it, it is reported *stranded* in `effects`: the caller must make room (grow
    /// the successor) and call [`relocate_stranded`](Self::relocate_stranded) until it
    /// moves. Until then the entry stays here, where operations still find it while this
    /// table is current or migrating; should the table be retired meanwhile (its group
    /// was clean before the claim), the entry is out of sight until moved, and any twin
    /// created meanwhile merges with it then.
    pub(super) fn relocate(&self, slot: usize, next: &Table<T>, effects: &mut Effects) {
        if self.move_slot(slot, next, effects) == Slot::NoRoom {
            effects.strand(self.gen, slot);
        }
    }

    /// Tries a stranded entry's move again: `false` when the successor still has no room.
    pub fn relocate_stranded(&self, slot: usize, effects: &mut Effects) -> bool {
        let Some(next) = self.successor() else {
            debug_assert!(false, "a stranded entry in a table with no successor");
            return true;
        };
        self.move_slot(slot, next, effects) != Slot::NoRoom
    }

    /// Moves the slot's entry to `next` if it is HELD or LIVE (module docs).
    fn move_slot(&self, slot: usize, next: &Table<T>, effects: &mut Effects) -> Slot {
        let mut word = self.word(slot).load_on(self.cpu);
        let frozen = loop {
            if word == Word::EMPTY || word.state() == State::MOVED {
                return Slot::Clean;
            }
            let Some(frozen) = word.frozen() else {
                return Slot::Busy;
            };
            match self.word(slot).cas_on(self.cpu, word, frozen) {
                Ok(()) => break frozen,
                Err(now) => word = now,
            }
        };
        // The entry is ours until we CAS FROZEN away: nobody else changes a FROZEN word,
        // its times (a reset waits for MOVED before it moves on) or its payload.
        let Some(stamp) = self.times(slot) else {
            debug_assert!(false, "a held slot without times");
            return Slot::Busy;
        };
        // SeqCst (both): read after the FROZEN CAS, which read from the join and settle.
        let timeout = self.timeout_cell(slot).load(Ordering::SeqCst);
        let live = word.taken_back().is_some();
        let payload = live.then(|| {
            self.payload(slot).0.with(|cell| {
                // Safety: a LIVE word's payload is written (by the settle that made it
                // LIVE, which our FROZEN CAS read from) and not taken (no completion CAS
                // from it succeeded), and the FROZEN word keeps every other thread off it
                // until we CAS it on.
                unsafe { (*cell).assume_init_read() }
            })
        });
        // Into the successor or, when it has no room for the root and a successor of its
        // own (it ran out of room while it filled), into the nearest generation after it
        // that has: lookups walk the whole chain, and the copy merges with any twin left
        // in a skipped generation when that one's entries move on.
        let mut target = next;
        let mut adopted = target.adopt(word, stamp, timeout, payload, effects);
        while let Err(payload) = adopted {
            let Some(after) = target.successor() else {
                adopted = Err(payload);
                break;
            };
            target = after;
            adopted = target.adopt(word, stamp, timeout, payload, effects);
        }
        match adopted {
            Ok(()) => {
                let moved = self.word(slot).cas_on(self.cpu, frozen, frozen.moved());
                debug_assert!(moved.is_ok(), "a FROZEN word changed under its mover");
                effects.note_moved();
                Slot::Clean
            }
            Err(payload) => {
                if let Some(payload) = payload {
                    self.payload(slot).0.with_mut(|cell| {
                        // Safety: as above; the value read out goes back before the word
                        // is LIVE again.
                        unsafe { (*cell).write(payload) };
                    });
                }
                let restored = self.word(slot).cas_on(self.cpu, frozen, word);
                debug_assert!(restored.is_ok(), "a FROZEN word changed under its mover");
                Slot::NoRoom
            }
        }
    }

    /// A moved entry's copy: claims a slot for `word` (no credit: the entry keeps its own)
    /// with its times, timeout and payload written before the word, files its timer, and
    /// merges any twin. Hands the payload back when the root's window has no room.
    fn adopt(
        &self,
        word: Word,
        stamp: Stamp,
        timeout: u32,
        payload: Option<T>,
        effects: &mut Effects,
    ) -> Result<(), Option<T>> {
        let key = word.key();
        let mut payload = payload;
        let slot = loop {
            let fill = |side: &Side<T>| {
                // Relaxed: published by the claim CAS.
                side.timeout.store(timeout, Ordering::Relaxed);
                if let Some(value) = payload.take() {
                    side.payload.0.with_mut(|cell| {
                        // Safety: the slot is reserved (times CASed from 0) and its word is
                        // EMPTY: nobody else touches its payload cell until our claim CAS
                        // publishes it.
                        unsafe { (*cell).write(value) };
                    });
                }
            };
            match self.claim_with(key, word, None, stamp, Credit::Kept, fill) {
                Ok((slot, _)) => break slot,
                // A reserved slot's word left EMPTY (which `claim_with` rules out): its
                // payload cell was written but never published; it is dropped with the
                // table as a LIVE word's would not be, so this cannot lose a payload
                // that anyone could reach. Look again.
                Err(Unclaimed::Raced) => continue,
                Err(_) => {
                    effects.set_crowded(); // grow this table
                    return Err(payload);
                }
            }
        };
        self.created(key, slot, effects);
        Ok(())
    }

    /// Waits until the FROZEN `word` in `slot` changes (its mover moved it, or put it back
    /// for want of room), and returns what it is then.
    pub(super) fn await_moved(&self, slot: usize, word: Word) -> Word {
        let mut backoff = Backoff::default();
        loop {
            let now = self.word(slot).load_on(self.cpu);
            if now != word {
                return now;
            }
            backoff.wait();
        }
    }

    /// The root's entry, as `find` gives it, after waiting out a move under
    /// way: `None` when the entry is not (or no longer) in this table.
    pub fn find_waiting(&self, key: Key) -> Option<(usize, Word)> {
        loop {
            match self.search(key, None) {
                super::Search::Found(slot, word) => return Some((slot, word)),
                super::Search::Frozen(slot, word) => {
                    self.await_moved(slot, word);
                }
                super::Search::Missing(_) => return None,
            }
        }
    }
}
