//! Loom models of the table's migration (growth) protocol
//! (`src/acker/table/migrate.rs`): a mover CASes a HELD or LIVE word to FROZEN, adopts the
//! entry into the successor and CASes FROZEN to MOVED; a claim in a table whose `next` is
//! set relocates its own new entry; init joins nothing in a migrating table; a message
//! that meets FROZEN waits and starts again.
//!
//! Every model runs on one fixed pair of tables: `old` (two groups of two slots, one group
//! of overflow under loom) and its successor `next` (four groups), and drives them as the
//! acker (`src/acker/engine/mod.rs`) does: along the chain `old, next`, creating only in
//! the last table, starting again from `old` on `Retry`, and finishing a completion in the
//! table its `gen` names. Each model asserts exactly-once: the tree completes once, with
//! its payload and the outcome its messages call for; afterwards neither table holds an
//! entry of the root, and `old`, once `moved_all()`, holds no HELD, LIVE or FROZEN word.
//! The successor is large enough that nothing is ever stranded (asserted on every
//! `Effects`).
//!
//! What each model's "Catches" names was checked: with that step of the protocol broken
//! (in a scratch copy of `src/`), the model fails.
#![cfg(loom)]

use ackwheel::table::{
    Applied, Change, Completed, Effects, Expiry, Key, Refused, Stamp, Table, KEY_SHIFT,
};
use ackwheel::Outcome;
use loom::sync::Arc;
use loom::thread;

/// Groups in the old table; the successor has twice as many.
const GROUPS: usize = 2;

/// A key whose home is group `home` of the old table (and of the successor, for home 0).
fn key(home: usize, low: u64) -> Key {
    let shift = 64 - KEY_SHIFT - GROUPS.trailing_zeros();
    Key::new((home as u64) << shift | low)
}

/// No completion.
const NONE: [(u32, Outcome); 0] = [];

/// Every creation stamp: start and base at tick 1.
fn stamped() -> Effects {
    Effects::stamped(Stamp::new(1, 1))
}

/// A table and its successor. The successor is owned here, so it lives as long as the old
/// table, whose `next` points at it once [`begin`](Pair::begin) ran.
struct Pair {
    old: Table<u32>,
    next: Box<Table<u32>>,
}

impl Pair {
    /// The pair, its migration not begun yet.
    fn new() -> Arc<Pair> {
        let old = Table::new(GROUPS);
        let next = Box::new(old.successor_of(2 * GROUPS, true));
        assert_eq!(next.gen(), old.gen() + 1);
        Arc::new(Pair { old, next })
    }

    /// Starts the migration: `old.next = next`. Called once per pair.
    fn begin(&self) {
        let next = &*self.next as *const Table<u32> as *mut Table<u32>;
        // Safety: `next` is owned by this pair, beside `old`, so it is valid as long as
        // `old` is; the table is only read through the pointer (`successor()` makes a
        // shared reference); and every model calls this once.
        unsafe { self.old.begin_move(next) };
    }

    /// The table of generation `gen`.
    fn table(&self, gen: u32) -> &Table<u32> {
        if gen == self.old.gen() {
            &self.old
        } else if gen == self.next.gen() {
            &self.next
        } else {
            panic!("no generation {gen}")
        }
    }

    /// After a call on the pair: drops the timers to file, asserts nothing was stranded,
    /// and finishes each completion the call claimed in the table its `gen` names (takes
    /// the payload, frees the slot).
    fn finish(&self, effects: &mut Effects) -> Vec<(u32, Outcome)> {
        while effects.take_to_file().is_some() {}
        assert_eq!(
            effects.take_stranded(),
            None,
            "the successor has room for everything"
        );
        let mut completions = Vec::new();
        while let Some(Completed {
            slot,
            key,
            outcome,
            gen,
        }) = effects.take()
        {
            let table = self.table(gen);
            // Safety: the call claimed this completion (its CAS completed the tree); its
            // payload is taken and its slot freed once, here.
            let payload = unsafe { table.take(slot) };
            // Safety: the same completion, freed once, after its take.
            unsafe { table.free(slot, key) };
            completions.push((payload, outcome));
        }
        completions
    }

    /// Engine's `message()`: along the chain, creating only in the last table; `Missing`
    /// goes on to the successor, `Retry` starts again from the first table.
    fn message(&self, key: Key, message: Change) -> Vec<(u32, Outcome)> {
        let mut completions = Vec::new();
        loop {
            let mut effects = stamped();
            let mut at = &self.old;
            let applied = loop {
                let last = at.successor().is_none();
                match at.apply(key, message, last, &mut effects) {
                    Applied::Missing if !last => at = at.successor().unwrap(),
                    applied => break applied,
                }
            };
            completions.extend(self.finish(&mut effects));
            match applied {
                Applied::Retry => continue,
                Applied::Created | Applied::Changed => return completions,
                other => panic!("{other:?} for {message:?}"),
            }
        }
    }

    fn ack(&self, key: Key, xor: u64) -> Vec<(u32, Outcome)> {
        self.message(key, Change::Ack(xor))
    }

    /// Engine's `init()`: along the chain, claiming a new entry only in the last table;
    /// `Refused::Retry` starts again from the first table. Panics unless it joined.
    fn init(&self, key: Key, xor: u64, payload: u32) -> Vec<(u32, Outcome)> {
        self.try_init(key, xor, payload)
            .unwrap_or_else(|refused| panic!("init refused: {refused:?}"))
    }

    /// Engine's `init()` as [`init`](Pair::init) runs it, handing a refusal other than
    /// `Retry` back.
    fn try_init(
        &self,
        key: Key,
        xor: u64,
        payload: u32,
    ) -> Result<Vec<(u32, Outcome)>, Refused<u32>> {
        let mut completions = Vec::new();
        let mut payload = payload;
        loop {
            let mut effects = stamped();
            let mut at = &self.old;
            let result = loop {
                let last = at.successor().is_none();
                match at.init_or(key, xor, payload, None, last, &mut effects) {
                    Err(Refused::Missing(p)) if !last => {
                        payload = p;
                        at = at.successor().unwrap();
                    }
                    result => break result,
                }
            };
            completions.extend(self.finish(&mut effects));
            match result {
                Ok(()) => return Ok(completions),
                Err(Refused::Retry(p)) => payload = p,
                Err(other) => return Err(other),
            }
        }
    }

    /// A mover: `move_round` until every group of the old table is clean (yielding between
    /// rounds, so that loom runs the thread whose JOINING, DONE or FROZEN word it waits
    /// for). What its copies completed (a merge with a twin may).
    fn move_all(&self) -> Vec<(u32, Outcome)> {
        let mut completions = Vec::new();
        loop {
            let mut effects = stamped();
            self.old.move_round(&mut effects);
            completions.extend(self.finish(&mut effects));
            if self.old.moved_all() {
                return completions;
            }
            thread::yield_now();
        }
    }

    /// The old table is moved entirely: every group clean, no HELD, LIVE or FROZEN word of
    /// any root left (an entry left here would be out of sight once the old table retires).
    fn assert_old_drained(&self) {
        assert!(self.old.moved_all(), "the migration did not finish");
        for slot in 0..self.old.slots() {
            assert_eq!(
                self.old.key_in(slot),
                None,
                "slot {slot} of the old table was left behind"
            );
        }
    }

    /// Nothing of `key` in either table, and the successor (which only `key` used) clear:
    /// no slot, reservation or overflow count left.
    fn assert_gone(&self, key: Key) {
        self.assert_old_drained();
        assert_eq!(self.old.find(key), None, "an entry left in the old table");
        assert_eq!(self.next.find(key), None, "an entry left in the successor");
        assert!(self.next.is_clear(), "the successor is not clear");
    }
}

/// A model explored with at most `preemptions` preemptions per execution.
fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(preemptions);
    model
}

/// An ack as an operation that began before the migration (or read no `next`) sends it:
/// `apply(create = true)` on the old table itself, which must then relocate its new entry
/// (and, on `Retry`, starts again along the chain).
fn ack_in_old(pair: &Pair, key: Key, xor: u64) -> Vec<(u32, Outcome)> {
    let mut effects = stamped();
    let applied = pair.old.apply(key, Change::Ack(xor), true, &mut effects);
    let mut completions = pair.finish(&mut effects);
    match applied {
        Applied::Created | Applied::Changed => {}
        Applied::Retry => completions.extend(pair.ack(key, xor)),
        other => panic!("{other:?}"),
    }
    completions
}

/// An init as an operation that began before the migration (or read no `next`) makes it:
/// `init_or(create = true)` on the old table itself, which moves a claim it finds `next`
/// set after and reports `Retry`; it then starts again along the chain.
fn init_in_old(pair: &Pair, key: Key, xor: u64, payload: u32) -> Vec<(u32, Outcome)> {
    let mut effects = stamped();
    let result = pair
        .old
        .init_or(key, xor, payload, None, true, &mut effects);
    let mut completions = pair.finish(&mut effects);
    match result {
        Ok(()) => {}
        Err(Refused::Retry(p)) => completions.extend(pair.init(key, xor, p)),
        Err(other) => panic!("init refused: {other:?}"),
    }
    completions
}

/// [`init_in_old`] on one thread while another starts the migration and moves every
/// group ([`Pair::move_all`]): what both completed.
fn init_in_old_vs_migration_start(
    pair: &Arc<Pair>,
    key: Key,
    xor: u64,
    payload: u32,
) -> Vec<(u32, Outcome)> {
    let initializer = Arc::clone(pair);
    let a = thread::spawn(move || init_in_old(&initializer, key, xor, payload));
    let mover = Arc::clone(pair);
    let b = thread::spawn(move || {
        mover.begin();
        mover.move_all()
    });
    let mut all = a.join().unwrap();
    all.extend(b.join().unwrap());
    all
}

/// The last two acks of a LIVE tree race its move: each either lands in the old table
/// before the mover's FROZEN CAS (which then fails and the mover copies the new word), or
/// meets FROZEN, waits for MOVED and starts again, finding the copy in the successor. The
/// tree completes once, Acked, wherever its last ack lands, and with its own payload (the
/// copy carries it).
///
/// Catches: a mover that freezes the word it finds but copies the one it loaded earlier
/// (an ack in between is lost, or a completed tree is copied: a second entry is left in
/// the successor); a message that meets FROZEN and returns as if applied (a lost ack: no
/// completion). Not caught, and harmless: a copy whose payload is written after its claim
/// CAS, as nobody looks for the root in the successor before the FROZEN word turns
/// MOVED, after the write.
#[test]
fn migrate_ack_vs_move() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let mut effects = stamped();
        pair.old.init(k, 0b11, 7, &mut effects).unwrap();
        assert_eq!(pair.finish(&mut effects), NONE);
        pair.begin();
        let mover = Arc::clone(&pair);
        let t = thread::spawn(move || mover.move_all());
        let mut all = pair.ack(k, 0b01);
        all.extend(pair.ack(k, 0b10));
        all.extend(t.join().unwrap());
        assert_eq!(all, [(7, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// A LIVE tree's move races a second init of its root, along the chain: the second init
/// finds the tree (LIVE in the old table; FROZEN, and it waits for MOVED; or the copy in
/// the successor) and is refused `Duplicate`, never starting a second tree beside the
/// copy. The tree's last ack then completes it once, with its own payload, and nothing of
/// the root is left.
///
/// Catches: an init that takes a FROZEN entry for a missing one and creates in the
/// successor (the second init starts a tree beside the copy: `Ok`, not `Duplicate`).
#[test]
fn migrate_second_init_vs_move_of_a_tree() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let mut effects = stamped();
        pair.old.init(k, 0b11, 7, &mut effects).unwrap();
        assert_eq!(pair.old.ack(k, 0b01, &mut effects), Applied::Changed);
        assert_eq!(pair.finish(&mut effects), NONE);
        pair.begin();
        let mover = Arc::clone(&pair);
        let t = thread::spawn(move || mover.move_all());
        let second = pair.try_init(k, 0b100, 9);
        assert_eq!(t.join().unwrap(), NONE);
        assert!(
            matches!(second, Err(Refused::Duplicate(9))),
            "the second init: {second:?}"
        );
        assert_eq!(pair.ack(k, 0b10), [(7, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// Init of a root whose orphan (an ack held before init) is being moved: init finds the
/// orphan in the old table and moves it over itself (it joins nothing in a migrating
/// table) or meets it FROZEN and waits, and then starts again; or finds it MOVED and joins
/// the copy in the successor. Either way it joins the one entry that holds the orphan's
/// ack, so the last ack completes the tree once, Acked, with init's payload.
///
/// Catches: a freeze that does not decide who moves the entry (a mover that freezes
/// whatever word it finds: the orphan is copied twice and an entry of the root is left in
/// the successor after the completion, `assert_gone`). Init's own `next` check before its
/// join is not exercised here: the orphan predates the migration, so no twin of it can be
/// created in the successor, and a join in the old table would be moved whole.
#[test]
fn migrate_init_vs_move_of_its_orphan() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let mut effects = stamped();
        assert_eq!(pair.old.ack(k, 0b01, &mut effects), Applied::Created);
        assert_eq!(pair.finish(&mut effects), NONE);
        pair.begin();
        let mover = Arc::clone(&pair);
        let t = thread::spawn(move || mover.move_all());
        let mut all = pair.init(k, 0b11, 9);
        assert_eq!(all, NONE, "the orphan's ack does not cancel init's value");
        all.extend(pair.ack(k, 0b10));
        all.extend(t.join().unwrap());
        assert_eq!(all, [(9, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// A claim in the old table by an operation that began before the migration races the
/// migration's start and a whole pass of the mover: the claim may land in a group the
/// mover has already found clean. The claim checks `next` after its claim CAS (both
/// SeqCst, against the grower's store of `next` and the mover's loads), so either the
/// mover sees the entry or the claimer moves it itself: once the old table is moved
/// entirely no entry is left in it (asserted right after the threads, before anything
/// else could move it). Then init and the last ack, along the chain, complete the tree
/// once, Acked: the held ack came along.
///
/// Catches: a claim that does not relocate its entry when `next` is set, or one that reads
/// `next` before its claim CAS instead of after (the entry is stranded in a table about to
/// be retired: `assert_old_drained` fails); a copy of a stale word (the held ack is not in
/// the successor).
#[test]
fn migrate_claim_in_old_vs_migration_start() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let claimer = Arc::clone(&pair);
        let a = thread::spawn(move || ack_in_old(&claimer, k, 0b01));
        let mover = Arc::clone(&pair);
        let b = thread::spawn(move || {
            mover.begin();
            mover.move_all()
        });
        let mut all = a.join().unwrap();
        all.extend(b.join().unwrap());
        assert_eq!(all, NONE, "one held ack completes nothing");
        pair.assert_old_drained();
        assert_eq!(
            pair.next.find(k).map(|(_, w)| w.value()),
            Some(0b01),
            "the held ack is in the successor"
        );
        all.extend(pair.init(k, 0b11, 9));
        assert_eq!(all, NONE);
        all.extend(pair.ack(k, 0b10));
        assert_eq!(all, [(9, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// Twin entries across the two tables: during the migration, an old-mode ack creates the
/// root's entry in the old table (and relocates it), while a chain-mode ack of the same new
/// root searched the old table (perhaps before that claim), found nothing, and created in
/// the successor. The relocated copy must merge with the successor's twin (`adopt` merges
/// as any claim does), or the chain ack must land in the old entry before it is moved, or
/// wait for its move: the successor ends with one HELD entry holding both acks, and init
/// (after the migration finished) completes the tree at once, Acked, exactly once.
///
/// Catches: a copy that loses an ack that landed in the old entry between the mover's
/// load and its FROZEN CAS; a message that meets FROZEN and returns as if applied; a
/// copy that does not merge with its twin in the successor (each: the successor does not
/// hold one entry with both acks).
///
/// Bounded at 6 preemptions (45,537 iterations, about 5 s): unbounded, the two claim
/// paths with their relocation and merges ran for over 10 minutes without finishing.
/// Bound 8 passes too (about 50 s).
#[test]
fn migrate_twin_across_tables_merges() {
    bounded(6).check(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        pair.begin();
        let claimer = Arc::clone(&pair);
        let a = thread::spawn(move || ack_in_old(&claimer, k, 0b01));
        let chained = Arc::clone(&pair);
        let b = thread::spawn(move || chained.ack(k, 0b10));
        let mut all = a.join().unwrap();
        all.extend(b.join().unwrap());
        assert_eq!(all, NONE, "two held acks complete nothing");
        assert_eq!(pair.move_all(), NONE);
        pair.assert_old_drained();
        assert_eq!(
            pair.next.find(k).map(|(_, w)| w.value()),
            Some(0b11),
            "both acks in one entry of the successor"
        );
        assert_eq!(pair.init(k, 0b11, 5), [(5, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// A reset of a LIVE tree (as the engine's `reset_timeout` does it: the old table, then the
/// successor) races the tree's move. The reset's new base must reach the entry that ends
/// in the successor: a reset that moved the old entry's base before the mover read the
/// times is copied with it; one that meets FROZEN waits for MOVED (so its reset of the
/// successor comes after the copy is there); one after MOVED resets the copy. So the
/// successor's entry has the new base (tick 5) and R, and a reaper that comes at the old
/// deadline (tick 1; at tick 4, say) finds it `NotDue(5)` rather than timing it out. The
/// tree then completes once, Acked, with its payload.
///
/// Catches: a mover that reads the times before its FROZEN CAS (a reset in between is
/// lost: base 1 is copied); a reset that does not wait for a FROZEN entry (its successor
/// reset runs before the copy exists and finds nothing: both resets return `false`); a
/// copy of a word loaded before the FROZEN CAS (the reset's R is lost).
#[test]
fn migrate_reset_vs_move() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let mut effects = stamped();
        pair.old.init(k, 0b11, 7, &mut effects).unwrap();
        assert_eq!(pair.finish(&mut effects), NONE);
        pair.begin();
        let mover = Arc::clone(&pair);
        let t = thread::spawn(move || mover.move_all());
        let in_old = pair.old.reset(k, 5);
        let in_next = pair.next.reset(k, 5);
        assert!(in_old || in_next, "the tree is live: some reset found it");
        assert_eq!(t.join().unwrap(), NONE);
        pair.assert_old_drained();
        let (slot, word) = pair.next.find(k).expect("the tree moved to the successor");
        assert_eq!(
            pair.next.times(slot).map(|s| s.base()),
            Some(5),
            "the reset's base"
        );
        assert!(word.state().reset(), "the reset's R: {word:?}");
        let mut effects = stamped();
        assert_eq!(
            pair.next.expire(slot, k.tag(), 4, &mut effects),
            Expiry::NotDue(5),
            "a reaper at the old deadline"
        );
        assert_eq!(pair.finish(&mut effects), NONE);
        assert_eq!(pair.ack(k, 0b11), [(7, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// Init of a new root by an operation that began before the migration (`init_or(create =
/// true)` on the old table itself) races the migration's start and the mover. Its claim,
/// made after `next` was set, unjoins and moves itself, and init starts again along the
/// chain; or init claimed before `next` was set, and the mover, meeting the JOINING
/// word, must leave the group unclean and come back for the LIVE entry once init settled
/// (an entry JOINING in the old table is not moved by anyone else). Once the old table is
/// moved entirely nothing is left in it, and the last ack completes the tree once, Acked.
///
/// Catches: a mover that counts a group clean while one of its words is JOINING (the LIVE
/// tree is left in the old table: `assert_old_drained`), which no other model reaches.
///
/// Unbounded: 213,657 iterations, about 20 s.
#[test]
fn migrate_init_in_old_vs_migration_start() {
    loom::model(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let all = init_in_old_vs_migration_start(&pair, k, 0b11, 9);
        assert_eq!(all, NONE, "init alone completes nothing");
        pair.assert_old_drained();
        assert_eq!(pair.ack(k, 0b11), [(9, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// A new tree's init and an orphan ack of its root, both by operations that began before
/// the migration (each creates in the old table itself), race the migration's start and
/// the mover. The ack may search before the tree's claim and claim its orphan after the
/// tree's twin search, then find `next` set and move the orphan over at once, without a
/// search of the old table: the orphan's copy is in the successor before the tree's. Only
/// the tree's copy, claimed after it, can see the pair, so it searches for twins as every
/// claim does (`src/acker/table/migrate.rs`, "Why a moved tree searches for twins too").
/// Wherever the two entries meet, the ack lands in the tree once: the tree's last ack
/// completes it, Acked, with its payload, and nothing of the root is left.
///
/// Catches: a moved LIVE entry's copy that skips its twin search (the orphan's copy is
/// left beside the tree's in the successor; the last ack finds the orphan first and the
/// tree never completes).
///
/// Bounded at 3 preemptions.
#[test]
fn migrate_orphan_moved_before_its_tree() {
    bounded(3).check(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let initializer = Arc::clone(&pair);
        let a = thread::spawn(move || init_in_old(&initializer, k, 0b111, 9));
        let acker = Arc::clone(&pair);
        let b = thread::spawn(move || ack_in_old(&acker, k, 0b100));
        pair.begin();
        // One round beside the threads (a JOINING word is left for later: no waiting on
        // the initializer), the rest after them.
        let mut effects = stamped();
        pair.old.move_round(&mut effects);
        let mut all = pair.finish(&mut effects);
        all.extend(a.join().unwrap());
        all.extend(b.join().unwrap());
        all.extend(pair.move_all());
        assert_eq!(all, NONE, "nothing completes before the last ack");
        pair.assert_old_drained();
        assert_eq!(pair.ack(k, 0b011), [(9, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}

/// An init that began before the migration joins its root's orphan, which was held before
/// it, while the migration starts and a mover runs. The join may land before `next` is
/// set (the mover then finds the word JOINING and comes back for it, LIVE), or after:
/// then the init finds the migration after its join, takes its XOR back out (JOINING to
/// HELD) and moves the entry itself, racing the mover's freeze of the same word, and
/// starts again in the successor, where it joins the copy. A join after `next` is what a
/// merge's restored loser lets happen unseen (`src/acker/table/migrate.rs`, "Why no root
/// gets two joined entries"; the unit test
/// `an_init_that_joins_a_restored_merge_loser_during_a_migration_moves_it` runs that
/// schedule and fails without the check); here, with no merge, the check after the join
/// runs against every interleaving of a mover: without it the mover would wait for the
/// JOINING word and move the tree LIVE, so this model passes without the check too.
/// Wherever the tree settles, the old table is drained, and the last ack completes it
/// once, Acked, with its payload.
///
/// Catches: a check after the join that moves the entry without unjoining it first (a
/// JOINING word is not moved, and the init, starting again, finds its own join:
/// `Duplicate`), or that reports success after moving it (the payload is never written
/// into the copy: the last ack completes nothing). Each fails at 2 preemptions.
///
/// Bounded at 5 preemptions (under a second); unbounded, it passes in about two minutes.
#[test]
fn migrate_join_of_an_orphan_vs_migration_start() {
    bounded(5).check(|| {
        let pair = Pair::new();
        let k = key(0, 1);
        let mut effects = stamped();
        assert_eq!(pair.old.ack(k, 0b01, &mut effects), Applied::Created);
        assert_eq!(pair.finish(&mut effects), NONE);
        let all = init_in_old_vs_migration_start(&pair, k, 0b11, 9);
        assert_eq!(all, NONE, "the orphan's ack does not cancel init's value");
        pair.assert_old_drained();
        assert_eq!(pair.ack(k, 0b10), [(9, Outcome::Acked)]);
        pair.assert_gone(k);
    });
}
