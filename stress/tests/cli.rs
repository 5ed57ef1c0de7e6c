//! The harness end to end, at a small scale: an honest run passes and writes its JSON and
//! SVG, every scenario runs under `all`, and a planted bug (every `Acked` reported to the
//! oracle as `Failed`; in the partitioned scenario, an ack routed to the wrong partition)
//! makes the run fail with the tree's history — so a green run means the oracle was
//! looking.

use std::path::PathBuf;
use std::process::{Command, Output};

fn stress(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stress"))
        .args(args)
        .output()
        .expect("run the stress binary")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A directory of its own under the system's temp dir, removed when dropped (so runs of
/// this test do not pile up there), whether the test passed or not.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("ackwheel-stress-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_short_acker_run_passes_and_writes_its_reports() {
    let scratch = Scratch::new("acker");
    let json = scratch.file("acker.json");
    let svg = scratch.file("acker.svg");
    let out = stress(&[
        "acker",
        "--duration",
        "1",
        "--memory-roots",
        "20000",
        // The build cost and the churn run in debug children here: a default acker's build
        // takes ~0.4 s and a tree ~5 µs, so fewer of both than by default.
        "--ackers-at-once",
        "2",
        "--churn-trees",
        "20000",
        // The growth and burst phases at a test's size (CI's stress steps run them at 1M
        // in a release build).
        "--growth-roots",
        "20000",
        "--deadline-roots",
        "0",
        "--burst-roots",
        "20000",
        "--seed",
        "11",
        "--replay",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("violations   0") && all.contains("PASS"),
        "{all}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["pass"], true);
    assert_eq!(report["acker"]["violations"], 0);
    assert_eq!(report["acker"]["pending_after_drain"], 0);
    assert!(report["acker"]["trees_completed"].as_u64().unwrap() > 0);
    for figure in ["bytes_per_pending_root", "bytes_per_pending_root_threaded"] {
        assert!(
            report["acker"]["memory"][figure].as_f64().unwrap() > 0.0,
            "{figure}"
        );
    }
    let footprint = &report["acker"]["footprint"];
    for (part, figure) in [
        ("build", "rss_growth"),
        ("build", "seconds"),
        ("build", "rss_growth_at_once"),
        ("build", "seconds_at_once"),
        ("churn", "peak_rss_growth"),
    ] {
        assert!(
            footprint[part][figure].as_f64().is_some_and(|v| v > 0.0),
            "{part}.{figure} in {footprint}"
        );
    }
    assert_eq!(footprint["build"]["ackers_at_once"], 2);
    assert_eq!(footprint["churn"]["trees"], 20000);
    assert!(
        all.contains("  build        +") && all.contains("  churn        +"),
        "{all}"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.contains("<polyline"));
}

#[test]
fn every_scenario_passes_under_all() {
    let out = stress(&[
        "all",
        "--duration",
        "3",
        "--memory-roots",
        "0",
        "--sessions",
        "2000",
        "--ops",
        "300000",
        "--growth-roots",
        "0",
        "--deadline-roots",
        "0",
        "--burst-roots",
        "0",
        "--seed",
        "12",
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    for header in ["acker:", "expiry-queue:", "wheel:", "partitioned:"] {
        assert!(all.contains(header), "no {header} section\n{all}");
    }
}

#[test]
fn a_planted_bug_fails_the_run_with_a_history() {
    let out = stress(&[
        "acker",
        "--duration",
        "1",
        "--memory-roots",
        "0",
        "--growth-roots",
        "0",
        "--deadline-roots",
        "0",
        "--burst-roots",
        "0",
        "--seed",
        "13",
        "--plant-bug",
    ]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("VIOLATION: root"), "{all}");
    assert!(all.contains("Failed, but no fail was sent"), "{all}");
    assert!(
        all.contains("history:") && all.contains("on_complete: Failed"),
        "{all}"
    );
    assert!(all.contains("FAIL:"), "{all}");
}

#[test]
fn a_short_partitioned_run_passes_with_its_kill() {
    let scratch = Scratch::new("partitioned");
    let json = scratch.file("partitioned.json");
    let out = stress(&[
        "partitioned",
        "--duration",
        "2",
        "--seed",
        "21",
        "--json",
        json.to_str().unwrap(),
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("throughput against N") && all.contains("PASS"),
        "{all}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["pass"], true);
    let p = &report["partitioned"];
    assert_eq!(p["violations"], 0);
    // N = 1, 2 (the scaling phases) and the configured 4 with the kill.
    assert_eq!(
        p["throughput_against_n"].as_array().unwrap().len(),
        3,
        "{p}"
    );
    let main = &p["phases"][2];
    assert_eq!(main["partitions"], 4);
    assert_eq!(main["kill"], true);
    assert!(
        main["messages_discarded_by_kill"].as_u64().unwrap() > 0,
        "{main}"
    );
    assert!(
        main["judged"]["hit_by_kill"].as_u64().unwrap() > 0,
        "{main}"
    );
    assert!(
        main["judged"]["acks_before_init"].as_u64().unwrap() > 0,
        "{main}"
    );
    for phase in p["phases"].as_array().unwrap() {
        let started = phase["trees_started"].as_u64().unwrap();
        assert!(started > 0, "{phase}");
        assert_eq!(
            started,
            phase["trees_acked"].as_u64().unwrap() + phase["trees_exhausted"].as_u64().unwrap(),
            "{phase}"
        );
    }
}

#[test]
fn a_misrouted_ack_fails_the_partitioned_run() {
    let out = stress(&[
        "partitioned",
        "--duration",
        "1",
        "--partitions",
        "2",
        "--seed",
        "22",
        "--plant-bug",
    ]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("VIOLATION: root") && all.contains("but hash(root) routes to"),
        "{all}"
    );
    assert!(all.contains("history:") && all.contains("FAIL:"), "{all}");
}
