//! A ZooKeeper-like session tracker on [`ExpiryQueue`].
//!
//! Client threads open sessions and touch them (heartbeats); some clients stop heartbeating.
//! An expirer thread sleeps `wait_time()`, polls, and closes the sessions that expired. A
//! touch on a closed session fails (`touch` returns `None`), exactly like ZooKeeper's
//! `touchSession` on a session being closed: an expired session is never resurrected.
//!
//! Run: `cargo run --example sessions`. It stops by itself within about three seconds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::ExpiryQueue;

const TICK: Duration = Duration::from_millis(50);
const SESSION_TIMEOUT: Duration = Duration::from_millis(400);
const RUN_FOR: Duration = Duration::from_secs(4);

fn main() {
    let sessions = Arc::new(ExpiryQueue::<u64>::new(TICK).expect("valid tick"));
    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // The flag and the counter below use Relaxed: each is a lone value, nothing else is
    // published through it, and joins order the final read.

    let expirer = {
        let (sessions, stop, closed) = (sessions.clone(), stop.clone(), closed.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let wait = sessions.wait_time();
                if !wait.is_zero() {
                    thread::sleep(wait);
                }
                for id in sessions.poll() {
                    closed.fetch_add(1, Ordering::Relaxed);
                    println!(
                        "[{:>4}ms] expirer: session {id:#x} expired, closing it",
                        started.elapsed().as_millis()
                    );
                }
            }
        })
    };

    // Client c owns sessions c*0x100 + 0..4, heartbeating each every 100 ms. Odd sessions
    // "crash" (go silent) at a session-dependent time and must be expired by the server;
    // even ones are closed politely by the client after two seconds.
    let clients: Vec<_> = (1..=3u64)
        .map(|c| {
            let (sessions, stop) = (sessions.clone(), stop.clone());
            thread::spawn(move || {
                let mut healthy: Vec<u64> = (0..4).map(|k| c * 0x100 + k).collect();
                for &id in &healthy {
                    sessions.update(id, SESSION_TIMEOUT);
                    println!(
                        "[{:>4}ms] client {c}: opened session {id:#x}",
                        started.elapsed().as_millis()
                    );
                }
                while !stop.load(Ordering::Relaxed) && !healthy.is_empty() {
                    thread::sleep(Duration::from_millis(100));
                    let now = started.elapsed();
                    healthy.retain(|&id| {
                        let crash_at = Duration::from_millis(500 * (id & 0xff) + 300 * c);
                        if id % 2 == 1 && now > crash_at {
                            println!(
                                "[{:>4}ms] client {c}: session {id:#x} goes silent",
                                now.as_millis()
                            );
                            return false;
                        }
                        if id % 2 == 0 && now > Duration::from_secs(2) {
                            if sessions.remove(&id).is_some() {
                                println!(
                                    "[{:>4}ms] client {c}: closed session {id:#x}",
                                    now.as_millis()
                                );
                            }
                            return false;
                        }
                        if sessions.touch(&id, SESSION_TIMEOUT).is_none() {
                            println!(
                                "[{:>4}ms] client {c}: session {id:#x} was closed by the server",
                                now.as_millis()
                            );
                            return false;
                        }
                        true
                    });
                }
            })
        })
        .collect();

    for c in clients {
        c.join().expect("client thread");
    }
    // Let the silent sessions time out, then stop.
    while started.elapsed() < RUN_FOR && !sessions.is_empty() {
        thread::sleep(TICK);
    }
    stop.store(true, Ordering::Relaxed);
    expirer.join().expect("expirer thread");
    println!(
        "done after {}ms: {} sessions expired, {} still open",
        started.elapsed().as_millis(),
        closed.load(Ordering::Relaxed),
        sessions.len()
    );
}
