//! The rules a judged tree must satisfy ([`verify`]): what the harness did to it (its
//! [`Fate`]) decides what the acker should have said, and when. Also the history printed
//! with a violation.

use std::fmt::Write as _;

use super::*;

/// What the harness did to a tree, hence what the acker should say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Every ack sent once, no fail: `Acked` (or `TimedOut` if a message came late).
    Clean,
    /// A fail was sent: `Failed` (or `TimedOut` if the fail came late).
    FailSent,
    /// An ack dropped or duplicated, no fail: the value never reaches 0, so `TimedOut`.
    Broken,
}

impl Fate {
    pub(crate) fn of(flags: u32) -> Fate {
        if flags & FAIL_SENT != 0 {
            Fate::FailSent
        } else if flags & (DROPPED | DUPED) != 0 {
            Fate::Broken
        } else {
            Fate::Clean
        }
    }

    pub(crate) fn expected(self) -> u32 {
        match self {
            Fate::Clean => 1,
            Fate::FailSent => 2,
            Fate::Broken => 3,
        }
    }
}

/// One tick of the acker's default resolution (1 ms, rounded up to 2^20 ns): the most
/// `Completion::elapsed` may exceed the time it measures.
pub(super) const ELAPSED_TICK_NS: u64 = 1 << 20;

/// Every rule a judged tree must satisfy; the broken ones, described.
pub(crate) fn verify(r: &Record, timeout: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let fate = Fate::of(r.flags);
    let base_deadline = r.first_before.wrapping_add(timeout);
    let refused = r.flags & (REFUSED | DUPLICATE_INIT) != 0;
    if r.flags & DUPLICATE_INIT != 0 {
        problems.push("init of a fresh root returned Duplicate".to_string());
    }
    match (refused, r.completions) {
        (true, 0) => return problems,
        (true, _) => problems.push("a completion for a root whose init was refused".into()),
        (false, 0) => problems.push("no completion".into()),
        (false, 1) => {}
        (false, n) => problems.push(format!("{n} completions")),
    }
    if r.completions == 0 {
        return problems;
    }
    // Completion.elapsed counts from the acker's first message, which is not before ours,
    // and is accurate to one tick of the acker's resolution (`AckerBuilder::resolution`'s docs).
    if r.elapsed > r.completed_at.wrapping_sub(r.first_before) + ELAPSED_TICK_NS {
        problems.push(format!(
            "Completion.elapsed {} is longer than the time since the first message ({})",
            ms(r.elapsed),
            ms(r.completed_at.wrapping_sub(r.first_before))
        ));
    }
    match r.outcome {
        1 => {
            if fate != Fate::Clean {
                problems.push(format!(
                    "Acked, but {}",
                    match fate {
                        Fate::FailSent => "a tuple was failed (its ack never sent)",
                        _ if r.flags & DROPPED != 0 => "an ack was dropped",
                        _ => "an ack was sent twice",
                    }
                ));
            }
        }
        2 => {
            if r.flags & FAIL_SENT == 0 {
                problems.push("Failed, but no fail was sent".into());
            } else if before(r.completed_at, r.fail_before) {
                problems.push("Failed before the first fail was sent".into());
            }
        }
        3 => {
            if r.elapsed < timeout {
                problems.push(format!(
                    "TimedOut after {} (Completion.elapsed), before the timeout {}",
                    ms(r.elapsed),
                    ms(timeout)
                ));
            }
            if before(r.completed_at, r.deadline) {
                problems.push(format!(
                    "TimedOut {} before its deadline{}",
                    ms(r.deadline.wrapping_sub(r.completed_at)),
                    if r.flags & RESET != 0 {
                        " (as moved by reset_timeout)"
                    } else {
                        ""
                    }
                ));
            }
            match fate {
                Fate::Clean if before(r.last_after, base_deadline) => problems.push(format!(
                    "TimedOut, yet init and every ack had returned {} before the deadline",
                    ms(base_deadline.wrapping_sub(r.last_after))
                )),
                Fate::FailSent
                    if before(r.init_after.max(r.fail_after), base_deadline)
                        && r.init_after != 0 =>
                {
                    problems.push(format!(
                        "TimedOut, yet init and a fail had returned {} before the deadline",
                        ms(base_deadline.wrapping_sub(r.init_after.max(r.fail_after)))
                    ))
                }
                _ => {}
            }
        }
        code => problems.push(format!("unknown outcome code {code}")),
    }
    problems
}

/// The earliest moment a `TimedOut` completion can have been decided: after the reaper
/// read its clock, which `elapsed` (from the first message, not before `first_before`) gives
/// to within a tick; a second tick of slack. `None` for any other outcome (or none yet):
/// then every reset binds.
pub(super) fn decided_after(first_before: u64, outcome: u32, elapsed: u64) -> Option<u64> {
    (outcome == 3).then(|| {
        first_before
            .wrapping_add(elapsed)
            .wrapping_sub(2 * ELAPSED_TICK_NS)
    })
}

/// The oracle's deadline once the tree is judged: `deadline` (the base deadline and the
/// resets that bound for certain), raised by each late reset `(called, orphan_by)` that
/// binds, i.e. no message that could have made an orphan for it came after the decision
/// ([`Oracle::reset`]). Also whether a late reset raised it.
pub(super) fn binding_deadline(
    deadline: u64,
    late: &[(u64, u64)],
    decided_after: Option<u64>,
    timeout: u64,
) -> (u64, bool) {
    late.iter()
        .filter(|&&(_, orphan_by)| !matches!(decided_after, Some(d) if before(d, orphan_by)))
        .map(|&(called, _)| called.wrapping_add(timeout))
        .fold((deadline, false), |(deadline, raised), moved| {
            if before(deadline, moved) {
                (moved, true)
            } else {
                (deadline, raised)
            }
        })
}

/// `a` strictly before `b` on the wrapping timeline.
pub(super) fn before(a: u64, b: u64) -> bool {
    (b.wrapping_sub(a) as i64) > 0
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The history printed with a violation.
pub(crate) fn history(r: &Record, timeout: u64) -> String {
    let mut out = String::new();
    let flags: Vec<&str> = [
        (FAIL_SENT, "fail-sent"),
        (DROPPED, "ack-dropped"),
        (DUPED, "ack-duplicated"),
        (INIT_DELAYED, "init-delayed"),
        (INIT_FIRST, "init-first"),
        (RESET, "reset"),
        (JOINED, "joined"),
        (REFUSED, "init-refused"),
        (DUPLICATE_INIT, "init-duplicate"),
    ]
    .iter()
    .filter(|(f, _)| r.flags & f != 0)
    .map(|(_, n)| *n)
    .collect();
    let t0 = r.first_before;
    let rel = |t: u64| format!("{:+9.3} ms", t.wrapping_sub(t0) as i64 as f64 / 1e6);
    let _ = writeln!(
        out,
        "    root {:#018x}  tree #{}  message {:#x} attempt {}  slot {}",
        r.root, r.tree, r.msg, r.attempt, r.slot
    );
    let _ = writeln!(
        out,
        "    fate {:?} [{}]  outcome {} ({} completion(s)), expected {}",
        Fate::of(r.flags),
        flags.join(", "),
        outcome_name(r.outcome),
        r.completions,
        outcome_name(Fate::of(r.flags).expected())
    );
    let _ = writeln!(
        out,
        "    times from the spout's reading before the first message: deadline {} (timeout {}), last message returned {}, completed {} (Completion.elapsed {})",
        rel(r.deadline),
        ms(timeout),
        rel(r.last_after),
        if r.completions > 0 { rel(r.completed_at) } else { "never".into() },
        ms(r.elapsed)
    );
    let _ = writeln!(out, "    history:");
    for &(t, event, data) in &r.log {
        let what = match event {
            Event::Start => format!("spout emits {data} root tuple(s)"),
            Event::Init => format!("init(xor {data:#018x}) returned"),
            Event::InitHeld => format!("init held back for {}", ms(data)),
            Event::Ack => format!("ack(xor {data:#018x}) returned"),
            Event::AckTwice => format!("ack(xor {data:#018x}) sent twice, returned"),
            Event::AckDropped => format!("ack(xor {data:#018x}) DROPPED"),
            Event::Fail => format!("fail returned {}", data == 1),
            Event::Reset => format!("reset_timeout returned {}", data == 1),
            Event::Join => format!("tuple joined with root {data:#018x}"),
            Event::Complete => format!(
                "on_complete: {}{}",
                outcome_name((data % 16) as u32),
                if data >= 16 { " (AGAIN)" } else { "" }
            ),
        };
        let _ = writeln!(out, "      {} {what}", rel(t));
    }
    if r.events_dropped > 0 {
        let _ = writeln!(out, "      ... and {} more events", r.events_dropped);
    }
    out
}
