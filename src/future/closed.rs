//! [`Closed`]: what a tree's future or the stream of completions returns once the acker
//! has shut down.

use std::fmt;

/// The acker shut down, or every handle of it was dropped: a
/// [`TreeCompletion`](crate::future::TreeCompletion) whose tree had not completed, or a
/// [`Completions`](crate::future::Completions) stream that has ended
/// ([`Completions::try_next`](crate::future::Completions::try_next)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the acker was shut down")
    }
}

impl std::error::Error for Closed {}
