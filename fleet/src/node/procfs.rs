//! Readings from Linux `/proc`: a process's resident set and CPU time, and the CPU time of
//! this process's threads by name.

/// Resident set size of process `pid`, bytes (Linux `/proc`).
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line["VmRSS:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// CPU time of this process's threads named `name` so far, nanoseconds (Linux `/proc`: the
/// scheduler's run time of each thread, or its user and system ticks where the kernel keeps
/// no scheduler statistics).
pub fn thread_cpu_ns(name: &str) -> Option<u64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let run_ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .filter(|&ns| ns > 0);
        let ns = match run_ns {
            Some(ns) => Some(ns),
            None => std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|stat| ticks_ms(&stat))
                .map(|ms| ms * 1_000_000),
        };
        if let Some(ns) = ns {
            *total.get_or_insert(0) += ns;
        }
    }
    total
}

/// User and system time from a `/proc/.../stat` line, milliseconds (clock ticks are 1/100 s
/// on every architecture Linux reports them for as USER_HZ).
fn ticks_ms(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces; the fields after it follow its ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

/// CPU time (user and system) of process `pid` so far, milliseconds (Linux `/proc`).
pub fn cpu_ms_of(pid: u32) -> Option<u64> {
    ticks_ms(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}
