//! # ackwheel
//!
//! A lock-free concurrent expiry engine for servers that track in-flight work and time it
//! out.
//!
//! | part | lineage | what it does |
//! |---|---|---|
//! | [`Clock`] | — | wrapping `u64` nanoseconds; [`MonotonicClock`], [`ManualClock`] |
//! | [`TimerWheel`] | Caffeine `TimerWheel` | single-owner hierarchical wheel: O(1) schedule / reschedule / cancel, cascading `advance` |
//! | [`Acker`] | Storm acker + spout pending map | tracks trees of work by root: init with the XOR of the edges, ack each edge, and each tree completes once (`Acked`, `Failed`, `TimedOut`) on the thread that finished it; no lock on any message, memory that follows what is pending, one reaper thread. Edge ids from [`edge_id()`] |
//! | [`ExpiryQueue`] | ZooKeeper `ExpiryQueue` | concurrent interval buckets keyed by `(t / I + 1) * I`, an atomic next-expiration time advanced by CAS; `update` / `touch` / `remove` / `poll` / `wait_time`, each element returned exactly once; `wait` (and `wait_async`) until a bucket is due, `close` |
//! | [`RotatingMap`], [`TimeCacheMap`] | Storm | rotating generations of maps; `TimeCacheMap` rotates itself on a cleaner thread and calls back outside its lock |
//!
//! Which one when: the `Acker` for requests that fan out into sub-tasks on many threads and
//! must all report back or time out; the `ExpiryQueue` for many sessions touched from many
//! threads and expired a bucket at a time; the `TimerWheel` for timers inside an event loop
//! you own; `RotatingMap` / `TimeCacheMap` for Storm-shaped code. With the `tokio` feature,
//! the `future` module awaits trees, streams completions and drives expiry from a task.
//!
//! ## Time
//!
//! Time everywhere is `u64` nanoseconds on a **wrapping** timeline with an arbitrary
//! origin. "`d` is due at `now`" means `(now.wrapping_sub(d) as i64) >= 0`. Every type
//! behaves the same whatever the origin, including clocks that start near 2^63 or
//! `u64::MAX` and wrap while running.

#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations)]
// With `internals`, the table's items are re-exported (hidden) for the loom models and the
// `table` bench, which makes them public to rustdoc; their docs link the private modules
// beside them, which is how they read in the engineers' docs (`--document-private-items`).
#![cfg_attr(feature = "internals", allow(rustdoc::private_intra_doc_links))]

// The README's examples are doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod acker;
mod clock;
mod edge_id;
mod error;
pub mod expiry_queue;
/// Async use on tokio (the `tokio` feature, off by default). (Under loom, without the
/// feature, only the slab and the waiter cell, for their models.)
#[cfg(any(feature = "tokio", loom))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod future;
mod rotating;
mod sync;
pub mod wheel;
mod zeroed;

/// The Acker's table and slot word, for the `table` loom models and the
/// `table` bench only (`--features internals`): not part of the API.
#[cfg(any(loom, feature = "internals"))]
#[doc(hidden)]
pub mod table {
    pub use crate::acker::table::word::{Key, Phase, Word, KEY_SHIFT};
    pub use crate::acker::table::{
        Applied, Change, Completed, Effects, Expiry, Refused, Stamp, Table, GROUP_SLOTS, MAX_PROBE,
    };
}
/// The per-thread records (operation marks, hands of credits), the reaper's wake-up and a
/// table's dirty bits, for the `threads` loom models only.
#[cfg(loom)]
#[doc(hidden)]
pub mod threads {
    pub use crate::acker::bound::Credits;
    pub use crate::acker::threads::{Record, Registered, Threads};
    pub use crate::acker::DirtyGroups;
    pub use crate::sync::fences::Fences;
}

pub use acker::{Acker, AckerBuilder, AckerStats, Completion, InitError, Message, Outcome};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use edge_id::edge_id;
pub use error::ConfigError;
pub use expiry_queue::ExpiryQueue;
pub use rotating::{RotatingMap, TimeCacheMap};
pub use wheel::{TimerKey, TimerWheel};
