//! Time in the acker: tick arithmetic ([`ticks`]), how a new entry reaches the reaper (a
//! dirty bit per group, [`dirty`]), and the timers as the reaper keeps them: one timer per
//! group of slots ([`groups`]), filed in a compact hierarchical wheel ([`wheel`]).

pub(in crate::acker) mod dirty;
pub(in crate::acker) mod groups;
pub(crate) mod ticks;
pub(crate) mod wheel;

/// The low bits of a timer entry's tag (a root's, a group timer's) that carry its
/// table's generation ([`engine`](crate::acker::engine)): a tag compares only the bits
/// above.
pub(crate) const GEN_TAG_BITS: u32 = 2;
/// A root's timer entry's tag names it by the bits of its key's tag from [`GEN_TAG_BITS`]
/// up to this one (18 bits; a later root that matches costs the reaper one look, never a
/// wrong timeout); the bits above are zero.
pub(crate) const TAG_CHECK_BITS: u32 = 20;
/// The bits of a timer entry's tag below [`TAG_CHECK_BITS`].
pub(crate) const TAG_CHECK_MASK: u32 = (1 << TAG_CHECK_BITS) - 1;
