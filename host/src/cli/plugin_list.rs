//! `outbox-host plugin list`: the `/plugins` page of a running host, as a table. The host is named
//! as `admin_page.rs` says. Exit codes: 0 when listed, 1 when the admin endpoint cannot be reached
//! or answers anything but a plugin list, 2 when the address or the configuration is not usable.

use std::io::Write;

use chrono::{DateTime, Utc};

use super::admin_page::{AdminArgs, fetch};
use super::{EXIT_FAILURE, EXIT_SUCCESS};
use crate::admin::{PluginStatusJson, PluginsPage};

const HEADER: [&str; 8] = [
    "FILE",
    "HASH",
    "WORLD",
    "TYPE",
    "SCOPE",
    "STATE",
    "LOADED AT",
    "LAST ERROR",
];

/// Enough of a SHA-256 to tell versions apart at a glance.
const SHORT_HASH_LEN: usize = 12;

pub async fn run(args: AdminArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let page: PluginsPage = match fetch(args, "/plugins", "a plugin list", err).await {
        Ok(page) => page,
        Err(code) => return code,
    };
    let printed = if page.plugins.is_empty() {
        writeln!(out, "no plugin files in the plugins directory")
    } else {
        write!(out, "{}", table(&page.plugins))
    };
    match printed {
        Ok(()) => EXIT_SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "error: cannot print the plugin list: {error}");
            EXIT_FAILURE
        }
    }
}

/// One line per plugin.
fn table(plugins: &[PluginStatusJson]) -> String {
    super::table::render(HEADER, plugins.iter().map(row))
}

fn row(plugin: &PluginStatusJson) -> [String; 8] {
    let shown = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
    let file = std::path::Path::new(&plugin.file).file_name().map_or_else(
        || plugin.file.clone(),
        |name| name.to_string_lossy().into_owned(),
    );
    let hash = plugin.content_hash.as_deref().map_or_else(
        || "-".to_owned(),
        |hash| hash.chars().take(SHORT_HASH_LEN).collect(),
    );
    let loaded_at = DateTime::parse_from_rfc3339(&plugin.loaded_at).map_or_else(
        |_| plugin.loaded_at.clone(),
        |at| {
            at.with_timezone(&Utc)
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string()
        },
    );
    // A compile error spans several lines; a table row must not.
    let last_error = plugin
        .last_error
        .as_deref()
        .map_or_else(|| "-".to_owned(), super::table::one_line);
    [
        file,
        hash,
        shown(&plugin.world),
        shown(&plugin.destination_type),
        shown(&plugin.claim_scope),
        match plugin.compiling_since {
            Some(_) if plugin.state != "compiling" => {
                format!("{} (compiling a new version)", plugin.state)
            }
            _ => plugin.state.clone(),
        },
        loaded_at,
        last_error,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(file: &str, state: &str, last_error: Option<&str>) -> PluginStatusJson {
        PluginStatusJson {
            file: format!("/srv/plugins/{file}"),
            content_hash: Some("0123456789abcdef0123456789abcdef".to_owned()),
            world: Some("destination-handler".to_owned()),
            destination_type: Some("WEBHOOK".to_owned()),
            claim_scope: Some("destinations (2)".to_owned()),
            state: state.to_owned(),
            last_error: last_error.map(str::to_owned),
            loaded_at: "2025-03-04T05:06:07.123456789+00:00".to_owned(),
            compiling_since: None,
        }
    }

    #[test]
    fn each_plugin_is_one_row_with_its_file_name_short_hash_and_state() {
        let text = table(&[status("webhook.wasm", "loaded", None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let cells: Vec<&str> = lines[1]
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .collect();
        assert_eq!(
            cells,
            [
                "webhook.wasm",
                "0123456789ab",
                "destination-handler",
                "WEBHOOK",
                "destinations (2)",
                "loaded",
                "2025-03-04 05:06:07 UTC",
                "-"
            ]
        );
    }

    #[test]
    fn a_plugin_compiling_a_new_version_says_so_beside_the_state_of_the_one_serving() {
        let mut serving = status("router.wasm", "loaded", None);
        serving.compiling_since = Some("2025-03-04T05:06:08+00:00".to_owned());
        let mut new = status("chat.wasm", "compiling", None);
        new.compiling_since = Some("2025-03-04T05:06:08+00:00".to_owned());
        let text = table(&[new, serving]);
        assert!(text.contains("  compiling  "), "{text}");
        assert!(text.contains("loaded (compiling a new version)"), "{text}");
    }

    #[test]
    fn a_multi_line_error_stays_on_its_row() {
        let text = table(&[status(
            "bad.wasm",
            "failed",
            Some("cannot compile:\n\nCaused by:\n  bad magic"),
        )]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.ends_with("cannot compile: Caused by: bad magic\n"),
            "{text}"
        );
    }
}
