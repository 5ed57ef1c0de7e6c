//! What a tree's end looks like to the user: its [`Outcome`], the [`Completion`] the
//! callback receives, and the [`InitError`] that hands an init's payload back.

use std::fmt;
use std::time::Duration;

/// How a tree ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Init seen and every edge acked: the value reached 0.
    Acked,
    /// A fail arrived (and the tree was not acked first).
    Failed,
    /// The deadline passed first.
    TimedOut,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Acked => "acked",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed out",
        })
    }
}

/// One finished tree, handed to `on_complete` exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion<T> {
    /// The tree's root id.
    pub root: u64,
    /// What init attached.
    pub payload: T,
    /// How it ended.
    pub outcome: Outcome,
    /// From the first message seen for this root (init, ack or fail) to the completion.
    pub elapsed: Duration,
}

/// Returned by init; the payload always comes back, nothing is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitError<T> {
    /// `max_pending` entries (trees and orphans) are held. A completed tree's slot and
    /// credit come back at once, on the completing thread; a root whose table has no room
    /// for it makes its table grow rather than be refused, so below `max_pending` an init
    /// is refused only in the rare case that its table is already as large as a table
    /// grows (its share of `max_pending` at half load) and still has no room in the root's
    /// probe window.
    Full(T),
    /// The root was already initialized.
    Duplicate(T),
    /// `shutdown` was called.
    Shutdown(T),
}

impl<T> InitError<T> {
    /// The payload handed back.
    pub fn into_payload(self) -> T {
        match self {
            InitError::Full(p) | InitError::Duplicate(p) | InitError::Shutdown(p) => p,
        }
    }
}

impl<T> fmt::Display for InitError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InitError::Full(_) => {
                "acker is full: max_pending trees are pending, or this root's buckets are"
            }
            InitError::Duplicate(_) => "root already initialized",
            InitError::Shutdown(_) => "acker is shut down",
        })
    }
}

impl<T: fmt::Debug> std::error::Error for InitError<T> {}

pub(crate) type Callback<T> = Box<dyn Fn(Completion<T>) + Send + Sync>;

/// Where a burst of timeouts goes, a batch at a time, in place of a callback each
/// (`Engine::deliver_timeouts`, "A burst's hand-over"): set by the async acker, not by users.
pub(crate) type BurstHandOver<T> = Box<dyn Fn(Vec<Completion<T>>) + Send + Sync>;
