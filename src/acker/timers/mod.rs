//! Time in the acker: tick arithmetic ([`ticks`]), and the timers as the reaper keeps them:
//! one timer per group of slots ([`groups`]), filed in a compact hierarchical wheel
//! ([`wheel`]).

pub(in crate::acker) mod groups;
pub(crate) mod ticks;
pub(crate) mod wheel;
