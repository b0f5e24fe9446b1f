//! The real `outbox-host run` as a child process, its log read from stderr as an operator's log
//! collector would: for tests of what the binary writes, and of its admin endpoint. (For tests that
//! hand the binary their own stdio and send it signals, see [`crate::binary::HostProcess`].)

use outbox_host::config::{Config, LogFormat};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for a log line or the start-up summary.
pub const LOG_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `outbox-host run --config FILE`; killed when dropped.
pub struct LoggedHost {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The admin listener's address, from the start-up summary (JSON format only).
    admin: Option<String>,
}

impl LoggedHost {
    /// Writes `config` to `config_file` and starts `binary` (a test's
    /// `env!("CARGO_BIN_EXE_outbox-host-under-test")`: only tests see it) on it, with `RUST_LOG`
    /// set to `log` (the configuration's `log.level` when `None`); waits for the start-up summary.
    pub async fn start(
        binary: &str,
        config: &Config,
        config_file: &Path,
        log: Option<&str>,
    ) -> LoggedHost {
        crate::binary::write_config(config, config_file);
        let mut command = Command::new(binary);
        command
            .args(["run", "--config"])
            .arg(config_file)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(filter) = log {
            command.env("RUST_LOG", filter);
        }
        let mut child = command.spawn().expect("the host binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let read = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                read.lock().expect("not poisoned").push(line);
            }
        });
        let mut host = LoggedHost {
            child,
            lines,
            admin: None,
        };
        let summary = host
            .wait_for_line("the start-up summary", |line| {
                line.contains("outbox-host started")
            })
            .await;
        if config.log.format == LogFormat::Json {
            let summary: serde_json::Value =
                serde_json::from_str(&summary).expect("a JSON log line");
            host.admin = summary["fields"]["admin"].as_str().map(str::to_owned);
        }
        host
    }

    /// `http://<admin address><path>`; needs `log.format = "json"`.
    pub fn admin_url(&self, path: &str) -> String {
        let admin = self.admin.as_deref().expect("started with JSON logs");
        format!("http://{admin}{path}")
    }

    /// Everything the host wrote to stderr so far, one entry a line.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("not poisoned").clone()
    }

    /// Waits until a line satisfies `check` and returns it; panics naming `what` after
    /// [`LOG_TIMEOUT`], with everything logged so far, or when the host exits first.
    pub async fn wait_for_line(&mut self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LOG_TIMEOUT;
        loop {
            if let Some(line) = self.lines().into_iter().find(|line| check(line)) {
                return line;
            }
            let exited = self.child.try_wait().expect("the child can be waited for");
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "no line shows {what} (host exited: {exited:?}); the log:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The lines logged as JSON, parsed (other lines are left out).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// SIGTERM, then waits for the exit; the exit code.
    pub async fn stop(mut self) -> Option<i32> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + LOG_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("the child can be waited for") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the host did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for LoggedHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
