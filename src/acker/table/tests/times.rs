//! A slot's times: the stamps a claim writes and emptying frees, a tree's own timeout
//! counted from its first message, resets that never bring a deadline earlier, and the
//! times word as a claimer's reservation.

use super::*;

#[test]
fn a_claim_stamps_the_times_and_emptying_the_slot_frees_them() {
    let table = Table::<u32>::new(2);
    let key = key_in(2, 0, 1);
    let mut effects = Effects::stamped(Stamp::new(100, 130));
    assert_eq!(table.ack(key, 0b1, &mut effects), Applied::Created);
    let slot = effects
        .take_to_file()
        .map(|(_, s)| s)
        .expect("the orphan's slot is reported");
    assert_eq!(effects.take_to_file().map(|(_, s)| s), None);
    let stamp = table.times(slot).unwrap();
    assert_eq!((stamp.start(), stamp.base()), (100, 130));
    assert_eq!(
        table.deadline(slot),
        Some(130),
        "this table's default timeout is 0"
    );
    // Not due before its deadline: the reaper is told when it is.
    let mut reaper = Effects::default();
    assert_eq!(
        table.expire(slot, key.tag(), 129, &mut reaper),
        Expiry::NotDue(130)
    );
    assert_eq!(
        table.expire(slot, key.tag(), 130, &mut reaper),
        Expiry::Dropped
    );
    assert_eq!(table.times(slot), None, "a dropped orphan's slot is free");
    assert!(table.is_clear());
}

#[test]
fn an_init_with_its_own_timeout_counts_from_the_first_message() {
    let table = Table::<u32>::bounded(2, None, 30, false);
    let key = key_in(2, 0, 1);
    let mut early = Effects::stamped(Stamp::new(10, 10));
    table.ack(key, 0b01, &mut early); // the orphan: first message at tick 10
    let slot = early.take_to_file().map(|(_, s)| s).unwrap();
    assert_eq!(table.deadline(slot), Some(40), "the default timeout");
    let mut init = Effects::stamped(Stamp::new(25, 25));
    table.init_with(key, 0b11, 7, Some(100), &mut init).unwrap();
    assert_eq!(
        init.take_to_file().map(|(_, s)| s),
        None,
        "joined the orphan, due later: no new timer"
    );
    assert_eq!(table.times(slot), Some(Stamp::new(10, 10)));
    assert_eq!(table.deadline(slot), Some(110));
    // A reset moves the base to now (the deadline to now + the tree's own timeout), and
    // marks R.
    assert!(table.reset(key, 50));
    assert_eq!(table.deadline(slot), Some(150));
    let mut reaper = Effects::default();
    assert_eq!(
        table.expire(slot, key.tag(), 149, &mut reaper),
        Expiry::NotDue(150)
    );
    assert_eq!(
        table.expire(slot, key.tag(), 150, &mut reaper),
        Expiry::TimedOut
    );
    assert_eq!(finish(&table, &mut reaper), Some((7, Outcome::TimedOut)));
    assert!(table.is_clear());
}

#[test]
fn a_reset_never_brings_a_deadline_earlier() {
    let table = Table::<u32>::new(2);
    let key = key_in(2, 0, 1);
    let mut effects = Effects::stamped(Stamp::new(10, 1_000));
    table.init(key, 0b1, 7, &mut effects).unwrap();
    let slot = effects.take_to_file().map(|(_, s)| s).unwrap();
    // A base of 20 would be before the stored 1000: kept.
    assert!(table.reset(key, 20));
    assert_eq!(table.times(slot).unwrap().base(), 1_000);
}

#[test]
fn a_shorter_own_timeout_asks_for_another_timer_and_a_reset_before_init_counts() {
    let table = Table::<u32>::bounded(2, None, 30, false);
    let key = key_in(2, 0, 1);
    let mut early = Effects::stamped(Stamp::new(10, 10));
    table.ack(key, 0b01, &mut early);
    let slot = early.take_to_file().map(|(_, s)| s).unwrap();
    assert!(table.reset(key, 20)); // before init: the timeout counts from 20
    let mut init = Effects::stamped(Stamp::new(25, 25));
    table.init_with(key, 0b11, 7, Some(5), &mut init).unwrap();
    assert_eq!(
        init.take_to_file().map(|(_, s)| s),
        Some(slot),
        "due before the timer filed for it"
    );
    assert_eq!(
        table.deadline(slot),
        Some(25),
        "the reset's base plus the own timeout"
    );
}

#[test]
fn a_reserved_slot_is_skipped_by_other_claimers() {
    let table = Table::<u32>::new(2);
    let (a, b) = (key_in(2, 0, 1), key_in(2, 0, 2));
    // Reserve a's home group's first slot as a claimer would before its word CAS.
    table
        .times_of(0)
        .store(Stamp::default().bits(), crate::sync::Ordering::SeqCst);
    let mut effects = Effects::default();
    assert_eq!(table.ack(a, 1, &mut effects), Applied::Created);
    assert_eq!(
        effects.take_to_file().map(|(_, s)| s),
        Some(1),
        "slot 0 is reserved, so the next one"
    );
    table.times_of(0).store(0, crate::sync::Ordering::SeqCst);
    assert_eq!(table.ack(b, 1, &mut effects), Applied::Created);
    assert_eq!(effects.take_to_file().map(|(_, s)| s), Some(0));
}
