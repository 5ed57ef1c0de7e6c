//! Messages in batches (`Acker::apply`, `Acker::init_each`): the next chunk's roots placed
//! and their home lines prefetched while the current chunk is applied, each message by the
//! same code as one at a time (`message_in`, `reset_in`). A chunk's messages and the next
//! chunk's placement share one operation: one entry and exit a chunk rather than a message
//! (a batched ack at 64 a frame: 307 to 279 instructions), and a batch holds back a grace
//! period (a migration's hand-over, a retired generation's release) no longer than a chunk
//! of [`AHEAD`] messages does. After each message the operation looks again whether the
//! callback is open (`Threads::reopen`): a callback that shut the acker down leaves the
//! chunk's later messages changing nothing, as the same calls one at a time would.

use super::Engine;
use crate::acker::message::Message;
use crate::acker::table::word::Key;
use crate::acker::table::Change;
use crate::acker::threads::Active;

/// Messages a batch places and prefetches at once, while it applies the chunk before:
/// about as many misses as one core keeps in flight (10-12 line fill buffers on current
/// x86 cores), so a prefetch runs 8 to 16 messages ahead of its message.
pub(in crate::acker) const AHEAD: usize = 8;

impl<T: Send + 'static> Engine<T> {
    /// Applies `messages` in order, a chunk of [`AHEAD`] at a time, with the next chunk
    /// placed and prefetched first; `each(index, result)` for a chunk's messages once the
    /// chunk is applied, outside any operation (it is the caller's code, like a callback).
    pub(in crate::acker) fn apply_each(
        &self,
        messages: &[Message],
        each: &mut impl FnMut(usize, bool),
    ) {
        let mut placed = [(0, Key::new(0)); AHEAD];
        let mut next = [(0, Key::new(0)); AHEAD];
        {
            let active = self.threads.enter();
            self.place_ahead(
                &active,
                messages.get(..AHEAD.min(messages.len())).unwrap_or(&[]),
                &mut next,
            );
        }
        for (c, chunk) in messages.chunks(AHEAD).enumerate() {
            std::mem::swap(&mut placed, &mut next);
            let first = c * AHEAD;
            let mut results = [false; AHEAD];
            let after = messages.get(first + AHEAD..).unwrap_or(&[]);
            let mut active = self.threads.enter();
            self.place_ahead(&active, &after[..after.len().min(AHEAD)], &mut next);
            for ((message, &(shard, key)), result) in chunk.iter().zip(&placed).zip(&mut results) {
                *result = match *message {
                    Message::Ack { xor, .. } => {
                        self.message_in(&active, shard, key, Change::Ack(xor))
                    }
                    Message::Fail { .. } => self.message_in(&active, shard, key, Change::Fail),
                    Message::ResetTimeout { .. } => self.reset_in(shard, key),
                };
                // A callback this message ran may have shut the acker down.
                self.threads.reopen(&mut active);
            }
            drop(active);
            for (i, &result) in results[..chunk.len()].iter().enumerate() {
                each(first + i, result);
            }
        }
    }

    /// Prefetches the home lines of `roots` in their tables' current generations
    /// (`Acker::init_each`).
    pub(in crate::acker) fn prefetch_roots(&self, roots: &[u64]) {
        if roots.is_empty() {
            return;
        }
        let active = self.threads.enter();
        self.prefetch_homes(&active, roots.iter().copied(), |_, _| {});
    }

    /// Places `messages`' roots into `placed` and prefetches their home lines, inside the
    /// operation `active` marks.
    #[inline]
    fn place_ahead(
        &self,
        active: &Active,
        messages: &[Message],
        placed: &mut [(usize, Key); AHEAD],
    ) {
        self.prefetch_homes(active, messages.iter().map(Message::root), |i, place| {
            placed[i] = place;
        });
    }

    /// Places each of `roots`, prefetches its home line in its table's current generation
    /// and hands `placed(index, (shard, key))` the placement.
    #[inline]
    fn prefetch_homes(
        &self,
        _active: &Active,
        roots: impl Iterator<Item = u64>,
        mut placed: impl FnMut(usize, (usize, Key)),
    ) {
        for (i, root) in roots.enumerate() {
            let (shard, key) = self.tables.layout.place(root);
            // Safety: inside the operation `_active` marks (the prefetch reads nothing).
            let table = unsafe { self.tables.shards[shard].current() };
            table.prefetch(key);
            placed(i, (shard, key));
        }
    }
}
