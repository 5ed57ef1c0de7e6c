//! Async use on tokio (the `tokio` feature): awaiting one tree
//! ([`AsyncAcker::track`](crate::future::AsyncAcker::track)), the completions of the others
//! as a stream ([`Completions`](crate::future::Completions)), and expiry driven by a task
//! on the caller's runtime ([`spawn_expiry`](crate::future::spawn_expiry)).
//!
//! The module is named for what it holds, as `moka::future` is, and not for the runtime:
//! a glob import of the crate must leave `tokio` naming the tokio crate.
//!
//! ```
//! use ackwheel::*;
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let (acker, _completions) = Acker::<&str>::builder().build_async(16).unwrap();
//!     let tree = acker.track(1, 0b11, "request").unwrap();
//!     let acks = tokio::spawn({
//!         let acker = acker.clone();
//!         async move { acker.ack(1, 0b11) }
//!     });
//!     assert!(acks.await.unwrap());
//!     assert_eq!(tree.await.unwrap().outcome, Outcome::Acked);
//!     assert!(acker.shutdown().await.is_empty());
//! }
//! ```
//!
//! Inside this module the tokio crate is still written `::tokio`, for the reader's sake.

// The files: `AsyncAcker` (`async_acker/mod.rs`), its building and the delivery of
// completions (`async_acker/build.rs`), a tree's start and the buffer's permits
// (`async_acker/start.rs`); a tracked tree's future, `TreeCompletion`
// (`tree_completion.rs`); the `Completions` stream (`stream.rs`); `Closed` (`closed.rs`); a
// tracked tree's waiter cell (`waiter.rs`) and the slab of cells (`slab.rs`); what the inner
// acker holds (`stores.rs`); expiry on a task (`expiry.rs`).

#[cfg(feature = "tokio")]
mod async_acker;
#[cfg(feature = "tokio")]
pub use async_acker::AsyncAcker;
#[cfg(feature = "tokio")]
mod closed;
#[cfg(feature = "tokio")]
pub use closed::Closed;
#[cfg(feature = "tokio")]
mod expiry;
#[cfg(feature = "tokio")]
pub use expiry::spawn_expiry;
#[cfg(feature = "tokio")]
mod stores;
#[cfg(feature = "tokio")]
mod stream;
#[cfg(feature = "tokio")]
pub use stream::Completions;
#[cfg(feature = "tokio")]
mod tree_completion;
#[cfg(feature = "tokio")]
pub use tree_completion::TreeCompletion;

// The slab and the waiter cell are public under loom only, for their models.
#[cfg(not(loom))]
pub(crate) mod slab;
#[cfg(loom)]
#[doc(hidden)]
pub mod slab;
#[cfg(not(loom))]
mod waiter;
#[cfg(loom)]
#[doc(hidden)]
pub mod waiter;
