//! Twins that a message finds before their claimer merges them: schedules run by hand
//! ([`pauses`]) in which a message lands in an unmerged twin and returns, and a later ack
//! reaches the tree (module docs of [`table`](crate::acker::table), "Twin claims").

use super::*;

/// What a twin schedule saw: the third message's result and completion, the last ack's,
/// and the root's one entry at the end (if any), as its word.
#[derive(Debug)]
struct TwinSchedule {
    third: (Applied, Option<(u32, Outcome)>),
    last: (Applied, Option<(u32, Outcome)>),
    left: Option<Word>,
}

/// A table of 4 groups whose group 0 is full of other roots' trees (and group 1 holds one
/// more of them when `spill`, so that searches from group 0 go on to group 1); the other
/// roots, in their slots' order.
fn crowded_home(spill: bool) -> (Table<u32>, Vec<Key>) {
    let table = Table::<u32>::new(4);
    let count = GROUP_SLOTS as u64 + u64::from(spill);
    let others: Vec<Key> = (0..count).map(|i| key_in(4, 0, 1000 + i)).collect();
    for (i, &other) in others.iter().enumerate() {
        let mut effects = Effects::default();
        table
            .init(other, 0b1, 100 + i as u32, &mut effects)
            .unwrap();
    }
    (table, others)
}

/// Completes another root's tree: its slot is free.
fn free_slot_of(table: &Table<u32>, other: Key) -> usize {
    let (slot, _) = table.find(other).unwrap();
    let mut effects = Effects::default();
    table.ack(other, 0b1, &mut effects);
    assert!(finish(table, &mut effects).is_some());
    slot
}

/// A schedule's end: A1 let on to its twin search and joined, and what the schedule saw,
/// with the root's one entry left (checked twinless).
fn ended(
    (a1, a1_at): (std::thread::ScopedJoinHandle<'_, Applied>, pauses::Actor),
    table: &Table<u32>,
    key: Key,
    third: (Applied, Option<(u32, Outcome)>),
    last: (Applied, Option<(u32, Outcome)>),
) -> TwinSchedule {
    a1_at.go();
    a1.join().unwrap();
    let left = table.find(key).map(|(slot, word)| {
        assert_eq!(table.find_other(key, Some(slot)), None, "a twin left");
        word
    });
    TwinSchedule { third, last, left }
}

/// A1 of the schedules below, on a thread of `s`: an ack of `key` (0b01) stopped after its
/// search found no entry, before its claim (and to stop again before its twin search).
fn orphan_ack_before_its_claim<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    table: &'s Table<u32>,
    key: Key,
) -> (std::thread::ScopedJoinHandle<'s, Applied>, pauses::Actor) {
    use pauses::{script, Point::*};
    let (tx, rx) = std::sync::mpsc::channel();
    let a1 = s.spawn(move || {
        script(&[BeforeMessageClaim, BeforeTwinSearch], &tx);
        let mut effects = Effects::default();
        table.ack(key, 0b01, &mut effects)
    });
    let at = rx.recv().unwrap();
    at.reaches(BeforeMessageClaim);
    (a1, at)
}

/// A twin claimed before the tree in probe order, run by hand ([`pauses`]): the tree
/// (init 0b11, payload 9) settles past its full home group; an ack A1 of 0b01, whose
/// search found nothing before the tree existed, claims a slot of the home group freed
/// meanwhile and stops before its twin search; `third` (A3) is sent and returns; an ack A2
/// of 0b11, whose search had passed the home group before A1's claim, goes on; A1 merges.
/// A3 found the twin first, which is merged only after its claimer's search: before a
/// message on a HELD entry merged it, A2 completed the tree without A3.
fn twin_before_the_tree(third: Change) -> TwinSchedule {
    use pauses::{script, Point::*};
    use std::sync::mpsc::channel;
    let (table, others) = crowded_home(false);
    let key = key_in(4, 0, 77);
    let (a2_tx, a2_rx) = channel();
    std::thread::scope(|s| {
        let (a1, a1_at) = orphan_ack_before_its_claim(s, &table, key);
        let mut effects = Effects::default();
        table.init(key, 0b11, 9, &mut effects).unwrap();
        let (tree, _) = table.find(key).unwrap();
        assert_eq!(tree / GROUP_SLOTS, 1, "past its full home group");
        let freed = free_slot_of(&table, others[1]);
        let a2 = s.spawn(|| {
            script(&[SearchedGroup], &a2_tx);
            let mut effects = Effects::default();
            let applied = table.ack(key, 0b11, &mut effects);
            (applied, finish(&table, &mut effects))
        });
        let a2_at = a2_rx.recv().unwrap();
        a2_at.reaches(SearchedGroup); // A2 passed the home group
        a1_at.go();
        a1_at.reaches(BeforeTwinSearch); // A1's orphan in the freed slot, not merged yet
        assert_eq!(table.word(freed).load(), Word::held_ack(key, 0b01));
        let mut effects = Effects::default();
        let applied = table.apply(key, third, true, &mut effects);
        let third = (applied, finish(&table, &mut effects));
        a2_at.go();
        let last = a2.join().unwrap();
        ended((a1, a1_at), &table, key, third, last)
    })
}

/// A twin claimed after the tree in probe order, run by hand ([`pauses`]): an ack A1 of
/// 0b01 finds no entry, a free slot of the home group its vacancy, and stops before its
/// claim; `third` (A3) searches the home group and stops; the tree's init (0b11, payload
/// 9) claims that slot and settles; A1's claim, its vacancy taken, lands in the next group
/// and stops before its twin search; A3 finds A1's twin, lands there and returns; then an
/// ack A2 of 0b11 is sent, after A3 returned. Before a message on a HELD entry merged it,
/// A2 completed the tree without A3, though A3 came first.
fn twin_after_the_tree(third: Change) -> TwinSchedule {
    use pauses::{script, Point::*};
    use std::sync::mpsc::channel;
    let (table, others) = crowded_home(true);
    let key = key_in(4, 0, 77);
    let freed = free_slot_of(&table, others[1]);
    let (a3_tx, a3_rx) = channel();
    std::thread::scope(|s| {
        let (a1, a1_at) = orphan_ack_before_its_claim(s, &table, key);
        let a3 = s.spawn(|| {
            script(&[SearchedGroup], &a3_tx);
            let mut effects = Effects::default();
            let applied = table.apply(key, third, true, &mut effects);
            (applied, finish(&table, &mut effects))
        });
        let a3_at = a3_rx.recv().unwrap();
        a3_at.reaches(SearchedGroup); // A3 passed the home group
        let mut effects = Effects::default();
        table.init(key, 0b11, 9, &mut effects).unwrap();
        assert_eq!(table.find(key).map(|(slot, _)| slot), Some(freed));
        a1_at.go();
        a1_at.reaches(BeforeTwinSearch); // A1's orphan past the tree, not merged yet
        a3_at.go();
        let third = a3.join().unwrap();
        let mut effects = Effects::default();
        let applied = table.ack(key, 0b11, &mut effects);
        let last = (applied, finish(&table, &mut effects));
        ended((a1, a1_at), &table, key, third, last)
    })
}

/// What each schedule below must end with: the third message, carried to the tree with
/// A1's ack, completed it `outcome` in its own call, and A2's 0b11 came after it, an
/// orphan, the root's one entry left.
fn assert_reached_the_tree(seen: TwinSchedule, outcome: Outcome) {
    assert_eq!(
        seen.third,
        (Applied::Changed, Some((9, outcome))),
        "{seen:?}"
    );
    assert_eq!(seen.last, (Applied::Created, None), "{seen:?}");
    assert_eq!(seen.left, Some(Word::held_ack(key_in(4, 0, 77), 0b11)));
}

/// A3 an ack of 0b10: with A1's ack it completes the tree (0b11 ^ 0b01 ^ 0b10), Acked.
/// Before the fix, A3 stayed in the twin and A2 completed the tree with the XOR of all the
/// messages 0b11.
#[test]
fn an_ack_on_an_unmerged_twin_before_the_tree_reaches_the_tree_before_it_returns() {
    assert_reached_the_tree(twin_before_the_tree(Change::Ack(0b10)), Outcome::Acked);
}

/// A3 a fail: the tree fails in A3's call. Before the fix, A2 completed it Acked.
#[test]
fn a_fail_on_an_unmerged_twin_before_the_tree_reaches_the_tree_before_it_returns() {
    assert_reached_the_tree(twin_before_the_tree(Change::Fail), Outcome::Failed);
}

/// The same with the twin after the tree: A2, sent after the fail returned, must not
/// complete the tree Acked. Before the fix it did.
#[test]
fn a_fail_on_an_unmerged_twin_after_the_tree_reaches_the_tree_before_it_returns() {
    assert_reached_the_tree(twin_after_the_tree(Change::Fail), Outcome::Failed);
}
