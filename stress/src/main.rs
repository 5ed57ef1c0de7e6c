//! The ackwheel stress harness.

fn main() {
    println!("stress: no scenario yet");
}
