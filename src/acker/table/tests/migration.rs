//! The migration's tests (growth: [`migrate`](crate::acker::table::migrate)): entries move
//! with their times, timeout and payload; entries created during a move move themselves; a
//! successor without room leaves an entry where it was.

use super::*;

/// A successor begun by [`begin`]: freed when dropped, through the pointer the table holds
/// (a `Box` kept here would claim it uniquely while the table still points at it).
struct Next(*mut Table<u32>);

impl std::ops::Deref for Next {
    type Target = Table<u32>;

    fn deref(&self) -> &Table<u32> {
        // Safety: a live allocation from `Box::into_raw`, freed only by our `Drop`.
        unsafe { &*self.0 }
    }
}

impl Drop for Next {
    fn drop(&mut self) {
        // Safety: the `Box::into_raw` pointer, freed once; the test no longer uses the old
        // table's successor (it is declared before this value, so it drops after it, and
        // its drop does not follow `next`).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// `table`'s successor of `groups` groups, begun.
fn begin(table: &Table<u32>, groups: usize) -> Next {
    let next = Box::into_raw(Box::new(table.successor_of(groups, true)));
    // Safety: `next` stays allocated while `table` is used (the returned value frees it at
    // the test's end), and each table begins once.
    unsafe { table.begin_move(next) };
    Next(next)
}

#[test]
fn a_migration_moves_every_entry_with_its_times_timeout_and_payload() {
    let old = Table::<u32>::bounded(4, None, 30, false);
    let keys: Vec<Key> = (0..12).map(|i| key_in(4, i % 4, 100 + i as u64)).collect();
    for (i, &key) in keys.iter().enumerate() {
        let mut effects = Effects::stamped(Stamp::new(10 + i as u32, 10 + i as u32));
        match i % 3 {
            0 => assert_eq!(old.ack(key, 0b1, &mut effects), Applied::Created), // an orphan
            1 => old.init(key, 0b11, i as u32, &mut effects).unwrap(),
            _ => {
                old.init_with(key, 0b11, i as u32, Some(5), &mut effects)
                    .unwrap();
                assert!(old.reset(key, 50));
            }
        }
    }
    let before: Vec<_> = keys
        .iter()
        .map(|&k| {
            let (slot, word) = old.find(k).unwrap();
            (
                word,
                old.times(slot),
                old.timeout_of(slot),
                old.deadline(slot),
            )
        })
        .collect();
    let next = begin(&old, 8);
    let mut effects = Effects::default();
    assert!(
        old.move_round(&mut effects),
        "every group clean in one round"
    );
    assert!(old.moved_all());
    assert!(effects.is_none());
    let mut filed = std::iter::from_fn(|| effects.take_to_file()).collect::<Vec<_>>();
    filed.sort();
    assert_eq!(filed.len(), keys.len(), "a timer per moved entry");
    assert!(
        filed.iter().all(|&(gen, _)| gen == 1),
        "filed in the successor"
    );
    for (&key, before) in keys.iter().zip(&before) {
        assert_eq!(old.find(key), None, "{key:?} left the old table");
        let (slot, word) = next.find(key).unwrap();
        let after = (
            word,
            next.times(slot),
            next.timeout_of(slot),
            next.deadline(slot),
        );
        assert_eq!(&after, before, "{key:?} moved whole");
    }
    // The moved trees complete in the successor, with their payloads.
    for (i, &key) in keys.iter().enumerate().filter(|(i, _)| i % 3 != 0) {
        let mut effects = Effects::default();
        assert_eq!(next.ack(key, 0b11, &mut effects), Applied::Changed);
        assert_eq!(
            finish(&next, &mut effects),
            Some((i as u32, Outcome::Acked))
        );
    }
    assert_eq!(old.slots(), 16);
    assert_eq!(next.slots(), 32);
}

#[test]
fn an_entry_created_after_the_migration_began_moves_itself() {
    let old = Table::<u32>::new(4);
    let next = begin(&old, 8);
    let key = key_in(4, 2, 9);
    let mut effects = Effects::default();
    // Created in the old table (as by an operation that began before `next` was set),
    // and moved at once.
    assert_eq!(old.ack(key, 0b1, &mut effects), Applied::Created);
    assert_eq!(old.find(key), None);
    assert_eq!(next.find(key).map(|(_, w)| w.value()), Some(0b1));
    let (gen, slot) = effects.take_to_file().unwrap();
    assert_eq!((gen, Some(slot)), (1, next.find(key).map(|(s, _)| s)));
    // A message in migration mode finds it there.
    assert_eq!(
        old.apply(key, Change::Ack(0b10), false, &mut effects),
        Applied::Missing
    );
    assert_eq!(next.ack(key, 0b10, &mut effects), Applied::Changed);
    assert_eq!(next.find(key).map(|(_, w)| w.value()), Some(0b11));
}

#[test]
fn init_joins_nothing_in_a_table_being_migrated() {
    let old = Table::<u32>::new(4);
    let key = key_in(4, 1, 3);
    let mut effects = Effects::default();
    assert_eq!(old.ack(key, 0b01, &mut effects), Applied::Created);
    let next = begin(&old, 8);
    // The orphan is found in the old table: init moves it over and starts again.
    assert_eq!(
        old.init_or(key, 0b11, 5, None, false, &mut effects),
        Err(Refused::Retry(5))
    );
    assert_eq!(old.find(key), None);
    assert_eq!(
        old.init_or(key, 0b11, 5, None, false, &mut effects),
        Err(Refused::Missing(5))
    );
    next.init_or(key, 0b11, 5, None, true, &mut effects)
        .unwrap();
    assert_eq!(next.ack(key, 0b10, &mut effects), Applied::Changed);
    assert_eq!(finish(&next, &mut effects), Some((5, Outcome::Acked)));
}

#[test]
fn a_successor_without_room_leaves_the_entry_where_it_was() {
    let old = Table::<u32>::new(4);
    let next = begin(&old, 2);
    // Fill the successor's only window (two groups of four).
    for low in 0..8 {
        let mut effects = Effects::default();
        assert_eq!(
            next.ack(key_in(2, 0, 1000 + low), 1, &mut effects),
            Applied::Created
        );
    }
    // An entry that was in the old table before the migration began (written as a
    // claim would have, bypassing the move-on-claim).
    let key = key_in(4, 3, 77);
    let word = Word::held_ack(key, 0b101);
    let mut effects = Effects::default();
    old.claim_with(key, word, None, Stamp::new(1, 1), Credit::Kept, |_| {})
        .unwrap();
    assert!(!old.move_round(&mut effects), "the entry has no room");
    assert!(!old.moved_all());
    assert_eq!(
        old.find(key).map(|(_, w)| w),
        Some(word),
        "still here, as it was"
    );
    // Room again: the next round moves it.
    let (slot, w) = next.find(key_in(2, 0, 1000)).unwrap();
    next.empty(slot, w).unwrap();
    assert!(old.move_round(&mut effects));
    assert_eq!(next.find(key).map(|(_, w)| w), Some(word));
}

#[test]
fn a_reset_that_waits_out_a_move_put_back_for_want_of_room_still_moves_the_base() {
    let table = Arc::new(Table::<u32>::bounded(4, None, 30, false));
    let key = key_in(4, 1, 5);
    let mut effects = Effects::stamped(Stamp::new(10, 10));
    table.init(key, 0b1, 7, &mut effects).unwrap();
    let (slot, live) = table.find(key).unwrap();
    assert_eq!(table.deadline(slot), Some(40));
    // A mover froze the entry (its successor then had no room, as the next line shows).
    let frozen = live.frozen().unwrap();
    table.word(slot).cas(live, frozen).unwrap();
    let resetter = {
        let table = Arc::clone(&table);
        std::thread::spawn(move || table.reset(key, 50))
    };
    std::thread::sleep(std::time::Duration::from_millis(50)); // the reset waits on FROZEN
    table.word(slot).cas(frozen, live).unwrap(); // put back: no room
    assert!(resetter.join().unwrap(), "the reset landed");
    assert_eq!(
        table.deadline(slot),
        Some(80),
        "the base moved to the reset's tick before R was set"
    );
    assert!(table.word(slot).load().state().reset());
}

#[test]
fn tables_of_any_group_count_find_every_entry_and_migrate_between_sizes() {
    let mut rng = StdRng::seed_from_u64(0x9e37);
    for groups in [3, 5, 6, 24] {
        let old = Table::<u32>::new(groups);
        let keys: Vec<Key> = (0..groups * GROUP_SLOTS / 2)
            .map(|_| Key::new(rng.random::<u64>() & Key::MAX))
            .collect();
        for (i, &key) in keys.iter().enumerate() {
            let mut effects = Effects::default();
            assert_eq!(
                old.init(key, 0b11, i as u32, &mut effects),
                Ok(()),
                "{groups} groups"
            );
            assert!(old.home(key) < groups);
        }
        // Half again as many groups, as growth makes them, and back to the first size.
        let next = begin(&old, groups + groups.div_ceil(2));
        let mut effects = Effects::default();
        assert!(
            old.move_round(&mut effects),
            "{groups} groups: every group moved"
        );
        for (i, &key) in keys.iter().enumerate() {
            let mut effects = Effects::default();
            assert_eq!(next.ack(key, 0b01, &mut effects), Applied::Changed);
            assert_eq!(next.ack(key, 0b10, &mut effects), Applied::Changed);
            assert_eq!(
                finish(&next, &mut effects),
                Some((i as u32, Outcome::Acked))
            );
        }
        assert!(next.is_clear(), "{groups} groups: nothing left behind");
    }
}

/// The stranded state: an orphan claimed in a migrating table after every group was clean,
/// with no room in the successor, stays behind, reported stranded; it is HELD, and an init
/// of its root moves it on (stranded again) instead of joining it, so no payload ever sits
/// in a stranded entry ([`growth`](crate::acker::engine::tables::growth),
/// `give_up_stranded`). Once dropped (shutdown), its credit is back and nothing of it is
/// left.
#[test]
fn a_stranded_entry_is_held_and_init_never_joins_it() {
    let old = Table::<u32>::bounded(4, None, 30, false);
    // A successor of two groups (the fewest), full: no room in any window.
    let next = begin(&old, 2);
    for i in 0..2 * GROUP_SLOTS as u64 {
        let mut effects = Effects::stamped(Stamp::new(5, 5));
        next.init(key_in(2, i as usize % 2, 900 + i), 0b1, 0, &mut effects)
            .unwrap();
    }
    let mut effects = Effects::default();
    assert!(
        old.move_round(&mut effects),
        "an empty table is clean at once"
    );
    let key = key_in(4, 2, 42);
    let mut effects = Effects::stamped(Stamp::new(10, 10));
    assert_eq!(old.ack(key, 0b110, &mut effects), Applied::Created);
    let (gen, slot) = effects.take_stranded().expect("no room: stranded");
    assert_eq!(gen, old.gen());
    let word = old.word(slot).load();
    assert!(word.holds(key) && word.state().phase() == Some(Phase::Held));
    // An init finds it, and moves it rather than join it: the payload comes back.
    let mut effects = Effects::stamped(Stamp::new(11, 11));
    assert!(matches!(
        old.init(key, 0b110, 7, &mut effects),
        Err(Refused::Retry(7))
    ));
    assert_eq!(effects.take_stranded(), Some((gen, slot)));
    assert_eq!(old.word(slot).load().state().phase(), Some(Phase::Held));
    // Given up at shutdown: dropped, nothing taken back.
    assert_eq!(old.take_back(slot, key), None);
    assert!(old.discard(slot, key));
    assert_eq!(old.find(key), None);
}

/// A merge's loser is EMPTY between its EMPTY CAS and its restore, and a mover counts such
/// a slot clean; the restore puts back the very word an init read before, so the init's
/// join CAS lands on it (an ABA on the word) after `next` was set. The schedule, run by
/// hand ([`pauses`]): an orphan ack (A) and an init (B) of one root claim twins; A's
/// merge judges its own entry the loser against B's JOINING claim; B unjoins, loses its
/// claim to A's entry and finds that entry to join; A empties it, finds no entry left to
/// carry to, and the migration begins and counts every group clean; A restores its entry
/// and B joins it, and A's move of the restored entry finds it JOINING and leaves it. An
/// init that then settled the tree there would leave it in a table about to be retired,
/// where no operation finds it: B must find the migration after its join and move the
/// entry instead.
#[test]
fn an_init_that_joins_a_restored_merge_loser_during_a_migration_moves_it() {
    use pauses::{script, Point::*};
    use std::sync::mpsc::channel;
    let table = Table::<u32>::new(4);
    let key = key_in(4, 2, 77);
    let (a_tx, a_rx) = channel();
    let (b_tx, b_rx) = channel();
    std::thread::scope(|s| {
        let init = s.spawn(|| {
            script(&[BeforeClaim, ClaimedJoining, BeforeJoin, Joined], &b_tx);
            let mut effects = Effects::default();
            table.init(key, 0b11, 9, &mut effects)
        });
        let b = b_rx.recv().unwrap();
        b.reaches(BeforeClaim); // B searched and found nothing
        let ack = s.spawn(|| {
            script(
                &[BeforeTwinSearch, MergeJudged, BeforeRestore, Restored],
                &a_tx,
            );
            let mut effects = Effects::default();
            table.ack(key, 0b01, &mut effects)
        });
        let a = a_rx.recv().unwrap();
        a.reaches(BeforeTwinSearch); // A's orphan claimed, its twin search next
        b.go();
        b.reaches(ClaimedJoining); // B's claim, JOINING, beside A's orphan
        a.go();
        a.reaches(MergeJudged); // A's own entry the loser, against B's JOINING claim
        b.go();
        b.reaches(BeforeJoin); // B unjoined, lost its claim to A's entry, and would join it
        a.go();
        a.reaches(BeforeRestore); // A's entry EMPTY, nothing to carry its ack to
        let next = begin(&table, 8);
        let mut effects = Effects::default();
        assert!(
            table.move_round(&mut effects),
            "every group counted clean: the old table can be retired"
        );
        a.go();
        a.reaches(Restored); // A's entry back, as B read it
        b.go();
        b.reaches(Joined); // B's join CAS landed on it
        a.go();
        assert_eq!(ack.join().unwrap(), Applied::Created);
        b.go();
        let payload = match init.join().unwrap() {
            Err(Refused::Retry(payload)) => payload,
            other => panic!("the init settled in the migrating table: {other:?}"),
        };
        // As the engine does on `Retry`: init again, in the successor.
        let mut effects = Effects::default();
        next.init(key, 0b11, payload, &mut effects).unwrap();
        assert!(
            table.find(key).is_none(),
            "nothing of the tree is left in the old table"
        );
        assert_eq!(next.ack(key, 0b10, &mut effects), Applied::Changed);
        assert_eq!(
            finish(&next, &mut effects),
            Some((9, Outcome::Acked)),
            "the held ack and the last one complete the tree, in the successor"
        );
    });
}
