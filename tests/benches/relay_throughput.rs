//! The relay end to end on this machine: the real service in-process, the `noop` plugin built from
//! source, PostgreSQL on the same 2 cores.
//!
//! 1. Drain rate: 100,000 pre-inserted NOOP rows, with one and with two relay loops, at batch sizes
//!    50 (the default) and 500, with no aggregate and with rows spread over 1,000 aggregates.
//! 2. Latency: insert-to-publish p50 and p99 (`published_at - created_at`, both on the database clock)
//!    under a steady 1,000 rows/s insert load, with LISTEN_NOTIFY.
//!
//! 3. Python and JavaScript handlers (see `sdk_handlers`): rows/s of the `chat-webhook` (Python) and
//!    `router` (JavaScript) examples delivering to a local HTTP server, against the Rust `webhook`
//!    example in the same run (goal: each at least 0.8 of it), each with its shipped manifest
//!    template and only the local server granted. `-- --sdk-only` runs this part alone;
//!    `SDK_RELAY_MAX_CONCURRENCY=N` runs all three at `[limits] max_concurrency = N` instead;
//!    `SDK_RELAY_ONLY=javascript` (any part of a label) drains only the handlers it names, to
//!    profile one alone (ratios then need the Rust webhook among them).
//!
//! Run: `cargo bench -p outbox-tests --bench relay_throughput`

use outbox_host::config::Strategy;
use outbox_tests::db::TestDb;
use outbox_tests::drain;
use outbox_tests::host::{self, TestHost};
use outbox_tests::latency;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;

const ROWS: u64 = 100_000;

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--sdk-only") {
        sdk_handlers::run().await;
        return;
    }
    println!("end-to-end drain of {ROWS} pre-inserted NOOP rows");
    println!(
        "{:<12} {:>10} {:>6} {:>10}",
        "aggregates", "loops", "batch", "rows/s"
    );
    for aggregates in [None, Some(1_000)] {
        for instances in [1, 2] {
            for batch in [50, 500] {
                let rate = drain(aggregates, instances, batch).await;
                let label = aggregates.map_or("none".to_owned(), |n| n.to_string());
                println!("{label:<12} {instances:>10} {batch:>6} {rate:>10.0}");
            }
        }
    }
    println!("goal: >= 10000 rows/s end to end");
    let measured = latency_under_load(1_000, Duration::from_secs(10)).await;
    println!(
        "\ninsert-to-publish latency at 1,000 rows/s (achieved {:.0}, {} rows, LISTEN_NOTIFY): p50 {:.2} ms, p99 {:.2} ms",
        measured.rows_per_second, measured.rows, measured.p50_ms, measured.p99_ms
    );
    println!("goal: p50 <= 5 ms, p99 <= 25 ms");
    sdk_handlers::run().await;
}

async fn drain(aggregates: Option<u32>, instances: u32, batch: u32) -> f64 {
    let db = TestDb::new().await;
    drain::fill(&db, ROWS, aggregates).await;
    let dir = ScratchDir::new("bench-relay");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.instances = instances;
    config.relay.batch_size = batch;
    config.relay.max_in_flight = batch.max(64);
    config.database.max_connections = 4 + instances;
    let host = TestHost::start(&config).await;
    latency::wait_until_all_published(&db).await;
    let rate = drain::published_rate(&db).await;
    host.stop().await;
    db.pool.close().await;
    rate
}

async fn latency_under_load(rate: u64, duration: Duration) -> latency::SteadyLatency {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("bench-latency");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval = Duration::from_millis(1000);
    let host = TestHost::start(&config).await;
    let measured = latency::under_steady_load(&db, rate, 1, duration).await;
    host.stop().await;
    measured
}

/// End-to-end rows/s of the Python and JavaScript example handlers, each delivering every row by an
/// HTTP POST to a local receiver, against the Rust webhook example doing the same in the same run.
/// The three drain in turn, round after round (the machine is shared), and medians are reported.
mod sdk_handlers {
    use outbox_tests::db::TestDb;
    use outbox_tests::drain;
    use outbox_tests::host::{self, TestHost};
    use outbox_tests::http_stub::StubServer;
    use outbox_tests::latency;
    use outbox_tests::plugins;
    use outbox_tests::rounds::median;
    use outbox_tests::scratch::ScratchDir;
    use outbox_tests::sdk_plugins::{self, CHAT_WEBHOOK, ROUTER};
    use std::path::PathBuf;
    use std::time::Duration;

    const ROWS: u64 = 20_000;
    const ROUNDS: usize = 3;

    struct Handler {
        label: &'static str,
        stem: &'static str,
        destination_type: &'static str,
        component: PathBuf,
        manifest_template: String,
    }

    pub async fn run() {
        let mut handlers = vec![Handler {
            label: "rust webhook",
            stem: "webhook",
            destination_type: "WEBHOOK",
            component: PathBuf::from(plugins::WEBHOOK),
            manifest_template: std::fs::read_to_string(
                sdk_plugins::repository().join("plugins/webhook/webhook.toml"),
            )
            .expect("the webhook example has a manifest template"),
        }];
        for (label, plugin, destination_type) in [
            ("python chat-webhook", CHAT_WEBHOOK, "CHAT"),
            ("javascript router", ROUTER, "ROUTER"),
        ] {
            match plugin.component() {
                Some(component) => handlers.push(Handler {
                    label,
                    stem: plugin.name,
                    destination_type,
                    component,
                    manifest_template: plugin.manifest_template(),
                }),
                None => println!("{label}: skipped, its toolchain is not installed"),
            }
        }
        if let Ok(only) = std::env::var("SDK_RELAY_ONLY") {
            handlers.retain(|handler| handler.label.contains(only.as_str()));
        }
        println!(
            "\nend-to-end drain of {ROWS} rows, each POSTed to a local HTTP server, {ROUNDS} interleaved rounds"
        );
        let mut drains = vec![Vec::new(); handlers.len()];
        for _ in 0..ROUNDS {
            for (handler, drains) in handlers.iter().zip(&mut drains) {
                drains.push(drain(handler).await);
            }
        }
        let of = |drains: &[Drain], figure: fn(&Drain) -> f64| {
            median(&drains.iter().map(figure).collect::<Vec<_>>())
        };
        let medians: Vec<f64> = drains.iter().map(|d| of(d, |d| d.rate)).collect();
        let rust = handlers
            .iter()
            .position(|handler| handler.stem == "webhook")
            .map(|at| medians[at]);
        for (handler, (drains, median)) in handlers.iter().zip(drains.iter().zip(&medians)) {
            let rounds: Vec<String> = drains.iter().map(|d| format!("{:.0}", d.rate)).collect();
            let ratio = rust.map_or("not run".into(), |rust| format!("{:.2}", median / rust));
            println!(
                "{:<20} median {:>7.0} rows/s ({ratio} of the rust webhook; rounds {}); \
                 this process's CPU {:.0} µs a row, a call {:.0} µs (wall), {:.0} instances started",
                handler.label,
                median,
                rounds.join(", "),
                of(drains, |d| d.cpu_micros_per_row),
                of(drains, |d| d.call_micros),
                of(drains, |d| d.instances_started),
            );
        }
        println!("goal: python and javascript each >= 0.8 of the rust webhook");
    }

    /// One drain's figures. The CPU is this whole process's (host, plugins and the local
    /// server), from the plugin's load to the last publish, so a round that compiles does not count
    /// its compile.
    #[derive(Clone)]
    struct Drain {
        rate: f64,
        cpu_micros_per_row: f64,
        call_micros: f64,
        instances_started: f64,
    }

    async fn drain(handler: &Handler) -> Drain {
        let receiver = StubServer::start(200).await;
        let db = TestDb::new().await;
        db.execute(&format!(
            "INSERT INTO {{outbox}} (carrier_id, aggregate_type, aggregate_id, event_type, destination, destination_type, payload) \
             SELECT gen_random_uuid(), 'Order', 'order-' || n, 'order.created', '{}', '{}', \
             json_build_object('order_id', 'A-' || n, 'total', n || ' EUR')::text::jsonb FROM generate_series(1, {ROWS}) AS n",
            receiver.url("/hook"),
            handler.destination_type,
        ))
        .await;
        db.execute("VACUUM ANALYZE {outbox}").await;
        let dir = ScratchDir::new("bench-sdk-relay");
        dir.add_plugin(
            handler.stem,
            handler.component.to_str().expect("a UTF-8 path"),
        );
        dir.add_manifest(handler.stem, &manifest(handler, &receiver));
        let host = TestHost::start(&host::config(&db, dir.path())).await;
        host.wait_for_plugins("the handler is loaded", Duration::from_secs(60), |set| {
            set.handler(handler.destination_type).is_some()
        })
        .await;
        let cpu_at_load = process_cpu();
        latency::wait_until_all_published(&db).await;
        let cpu = process_cpu() - cpu_at_load;
        let rate = drain::published_rate(&db).await;
        let stats = host
            .service
            .plugins()
            .borrow()
            .handler(handler.destination_type)
            .expect("the handler stays loaded")
            .stats();
        host.stop().await;
        db.pool.close().await;
        assert_eq!(receiver.requests().len() as u64, ROWS, "{}", handler.label);
        Drain {
            rate,
            cpu_micros_per_row: cpu.as_secs_f64() * 1e6 / ROWS as f64,
            call_micros: stats.total_duration.as_secs_f64() * 1e6 / stats.calls.max(1) as f64,
            instances_started: stats.instances_started as f64,
        }
    }

    /// User and system CPU of this process so far (all its threads), from `/proc/self/stat`.
    fn process_cpu() -> Duration {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux has /proc/self/stat");
        // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat[stat.rfind(')').expect("a command") + 2..]
            .split(' ')
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // The kernel reports USER_HZ ticks, 100 a second on every Linux this runs on.
        Duration::from_millis(ticks * 10)
    }

    /// The example's shipped manifest, granted the local server and routed to it.
    fn manifest(handler: &Handler, receiver: &StubServer) -> String {
        let mut manifest: toml::Table =
            toml::from_str(&handler.manifest_template).expect("a manifest template parses");
        section(&mut manifest, "http")
            .insert("allowed_hosts".into(), vec![receiver.origin()].into());
        section(&mut manifest, "config")
            .insert("route.default".into(), receiver.url("/hook").into());
        if let Ok(calls) = std::env::var("SDK_RELAY_MAX_CONCURRENCY") {
            let calls: i64 = calls
                .parse()
                .expect("SDK_RELAY_MAX_CONCURRENCY is a number");
            section(&mut manifest, "limits").insert("max_concurrency".into(), calls.into());
        }
        toml::to_string(&manifest).expect("a manifest serialises")
    }

    fn section<'a>(manifest: &'a mut toml::Table, name: &str) -> &'a mut toml::Table {
        manifest
            .entry(name)
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .expect("a manifest section is a table")
    }
}
