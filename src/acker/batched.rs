//! Messages in batches: [`Acker::apply`] takes a slice of acks, fails and resets and
//! applies them in order, each exactly as its own call would, while the memory the next
//! ones need is already on its way.
//!
//! One message costs little once its root's table line is in the cache (a hash, a load and
//! one 128-bit CAS); with many roots pending the line is nearly always in memory, and a
//! message waits ~100 ns for it, during which one-message-at-a-time code can do nothing
//! else. A batch knows its next messages. It places the roots of a chunk of [`AHEAD`]
//! messages (their tables and keys) and asks the CPU for their home lines (a prefetch: a
//! hint that never faults and never waits) while it applies the chunk before, so that the
//! misses of a whole chunk overlap with one another and with the work of the chunk before.
//! A chunk's messages are then applied one after another in one acker operation, which
//! also places the next chunk, so a batch delays a grace period by one chunk at most, not
//! by the whole batch. A root that lives outside
//! its home group, or a table that moved to a successor in the meantime, costs what it
//! costs one at a time: the prefetch is a hint, and each message is applied by the same
//! code as [`Acker::ack`], [`Acker::fail`] and [`Acker::reset_timeout`]
//! ([`engine`](crate::acker::engine)'s `message_in` and `reset_in`). So batched and
//! one-by-one application deliver the same completions, with the same payloads, in the same
//! order, and count the same statistics. The caller's `each` of [`Acker::apply_each`] runs
//! once a chunk is done, outside any operation, as a callback would.

use super::engine::batched::AHEAD;
use super::{Acker, InitError, Message};

impl<T: Send + 'static> Acker<T> {
    /// Applies `messages` in order, each exactly as [`ack`](Self::ack),
    /// [`fail`](Self::fail) or [`reset_timeout`](Self::reset_timeout) would, with the
    /// memory of the next ones fetched ahead (as [`Message`] says). Returns
    /// how many trees the acks and fails completed; their completions are delivered as one
    /// by one (to `on_complete`, in the same order). [`apply_each`](Self::apply_each)
    /// tells each message's result.
    ///
    /// Batch when messages arrive together anyway: a socket read of many frames, a queue
    /// drained in one go, a frame of acks for one owner. With many trees pending (100k and
    /// more, where a root's line is seldom in the cache) a batch of a few dozen messages or
    /// more saves most of each message's wait for memory; with a few thousand pending, the
    /// lines are in the cache and a batch saves little. A batch is not atomic: other
    /// threads' messages, and the reaper, may act between two of its messages.
    ///
    /// ```
    /// use ackwheel::{Acker, Message};
    ///
    /// let acker: Acker = Acker::builder().build_manual().unwrap();
    /// acker.init(1, 0b11, 10).unwrap();
    /// acker.init(2, 0b1, 20).unwrap();
    /// let frame = [
    ///     Message::Ack { root: 1, xor: 0b01 },
    ///     Message::Ack { root: 2, xor: 0b1 }, // completes tree 2
    ///     Message::Fail { root: 1 },          // completes tree 1, failed
    /// ];
    /// assert_eq!(acker.apply(&frame), 2);
    /// assert_eq!(acker.pending(), 0);
    /// ```
    pub fn apply(&self, messages: &[Message]) -> usize {
        let mut completed = 0;
        self.apply_each(messages, |i, result| {
            if !matches!(messages[i], Message::ResetTimeout { .. }) {
                completed += usize::from(result);
            }
        });
        completed
    }

    /// [`apply`](Self::apply), calling `each(index, result)` once the message at `index`
    /// has been applied (with at most 7 of the next ones: a chunk of 8 is applied at once),
    /// with what its own call returns: for an ack or a fail, whether it completed a tree;
    /// for a reset, whether the root had an uncompleted entry. Every call of `each` comes
    /// after every `on_complete` call of the messages it reports.
    ///
    /// ```
    /// use ackwheel::{Acker, Message};
    ///
    /// let acker: Acker = Acker::builder().build_manual().unwrap();
    /// acker.init(7, 0b1, 0).unwrap();
    /// let frame = [Message::ResetTimeout { root: 7 }, Message::Ack { root: 7, xor: 0b1 }];
    /// let mut results = Vec::new();
    /// acker.apply_each(&frame, |i, result| results.push((i, result)));
    /// assert_eq!(results, [(0, true), (1, true)]);
    /// ```
    pub fn apply_each(&self, messages: &[Message], mut each: impl FnMut(usize, bool)) {
        self.engine().apply_each(messages, &mut each);
    }

    /// Inits the trees `trees` yields, `(root, xor, payload)`, in order, each exactly as
    /// [`init`](Self::init) would, with the home lines of the next ones fetched ahead (up
    /// to 16 are taken from the iterator ahead of the one being inited). `each(index,
    /// result)` gets every init's result, a refused init's payload included: nothing is
    /// lost. With many trees pending, an init's claim is a trip to memory that a batch
    /// overlaps with the next ones'.
    ///
    /// ```
    /// use ackwheel::{Acker, InitError};
    ///
    /// let acker: Acker<&str> = Acker::builder().max_pending(2).build_manual().unwrap();
    /// let mut refused = Vec::new();
    /// acker.init_each([(1, 0b1, "a"), (2, 0b1, "b"), (3, 0b1, "c")], |i, result| {
    ///     if let Err(e) = result {
    ///         refused.push((i, e.into_payload()));
    ///     }
    /// });
    /// assert_eq!(refused, [(2, "c")]); // max_pending 2: the third is handed back
    /// assert_eq!(acker.pending(), 2);
    /// ```
    pub fn init_each<I>(&self, trees: I, mut each: impl FnMut(usize, Result<(), InitError<T>>))
    where
        I: IntoIterator<Item = (u64, u64, T)>,
    {
        let engine = self.engine();
        let mut trees = trees.into_iter();
        // Two chunks: the one being inited, and the next, whose lines are on their way.
        let mut now: Vec<(u64, u64, T)> = Vec::with_capacity(AHEAD);
        let mut next: Vec<(u64, u64, T)> = Vec::with_capacity(AHEAD);
        let mut roots = [0u64; AHEAD];
        let mut fill = |chunk: &mut Vec<(u64, u64, T)>, trees: &mut I::IntoIter| {
            chunk.extend(trees.by_ref().take(AHEAD));
            for (root, tree) in roots.iter_mut().zip(chunk.iter()) {
                *root = tree.0;
            }
            engine.prefetch_roots(&roots[..chunk.len()]);
        };
        fill(&mut next, &mut trees);
        let mut index = 0;
        while !next.is_empty() {
            std::mem::swap(&mut now, &mut next);
            fill(&mut next, &mut trees);
            for (root, xor, payload) in now.drain(..) {
                each(index, engine.init(root, xor, payload, None));
                index += 1;
            }
        }
    }
}
