//! Placeholder: a tokio service tracking fan-out requests with timeouts (being written).
fn main() {}
