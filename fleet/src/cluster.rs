//! A 3-server NATS cluster with JetStream, on loopback, owned by this process.
//!
//! Each server gets a config file of `server_name`, `listen`, `jetstream { store_dir }`,
//! `cluster { name, listen, routes }` and, when the fleet has credentials, an
//! `authorization` block: the servers listen on 127.0.0.1 only and require the fleet's
//! token (or user and password), so no other local user's client gets in. The cluster elects
//! a JetStream metadata leader within a second or two of the third start.
//!
//! A server can be killed with SIGKILL and started again on the same config and store
//! directory: it rejoins its routes and catches its streams up from the other two.

use crate::node::cpu_ms_of;
use crate::Credentials;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How a user installs the server, said whenever it cannot be found or started.
pub const INSTALL_HINT: &str = "install it with `sudo apt-get install nats-server` (Debian, \
Ubuntu) or from https://github.com/nats-io/nats-server/releases, and make sure it is on PATH";

pub struct Cluster {
    servers: Vec<Server>,
    dir: PathBuf,
    /// CPU time of servers killed so far, milliseconds (read just before each kill).
    cpu_ms_of_killed: u64,
}

struct Server {
    config: PathBuf,
    client_port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl Cluster {
    /// Writes the configs under `dir` and starts the three servers.
    pub fn start(dir: &Path, base_port: u16, credentials: &Credentials) -> Result<Cluster, String> {
        let version = Command::new("nats-server")
            .arg("--version")
            .output()
            .map_err(|e| format!("cannot run nats-server ({e}): {INSTALL_HINT}"))?;
        if !version.status.success() {
            return Err(format!("nats-server --version failed: {INSTALL_HINT}"));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let names = ["n1", "n2", "n3"];
        let client = |i: usize| base_port + i as u16;
        let route = |i: usize| base_port + 100 + i as u16;
        let mut servers = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let routes: Vec<String> = (0..names.len())
                .filter(|&j| j != i)
                .map(|j| format!("\"nats-route://127.0.0.1:{}\"", route(j)))
                .collect();
            let store = dir.join(format!("{name}-store"));
            let config = dir.join(format!("{name}.conf"));
            let text = format!(
                "server_name: {name}\nlisten: \"127.0.0.1:{client}\"\n\
                 jetstream {{ store_dir: \"{store}\" }}\n\
                 cluster {{ name: fleet\n  listen: \"127.0.0.1:{route}\"\n  routes: [{routes}] }}\n\
                 {auth}",
                client = client(i),
                route = route(i),
                store = store.display(),
                routes = routes.join(", "),
                auth = credentials.server_block(),
            );
            std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
            servers.push(Server {
                config,
                client_port: client(i),
                child: None,
                log: dir.join(format!("{name}.log")),
            });
        }
        let mut cluster = Cluster {
            servers,
            dir: dir.to_path_buf(),
            cpu_ms_of_killed: 0,
        };
        for i in 0..cluster.servers.len() {
            cluster.start_server(i)?;
        }
        Ok(cluster)
    }

    /// Client URLs of every server, for a client that should fail over between them.
    pub fn urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| format!("nats://127.0.0.1:{}", s.client_port))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn start_server(&mut self, i: usize) -> Result<(), String> {
        let server = &mut self.servers[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&server.log)
            .map_err(|e| format!("{}: {e}", server.log.display()))?;
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&server.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start nats-server ({e}): {INSTALL_HINT}"))?;
        server.child = Some(child);
        wait_for_port(server.client_port, Duration::from_secs(10)).map_err(|e| {
            format!(
                "nats-server {} did not listen on 127.0.0.1:{}: {e} (its log: {})",
                i + 1,
                server.client_port,
                server.log.display()
            )
        })
    }

    /// SIGKILL, as a crash would.
    pub fn kill_server(&mut self, i: usize) {
        if let Some(mut child) = self.servers[i].child.take() {
            self.cpu_ms_of_killed += cpu_ms_of(child.id()).unwrap_or(0);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// CPU time every server of this cluster has used so far, milliseconds.
    pub fn cpu_ms(&self) -> u64 {
        let live: u64 = self
            .servers
            .iter()
            .filter_map(|s| s.child.as_ref())
            .filter_map(|c| cpu_ms_of(c.id()))
            .sum();
        self.cpu_ms_of_killed + live
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill_server(i);
        }
    }
}

fn wait_for_port(port: u16, within: Duration) -> Result<(), String> {
    let start = std::time::Instant::now();
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() > within => return Err(e.to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
