//! What the spouts and bolts tell the oracle about a tree as they send its messages: its
//! start, each init, ack, fail and reset with the readings around the call, and its flags.

use super::*;

impl Oracle {
    /// A spout takes a free slot for a new tree with `children` root tuples. Returns the
    /// reading taken before any message of the tree, which starts the oracle's deadline.
    pub(crate) fn begin(
        &self,
        slot: u32,
        root: u64,
        tree: u64,
        msg: u64,
        attempt: u8,
        children: u32,
    ) -> u64 {
        let s = self.slot(slot);
        // Relaxed throughout: the slot reaches other threads only through a channel send
        // (a tuple, or the payload inside the acker), which orders these stores before them.
        s.tree.store(tree, Ordering::Relaxed);
        s.msg
            .store(msg << 8 | u64::from(attempt), Ordering::Relaxed);
        // Spout until init is sent, the completion, and one per root tuple.
        s.refs.store(2 + children, Ordering::Relaxed);
        s.flags.store(0, Ordering::Relaxed);
        s.completions.store(0, Ordering::Relaxed);
        s.outcome.store(0, Ordering::Relaxed);
        s.init_after.store(0, Ordering::Relaxed);
        s.fail_before.store(u64::MAX, Ordering::Relaxed);
        s.fail_after.store(u64::MAX, Ordering::Relaxed);
        s.completed_at.store(0, Ordering::Relaxed);
        s.elapsed.store(0, Ordering::Relaxed);
        s.log_len.store(0, Ordering::Relaxed);
        s.messages_in_flight.store(0, Ordering::Relaxed);
        s.last_message_after.store(0, Ordering::Relaxed);
        s.late_resets_len.store(0, Ordering::Relaxed);
        s.root.store(root, Ordering::Release);
        let before = self.now();
        s.first_before.store(before, Ordering::Relaxed);
        s.last_after.store(before, Ordering::Relaxed);
        s.deadline
            .store(before.wrapping_add(self.timeout), Ordering::Relaxed);
        self.log(slot, Event::Start, before, u64::from(children));
        before
    }

    /// Appends to the tree's history.
    pub(crate) fn log(&self, slot: u32, event: Event, time: u64, data: u64) {
        let s = self.slot(slot);
        let i = s.log_len.fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(entry) = s.log.get(i) {
            entry[0].store((event as u64) << 56 | (time & TIME_MASK), Ordering::Relaxed);
            entry[1].store(data, Ordering::Relaxed);
        }
    }

    /// A message call for the tree has just returned: note the time and log it.
    pub(crate) fn sent(&self, slot: u32, event: Event, data: u64) -> u64 {
        let after = self.now();
        self.slot(slot)
            .last_after
            .fetch_max(after, Ordering::Relaxed);
        self.log(slot, event, after, data);
        after
    }

    /// An ack or fail for the tree is about to be called: returns the reading before it.
    /// Every such call ends with [`message_sent`](Self::message_sent) (or `fail_sent`).
    pub(crate) fn calling(&self, slot: u32) -> u64 {
        // SeqCst (and below): a reset's `late_reset` must see either this count or the
        // message's `last_message_after`, whichever way they interleave.
        self.slot(slot)
            .messages_in_flight
            .fetch_add(1, Ordering::SeqCst);
        self.now()
    }

    /// An ack or fail announced by [`calling`](Self::calling) has returned: note the time
    /// and log it.
    pub(crate) fn message_sent(&self, slot: u32, event: Event, data: u64) -> u64 {
        let after = self.sent(slot, event, data);
        let s = self.slot(slot);
        s.last_message_after.fetch_max(after, Ordering::SeqCst);
        s.messages_in_flight.fetch_sub(1, Ordering::SeqCst);
        after
    }

    pub(crate) fn flag(&self, slot: u32, flag: u32) {
        self.slot(slot).flags.fetch_or(flag, Ordering::Relaxed);
    }

    pub(crate) fn init_sent(&self, slot: u32, xor: u64) {
        let after = self.sent(slot, Event::Init, xor);
        self.slot(slot).init_after.store(after, Ordering::Relaxed);
    }

    pub(crate) fn fail_sent(&self, slot: u32, before: u64, completed: bool) {
        let after = self.message_sent(slot, Event::Fail, u64::from(completed));
        let s = self.slot(slot);
        s.flags.fetch_or(FAIL_SENT, Ordering::Relaxed);
        s.fail_before.fetch_min(before, Ordering::Relaxed);
        s.fail_after.fetch_min(after, Ordering::Relaxed);
    }

    /// A `reset_timeout` called at `called` returned `pending`. The acker must honour
    /// every reset that found the tree pending, even one racing the old deadline: the
    /// oracle's deadline becomes `called + timeout`.
    ///
    /// A `true` can also be about an orphan, not the tree: once the reaper has decided the
    /// tree's timeout, a late ack or fail makes an orphan for the root, and a reset finds it
    /// (an uncompleted entry, initialized or not: `Acker::reset_timeout`'s docs). The completion is delivered
    /// after the reaper's pass, tens of milliseconds later under TSan, so delivery does not
    /// date the decision. Two things do:
    ///
    /// * the decision came after the reaper read its clock, which `Completion::elapsed`
    ///   gives to within a tick: not before `first_before + elapsed - 2 ticks` (`verify`'s
    ///   `decided_after`);
    /// * an orphan needs a message that returned after the decision and began before the
    ///   reset returned. The latest such return the reset can vouch for is `orphan_by`:
    ///   the reset's own return when a message was under way, else the last message's
    ///   return (the count and the time are read in that order, and a message stores them
    ///   in the other, so one that began before the reset returned shows in one of them).
    ///   A message begun in the nanoseconds between the reset's return and these reads
    ///   counts too: lenient, by that window only.
    ///
    /// So a reset binds unless `orphan_by` is after the decision's earliest time. One whose
    /// `orphan_by` is before the base deadline less two ticks binds for certain, now; a later
    /// one is kept and decided when the tree is judged ([`LATE_RESETS`] of them; further ones
    /// are not held against the acker). A reset begun after the completion was delivered
    /// never binds.
    pub(crate) fn reset(&self, slot: u32, called: u64, pending: bool) {
        let after = self.sent(slot, Event::Reset, u64::from(pending));
        let s = self.slot(slot);
        // SeqCst: against the store in `on_complete`; a completion not seen yet is one
        // that may have raced the reset, which is held to it (the strict side).
        let completed_at = s.completed_at.load(Ordering::SeqCst);
        let after_completion = completed_at != 0 && before(completed_at, called);
        if !pending || after_completion {
            return;
        }
        // SeqCst (both): against `calling` and `message_sent` (see above).
        let orphan_by = if s.messages_in_flight.load(Ordering::SeqCst) > 0 {
            after
        } else {
            let last = s.last_message_after.load(Ordering::SeqCst);
            if before(last, after) {
                last
            } else {
                after
            }
        };
        // Relaxed (here and below): read by `snapshot` after every reference is dropped,
        // which the reference count's AcqRel orders.
        let certain = s
            .first_before
            .load(Ordering::Relaxed)
            .wrapping_add(self.timeout)
            .wrapping_sub(2 * ELAPSED_TICK_NS);
        if !before(certain, orphan_by) {
            s.deadline
                .fetch_max(called.wrapping_add(self.timeout), Ordering::Relaxed);
            s.flags.fetch_or(RESET, Ordering::Relaxed);
        } else if let Some(late) = s
            .late_resets
            .get(s.late_resets_len.fetch_add(1, Ordering::Relaxed) as usize)
        {
            late[0].store(called, Ordering::Relaxed);
            late[1].store(orphan_by, Ordering::Relaxed);
        }
    }
}
