//! Resident memory of this process, read from `/proc/self/status` (Linux).
//!
//! The harness reports two figures: the peak (`VmHWM`) over a phase, and the current size
//! (`VmRSS`) at chosen moments of the memory phase. Both are in bytes. On a system without
//! `/proc` every reading is `None` and the report says "unavailable" instead of a number:
//! a missing figure is better than a made-up one.

use std::fs;

/// Current resident set size, bytes.
pub(crate) fn current() -> Option<u64> {
    status_field("VmRSS:")
}

/// Peak resident set size since the process started or since [`reset_peak`], bytes.
pub(crate) fn peak() -> Option<u64> {
    status_field("VmHWM:")
}

/// Resets the peak to the current size, so that [`peak`] covers only what follows.
/// Returns `false` when the kernel refused (then the peak covers the whole process).
pub(crate) fn reset_peak() -> bool {
    // "5" resets VmHWM (proc(5), /proc/pid/clear_refs, Linux 4.0+).
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_field(name: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    // "VmRSS:	  123456 kB"
    let kib: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_something_on_linux() {
        if cfg!(target_os = "linux") {
            let now = super::current().expect("VmRSS");
            let peak = super::peak().expect("VmHWM");
            assert!(now > 0 && peak >= now / 2);
        }
    }
}
