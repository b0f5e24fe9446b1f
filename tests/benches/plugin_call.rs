//! What a plugin call costs the relay, printed as figures (no assertions):
//! - per-call cost of `noop` as the relay pays it: taking an instance, `publish`, giving it back,
//!   averaged over 10,000 calls (goal: at most 10 µs for a Rust plugin);
//! - calls per second with two tasks on a two-worker runtime (2 cores);
//! - first against second load of an unchanged component: compile, then the cache (goal: the second
//!   at least 20 times faster).
//!
//! - the Python and JavaScript examples (`chat-webhook`, `router`, `type-counter`) beside the Rust
//!   `webhook`, each doing its real work with its HTTP answered by the mock (no network in the
//!   figure): load with a cold and a warm cache, the first call after load, and steady calls
//!   averaged over 10,000 (goals for Python and JavaScript: first call under 20 ms, steady under
//!   100 µs, warm load under 200 ms).
//!
//! Run with `cargo bench -p outbox-tests --bench plugin_call`.

use std::time::{Duration, Instant};

use std::path::PathBuf;

use outbox_host::plugins::mock::{MockOptions, MockRunner, mock_envelope};
use outbox_host::plugins::{EngineConfig, PluginEngine, PluginSet, PublishResult};
use outbox_tests::plugins::{NOOP, WEBHOOK};
use outbox_tests::scratch::ScratchDir;
use outbox_tests::sdk_plugins::{CHAT_WEBHOOK, ROUTER, SdkPlugin, TYPE_COUNTER};

const CALLS: u32 = 10_000;
const WARM_UP_CALLS: u32 = 1_000;
const TASKS: u32 = 2;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let cache = ScratchDir::new("bench-cache");
    let plugins = ScratchDir::new("bench-plugins");
    plugins.add_plugin("noop", NOOP);
    let engine = || {
        PluginEngine::new(EngineConfig {
            cache_dir: Some(cache.path().join("cache")),
            ..EngineConfig::default()
        })
        .unwrap()
    };

    let (first_load, _) = timed(PluginSet::load_dir(&engine(), plugins.path())).await;
    let engine = engine();
    let (second_load, set) = timed(PluginSet::load_dir(&engine, plugins.path())).await;
    println!(
        "load of noop.wasm, first (compiled): {:>10.2} ms",
        millis(first_load)
    );
    println!(
        "load of noop.wasm, second (cache):   {:>10.2} ms",
        millis(second_load)
    );
    println!(
        "second load is {:.0}x faster (goal: at least 20x)",
        first_load.as_secs_f64() / second_load.as_secs_f64()
    );

    let handler = set.handler("NOOP").expect("noop loads");
    let envelope = mock_envelope("NOOP");
    for _ in 0..WARM_UP_CALLS {
        assert_eq!(handler.publish(&envelope).await, Ok(PublishResult::Success));
    }
    let (elapsed, ()) = timed(async {
        for _ in 0..CALLS {
            let _ = handler.publish(&envelope).await;
        }
    })
    .await;
    println!(
        "noop publish, one task: {:>8.2} µs a call over {CALLS} calls (goal: at most 10 µs)",
        micros(elapsed) / f64::from(CALLS)
    );

    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let handler = handler.clone();
            let envelope = envelope.clone();
            tokio::spawn(async move {
                for _ in 0..CALLS {
                    let _ = handler.publish(&envelope).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let total = f64::from(CALLS * TASKS);
    let elapsed = started.elapsed();
    println!(
        "noop publish, {TASKS} tasks on 2 workers: {:>10.0} calls/s ({:.2} µs a call each task)",
        total / elapsed.as_secs_f64(),
        micros(elapsed) / f64::from(CALLS)
    );
    let stats = handler.stats();
    println!("calls counted: {}, errors: {}", stats.calls, stats.errors());

    sdk_examples().await;
}

/// One example of [`sdk_examples`]: its component and manifest, and the envelope it is called with.
struct Example {
    label: &'static str,
    component: PathBuf,
    manifest: String,
    observer: bool,
}

/// The Rust webhook (the anchor) and the Python and JavaScript examples, each loaded as
/// `outbox-host plugin test` loads it, with every allowed request answered 200 by the mock.
async fn sdk_examples() {
    let hosts = "[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n";
    let mut examples = vec![Example {
        label: "rust webhook",
        component: PathBuf::from(WEBHOOK),
        manifest: hosts.to_owned(),
        observer: false,
    }];
    let sdk: [(&str, SdkPlugin, String); 3] = [
        ("python chat-webhook", CHAT_WEBHOOK, hosts.to_owned()),
        (
            "javascript router",
            ROUTER,
            format!("{hosts}[config]\n\"route.default\" = \"http://127.0.0.1:9/in\"\n"),
        ),
        (
            "python type-counter",
            TYPE_COUNTER,
            "[config]\nevery = \"1000000\"\n".to_owned(),
        ),
    ];
    for (label, plugin, manifest) in sdk {
        match plugin.component() {
            Some(component) => examples.push(Example {
                label,
                component,
                manifest,
                observer: plugin.observer,
            }),
            None => println!("{label}: skipped, its toolchain is not installed"),
        }
    }
    println!();
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>12}",
        "example", "cold load", "warm load", "first call", "steady call"
    );
    let mut anchor = None;
    for example in &examples {
        let figures = measure(example).await;
        let steady = figures.3;
        println!(
            "{:<22} {:>9.0} ms {:>9.1} ms {:>9.2} ms {:>9.1} µs{}",
            example.label,
            millis(figures.0),
            millis(figures.1),
            millis(figures.2),
            steady,
            match anchor {
                Some(rust) => format!("  ({:.1}x the rust webhook's steady call)", steady / rust),
                None => String::new(),
            }
        );
        if anchor.is_none() {
            anchor = Some(steady);
        }
    }
    println!(
        "goals for python and javascript: first call < 20 ms, steady call < 100 µs, warm load < 200 ms"
    );
}

/// Cold load, warm load, first call after the warm load, and the steady call in µs.
async fn measure(example: &Example) -> (Duration, Duration, Duration, f64) {
    let dir = ScratchDir::new("bench-sdk");
    let wasm = dir.path().join("plugin.wasm");
    std::fs::copy(&example.component, &wasm).expect("the component is readable");
    let manifest = dir.write("plugin.toml", example.manifest.as_bytes());
    let cache = ScratchDir::new("bench-sdk-cache");
    let engine = || {
        PluginEngine::new(EngineConfig {
            cache_dir: Some(cache.path().join("cache")),
            ..EngineConfig::default()
        })
        .unwrap()
    };
    let options = || MockOptions {
        manifest: Some(manifest.clone()),
        http_response: Some("200".parse().expect("a mock response")),
        ..MockOptions::default()
    };
    let (cold, _) = timed(MockRunner::load(&engine(), &wasm, options())).await;
    let engine = engine();
    let (warm, runner) = timed(MockRunner::load(&engine, &wasm, options())).await;
    let runner = runner.expect("the example loads");
    let mut envelope = runner.mock_envelope();
    envelope.destination = "http://127.0.0.1:9/hook".to_owned();
    envelope.event_type = "order.created".to_owned();
    envelope.payload =
        r#"{"order_id":"A-17","total":"12 EUR","lines":[{"sku":"x","qty":2}]}"#.to_owned();
    if example.observer {
        let first = runner.run(&envelope, 1).await;
        assert!(first.succeeded(), "{}", example.label);
        let steady = runner.run(&envelope, CALLS).await;
        assert!(steady.succeeded(), "{}", example.label);
        let total: Duration = steady.calls.iter().map(|call| call.elapsed).sum();
        return (
            cold,
            warm,
            first.calls[0].elapsed,
            micros(total) / f64::from(CALLS),
        );
    }
    let handler = runner.handler().expect("a handler").clone();
    let (first, result) = timed(handler.publish(&envelope)).await;
    assert_eq!(result, Ok(PublishResult::Success), "{}", example.label);
    let (elapsed, ()) = timed(async {
        for _ in 0..CALLS {
            assert_eq!(handler.publish(&envelope).await, Ok(PublishResult::Success));
        }
    })
    .await;
    // The mock keeps what it recorded until asked: drop it.
    let _ = runner.run(&envelope, 1).await;
    (cold, warm, first, micros(elapsed) / f64::from(CALLS))
}

async fn timed<T>(work: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let value = work.await;
    (started.elapsed(), value)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000_000.0
}
