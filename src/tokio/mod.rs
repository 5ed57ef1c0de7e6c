//! Async use on tokio (the `tokio` feature). Inside this module the tokio crate is
//! `::tokio` (this module's own name shadows it).

mod completions;
pub use completions::{AsyncAcker, Closed, Completions, TreeCompletion};
mod expiry;
pub use expiry::*;
