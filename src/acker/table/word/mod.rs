//! A root's slot word: its key, its state and its XOR value, changed together.
//!
//! The table keeps everything an operation decides on in one 16-byte
//! word per slot, changed only by a 128-bit compare-and-swap:
//!
//! ```text
//!   bits 127..64  value   the XOR of init's value and every ack's, so far
//!   bits  63..4   key     the root's mixed hash without the top KEY_SHIFT bits
//!   bits   3..0   state   EMPTY, or a phase (HELD, JOINING, LIVE) with flags
//! ```
//!
//! Because key, state and value move together, three defects of a design with separate
//! words cannot happen:
//!
//! * **a false `Acked`**: an ack that brings the value to 0 completes the tree in the same
//!   CAS that XORs, and only from LIVE, a state init enters after its own XOR is in the
//!   value. There is no zero read at one moment and a state read at another;
//! * **a late ack in the next root's tree**: an ack's CAS expects the word it read, key
//!   included, so once the slot is freed (or reused) the CAS fails and the ack looks again:
//!   slot reuse needs no grace period;
//! * **a lost reset**: `reset_timeout` sets RESET with a CAS, so a reaper's timeout CAS
//!   from the word it read before the reset fails, and the reaper reads the deadline again.
//!
//! ## States
//!
//! ```text
//!             claim                     join (init)                settle
//!  EMPTY -----------------> HELD[F][R] ----------------> JOINING[F][R] -------> LIVE[R]
//!    |   (ack, fail)         |    |    <----------------     ^     |              |
//!    |                       |    |     unjoin (a twin)      |     | value 0,     | ack to 0,
//!    |      expire (orphan)  |    |  merged into its twin    |     | or F         | fail, timeout,
//!    |                       v    v                          |     v              v take back
//!    |                     EMPTY EMPTY                       |   EMPTY, reserved <-'
//!    '-------------------------------------------------------'          |
//!                      claim (init of a new root)                       |
//!  EMPTY <--------------- free (payload taken, reservation ended) ------'
//! ```
//!
//! * **HELD**: acks or a fail arrived before init (Storm's orphans). F: a fail was held.
//! * **JOINING**: an init joined a HELD entry, or claimed a new root's slot with its XOR in
//!   at once, and owns the slot's payload cell and times until it settles. Acks XOR in and
//!   a fail sets F, but nothing completes: the payload is not written yet. An init whose
//!   new claim has a twin (two threads that both found no entry, see
//!   [`table`](crate::acker::table)) *unjoins* it before anything else: its XOR comes back
//!   out and the word is HELD, so twins are only ever merged as HELD words, which carry no
//!   payload.
//! * **LIVE**: initialized. An ack that brings the value to 0 completes the tree (`Acked`),
//!   a fail completes it (`Failed`), the reaper times it out (`TimedOut`).
//! * **Completed**: the CAS that completes a tree (an ack to 0, a fail, a settle, a
//!   timeout, a take-back) empties the word in the same step. The slot stays *reserved*
//!   (its times are not 0, [`times`](crate::acker::table::times)) until that one thread has
//!   taken the payload and freed it, so no claim can take the slot meanwhile; lookups find
//!   no entry: the tree is over.
//! * R (RESET): `reset_timeout` moved the deadline; the reaper clears R before it reads the
//!   deadline, so its timeout CAS fails if another reset lands in between.
//! * **FROZEN** and **MOVED**: growth ([`migrate`](crate::acker::table::migrate)) moving a
//!   HELD or LIVE entry to the table's successor. The mover CASes the word to FROZEN (key
//!   and value kept, so a search still recognizes the root), copies the entry into the
//!   successor, then CASes FROZEN to MOVED. No other transition leaves either: a message or
//!   a reaper that meets FROZEN waits for MOVED and then looks in the successor; MOVED is
//!   dead until the old table is freed. JOINING words are not moved (their owner leaves
//!   them in nanoseconds; the mover comes back).
//!
//! Every transition is a method of [`Word`] that returns the word to CAS in (or why not),
//! so the protocol lives in this file; [`table`](crate::acker::table) only finds slots and
//! retries CASes.

use crate::acker::outcome::Outcome;

/// A state code: the low four bits of a word's low half.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct State(u8);

/// The phases a live slot goes through (EMPTY is a state of its own; code 1 is unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Messages arrived before init.
    Held,
    /// An init is writing the payload.
    Joining,
    /// Initialized.
    Live,
}

impl State {
    pub const EMPTY: State = State(0);
    /// Being moved to the successor table (module docs).
    pub const FROZEN: State = State(14);
    /// Moved to the successor table.
    pub const MOVED: State = State(15);
    /// A fail arrived (before init, or while init was joining).
    const FAILED: u8 = 1;
    /// A reset moved the deadline since the reaper last looked.
    const RESET: u8 = 2;
    /// Codes 2..=13: `2 + 4 * phase + flags`.
    const PHASE_BASE: u8 = 2;
    /// How many codes the phases take from [`PHASE_BASE`](Self::PHASE_BASE) (FROZEN is
    /// the first after them): a code `c` is an uncompleted entry's exactly when
    /// `c.wrapping_sub(PHASE_BASE) < PHASE_CODES`, one compare.
    const PHASE_CODES: u8 = Self::FROZEN.0 - Self::PHASE_BASE;
    /// LIVE's first code, counted from [`PHASE_BASE`](Self::PHASE_BASE): LIVE is the last
    /// phase, so an uncompleted entry's code counted so is LIVE exactly from here.
    const LIVE_FROM: u8 = Self::of(Phase::Live, 0).0 - Self::PHASE_BASE;

    #[inline]
    const fn of(phase: Phase, flags: u8) -> State {
        let phase = match phase {
            Phase::Held => 0,
            Phase::Joining => 1,
            Phase::Live => 2,
        };
        State(Self::PHASE_BASE + 4 * phase + flags)
    }

    /// The phase of an occupied, uncompleted slot; `None` for EMPTY, FROZEN and MOVED.
    #[inline]
    pub fn phase(self) -> Option<Phase> {
        match self.0.checked_sub(Self::PHASE_BASE)? / 4 {
            0 => Some(Phase::Held),
            1 => Some(Phase::Joining),
            2 => Some(Phase::Live),
            _ => None,
        }
    }

    #[inline]
    fn flags(self) -> u8 {
        self.0.saturating_sub(Self::PHASE_BASE) % 4
    }

    #[inline]
    pub fn failed(self) -> bool {
        self.phase().is_some() && self.flags() & Self::FAILED != 0
    }

    #[inline]
    pub fn reset(self) -> bool {
        self.phase().is_some() && self.flags() & Self::RESET != 0
    }

    #[inline]
    fn with_flags(self, flags: u8) -> State {
        match self.phase() {
            Some(phase) => State::of(phase, flags),
            None => self,
        }
    }
}

const _: () = assert!(
    State::of(Phase::Live, 3).0 < State::FROZEN.0,
    "the phases leave codes 14 and 15 to FROZEN and MOVED"
);

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (*self, self.phase()) {
            (State::EMPTY, _) => f.write_str("EMPTY"),
            (State::FROZEN, _) => f.write_str("FROZEN"),
            (State::MOVED, _) => f.write_str("MOVED"),
            (_, Some(phase)) => {
                write!(f, "{phase:?}")?;
                if self.failed() {
                    f.write_str("|F")?;
                }
                if self.reset() {
                    f.write_str("|R")?;
                }
                Ok(())
            }
            _ => write!(f, "State({})", self.0),
        }
    }
}

/// Bits of a word's low half below the key.
const STATE_BITS: u32 = 4;
/// How many top bits of a root's mixed hash the key drops: they are implied by the table
/// the root hashes to, which is chosen by at least these bits
/// (the acker keeps at least `1 << KEY_SHIFT` tables), so a key names
/// its root within its table.
pub const KEY_SHIFT: u32 = STATE_BITS;

/// A root's key in its table: the low `64 - KEY_SHIFT` bits of its mixed hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(u64);

impl Key {
    /// The largest key.
    pub const MAX: u64 = (1 << (64 - KEY_SHIFT)) - 1;

    /// The key of `bits` (at most [`Key::MAX`]).
    #[inline]
    pub fn new(bits: u64) -> Key {
        debug_assert!(bits <= Self::MAX, "a key has {} bits", 64 - KEY_SHIFT);
        Key(bits & Self::MAX)
    }

    /// The key's bits.
    #[inline]
    pub fn bits(self) -> u64 {
        self.0
    }

    /// The key's low 32 bits: what a timer entry keeps to tell most later roots apart.
    #[inline]
    pub fn tag(self) -> u32 {
        self.0 as u32
    }

    /// The key where a word's low half holds it, the state bits zero: a word's key is this
    /// one exactly when its low half without its state bits ([`Word::STATE_MASK`]) is this.
    #[inline]
    pub fn in_low(self) -> u64 {
        self.0 << STATE_BITS
    }
}

/// What a transition did, for the operation that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// CAS this word in; the tree goes on.
    To(Word),
    /// CAS this word (EMPTY, the slot left reserved) in; whoever's CAS succeeds completes
    /// the tree with the outcome.
    Complete(Word, Outcome),
}

impl Step {
    #[inline]
    pub fn word(self) -> Word {
        match self {
            Step::To(word) | Step::Complete(word, _) => word,
        }
    }
}

/// A slot word's contents. `Word::EMPTY` is all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Word {
    low: u64,
    value: u64,
}

impl std::fmt::Debug for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Word({:?} key {:#x} value {:#x})",
            self.state(),
            self.key().0,
            self.value
        )
    }
}

impl Word {
    /// An empty slot's word.
    pub const EMPTY: Word = Word { low: 0, value: 0 };

    /// The state's bits of a word's low half (the key is above them).
    pub const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

    #[inline]
    fn new(key: Key, state: State, value: u64) -> Word {
        Word {
            low: key.0 << STATE_BITS | u64::from(state.0),
            value,
        }
    }

    /// The key part.
    #[inline]
    pub fn key(self) -> Key {
        Key(self.low >> STATE_BITS)
    }

    /// The state part.
    #[inline]
    pub fn state(self) -> State {
        State((self.low & ((1 << STATE_BITS) - 1)) as u8)
    }

    /// The XOR value.
    #[inline]
    pub fn value(self) -> u64 {
        self.value
    }

    /// An uncompleted entry of `key`'s root (not EMPTY, FROZEN or MOVED).
    #[inline]
    pub fn holds(self, key: Key) -> bool {
        // One compare of the code (`State::PHASE_CODES`), and one of the key bits.
        let code = (self.low & ((1 << STATE_BITS) - 1)) as u8;
        self.low >> STATE_BITS == key.0 && code.wrapping_sub(State::PHASE_BASE) < State::PHASE_CODES
    }

    /// A FROZEN word of `key`'s root: a mover is copying it to the successor.
    #[inline]
    pub fn frozen_for(self, key: Key) -> bool {
        self.key() == key && self.state() == State::FROZEN
    }

    /// The word as the atomic holds it.
    #[inline]
    pub fn to_bits(self) -> u128 {
        u128::from(self.value) << 64 | u128::from(self.low)
    }

    /// A word from the atomic's bits.
    #[inline]
    pub fn from_bits(bits: u128) -> Word {
        Word {
            low: bits as u64,
            value: (bits >> 64) as u64,
        }
    }

    // === transitions ===

    /// A new entry for an ack that found none: HELD with the ack's XOR.
    #[inline]
    pub fn held_ack(key: Key, xor: u64) -> Word {
        Word::new(key, State::of(Phase::Held, 0), xor)
    }

    /// A new entry for a fail that found none: HELD with F.
    #[inline]
    pub fn held_fail(key: Key) -> Word {
        Word::new(key, State::of(Phase::Held, State::FAILED), 0)
    }

    /// An empty HELD word: what a new root's entry was before init claimed it JOINING
    /// (tests).
    #[cfg(test)]
    pub fn placeholder(key: Key) -> Word {
        Word::held_ack(key, 0)
    }

    /// A new root claimed by its init: JOINING with init's XOR, as a placeholder joined.
    #[inline]
    pub fn joining(key: Key, xor: u64) -> Word {
        Word::new(key, State::of(Phase::Joining, 0), xor)
    }

    /// Init's claim given up for a twin: JOINING back to HELD with init's XOR taken out,
    /// flags kept, so the word holds what messages brought (a placeholder with them).
    /// `None` unless JOINING (only the claiming init leaves JOINING).
    #[inline]
    pub fn unjoined(self, xor: u64) -> Option<Word> {
        self.rephased(Phase::Joining, Phase::Held, xor)
    }

    /// Phase `from` to `to` with `xor` XORed into the value, flags kept: init's join and
    /// its undoing. `None` unless the word is in phase `from`.
    #[inline]
    fn rephased(self, from: Phase, to: Phase, xor: u64) -> Option<Word> {
        let state = self.state();
        (state.phase()? == from).then(|| Word {
            value: self.value ^ xor,
            ..self.with(State::of(to, state.flags()))
        })
    }

    /// An ack: XORs `xor` in; from LIVE, a value of 0 completes the tree `Acked` in this
    /// very CAS. `None` when the word holds no uncompleted tree.
    #[inline]
    pub fn acked(self, xor: u64) -> Option<Step> {
        // The phase as `holds` tests it (one compare of the code), so that an ack that
        // matched its word with `holds` tests it once.
        let n = self.state().0.wrapping_sub(State::PHASE_BASE);
        if n >= State::PHASE_CODES {
            return None;
        }
        let live = n >= State::LIVE_FROM;
        let next = Word {
            value: self.value ^ xor,
            ..self
        };
        Some(if live && next.value == 0 {
            Step::Complete(next.done(), Outcome::Acked)
        } else {
            Step::To(next)
        })
    }

    /// A fail: completes a LIVE tree `Failed`; before that it is held as F. `None` when
    /// the word holds no uncompleted tree.
    #[inline]
    pub fn failed(self) -> Option<Step> {
        let state = self.state();
        Some(match state.phase()? {
            Phase::Live => Step::Complete(self.done(), Outcome::Failed),
            _ => Step::To(self.with(state.with_flags(state.flags() | State::FAILED))),
        })
    }

    /// Init's join: HELD to JOINING with init's XOR in. `None` if init has been here
    /// already (JOINING or LIVE: a duplicate init) or the word holds no uncompleted tree.
    #[inline]
    pub fn joined(self, xor: u64) -> Option<Word> {
        self.rephased(Phase::Held, Phase::Joining, xor)
    }

    /// Init's settle, after it wrote the payload: JOINING to LIVE, or completed at once
    /// when the held acks already cancel init's XOR (`Acked` wins) or a fail was held.
    /// `None` unless the word is JOINING (only the joining init calls this, and only it
    /// leaves JOINING, so that would be a bug).
    #[inline]
    pub fn settled(self) -> Option<Step> {
        let state = self.state();
        if state.phase()? != Phase::Joining {
            return None;
        }
        Some(if self.value == 0 {
            Step::Complete(self.done(), Outcome::Acked)
        } else if state.failed() {
            Step::Complete(self.done(), Outcome::Failed)
        } else {
            Step::To(self.with(State::of(Phase::Live, state.flags() & State::RESET)))
        })
    }

    /// `reset_timeout`: sets R. `None` when the word holds no uncompleted tree.
    #[inline]
    pub fn reset(self) -> Option<Word> {
        let state = self.state();
        state.phase()?;
        Some(self.with(state.with_flags(state.flags() | State::RESET)))
    }

    /// The reaper, before it reads the deadline: R cleared. `None` when R is not set.
    #[inline]
    pub fn reset_seen(self) -> Option<Word> {
        let state = self.state();
        state
            .reset()
            .then(|| self.with(state.with_flags(state.flags() & !State::RESET)))
    }

    /// The reaper, at the deadline, from a word without R: a LIVE tree times out, a HELD
    /// orphan is dropped (both EMPTY; the orphan has no payload to take). `None` for
    /// JOINING (init is about to make it LIVE; look again later), with R set, or for no
    /// uncompleted tree.
    #[inline]
    pub fn expired(self) -> Option<Step> {
        let state = self.state();
        if state.reset() {
            return None;
        }
        match state.phase()? {
            Phase::Live => Some(Step::Complete(self.done(), Outcome::TimedOut)),
            Phase::Held => Some(Step::To(Word::EMPTY)),
            Phase::Joining => None,
        }
    }

    /// `shutdown` taking an initialized tree back: LIVE to completed (no outcome is
    /// delivered).
    #[inline]
    pub fn taken_back(self) -> Option<Word> {
        (self.state().phase()? == Phase::Live).then(|| self.done())
    }

    /// A twin's contents merged into this entry: its value XORed in, its fail applied, as
    /// an ack and a fail would be (so a LIVE tree may complete: Acked wins), and its R
    /// kept. `None` when this word holds no uncompleted tree.
    #[inline]
    pub fn absorbed(self, twin: Word) -> Option<Step> {
        let step = self.acked(twin.value)?;
        let step = match step {
            Step::To(next) if twin.state().failed() => next.failed()?,
            step => step,
        };
        // A reset that landed on the twin is the tree's: its R comes along.
        Some(match step {
            Step::To(next) if twin.state().reset() => Step::To(next.reset()?),
            step => step,
        })
    }

    /// Growth, before it copies the entry: HELD or LIVE (flags and all) to FROZEN. `None`
    /// for a word that is not moved now: EMPTY, JOINING (its owner settles it
    /// soon), FROZEN or MOVED.
    #[inline]
    pub fn frozen(self) -> Option<Word> {
        matches!(self.state().phase()?, Phase::Held | Phase::Live).then(|| self.with(State::FROZEN))
    }

    /// Growth, after the copy is in the successor: FROZEN to MOVED.
    #[inline]
    pub fn moved(self) -> Word {
        debug_assert_eq!(self.state(), State::FROZEN);
        self.with(State::MOVED)
    }

    #[inline]
    fn with(self, state: State) -> Word {
        Word::new(self.key(), state, self.value)
    }

    /// The word a completion CASes in: EMPTY (module docs, "Completed"). The completer's
    /// [`Completed`](crate::acker::table::Completed) carries the key it needs to free the
    /// slot.
    #[inline]
    fn done(self) -> Word {
        Word::EMPTY
    }
}

#[cfg(test)]
mod tests;
