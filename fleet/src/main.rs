//! ackwheel past one machine, for real: a fan-out pipeline across OS processes over a NATS
//! JetStream cluster, with one [`ackwheel::Acker`] per node as that node's partition of the
//! fleet's trees, processes and servers killed on purpose during the run, and an audit that
//! proves no work item was lost.
//!
//! `cargo run --release -p fleet` starts everything itself (`run/`): three `nats-server`
//! processes on loopback forming a cluster with JetStream (`cluster.rs`), a replicated
//! stream of numbered work items, and P node processes (this binary's `node` subcommand,
//! `node/`). A node pulls items from a shared durable consumer; for each it becomes the
//! origin of a tree under a random root, fans the item out into sub-tasks on the other
//! nodes and sends the init to the root's owner (`mix64(root) % P`); every sub-task acks
//! its edge to the owner in frames (`wire.rs`), which the owner applies with
//! [`ackwheel::Acker::apply`]. The owner's completion returns to the origin, which records
//! the item as done in a second replicated stream and acks the JetStream message on
//! `Acked`, or asks for redelivery on `Failed`, `TimedOut` or silence (an owner lost). The
//! run's phases alternate the owner's tracker between the Acker and a hand-written
//! `DashMap` with a sweeper (`node/tracker.rs`) for `--rounds` rounds, and the summary
//! (`report.rs`) compares the medians of their rounds: first what each tracker costs a
//! message, then the throughput, judged against what that cost can explain.

mod audit;
mod cluster;
mod node;
mod report;
mod run;
mod wire;

use clap::{Parser, Subcommand, ValueEnum};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    about = "ackwheel's Acker partitions over a NATS JetStream cluster, with kills and an audit"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: run::RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One node process (started by the run; not meant to be started by hand).
    Node(node::NodeArgs),
}

/// The owner's tracker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TrackerKind {
    /// One `ackwheel::Acker` per node, acks applied in frames.
    Acker,
    /// The hand-written alternative: a `DashMap` of XOR values with a sweeper thread.
    Dashmap,
}

impl std::fmt::Display for TrackerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrackerKind::Acker => "acker",
            TrackerKind::Dashmap => "dashmap",
        })
    }
}

/// The fleet's NATS credentials, from the environment: `FLEET_NATS_TOKEN`, or
/// `FLEET_NATS_USER` with `FLEET_NATS_PASSWORD`. The servers a run starts require them; when
/// none are set, a run makes up a random token for its own servers and hands it to its
/// nodes, so no other client on the machine gets in.
#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// No credentials: only for servers that require none.
    #[default]
    None,
    /// `FLEET_NATS_TOKEN`.
    Token(String),
    /// `FLEET_NATS_USER` and `FLEET_NATS_PASSWORD`.
    UserPassword(String, String),
}

impl Credentials {
    /// The credentials the environment names, if any.
    pub fn from_env() -> Credentials {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        match (
            var("FLEET_NATS_TOKEN"),
            var("FLEET_NATS_USER"),
            var("FLEET_NATS_PASSWORD"),
        ) {
            (Some(token), _, _) => Credentials::Token(token),
            (None, Some(user), Some(password)) => Credentials::UserPassword(user, password),
            _ => Credentials::None,
        }
    }

    /// The environment a child process needs to connect with these credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Credentials::None => vec![],
            Credentials::Token(t) => vec![("FLEET_NATS_TOKEN", t.clone())],
            Credentials::UserPassword(u, p) => vec![
                ("FLEET_NATS_USER", u.clone()),
                ("FLEET_NATS_PASSWORD", p.clone()),
            ],
        }
    }

    /// The `authorization` block of a server's config.
    pub fn server_block(&self) -> String {
        let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        match self {
            Credentials::None => String::new(),
            Credentials::Token(t) => format!("authorization {{ token: {} }}\n", quote(t)),
            Credentials::UserPassword(u, p) => format!(
                "authorization {{ user: {}, password: {} }}\n",
                quote(u),
                quote(p)
            ),
        }
    }

    fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        match self {
            Credentials::None => options,
            Credentials::Token(t) => options.token(t.clone()),
            Credentials::UserPassword(u, p) => options.user_and_password(u.clone(), p.clone()),
        }
    }
}

/// Connects to any of `urls`, retrying with backoff (100 ms doubling to 2 s) for at most
/// `within`; then the client fails over and reconnects by itself, and `disconnected` (if
/// given) is told of every disconnection and reconnection so that a node can give up after a
/// bounded time without NATS.
pub async fn connect(
    urls: &[String],
    credentials: &Credentials,
    name: &str,
    within: Duration,
    events: Option<tokio::sync::mpsc::UnboundedSender<async_nats::Event>>,
) -> Result<async_nats::Client, String> {
    let addrs: Vec<async_nats::ServerAddr> = urls
        .iter()
        .map(|u| u.parse().map_err(|e| format!("bad NATS url {u}: {e}")))
        .collect::<Result<_, _>>()?;
    let start = std::time::Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut options = credentials
            .apply(async_nats::ConnectOptions::new())
            .name(name)
            .connection_timeout(Duration::from_secs(2));
        if let Some(events) = events.clone() {
            options = options.event_callback(move |event| {
                let events = events.clone();
                async move {
                    let _ = events.send(event);
                }
            });
        }
        match options.connect(addrs.clone()).await {
            Ok(client) => return Ok(client),
            Err(e) if start.elapsed() + backoff > within => {
                return Err(format!(
                    "could not reach NATS at {} within {:?}: {e}",
                    urls.join(","),
                    within
                ))
            }
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Node(args)) => node::main(args),
        None => run::main(cli.run),
    };
    if let Err(e) = result {
        eprintln!("fleet: {e}");
        std::process::exit(2);
    }
}
