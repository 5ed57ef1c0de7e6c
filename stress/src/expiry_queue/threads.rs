//! The scenario's threads: the touchers (each owns its sessions and checks every deadline
//! the queue gives it) and the expirer (polls and records each session it is handed).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use ackwheel::Clock;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::Shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Still touched, or abandoned: must expire exactly once.
    Open,
    /// `remove` returned its deadline: must never expire.
    Removed,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Session {
    pub(super) id: u64,
    pub(super) deadline: u64,
    pub(super) end: End,
}

/// One toucher's result: its sessions, and what went wrong on the way.
#[derive(Debug, Default)]
pub(super) struct Touched {
    pub(super) sessions: Vec<Session>,
    pub(super) problems: Vec<String>,
    pub(super) found_expired: u64,
}

/// A touching thread: keeps `live` sessions going until told to stop, then abandons them.
pub(super) fn toucher(shared: &Shared, index: usize, seed: u64, live: usize) -> Touched {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Touched::default();
    // (next touch, session index, touches left, period)
    let mut schedule: BinaryHeap<Reverse<(u64, usize, u32, u64)>> = BinaryHeap::new();
    let timeout = shared.timeout.as_nanos() as u64;
    let mut serial = 0u64;
    let q = &shared.queue;
    let mut open = |out: &mut Touched, rng: &mut SmallRng| -> (usize, u32, u64) {
        serial += 1;
        let id = (index as u64) << 40 | serial;
        let before = shared.clock.now();
        let d = q.update(id, shared.timeout);
        let after = shared.clock.now();
        match d {
            Some(d) => check_deadline(out, id, d, before, after, timeout, shared.interval),
            None => out
                .problems
                .push(format!("update of new session {id:#x} returned None")),
        }
        out.sessions.push(Session {
            id,
            deadline: d.unwrap_or(0),
            end: End::Open,
        });
        let period = if rng.random_bool(0.1) {
            rng.random_range(timeout * 9 / 10..=timeout * 11 / 10)
        } else {
            rng.random_range(timeout / 50..=timeout / 2)
        };
        (out.sessions.len() - 1, rng.random_range(0..20), period)
    };
    let now = shared.clock.now();
    for _ in 0..live {
        let (i, left, period) = open(&mut out, &mut rng);
        let first = now + rng.random_range(0..=period);
        schedule.push(Reverse((first, i, left, period)));
    }
    let mut done = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = shared.clock.now();
        let Some(&Reverse((at, i, left, period))) = schedule.peek() else {
            break;
        };
        if at > now {
            thread::sleep(Duration::from_nanos(at - now).min(Duration::from_millis(1)));
            continue;
        }
        schedule.pop();
        let id = out.sessions[i].id;
        let last = out.sessions[i].deadline;
        let before = shared.clock.now();
        if left == 0 {
            if rng.random_bool(0.15) {
                let r = q.remove(&id);
                let after = shared.clock.now();
                match r {
                    Some(d) if d == last => out.sessions[i].end = End::Removed,
                    Some(d) => {
                        out.sessions[i].end = End::Removed;
                        out.problems.push(format!(
                            "remove({id:#x}) returned deadline {d}, the last one given was {last}"
                        ));
                    }
                    None => {
                        out.found_expired += 1;
                        gone_early(&mut out, id, last, after, "remove");
                    }
                }
            }
            // Abandoned (or removed): a fresh session takes its place.
            let (j, left, period) = open(&mut out, &mut rng);
            schedule.push(Reverse((now + period, j, left, period)));
        } else {
            let r = q.touch(&id, shared.timeout);
            let after = shared.clock.now();
            done += 1;
            match r {
                Some(d) => {
                    check_deadline(&mut out, id, d, before, after, timeout, shared.interval);
                    out.sessions[i].deadline = d;
                    schedule.push(Reverse((now + period, i, left - 1, period)));
                }
                None => {
                    out.found_expired += 1;
                    gone_early(&mut out, id, last, after, "touch");
                    let (j, left, period) = open(&mut out, &mut rng);
                    schedule.push(Reverse((now + period, j, left, period)));
                }
            }
            if done % 64 == 0 {
                shared.touches[index].store(done, Ordering::Relaxed);
            }
        }
    }
    shared.touches[index].store(done, Ordering::Relaxed);
    out
}

/// A deadline handed out by update/touch lies on the bucket after `now + timeout`, where
/// `now` is somewhere between the two readings.
fn check_deadline(
    out: &mut Touched,
    id: u64,
    d: u64,
    before: u64,
    after: u64,
    timeout: u64,
    interval: u64,
) {
    let low = before + timeout;
    let high = after + timeout + interval;
    if d <= low || d > high {
        out.problems.push(format!(
            "session {id:#x} got deadline {d}, outside ({low}, {high}] (now + timeout, rounded up to the next bucket)"
        ));
    }
}

/// `touch`/`remove` found the session gone: the expirer took it, legal only if the call
/// returned after its deadline.
fn gone_early(out: &mut Touched, id: u64, deadline: u64, after: u64, call: &str) {
    if after < deadline {
        out.problems.push(format!(
            "{call}({id:#x}) found the session gone {:.3} ms before its deadline",
            (deadline - after) as f64 / 1e6
        ));
    }
}

/// The expirer: sleeps until the next bucket is due, polls, records each session's expiry.
pub(super) fn expirer(shared: &Shared, stop: &AtomicBool) -> (HashMap<u64, u64>, Vec<String>) {
    let mut expired: HashMap<u64, u64> = HashMap::new();
    let mut problems = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let wait = shared.queue.wait_time();
        if !wait.is_zero() {
            thread::sleep(wait.min(Duration::from_millis(5)));
            continue;
        }
        let got = shared.queue.poll();
        let at = shared.clock.now();
        shared
            .expired
            .fetch_add(got.len() as u64, Ordering::Relaxed);
        for id in got {
            if let Some(first) = expired.insert(id, at) {
                expired.insert(id, first);
                problems.push(format!(
                    "session {id:#x} expired twice (at {first} and {at})"
                ));
            }
        }
    }
    (expired, problems)
}
