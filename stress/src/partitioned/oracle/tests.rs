//! Tests of the partitioned oracle: records built by hand, each judged by its rules.

use super::*;

const TAG: Tag = Tag {
    spout: 0,
    tree: 1,
    attempt: 1,
};
const TIMEOUT_US: u64 = 500_000;

/// Init and one ack to partition 2, incarnation 1, applied at 10 and 20 µs.
fn record(fail: bool, extra: &[(u64, What)]) -> Record {
    let last = if fail { Kind::Fail } else { Kind::Ack(0) };
    let mut history = vec![
        Event {
            us: 0,
            what: What::Sent(Kind::Init, 2),
        },
        Event {
            us: 0,
            what: What::Sent(last, 2),
        },
        Event {
            us: 10,
            what: What::Delivered(Kind::Init, 2, 1, 9),
        },
        Event {
            us: 20,
            what: What::Delivered(last, 2, 1, 19),
        },
    ];
    history.extend(extra.iter().map(|&(us, what)| Event { us, what }));
    Record {
        tag: TAG,
        owner: 2,
        planned: 2,
        fail,
        history,
    }
}

fn problems(r: &Record) -> Vec<String> {
    verify(r, TIMEOUT_US, false)
}

#[test]
fn a_clean_acked_attempt_passes() {
    let done = What::Completed(Outcome::Acked, 2, 1, TAG);
    let r = record(
        false,
        &[
            (20, done),
            (30, What::Resolved(Resolved::Completion(Outcome::Acked))),
        ],
    );
    assert!(problems(&r).is_empty(), "{:?}", problems(&r));
}

#[test]
fn a_completion_from_another_partition_or_twice_is_a_violation() {
    let resolved = (30, What::Resolved(Resolved::Completion(Outcome::Acked)));
    let r = record(
        false,
        &[(20, What::Completed(Outcome::Acked, 3, 1, TAG)), resolved],
    );
    assert!(
        problems(&r)[0].contains("does not own it"),
        "{:?}",
        problems(&r)
    );
    let done = What::Completed(Outcome::Acked, 2, 1, TAG);
    let r = record(false, &[(20, done), (25, done), resolved]);
    assert!(problems(&r).iter().any(|p| p.contains("completed 2 times")));
}

#[test]
fn acked_with_a_fail_and_failed_without_one_are_violations() {
    let resolved = (30, What::Resolved(Resolved::OriginTimeout));
    let r = record(
        true,
        &[(20, What::Completed(Outcome::Acked, 2, 1, TAG)), resolved],
    );
    assert!(problems(&r).iter().any(|p| p.contains("Acked, but a fail")));
    let r = record(
        false,
        &[(20, What::Completed(Outcome::Failed, 2, 1, TAG)), resolved],
    );
    assert!(problems(&r)
        .iter()
        .any(|p| p.contains("Failed, but no fail")));
    let r = record(
        true,
        &[(20, What::Completed(Outcome::Failed, 2, 1, TAG)), resolved],
    );
    assert!(problems(&r).is_empty(), "{:?}", problems(&r));
}

#[test]
fn timing_out_with_every_message_in_time_is_a_violation() {
    let resolved = (TIMEOUT_US, What::Resolved(Resolved::OriginTimeout));
    let r = record(
        false,
        &[
            (TIMEOUT_US, What::Completed(Outcome::TimedOut, 2, 1, TAG)),
            resolved,
        ],
    );
    assert!(problems(&r).iter().any(|p| p.contains("TimedOut, but")));
}

#[test]
fn an_initialized_attempt_must_complete_or_be_handed_back_not_both() {
    let resolved = (TIMEOUT_US, What::Resolved(Resolved::OriginTimeout));
    let r = record(false, &[resolved]);
    assert!(problems(&r)[0].contains("neither completed nor handed back"));
    let r = record(false, &[(15, What::HandedBack(2, 1)), resolved]);
    assert!(problems(&r).is_empty(), "{:?}", problems(&r));
    let done = What::Completed(Outcome::Acked, 2, 1, TAG);
    let r = record(false, &[(15, What::HandedBack(2, 1)), (20, done), resolved]);
    assert!(problems(&r).iter().any(|p| p.contains("also handed back")));
}

#[test]
fn a_message_applied_by_a_partition_that_does_not_own_the_root_is_a_violation() {
    let mut r = record(false, &[(30, What::Resolved(Resolved::OriginTimeout))]);
    r.history[3].what = What::Delivered(Kind::Ack(0), 1, 1, 19);
    assert!(problems(&r)[0].contains("but hash(root) routes to 2"));
}
