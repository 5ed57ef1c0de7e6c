//! A node against a real `nats-server` whose JetStream will not take the node's completion
//! records: the node must give up after `--nats-limit` with a clear error and a non-zero
//! status, not retry for ever, and it must not have acked the item it could not record, so
//! that the item is done again once the record can be written (the audit's rule: every
//! confirmed item is on record).
//!
//! The server is one `nats-server -js` on a free loopback port, started and killed by the
//! test. Without `nats-server` on PATH the test says SKIPPED and passes (the fleet's own
//! run, and CI, install it).

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One `nats-server` with JetStream, killed and its store removed on drop.
struct NatsServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl NatsServer {
    /// `None` (and a SKIPPED line) when `nats-server` is not installed.
    fn start(name: &str) -> Option<NatsServer> {
        if Command::new("nats-server")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: {name}: no nats-server on PATH (apt-get install nats-server)");
            return None;
        }
        // A port nothing listens on: bind one, note it, let it go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("fleet-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let server = NatsServer { child, dir, port };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nats-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node of a one-node fleet on run `t`; its standard input stays open (closing it is
/// how a run tells its nodes to stop).
fn node(url: &str, nats_limit: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["node", "--index", "0", "--nodes", "1", "--run", "t"])
        .args([
            "--tracker",
            "acker",
            "--fanout",
            "4",
            "--timeout-ms",
            "1000",
        ])
        .args(["--fail-rate", "0", "--drop-rate", "0", "--dup-rate", "0"])
        .args(["--nats-limit", &nats_limit.to_string(), "--servers", url])
        .env_remove("FLEET_NATS_TOKEN")
        .env_remove("FLEET_NATS_USER")
        .env_remove("FLEET_NATS_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a node")
}

/// The child's exit status and standard error, or a panic when it is still running after
/// `within` (then it is killed first).
fn wait(mut child: Child, within: Duration) -> (ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            return (status, stderr);
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node was still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_whose_records_jetstream_refuses_gives_up_after_its_limit_and_loses_nothing() {
    let Some(server) = NatsServer::start("records-refused") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client);
        let work = js
            .create_stream(stream::Config {
                name: "WORK_t".into(),
                subjects: vec!["t.work".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        let mut consumer: consumer::PullConsumer = work
            .create_consumer(consumer::pull::Config {
                durable_name: Some("nodes".into()),
                ack_wait: Duration::from_secs(2),
                ..Default::default()
            })
            .await
            .unwrap();
        js.publish("t.work", 7u64.to_le_bytes().to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();

        // No stream holds `t.completed`: every record publish is refused (no responders).
        let limit = 2;
        let start = Instant::now();
        let (status, stderr) = wait(node(&server.url(), limit), Duration::from_secs(20));
        let took = start.elapsed();
        eprintln!("the node said, after {took:?}: {stderr}");
        assert_eq!(status.code(), Some(2), "stderr: {stderr}");
        assert!(
            stderr.contains("JetStream") && stderr.contains("record"),
            "stderr: {stderr}"
        );
        assert!(
            took >= Duration::from_secs(limit) && took < Duration::from_secs(limit + 5),
            "gave up after {took:?}, the limit is {limit} s; stderr: {stderr}"
        );
        // The item it could not record is not acked: JetStream still holds it for a node.
        let info = consumer.info().await.unwrap();
        assert_eq!(
            info.num_ack_pending + info.num_pending as usize,
            1,
            "{info:?}"
        );

        // Once the record can be written, a new node does the item and records it.
        let mut done = js
            .create_stream(stream::Config {
                name: "DONE_t".into(),
                subjects: vec!["t.completed".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        let mut second = node(&server.url(), 10);
        let start = Instant::now();
        loop {
            let info = consumer.info().await.unwrap();
            if info.num_ack_pending == 0 && info.num_pending == 0 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the item was not done again: {info:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(second.stdin.take()); // the run is gone: the node stops
        let (status, stderr) = wait(second, Duration::from_secs(10));
        assert!(status.success(), "stderr: {stderr}");
        assert_eq!(done.info().await.unwrap().state.messages, 1);
        let reader: consumer::PullConsumer = done
            .create_consumer(consumer::pull::Config::default())
            .await
            .unwrap();
        let record = reader
            .fetch()
            .max_messages(1)
            .messages()
            .await
            .unwrap()
            .next()
            .await
            .unwrap()
            .unwrap();
        // A Completed record: the item number first.
        assert_eq!(record.payload[..8], 7u64.to_le_bytes());
    });
}
