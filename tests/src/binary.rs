//! The real `outbox-host` binary, run as an operator runs it: a configuration file, a process of its
//! own, signals to stop it.

use outbox_host::config::Config;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// Writes `config` where the binary reads it (`--config`).
pub fn write_config(config: &Config, path: &Path) {
    let text = toml::to_string(config).expect("the configuration serializes");
    std::fs::write(path, text).expect("the configuration file is writable");
}

/// A running `outbox-host run`. Killed when dropped, so a failed test leaves no host behind.
pub struct HostProcess {
    child: Child,
}

impl HostProcess {
    /// Starts `<binary> run --config <config>` with `RUST_LOG` as given and its standard output and
    /// error as given. `binary` is the test's `env!("CARGO_BIN_EXE_outbox-host-under-test")` (Cargo
    /// tells only tests where the binaries are).
    pub fn run(
        binary: &str,
        config: &Path,
        rust_log: &str,
        stdout: Stdio,
        stderr: Stdio,
    ) -> HostProcess {
        let child = Command::new(binary)
            .args(["run", "--config", config.to_str().expect("a UTF-8 path")])
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("the host binary starts");
        HostProcess { child }
    }

    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The process's peak resident set (`VmHWM`) so far, in KiB; 0 once it has exited.
    pub fn peak_resident_kib(&mut self) -> u64 {
        let Some(pid) = self.child.id() else {
            return 0;
        };
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("VmHWM:"))
                    .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Sends `signal` (`TERM`, `KILL`, …) as `kill -<signal>` does.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the host has not been reaped");
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// The exit code, once the process has exited; panics naming `what` after `timeout`. `None`
    /// when a signal ended it.
    pub async fn exit_code(&mut self, what: &str, timeout: Duration) -> Option<i32> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("the host can be waited for").code(),
            Err(_) => panic!("the host did not exit within {timeout:?} after {what}"),
        }
    }
}
