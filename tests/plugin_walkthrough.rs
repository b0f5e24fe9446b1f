//! The plugin walk-throughs, followed as their readers would, with the files and commands taken from
//! the markdown (so the documentation cannot drift from what works): the README's (build the example
//! plugins, try and inspect them) in the repository, and a new plugin author's first hour from an
//! empty folder with `sdk/rust/README.md`: written, built, tried offline with `outbox-host plugin
//! test`, deployed into a running host, and fed a row inserted with the README's SQL until that row
//! is delivered; and the same for Python and JavaScript with `sdk/README.md`.

use outbox_host::api::OutboxEntry;
use outbox_host::plugins::PluginSet;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost};
use outbox_tests::http_stub::StubServer;
use outbox_tests::scratch::ScratchDir;
use outbox_tests::sdk_plugins::Language;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
/// Settings of the build running this test that would redirect or reshape the walk-through's own.
const OUTER_BUILD_VARS: [&str; 7] = [
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
        .to_owned()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repository().join(relative)).expect("the document is readable")
}

/// The bodies of the fenced blocks after `marker` in `markdown`, in order.
fn blocks_after(markdown: &str, marker: &str) -> Vec<String> {
    let start = markdown
        .find(marker)
        .unwrap_or_else(|| panic!("the document no longer says {marker:?}"));
    let mut rest = &markdown[start..];
    let mut blocks = Vec::new();
    while let Some(fence) = rest.find("```") {
        let body = &rest[fence..];
        let Some(line_end) = body.find('\n') else {
            break;
        };
        let body = &body[line_end + 1..];
        let Some(end) = body.find("```") else { break };
        blocks.push(body[..end].to_owned());
        rest = &body[end + 3..];
    }
    blocks
}

/// The body of the first fenced block after `marker`.
fn block_after(markdown: &str, marker: &str) -> String {
    blocks_after(markdown, marker).swap_remove(0)
}

/// `text` with `from` replaced by `to`; panics when the document no longer holds `from`.
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the document no longer holds {from:?}:\n{text}"
    );
    text.replace(from, to)
}

/// Runs one shell command in `dir`, with `outbox-host` at its start being the binary under test: its
/// exit code and everything it printed.
fn run_command(command: &str, dir: &Path) -> (Option<i32>, String) {
    let command = match command.strip_prefix("outbox-host ") {
        Some(args) => format!("{BINARY} {args}"),
        None => command.to_owned(),
    };
    let mut sh = Command::new("sh");
    sh.args(["-c", &command])
        .current_dir(dir)
        // The test machine may have no network: dependencies come from Cargo's local cache.
        .env("CARGO_NET_OFFLINE", "true");
    // A new user's shell has none of the settings of the build running this test.
    for outer in OUTER_BUILD_VARS {
        sh.env_remove(outer);
    }
    let result = sh.output().expect("sh runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    (result.status.code(), text)
}

/// The commands of a `sh` block, continuation lines joined, comments and blank lines left out.
fn commands(block: &str) -> Vec<String> {
    block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Runs every command of a `sh` block in `dir`; panics on a failing one. Everything they printed.
fn run_commands(block: &str, dir: &Path) -> String {
    let mut output = String::new();
    for command in commands(block) {
        let (code, text) = run_command(&command, dir);
        assert_eq!(code, Some(0), "`{command}` failed:\n{text}");
        output.push_str(&text);
    }
    output
}

#[tokio::test]
async fn the_readme_walkthrough_builds_tries_and_inspects_the_example_plugins() {
    let readme = read("README.md");
    let blocks = blocks_after(&readme, "## Writing a plugin");
    let printed = run_commands(&blocks[0], &repository());
    for expected in [
        "built plugins/webhook.wasm",
        "call 1: success",
        "destination type: WEBHOOK",
    ] {
        assert!(printed.contains(expected), "{expected}\n{printed}");
    }

    let files = ScratchDir::new("readme-walkthrough");
    let envelope = files.write("hook.json", blocks[1].as_bytes());
    let manifest = files.write("hook.toml", blocks[2].as_bytes());
    let tried = commands(&blocks[3]);
    assert_eq!(tried.len(), 1, "{tried:?}");
    let command = replaced(&tried[0], "hook.toml", &manifest.display().to_string());
    let command = replaced(&command, "hook.json", &envelope.display().to_string());
    let (code, printed) = run_command(&command, &repository());
    assert_eq!(code, Some(1), "{printed}");
    for expected in [
        "call 1: retryable [http-status]",
        "POST https://hooks.example.com/orders",
    ] {
        assert!(printed.contains(expected), "{expected}\n{printed}");
    }
}

#[tokio::test]
async fn the_sdk_walkthrough_goes_from_an_empty_folder_to_a_delivered_row() {
    let sdk = read("sdk/rust/README.md");
    let readme = read("README.md");
    let stub = StubServer::start(201).await;
    let folder = ScratchDir::new("walkthrough");
    let project = folder.path().join("billing");
    std::fs::create_dir_all(project.join("src")).unwrap();
    // Compiled dependencies are kept between runs, as a new user's would be on their second build.
    let target = std::env::temp_dir().join("outbox-tests-walkthrough-target");
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&target, project.join("target")).unwrap();

    let manifest = block_after(&sdk, "`Cargo.toml`:");
    let manifest = replaced(
        &manifest,
        "/path/to/outbox-host",
        &repository().display().to_string(),
    );
    std::fs::write(project.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(
        project.join("src/lib.rs"),
        block_after(&sdk, "`src/lib.rs`:"),
    )
    .unwrap();
    let grants = block_after(&sdk, "Its manifest, `billing.toml`");
    let grants = replaced(&grants, "https://billing.example.com", &stub.origin());
    std::fs::write(project.join("billing.toml"), grants).unwrap();
    std::fs::write(
        project.join("order.json"),
        block_after(&sdk, "`order.json` overrides any envelope field"),
    )
    .unwrap();

    run_commands(&block_after(&sdk, "## Build"), &project);
    let tried = run_commands(&blocks_after(&sdk, "## Test offline")[1], &project);
    for expected in [
        "manifest:         billing.toml",
        "\"total_cents\": 1250",
        "call 1: success",
        "invoicing entry 1",
        "POST ",
    ] {
        assert!(tried.contains(expected), "{expected}\n{tried}");
    }

    // A payload of the wrong shape is refused naming the field, never quoting the value.
    std::fs::write(
        project.join("wrong.json"),
        r#"{"payload": {"order_id": "o-1", "total_cents": "secret-value"}}"#,
    )
    .unwrap();
    let wrong = Command::new(BINARY)
        .args([
            "plugin",
            "test",
            "billing.wasm",
            "--manifest",
            "billing.toml",
        ])
        .args(["--envelope", "wrong.json", "--http-response", "201"])
        .current_dir(&project)
        .output()
        .unwrap();
    let wrong = String::from_utf8_lossy(&wrong.stdout);
    assert!(
        wrong.contains(
            "call 1: permanent [payload]: the payload does not have the expected shape at `total_cents`"
        ),
        "{wrong}"
    );
    assert!(!wrong.contains("secret-value"), "{wrong}");

    let db = TestDb::new().await;
    let plugins = ScratchDir::new("walkthrough-plugins");
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let deploy = replaced(
        &block_after(&sdk, "## Deploy"),
        "/path/to/plugins",
        &plugins.path().display().to_string(),
    );
    run_commands(&deploy, &project);
    host.wait_for_plugins(
        "the billing plugin is loaded",
        Duration::from_secs(60),
        |set: &PluginSet| set.handler("BILLING").is_some(),
    )
    .await;

    let insert = block_after(&readme, "From any other language, insert the row");
    let insert = replaced(&insert, "INSERT INTO outbox", "INSERT INTO {outbox}");
    let insert = replaced(
        &insert,
        "'WEBHOOK', 'https://hooks.example.com/orders'",
        "'BILLING', 'invoices'",
    );
    let insert = replaced(
        &insert,
        "'{\"order\": 42}'",
        "'{\"order_id\": \"o-42\", \"total_cents\": 990}'",
    );
    let id: i64 = db.scalar(&insert).await;
    db.wait_until_published(id, Duration::from_secs(60)).await;
    let carrier_id: String = db.carrier_id(id).await;
    assert_eq!(carrier_id.as_bytes()[14], b'7', "a UUIDv7: {carrier_id}");
    let max_attempts: i32 = db
        .scalar(&format!(
            "SELECT max_attempts FROM {{outbox}} WHERE id = {id}"
        ))
        .await;
    assert_eq!(max_attempts, 10);
    let requests = stub.requests();
    let request = requests.last().expect("the plugin called the billing API");
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/invoices")
    );
    assert_eq!(request.header("idempotency-key"), Some(carrier_id.as_str()));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&request.body).unwrap(),
        serde_json::json!({"order": "o-42", "amount": 990})
    );
    host.stop().await;
}

/// `sdk/README.md`'s walk-through for one language, from an empty folder: the module and manifest
/// written from the guide, built and tried with its commands, deployed into a running host, and a
/// row delivered through it to a local receiver.
async fn follow_the_sdk_guide(
    language: Language,
    section: &str,
    source_file: &str,
    stem: &str,
    destination_type: &str,
    example_origin: &str,
) {
    if !language.toolchain_ready() {
        return;
    }
    let guide = read("sdk/README.md");
    let stub = StubServer::start(200).await;
    let folder = ScratchDir::new("sdk-guide");
    let project = folder.path().join(stem);
    std::fs::create_dir_all(&project).unwrap();
    let files = blocks_after(&guide, &format!("## {section}\n"));
    // The SDK's template project is the guide's two files.
    let template = repository()
        .join("sdk")
        .join(language.folder())
        .join("template");
    for (name, block) in [
        (source_file.to_owned(), &files[0]),
        (format!("{stem}.toml"), &files[1]),
    ] {
        let text = std::fs::read_to_string(template.join(&name)).expect("the template file");
        assert_eq!(
            &text,
            block,
            "sdk/{}/template/{name} is the guide's",
            language.folder()
        );
    }
    std::fs::write(project.join(source_file), &files[0]).unwrap();
    let manifest = replaced(&files[1], example_origin, &stub.origin());
    std::fs::write(project.join(format!("{stem}.toml")), manifest).unwrap();
    let at_repository = |block: &str| {
        replaced(
            block,
            "/path/to/outbox-host",
            &repository().display().to_string(),
        )
    };
    let built = run_commands(
        &at_repository(&block_after(&guide, &format!("### {section}: build"))),
        &project,
    );
    assert!(built.contains(&format!("{stem}.wasm")), "{built}");

    let offline = blocks_after(&guide, &format!("### {section}: test offline"));
    std::fs::write(project.join("order.json"), &offline[0]).unwrap();
    // The guide's cache is the test hosts' own, so the host below loads the component compiled here.
    let tried = replaced(
        &offline[1],
        "~/.cache/outbox-host/compiled",
        &host::state_dir().join("cache").display().to_string(),
    );
    let tried = run_commands(&tried, &project);
    for expected in ["call 1: success", &format!("POST {}/", stub.origin())] {
        assert!(tried.contains(expected), "{expected}\n{tried}");
    }

    let db = TestDb::new().await;
    let plugins = ScratchDir::new("sdk-guide-plugins");
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let deploy = replaced(
        &block_after(&guide, &format!("### {section}: deploy")),
        "/path/to/plugins",
        &plugins.path().display().to_string(),
    );
    run_commands(&deploy, &project);
    host.wait_for_plugins(
        "the guide's plugin is loaded",
        Duration::from_secs(300),
        |set: &PluginSet| set.handler(destination_type).is_some(),
    )
    .await;
    let id = db
        .publish(OutboxEntry::new(
            "order.created",
            destination_type,
            "anywhere",
            serde_json::json!({"order_id": "o-42"}),
        ))
        .await;
    db.wait_until_published(id, Duration::from_secs(60)).await;
    let carrier_id: String = db.carrier_id(id).await;
    let requests = stub.requests();
    let request = requests.last().expect("the plugin posted to the receiver");
    assert_eq!(request.method, "POST");
    assert_eq!(request.header("idempotency-key"), Some(carrier_id.as_str()));
    assert!(
        String::from_utf8_lossy(&request.body).contains("o-42"),
        "the row's payload reached the receiver"
    );
    host.stop().await;
}

#[tokio::test]
async fn the_python_guide_goes_from_an_empty_folder_to_a_delivered_row() {
    follow_the_sdk_guide(
        Language::Python,
        "Python",
        "app.py",
        "alerts",
        "ALERTS",
        "https://alerts.example.com",
    )
    .await;
}

#[tokio::test]
async fn the_javascript_guide_goes_from_an_empty_folder_to_a_delivered_row() {
    follow_the_sdk_guide(
        Language::JavaScript,
        "JavaScript",
        "app.js",
        "audit",
        "AUDIT",
        "https://audit.example.com",
    )
    .await;
}
