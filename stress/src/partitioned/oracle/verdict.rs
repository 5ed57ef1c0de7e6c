//! The partitioned oracle's rules: what a finished attempt's record must satisfy
//! ([`verify`]), how it counts ([`tally`]), and how a violation describes it.

use super::*;

pub(super) fn describe(r: &Record) -> String {
    format!(
        "spout {} tree {} attempt {}, owner partition {}, {} messages{}",
        r.tag.spout,
        r.tag.tree,
        r.tag.attempt,
        r.owner,
        r.planned,
        if r.fail {
            ", fail instead of the last ack"
        } else {
            ""
        }
    )
}

pub(super) fn history(r: &Record) -> String {
    let mut s = String::from("    history:");
    let t0 = r.history.first().map_or(0, |e| e.us);
    for e in &r.history {
        let _ = write!(s, "\n      +{:>8} µs  ", e.us - t0);
        let _ = match e.what {
            What::Sent(k, p) => write!(s, "sent {k:?} to partition {p}"),
            What::Lost(k) => write!(s, "{k:?} lost on the network"),
            What::Delivered(k, p, inc, _) => write!(s, "{k:?} applied by partition {p}#{inc}"),
            What::Discarded(k, p) => write!(s, "{k:?} thrown away by killed partition {p}"),
            What::Completed(o, p, inc, _) => {
                write!(s, "on_complete: {o:?} from partition {p}#{inc}")
            }
            What::HandedBack(p, inc) => write!(s, "handed back by shutdown of partition {p}#{inc}"),
            What::Resolved(how) => write!(s, "origin resolved: {how:?}"),
        };
    }
    s
}

pub(super) fn tally(j: &mut Judged, r: &Record) {
    j.attempts += 1;
    let mut init_seen = false;
    let mut completed = false;
    let mut origin_timeout = false;
    for e in &r.history {
        match e.what {
            What::Delivered(Kind::Init, ..) => init_seen = true,
            What::Delivered(Kind::Ack(_), ..) if !init_seen => j.acks_before_init += 1,
            What::Completed(o, ..) if !completed => {
                completed = true;
                match o {
                    Outcome::Acked => j.acked += 1,
                    Outcome::Failed => j.failed += 1,
                    _ => j.timed_out += 1,
                }
                if origin_timeout {
                    j.late_completions += 1;
                }
            }
            What::HandedBack(..) => j.handed_back += 1,
            What::Resolved(Resolved::OriginTimeout) => origin_timeout = true,
            _ => {}
        }
    }
    if r.history
        .iter()
        .any(|e| matches!(e.what, What::Discarded(..)))
    {
        j.hit_by_kill += 1;
    }
    if !init_seen {
        j.never_initialized += 1;
    }
}

/// Everything wrong with one attempt's history.
pub(super) fn verify(r: &Record, timeout_us: u64, forced: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut init: Option<(u32, u64)> = None; // incarnation, time
    let (mut lost, mut discarded, mut delivered) = (0u32, 0u32, 0u32);
    let mut incs = Vec::new();
    let mut fail_delivered_to = None;
    let (mut first_before, mut last_after) = (u64::MAX, 0u64);
    let mut completions = Vec::new();
    let mut handed_back = None;
    let mut resolved = 0;
    for e in &r.history {
        match e.what {
            What::Lost(_) => lost += 1,
            What::Discarded(..) => discarded += 1,
            What::Delivered(k, p, inc, before) => {
                if p != r.owner {
                    out.push(format!(
                        "{k:?} delivered to partition {p}, but hash(root) routes to {}",
                        r.owner
                    ));
                    continue;
                }
                delivered += 1;
                incs.push(inc);
                first_before = first_before.min(before);
                last_after = last_after.max(e.us);
                match k {
                    Kind::Init => init = Some((inc, e.us)),
                    Kind::Fail => fail_delivered_to = Some(inc),
                    Kind::Ack(_) => {}
                }
            }
            What::Completed(o, p, inc, tag) => {
                if p != r.owner {
                    out.push(format!(
                        "completed ({o:?}) by partition {p}, which does not own it (hash(root) routes to {})",
                        r.owner
                    ));
                }
                if tag != r.tag {
                    out.push(format!("completion carries payload {tag:?}"));
                }
                completions.push((o, inc));
            }
            What::HandedBack(p, inc) => {
                if handed_back.replace((p, inc)).is_some() {
                    out.push("handed back twice".into());
                }
            }
            What::Resolved(_) => resolved += 1,
            What::Sent(..) => {}
        }
    }
    if resolved != 1 {
        out.push(format!("resolved {resolved} times by its origin"));
    }
    if forced {
        out.push(
            "still open at the end of the drain (a message or its completion never came)".into(),
        );
    }
    if completions.len() > 1 {
        out.push(format!("completed {} times", completions.len()));
    }
    let clean = lost == 0
        && discarded == 0
        && delivered == u32::from(r.planned)
        && init.is_some_and(|(i, _)| incs.iter().all(|&x| x == i));
    match (completions.first(), handed_back) {
        (Some(_), Some(_)) => out.push("completed, and also handed back by shutdown".into()),
        (None, Some((p, inc))) => {
            if init.map_or(true, |(i, _)| i != inc) || p != r.owner {
                out.push(format!(
                    "handed back by the shutdown of partition {p}#{inc}, which never got its init"
                ));
            }
        }
        (None, None) => {
            if let Some((inc, _)) = init {
                out.push(format!(
                    "initialized in partition {}#{inc}, but neither completed nor handed back by a shutdown",
                    r.owner
                ));
            }
        }
        (Some(&(o, inc)), None) => {
            if init.map_or(true, |(i, _)| i != inc) {
                out.push(format!(
                    "completed ({o:?}) by incarnation {inc}, which never got its init"
                ));
            }
            match o {
                Outcome::Acked if r.fail => {
                    out.push("Acked, but a fail was sent in place of its last ack".into());
                }
                Outcome::Acked if !clean => out.push(format!(
                    "Acked, but {lost} message(s) lost, {discarded} thrown away, {delivered} of {} applied to its init's incarnation",
                    r.planned
                )),
                Outcome::Failed if fail_delivered_to != Some(inc) => {
                    out.push("Failed, but no fail was applied to its incarnation".into());
                }
                Outcome::TimedOut if clean && last_after < first_before + timeout_us - SLACK_US => {
                    out.push(format!(
                        "TimedOut, but all its messages were applied within {:.1} ms of the first (timeout {} ms)",
                        (last_after - first_before) as f64 / 1e3,
                        timeout_us / 1000
                    ));
                }
                _ => {}
            }
        }
    }
    out
}
