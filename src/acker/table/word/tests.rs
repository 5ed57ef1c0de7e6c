//! The word's encoding and its transitions, one state at a time.

use super::*;

const K: u64 = 0x0abc_def0_1234_5678;

fn key() -> Key {
    Key::new(K)
}

#[test]
fn fields_round_trip_through_the_bits() {
    for (bits, value) in [(0, 0), (K, u64::MAX), (Key::MAX, 1)] {
        let w = Word::held_ack(Key::new(bits), value);
        assert_eq!(Word::from_bits(w.to_bits()), w);
        assert_eq!(w.key(), Key::new(bits));
        assert_eq!(w.value(), value);
        assert_eq!(w.state().phase(), Some(Phase::Held));
    }
    assert_eq!(Word::from_bits(0), Word::EMPTY);
    assert_eq!(Word::EMPTY.state(), State::EMPTY);
}

#[test]
fn the_one_compare_tests_of_a_code_agree_with_its_phase() {
    // Every code the state bits can hold: `holds` and `acked` test the phase with one
    // compare each (`PHASE_CODES`, `LIVE_FROM`), which must say what `phase` says.
    for code in 0..=u8::MAX >> (8 - STATE_BITS) {
        let word = Word::held_ack(key(), 1).with(State(code));
        let phase = State(code).phase();
        assert_eq!(word.holds(key()), phase.is_some(), "code {code}");
        let completes = matches!(word.acked(1), Some(Step::Complete(..)));
        assert_eq!(completes, phase == Some(Phase::Live), "code {code}");
        assert_eq!(word.acked(1).is_some(), phase.is_some(), "code {code}");
    }
}

#[test]
fn an_ack_completes_only_a_live_tree_and_in_the_same_step() {
    let held = Word::held_ack(key(), 0b1);
    // A held orphan reaching 0 (a duplicated ack) completes nothing.
    assert_eq!(held.acked(0b1), Some(Step::To(Word::placeholder(key()))));
    let joining = held.joined(0b10).unwrap();
    assert_eq!(joining.value(), 0b11);
    assert!(matches!(joining.acked(0b11), Some(Step::To(w)) if w.value() == 0));
    let Some(Step::To(live)) = joining.settled() else {
        panic!("value 0b11 settles LIVE")
    };
    assert!(matches!(live.acked(0b01), Some(Step::To(w)) if w.value() == 0b10));
    let Some(Step::Complete(done, Outcome::Acked)) = live.acked(0b11) else {
        panic!("the last ack completes")
    };
    assert_eq!(done, Word::EMPTY, "completed and emptied in one step");
    assert_eq!(done.acked(1), None, "a completed word takes no ack");
    assert!(!done.holds(key()));
}

#[test]
fn settle_lets_acked_win_over_a_held_fail() {
    let failed = Word::held_fail(key()).failed().unwrap().word();
    assert!(failed.state().failed());
    let acked = Word::held_ack(key(), 0b1).failed().unwrap().word();
    // Init's XOR cancels the held acks: Acked, though a fail was held.
    let Some(Step::Complete(done, outcome)) = acked.joined(0b1).unwrap().settled() else {
        panic!("held acks that cancel init's XOR complete at settle")
    };
    assert_eq!((done, outcome), (Word::EMPTY, Outcome::Acked));
    let Some(Step::Complete(_, outcome)) = failed.joined(0b1).unwrap().settled() else {
        panic!("a held fail completes at settle")
    };
    assert_eq!(outcome, Outcome::Failed);
}

#[test]
fn a_second_init_cannot_join() {
    let joining = Word::placeholder(key()).joined(5).unwrap();
    assert_eq!(joining.joined(5), None);
    let live = joining.settled().unwrap().word();
    assert_eq!(live.joined(5), None);
    assert_eq!(Word::EMPTY.joined(5), None);
}

#[test]
fn reset_survives_join_and_settle_and_blocks_expiry_until_seen() {
    let held = Word::held_ack(key(), 1).reset().unwrap();
    assert_eq!(held.expired(), None, "R must be seen first");
    let live = held.joined(2).unwrap().settled().unwrap().word();
    assert!(live.state().reset());
    assert_eq!(live.expired(), None);
    let seen = live.reset_seen().unwrap();
    assert!(!seen.state().reset());
    assert_eq!(seen.reset_seen(), None);
    assert!(matches!(
        seen.expired(),
        Some(Step::Complete(_, Outcome::TimedOut))
    ));
    assert_eq!(
        Word::held_ack(key(), 1).expired(),
        Some(Step::To(Word::EMPTY)),
        "an orphan is dropped"
    );
    assert_eq!(
        held.joined(2).unwrap().reset_seen().unwrap().expired(),
        None
    );
}

#[test]
fn a_twin_is_absorbed_as_its_acks_and_fail() {
    let live = Word::placeholder(key())
        .joined(0b11)
        .unwrap()
        .settled()
        .unwrap()
        .word();
    let twin = Word::held_ack(key(), 0b01).failed().unwrap().word();
    // Its ack leaves 0b10, its fail then completes the LIVE tree.
    assert!(matches!(
        live.absorbed(twin),
        Some(Step::Complete(_, Outcome::Failed))
    ));
    let twin = Word::held_ack(key(), 0b11).failed().unwrap().word();
    assert!(matches!(
        live.absorbed(twin),
        Some(Step::Complete(_, Outcome::Acked))
    ));
    let held = Word::placeholder(key());
    assert_eq!(held.absorbed(twin).unwrap().word().value(), 0b11);
    assert!(held.absorbed(twin).unwrap().word().state().failed());
}

#[test]
fn only_held_and_live_words_freeze_and_frozen_or_moved_take_no_message() {
    let held = Word::held_ack(key(), 3).reset().unwrap();
    let frozen = held.frozen().unwrap();
    assert!(frozen.frozen_for(key()) && !frozen.holds(key()));
    assert_eq!((frozen.key(), frozen.value()), (key(), 3));
    let live = Word::placeholder(key())
        .joined(1)
        .unwrap()
        .settled()
        .unwrap()
        .word();
    assert!(live.frozen().is_some());
    assert_eq!(Word::placeholder(key()).joined(1).unwrap().frozen(), None);
    assert_eq!(Word::EMPTY.frozen(), None);
    let moved = frozen.moved();
    assert!(!moved.holds(key()) && !moved.frozen_for(key()));
    for w in [frozen, moved] {
        assert_eq!(w.frozen(), None);
        assert_eq!(w.acked(1), None);
        assert_eq!(w.failed(), None);
        assert_eq!(w.joined(1), None);
        assert_eq!(w.reset(), None);
        assert_eq!(w.expired(), None);
        assert_eq!(w.taken_back(), None);
    }
    assert_eq!(format!("{:?}", moved.state()), "MOVED");
}

#[test]
fn init_claims_joining_and_gives_its_xor_back_when_it_unjoins() {
    let claimed = Word::joining(key(), 0b110);
    assert_eq!(claimed, Word::placeholder(key()).joined(0b110).unwrap());
    assert!(claimed.holds(key()));
    assert_eq!(claimed.joined(1), None, "a second init finds it joined");
    // An ack and a fail land while it is JOINING; nothing completes.
    let Some(Step::To(acked)) = claimed.acked(0b010) else {
        panic!("an ack on JOINING completes nothing");
    };
    let Some(Step::To(failed)) = acked.failed() else {
        panic!("a fail on JOINING is held");
    };
    // Unjoined: what the messages brought, held, with the fail.
    let held = failed.unjoined(0b110).unwrap();
    assert_eq!(held.value(), 0b010);
    assert_eq!(held.state().phase(), Some(Phase::Held));
    assert!(held.state().failed());
    assert_eq!(held, Word::held_fail(key()).acked(0b010).unwrap().word());
    // Only JOINING unjoins.
    assert_eq!(held.unjoined(0b110), None);
    assert_eq!(claimed.settled().unwrap().word().unjoined(0b110), None);
    assert_eq!(Word::EMPTY.unjoined(0), None);
}

#[test]
fn states_print_their_names() {
    let w = Word::held_fail(key()).reset().unwrap();
    assert_eq!(format!("{:?}", w.state()), "Held|F|R");
    assert_eq!(format!("{:?}", State::EMPTY), "EMPTY");
}
