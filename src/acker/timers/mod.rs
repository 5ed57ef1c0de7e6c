//! The acker's timers as the reaper keeps them: one timer per group of slots
//! ([`groups`]), filed in a compact hierarchical wheel ([`wheel`]).

pub(in crate::acker) mod groups;
pub(crate) mod wheel;
