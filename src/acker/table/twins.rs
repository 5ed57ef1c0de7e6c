//! Twin entries: what a claimer does after its claim. Two threads that found no entry for
//! a new root may both claim one (the parent module's "Twin claims"); every claimer
//! searches again and the pair is merged lock-free: the loser's CAS to EMPTY decides who
//! carries its contents to the winner, so they are applied once.

use super::{Applied, Change, Effects, Key, Phase, Table, Tick, Word, GROUP_SLOTS};
use crate::sync::{AtomicU64, Backoff, Ordering};

/// Merges started and merges whose contents have landed, in one table: between the two, a
/// root's contents may be in no slot a walk can see (the loser EMPTY, the carry not yet
/// applied, or applied to a winner the walk had passed). A walk that found nothing asks
/// [`overlapped`](Self::overlapped) whether that can have happened to it.
///
/// Every count is SeqCst, as the words are: a merge counts its start before its loser's
/// EMPTY CAS and its landing after the contents' CAS, and a walk reads `landed` before its
/// first word and `started` after its last. A walk that read a loser EMPTY therefore reads
/// that merge's start; and if the landing was counted by the time it began, every word it
/// reads already holds the contents. So `started` after the walk equals `landed` before it
/// only if no merge was under way at any moment of the walk.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    started: AtomicU64,
    landed: AtomicU64,
}

impl InFlight {
    fn start(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }

    fn land(&self) {
        self.landed.fetch_add(1, Ordering::SeqCst);
    }

    /// Read before a walk: the merges landed so far.
    pub(super) fn mark(&self) -> u64 {
        self.landed.load(Ordering::SeqCst)
    }

    /// After a walk that began at `mark`: whether a merge was under way during it.
    pub(super) fn overlapped(&self, mark: u64) -> bool {
        self.started.load(Ordering::SeqCst) != mark
    }

    /// Waits until no merge is under way: every merge started by now has landed (`landed`
    /// read, then `started` equal to it: a merge counts its start before its landing).
    /// For a thread whose entry another thread's merge emptied: its messages are in that
    /// merge's hands until it lands. A merge's carry holds no lock and waits only for a
    /// move under way, as a message does; merges come only from twins, which are rare, but
    /// the wait is for every merge of the table, and a merger the kernel preempted holds
    /// every such waiter (as a mover holds whoever meets its FROZEN word).
    fn await_landed(&self) {
        let mut backoff = Backoff::default();
        while self.overlapped(self.mark()) {
            backoff.wait();
        }
    }
}

impl<T> Table<T> {
    /// After claiming `slot` for `key`: files its timer and merges any twin, or, when a
    /// migration has begun, moves the entry to the successor (where that happens).
    pub(super) fn created(&self, key: Key, slot: usize, effects: &mut Effects) {
        if let Some(next) = self.successor() {
            self.relocate(slot, next, effects);
            return;
        }
        effects.file_later(self.gen, slot);
        self.merge_twins(key, slot, effects);
    }

    /// After claiming `mine` for `key`, or after a message landed in the HELD entry `mine`:
    /// merges every twin entry (module docs) until `mine` is the root's only entry or has
    /// been merged into another. Carrying a twin's contents
    /// may complete the tree (into `effects`).
    pub(super) fn merge_twins(&self, key: Key, mine: usize, effects: &mut Effects) {
        pause_point!(BeforeTwinSearch);
        loop {
            // Ours first: the twin that merged it away may be gone from the window (moved on
            // by a migration) by the time a search looks.
            let ours = self.word(mine).load_on(self.cpu);
            if !ours.holds(key) {
                // Merged away by another thread, or completed: nothing of ours is left
                // here. Merged away, what our entry held (this call's message, or its
                // claim's) may still be in that merge's hands, in no slot a search sees:
                // returned now, a message sent after this call could complete the tree
                // without it. So wait for the merge to land (a FROZEN word, moving, is
                // seen by every search, which waits for it).
                if ours == Word::EMPTY {
                    self.in_flight.await_landed();
                }
                return;
            }
            let Some((other, theirs)) = self.find_other(key, Some(mine)) else {
                return;
            };
            let (loser, lost) = if wins(ours, mine, theirs, other, |s| self.distance(key, s)) {
                (other, theirs)
            } else {
                (mine, ours)
            };
            if lost.state().phase() != Some(Phase::Held) {
                // Two joined entries, for an instant: an init's new claim (JOINING) and an
                // entry another init joined, or another new claim. An init joins only an
                // entry it found twinless, and a claimer searches after its claim, so the
                // claimer (or, of two claimers, at least one) sees the pair and unjoins
                // ([`init`](crate::acker::table::init)); its payload is not written yet.
                // Leave the pair to it. (Two LIVE entries of one root would be a bug.)
                debug_assert!(
                    ours.state().phase() == Some(Phase::Joining)
                        || theirs.state().phase() == Some(Phase::Joining),
                    "two live entries for {key:?}"
                );
                return;
            }
            // Read before the slot is emptied (its times go with it). A reset that moves it
            // after this read sets R after, which fails the empty CAS below, or finds the
            // winner too (a reset moves every entry's base in the table).
            let base = self.times(loser).map_or(0, |stamp| stamp.base());
            // The loser's word goes EMPTY, but its slot stays reserved (times, overflow
            // counts, credit) until its contents have landed, so no claim can take it.
            // Counted from before the CAS to the landing, for resets ([`InFlight`]).
            self.in_flight.start();
            pause_point!(MergeJudged);
            if self
                .word(loser)
                .cas_on(self.cpu, lost, Word::EMPTY)
                .is_err()
            {
                self.in_flight.land(); // nothing moved
                continue; // it moved: look at the pair again
            }
            // Relaxed: a statistic.
            self.merged.fetch_add(1, Ordering::Relaxed);
            match self.land_lost(key, loser, lost, base, effects) {
                Landed::Carried if loser == mine => return,
                // Restored: ours, if it is still there, may have a twin left.
                Landed::Carried | Landed::Restored => continue,
                Landed::Recreated => return,
            }
        }
    }

    /// A merge's loser, `lost` (its word, whose base was `base`), emptied from `loser` with
    /// its slot kept reserved: its contents carried to the root's other entry, or, when the
    /// root has none left, put back where they were (module docs).
    fn land_lost(
        &self,
        key: Key,
        loser: usize,
        lost: Word,
        base: Tick,
        effects: &mut Effects,
    ) -> Landed {
        // An empty twin (init's unjoined claim, or acks that cancelled) carries
        // nothing; carrying it to a tree that has completed meanwhile would leave an
        // empty orphan.
        let empty = lost.value() == 0 && !lost.state().failed() && !lost.state().reset();
        if empty || self.carry(key, Change::Twin(lost, base), effects) {
            self.in_flight.land();
            self.release(loser, key);
            return Landed::Carried;
        }
        // The root has no entry left: the winner completed, or it was itself merged
        // away meanwhile (a claimer that unjoined and lost by probe order to the
        // entry this merge judged against its JOINING word). The contents go back
        // where they were, which was kept for them: a carry is never refused for
        // room or credit, and a twin's acks are never dropped. Then it is an entry
        // like any new one: moved if a migration has begun, else merged with any
        // twin claimed meanwhile (searched again after the restore, as after a
        // claim).
        pause_point!(BeforeRestore);
        if self
            .word(loser)
            .cas_on(self.cpu, Word::EMPTY, lost)
            .is_err()
        {
            // Cannot happen: a reserved slot's EMPTY word changes only by its
            // reserver (`claim_with`). Were it to, the contents go as a new entry.
            debug_assert!(false, "a reserved slot's word left EMPTY");
            self.release(loser, key);
            // Landed first: the new entry's claim searches for twins, which may wait for
            // the merges under way to land, this one included.
            self.in_flight.land();
            self.recreate(key, Change::Twin(lost, base), effects);
            return Landed::Recreated;
        }
        self.in_flight.land();
        pause_point!(Restored);
        self.created(key, loser, effects);
        Landed::Restored
    }

    /// Applies `message` to the root's entry here or in a successor; `false` when the root
    /// has none (nothing is created).
    fn carry(&self, key: Key, message: Change, effects: &mut Effects) -> bool {
        let mut table = self;
        loop {
            match table.apply(key, message, false, effects) {
                Applied::Changed => return true,
                // Moved or moving: on along the chain.
                Applied::Retry => table = table.successor().unwrap_or(table),
                Applied::Missing => match table.successor() {
                    Some(next) => table = next,
                    None => return false,
                },
                Applied::Created | Applied::Full => {
                    debug_assert!(false, "a carry created an entry");
                    return true;
                }
            }
        }
    }

    /// Applies `message` here or, if the root's entry moves meanwhile, in the successor,
    /// creating an entry if there is none (which room or credit may refuse).
    fn recreate(&self, key: Key, message: Change, effects: &mut Effects) {
        let mut table = self;
        while table.apply(key, message, true, effects) == Applied::Retry {
            table = table.successor().unwrap_or(table);
        }
    }
}

/// Where a merge's loser's contents went ([`Table::land_lost`]).
enum Landed {
    /// Carried to the root's other entry (or nothing to carry): the loser's slot is free.
    Carried,
    /// Put back in the loser's slot (the root had no other entry left), as a new entry.
    Restored,
    /// Left as a new entry elsewhere (the loser's slot was lost: cannot happen).
    Recreated,
}

/// Whether our entry `mine` (word `ours`) survives its twin `other` (word `theirs`): a
/// joined entry (JOINING or LIVE) beats a HELD one, else the first in probe order wins.
fn wins(
    ours: Word,
    mine: usize,
    theirs: Word,
    other: usize,
    distance: impl Fn(usize) -> usize,
) -> bool {
    let joined = |w: Word| w.state().phase() != Some(Phase::Held);
    match (joined(ours), joined(theirs)) {
        (true, false) => true,
        (false, true) => false,
        _ => (distance(mine), mine % GROUP_SLOTS) < (distance(other), other % GROUP_SLOTS),
    }
}
