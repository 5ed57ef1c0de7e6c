//! Placeholder; the wheel benchmarks land with the TimerWheel.
fn main() {}
