//! What the fault tests share: the bounds they wait within, the steady load of a well-behaved type
//! they run under, and a plugins directory with that type's webhook posting to a local receiver.

use crate::binary::write_config;
use crate::db::TestDb;
use crate::host;
use crate::http_stub::StubServer;
use crate::plugins;
use crate::scratch::ScratchDir;
use outbox_host::config::Config;
use std::path::PathBuf;
use std::time::Duration;

/// Rows a second of the steady load: what a debug host keeps up with on a slow 2-core machine (at
/// 1,000 one such machine never caught up within a minute, whichever doorbell it ran).
pub const LOAD: u64 = 500;
/// Bound for the host to finish every row once the load stops.
pub const DRAIN: Duration = Duration::from_secs(180);
/// Bound for the host to exit after SIGTERM.
pub const EXIT: Duration = Duration::from_secs(30);

/// A plugins directory with the webhook (`WEBHOOK`) allowed to post to `receiver`, and the host's
/// configuration beside it, changed by `change`. Call limits are generous: a loaded machine must not
/// turn a slow call into a retry.
pub fn webhook_host(
    db: &TestDb,
    receiver: &StubServer,
    label: &str,
    change: impl FnOnce(&mut Config),
) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!(
            "[http]\nallowed_hosts = [\"{}\"]\n[limits]\ntimeout_ms = 20000\n",
            receiver.origin()
        ),
    );
    let config_path = dir.path().join("host.conf");
    let mut config = host::config(db, dir.path());
    change(&mut config);
    write_config(&config, &config_path);
    (dir, config_path)
}
