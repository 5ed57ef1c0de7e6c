//! Pause points inside the table's protocols, for tests that run one schedule of racing
//! threads by hand: each thread follows a script of the points it stops at, and the test
//! lets it on from one to the next. A schedule that a loom model reaches only after many
//! preemptions (a search of millions of branches) then runs at once, the same every time.
//!
//! The protocols name their points with `pause_point!` (the parent module), which is
//! nothing outside this module's tests. A thread with no script passes every point.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

/// A named point of a protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker::table) enum Point {
    /// An init searched and found no entry; it claims one next.
    BeforeClaim,
    /// An init's claim of a new entry returned (JOINING, if it succeeded); it searches for
    /// twins next.
    ClaimedJoining,
    /// A claimer's twin search is about to begin (`merge_twins`).
    BeforeTwinSearch,
    /// A merge judged its loser and counted its start; the loser's EMPTY CAS is next.
    MergeJudged,
    /// A merge's loser found no entry to carry its contents to; the restore is next.
    BeforeRestore,
    /// A merge's loser was put back; it goes on as a new entry next (`created`).
    Restored,
    /// An init found its entry twinless and checked for a migration; the join CAS is next.
    BeforeJoin,
    /// An init's join CAS landed.
    Joined,
    /// A message's search found no entry; its claim is next.
    BeforeMessageClaim,
    /// A search looked at a group without the root's entry and goes on to the next.
    SearchedGroup,
}

thread_local! {
    /// This thread's script: the points it stops at, in order, and its channels.
    static SCRIPT: RefCell<Option<Script>> = const { RefCell::new(None) };
}

struct Script {
    stops: VecDeque<Point>,
    reached: Sender<Point>,
    go: Receiver<()>,
}

/// Called at each point: stops there if it is the next one in this thread's script.
pub(in crate::acker::table) fn at(point: Point) {
    SCRIPT.with(|script| {
        // Held while stopped: the thread runs nothing else meanwhile.
        let mut script = script.borrow_mut();
        let Some(script) = script.as_mut() else {
            return;
        };
        if script.stops.front() != Some(&point) {
            return;
        }
        script.stops.pop_front();
        script
            .reached
            .send(point)
            .expect("the test stopped listening");
        // The test lets us on; if it panicked meanwhile, go on and end.
        let _ = script.go.recv();
    });
}

/// A thread under a script, as the test sees it.
pub(in crate::acker::table) struct Actor {
    reached: Receiver<Point>,
    go: Sender<()>,
}

impl Actor {
    /// Waits until the thread stops at `point` (its next stop).
    pub(in crate::acker::table) fn reaches(&self, point: Point) {
        let got = self
            .reached
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("no stop at {point:?}: {e}"));
        assert_eq!(got, point, "stopped elsewhere");
    }

    /// Lets the stopped thread on.
    pub(in crate::acker::table) fn go(&self) {
        self.go.send(()).expect("the thread ended");
    }
}

/// Gives the calling thread the script `stops` (run it first thing in the thread); the
/// test drives it through the returned [`Actor`]'s other half, sent back by `actor`.
pub(in crate::acker::table) fn script(stops: &[Point], actor: &Sender<Actor>) {
    let (reached_tx, reached_rx) = channel();
    let (go_tx, go_rx) = channel();
    SCRIPT.with(|script| {
        *script.borrow_mut() = Some(Script {
            stops: stops.iter().copied().collect(),
            reached: reached_tx,
            go: go_rx,
        });
    });
    actor
        .send(Actor {
            reached: reached_rx,
            go: go_tx,
        })
        .expect("the test waits for its actors");
}
