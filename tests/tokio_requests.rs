//! Runs the `tokio_requests` example: every request must get exactly one outcome.
#![cfg(feature = "tokio")]

#[allow(dead_code)] // the example's `main`
#[path = "../examples/tokio_requests.rs"]
mod example;

#[test]
fn every_request_gets_exactly_one_outcome() {
    let summary = example::run(300);
    assert_eq!(summary.requests, 300);
    assert_eq!(
        summary.acked + summary.failed + summary.timed_out,
        summary.requests
    );
    // About 6 % of requests have a silent sub-task and 6 % a failing one: some of each.
    assert!(summary.acked > 0 && summary.failed + summary.timed_out > 0);
}
