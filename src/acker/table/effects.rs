//! What a table operation reports to its caller: the completions its CASes claimed, and
//! the slots whose entries need a timer filed; and what it is given: the stamp for an
//! entry it creates.

use std::ptr::NonNull;

use super::times::Stamp;
use super::Key;
use crate::acker::outcome::Outcome;
use crate::sync::AtomicUsize;

/// A completion this call's CAS claimed: it emptied `slot`'s word (the slot stays
/// reserved), and the caller completes the tree with `outcome` (unsafe
/// [`Table::take`](super::Table::take) of the payload, then
/// [`Table::free`](super::Table::free) of the slot, once each).
#[derive(Debug, PartialEq, Eq)]
pub struct Completed {
    /// The slot whose tree the call completed.
    pub slot: usize,
    /// The root's key.
    pub key: Key,
    /// What the tree completed as.
    pub outcome: Outcome,
    /// The generation of the table the slot is in ([`Table::gen`](super::Table::gen)):
    /// an operation may complete a tree in its table's successor during growth.
    pub gen: u32,
}

/// Almost always none or one value: the first without an allocation, any more in a `Vec`.
/// `more` is empty whenever `first` is `None` (a push fills `first` first, a take empties
/// `more` first), so an empty one is told by `first` alone: the common case, on every
/// operation's way out, is one test.
#[derive(Debug)]
struct Few<T> {
    first: Option<T>,
    more: Vec<T>,
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few {
            first: None,
            more: Vec::new(),
        }
    }
}

impl<T> Few<T> {
    #[inline]
    fn push(&mut self, value: T) {
        if self.first.is_none() {
            self.first = Some(value);
        } else {
            self.more.push(value);
        }
    }

    #[inline]
    fn take(&mut self) -> Option<T> {
        if self.first.is_none() {
            debug_assert!(self.more.is_empty(), "values past an empty first");
            return None;
        }
        self.more.pop().or_else(|| self.first.take())
    }

    #[inline]
    fn is_empty(&self) -> bool {
        debug_assert!(self.first.is_some() || self.more.is_empty());
        self.first.is_none()
    }
}

/// The completions an operation claimed, for its caller to finish.
///
/// Almost always none or one. More only when carrying a twin's contents completed a tree
/// and the operation's own message then completed a new tree of the same root (a duplicate
/// init racing a twin claim), so the second one costs nothing unless it happens.
///
/// It also carries the operation's [`Stamp`] in (the times a claimer writes into a new
/// entry: see the `times` module) and, out, the slots whose entries need
/// a timer filed: those it created, and those whose deadline it moved earlier.
#[derive(Default)]
pub struct Effects {
    completed: Few<Completed>,
    stamp: Stamp,
    to_file: Few<(u32, usize)>,
    /// A claim found the root's window full, or had to go far from home: the table
    /// should grow ([`engine`](crate::acker::engine)).
    crowded: bool,
    /// Entries this operation created in a table being migrated that it could not move to
    /// the successor for want of room ([`migrate`](crate::acker::table::migrate)): the
    /// caller makes room and moves them.
    stranded: Few<(u32, usize)>,
    /// An init joined an entry of messages held for its root (`orphans_joined`).
    joined: bool,
    /// Entries this operation moved to a successor (`roots_moved`).
    moved: u32,
    /// The hand of credits of the operation's thread ([`bound`](crate::acker::bound)),
    /// where the operation has its record at hand: a claim takes its credit there without
    /// a lookup. `None`: from the stripes.
    hand: Option<NonNull<AtomicUsize>>,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("completed", &self.completed)
            .field("to_file", &self.to_file)
            .field("stranded", &self.stranded)
            .finish_non_exhaustive()
    }
}

impl Effects {
    /// An operation whose new entries, if it creates any, get `stamp`.
    #[inline]
    pub fn stamped(stamp: Stamp) -> Effects {
        Effects {
            stamp,
            ..Effects::default()
        }
    }

    #[inline]
    pub(super) fn stamp(&self) -> Stamp {
        self.stamp
    }

    /// These effects with the calling thread's hand of credits, `hand`.
    ///
    /// # Safety `hand` outlives these effects: it is the record of the operation that
    /// makes them (which lives as long as the thread), and they are used on its thread.
    #[inline]
    pub unsafe fn with_hand(mut self, hand: Option<&AtomicUsize>) -> Self {
        self.hand = hand.map(NonNull::from);
        self
    }

    /// The hand of credits the operation gave ([`with_hand`](Self::with_hand)).
    #[inline]
    pub(super) fn hand(&self) -> Option<&AtomicUsize> {
        // Safety: `with_hand`'s contract: the hand outlives these effects.
        self.hand.map(|hand| unsafe { hand.as_ref() })
    }

    /// Takes one slot, with its table's generation, whose entry needs a timer filed, if
    /// any is left: an entry the operation created (an orphan, init's new claim, a twin's
    /// contents carried to a new entry, an entry moved by growth), or one whose deadline
    /// its init moved earlier than the timers already filed.
    #[inline]
    pub fn take_to_file(&mut self) -> Option<(u32, usize)> {
        self.to_file.take()
    }

    #[inline]
    pub(super) fn file_later(&mut self, gen: u32, slot: usize) {
        self.to_file.push((gen, slot));
    }

    /// This operation moved an entry to a successor.
    #[inline]
    pub fn note_moved(&mut self) {
        self.moved += 1;
    }

    /// The entries this operation moved since the last call.
    #[inline]
    pub fn take_moved(&mut self) -> u32 {
        std::mem::take(&mut self.moved)
    }

    /// A claim of this operation found its table crowded (see the field).
    #[inline]
    pub fn crowded(&self) -> bool {
        self.crowded
    }

    /// An init of this operation joined messages held for its root.
    #[inline]
    pub fn joined(&self) -> bool {
        self.joined
    }

    #[inline]
    pub(super) fn set_joined(&mut self) {
        self.joined = true;
    }

    #[inline]
    pub(super) fn set_crowded(&mut self) {
        self.crowded = true;
    }

    /// Takes one stranded entry (see the field) as its table's generation and slot.
    #[inline]
    pub fn take_stranded(&mut self) -> Option<(u32, usize)> {
        self.stranded.take()
    }

    /// Records a stranded entry (see the field).
    #[inline]
    pub fn strand(&mut self, gen: u32, slot: usize) {
        self.crowded = true;
        self.stranded.push((gen, slot));
    }

    /// Takes one claimed completion, if any is left.
    #[inline]
    pub fn take(&mut self) -> Option<Completed> {
        self.completed.take()
    }

    /// Nothing (left) to finish.
    #[inline]
    pub fn is_none(&self) -> bool {
        self.completed.is_empty()
    }

    #[inline]
    pub(super) fn push(&mut self, completed: Completed) {
        self.completed.push(completed);
    }
}
