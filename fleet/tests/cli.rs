//! The fleet's failures that need no NATS server: each must end the process with a clear
//! error, not a hang or a panic.

use std::process::Command;
use std::time::{Duration, Instant};

fn fleet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fleet"))
}

#[test]
fn a_missing_nats_server_says_how_to_install_it() {
    let empty = std::env::temp_dir().join(format!("fleet-no-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = fleet()
        .env("PATH", &empty)
        .args(["--duration", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("nats-server"), "stderr: {stderr}");
    assert!(
        stderr.contains("apt-get install nats-server"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_node_that_cannot_reach_nats_gives_up_after_its_limit() {
    // A port nothing listens on: bind one, note it, let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let out = fleet()
        .args([
            "node",
            "--index",
            "0",
            "--nodes",
            "1",
            "--run",
            "t",
            "--tracker",
            "acker",
        ])
        .args(["--fanout", "4", "--timeout-ms", "1000", "--fail-rate", "0"])
        .args(["--drop-rate", "0", "--dup-rate", "0", "--nats-limit", "2"])
        .args(["--servers", &format!("nats://127.0.0.1:{port}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("could not reach NATS"), "stderr: {stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "gave up only after {:?}",
        start.elapsed()
    );
}

#[test]
fn nonsense_arguments_are_refused() {
    let out = fleet().args(["--nodes", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes >= 1"));
}
