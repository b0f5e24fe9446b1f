//! What a plugin call costs the relay, printed as figures (no assertions):
//! - per-call cost of `noop` as the relay pays it: taking an instance, `publish`, giving it back,
//!   averaged over 10,000 calls (goal: at most 10 µs for a Rust plugin);
//! - calls per second with two tasks on a two-worker runtime (2 cores);
//! - first against second load of an unchanged component: compile, then the cache (goal: the second
//!   at least 20 times faster).
//!
//! Run with `cargo bench -p outbox-tests --bench plugin_call`.

use std::time::{Duration, Instant};

use outbox_host::plugins::mock::mock_envelope;
use outbox_host::plugins::{EngineConfig, PluginEngine, PluginSet, PublishResult};
use outbox_tests::plugins::NOOP;
use outbox_tests::scratch::ScratchDir;

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
