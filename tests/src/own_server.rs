//! A PostgreSQL server of a test's own: a cluster made with Debian's `pg_createcluster` on a free
//! port, which the test may restart without disturbing the other tests on the shared server.

use crate::host::free_port;
use std::path::Path;
use std::process::Command;

/// Clusters made here are named `outbox_tests_<pid>_<port>`; a later run drops those whose process
/// is gone.
const PREFIX: &str = "outbox_tests_";

/// A running cluster, stopped and dropped when this is dropped.
pub struct OwnServer {
    version: String,
    name: String,
    port: u16,
}

impl OwnServer {
    /// Creates and starts a cluster with trust authentication, as the shared server has.
    pub fn start() -> OwnServer {
        let version = installed_version();
        drop_clusters_of_gone_runs(&version);
        let port = free_port();
        let name = format!("{PREFIX}{}_{port}", std::process::id());
        run(Command::new("pg_createcluster")
            .stdout(std::process::Stdio::null())
            .args([
                &version,
                &name,
                "--port",
                &port.to_string(),
                "--start",
                "--",
                "--auth-local=trust",
                "--auth-host=trust",
            ]));
        OwnServer {
            version,
            name,
            port,
        }
    }

    /// The `postgres` database on this server.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctlcluster … restart`: a fast shutdown that ends every session, then a start. Async, so
    /// a test's load and host keep running against the server while it goes down and comes back.
    pub async fn restart(&self) {
        let status = tokio::process::Command::new("pg_ctlcluster")
            .args([
                "--skip-systemctl-redirect",
                &self.version,
                &self.name,
                "restart",
            ])
            .status()
            .await
            .expect("pg_ctlcluster runs");
        assert!(status.success(), "pg_ctlcluster restart failed: {status}");
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args([&self.version, &self.name, "--stop"])
            .status();
    }
}

/// The newest PostgreSQL version with a cluster configured on this machine.
fn installed_version() -> String {
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .expect("Debian's PostgreSQL packages (postgresql-common) are installed")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    versions.sort_by_key(|version| version.parse::<u32>().unwrap_or(0));
    versions.pop().expect("a PostgreSQL version is installed")
}

fn drop_clusters_of_gone_runs(version: &str) {
    let Ok(clusters) = std::fs::read_dir(Path::new("/etc/postgresql").join(version)) else {
        return;
    };
    for cluster in clusters.filter_map(|entry| entry.ok()?.file_name().into_string().ok()) {
        let Some(pid) = cluster
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('_').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = Command::new("pg_dropcluster")
                .args([version, &cluster, "--stop"])
                .status();
        }
    }
}

fn run(command: &mut Command) {
    let status = command.status().expect("the PostgreSQL cluster tools run");
    assert!(status.success(), "{command:?} failed: {status}");
}
