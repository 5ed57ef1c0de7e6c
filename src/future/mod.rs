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

mod async_acker;
pub use async_acker::AsyncAcker;
mod closed;
pub use closed::Closed;
mod expiry;
pub use expiry::*;
pub(crate) mod slab;
mod stores;
mod stream;
pub use stream::Completions;
mod tree_completion;
pub use tree_completion::TreeCompletion;
mod waiter;
