//! Async use on tokio (the `tokio` feature). Inside this module the tokio crate is
//! `::tokio` (this module's own name shadows it).
