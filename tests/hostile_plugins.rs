//! The sandbox against a plugin that misbehaves on purpose (`tests/plugins/hostile`): the envelope's
//! `destination` names what it tries. Every attempt is contained, the host goes on, and the next
//! call to the same plugin works.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use outbox_host::plugins::{
    CallError, ComponentCaps, EngineConfig, Envelope, HandlerPlugin, PluginEngine, PluginSet,
    PublishResult,
};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugin_engine::test_engine;
use outbox_tests::plugins::{HOSTILE, NOOP};
use outbox_tests::scratch::ScratchDir;

const TIMEOUT_MS: u64 = 1000;
const MEMORY_MB: u32 = 32;

/// A guard against a test hanging forever; far above every limit under test.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// The hostile plugin (and noop) with tight limits.
async fn hostile_set(dir: &ScratchDir) -> PluginSet {
    dir.add_plugin("hostile", HOSTILE);
    dir.add_manifest(
        "hostile",
        &format!("[limits]\ntimeout_ms = {TIMEOUT_MS}\nmemory_mb = {MEMORY_MB}\n"),
    );
    dir.add_plugin("noop", NOOP);
    PluginSet::load_dir(&test_engine(), dir.path()).await
}

fn attempt(destination: &str, payload: &str) -> Envelope {
    Envelope {
        entry_id: 7,
        carrier_id: "01900000-0000-7000-8000-000000000007".into(),
        aggregate_type: None,
        aggregate_id: None,
        event_type: "Attack".into(),
        destination_type: "HOSTILE".into(),
        destination: destination.into(),
        payload: payload.into(),
        headers: vec![],
        metadata: "{}".into(),
        scheduled_at: None,
        attempt: 0,
        max_attempts: 5,
        created_at: 0,
    }
}

async fn call(
    plugin: &HandlerPlugin,
    destination: &str,
    payload: &str,
) -> Result<PublishResult, CallError> {
    tokio::time::timeout(HANG_GUARD, plugin.publish(&attempt(destination, payload)))
        .await
        .expect("the call ended")
}

fn assert_denied(result: Result<PublishResult, CallError>) {
    match result {
        Ok(PublishResult::Permanent(failure)) => assert_eq!(
            failure.error_type.as_deref(),
            Some("denied"),
            "{}",
            failure.message
        ),
        other => panic!("expected a permanent `denied` failure, got {other:?}"),
    }
}

async fn assert_next_call_works(plugin: &HandlerPlugin) {
    assert_eq!(call(plugin, "ok", "{}").await, Ok(PublishResult::Success));
}

#[tokio::test]
async fn an_endless_loop_ends_as_timeout_once_its_limit_has_passed() {
    let dir = ScratchDir::new("loop");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let started = Instant::now();
    let result = call(&hostile, "loop", "{}").await;
    assert_eq!(
        result,
        Err(CallError::Timeout {
            limit_ms: TIMEOUT_MS
        })
    );
    assert_eq!(result.unwrap_err().error_type().as_str(), "timeout");
    assert!(started.elapsed() >= Duration::from_millis(TIMEOUT_MS));
    assert_next_call_works(&hostile).await;
}

/// CPU time this thread has used, user and system, from `/proc` (in USER_HZ ticks, 100 a second).
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc is mounted");
    // The fields after the command name, which is in parentheses and may hold spaces: utime and
    // stime are the 14th and 15th fields of the line.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("a stat line")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// On a current-thread runtime the guest runs on the test's own thread, so that thread's CPU time
/// is what the loop took from the machine.
#[tokio::test(flavor = "current_thread")]
async fn an_endless_loop_is_held_to_a_fraction_of_a_core_until_its_limit() {
    let dir = ScratchDir::new("loop-cpu");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let before = thread_cpu_time();
    let result = call(&hostile, "loop", "{}").await;
    let used = thread_cpu_time() - before;
    assert_eq!(
        result,
        Err(CallError::Timeout {
            limit_ms: TIMEOUT_MS
        })
    );
    println!(
        "a {TIMEOUT_MS} ms endless loop used {} ms of CPU",
        used.as_millis()
    );
    assert!(
        used < Duration::from_millis(TIMEOUT_MS / 2),
        "the loop used {} ms of CPU in its {TIMEOUT_MS} ms limit",
        used.as_millis()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn other_calls_go_on_while_a_plugin_loops_on_the_same_thread() {
    let dir = ScratchDir::new("loop-others");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let noop = set.handler("NOOP").unwrap();
    let loop_ended = Arc::new(AtomicBool::new(false));
    let looping = tokio::spawn({
        let loop_ended = loop_ended.clone();
        async move {
            let result = call(&hostile, "loop", "{}").await;
            loop_ended.store(true, Ordering::SeqCst);
            result
        }
    });
    let others = tokio::spawn(async move {
        for _ in 0..20 {
            assert_eq!(
                noop.publish(&attempt("anywhere", "{}")).await,
                Ok(PublishResult::Success)
            );
        }
        loop_ended.load(Ordering::SeqCst)
    });
    assert!(
        !others.await.unwrap(),
        "the other calls completed only after the loop ended"
    );
    assert_eq!(
        looping.await.unwrap(),
        Err(CallError::Timeout {
            limit_ms: TIMEOUT_MS
        })
    );
}

#[tokio::test]
async fn time_spent_waiting_in_a_host_call_counts_against_the_limit() {
    let dir = ScratchDir::new("sleep");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let result = call(
        &hostile,
        "sleep",
        &format!(r#"{{"ms": {}}}"#, TIMEOUT_MS * 20),
    )
    .await;
    assert_eq!(
        result,
        Err(CallError::Timeout {
            limit_ms: TIMEOUT_MS
        })
    );
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn allocating_past_the_memory_limit_ends_as_memory_and_is_contained() {
    let dir = ScratchDir::new("alloc");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let result = call(&hostile, "alloc", "{}").await;
    assert_eq!(
        result,
        Err(CallError::Memory {
            limit_mb: MEMORY_MB
        })
    );
    assert_eq!(result.unwrap_err().error_type().as_str(), "memory");
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn a_trap_ends_as_trap_and_the_next_call_works() {
    let dir = ScratchDir::new("trap");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let error = call(&hostile, "trap", "{}").await.unwrap_err();
    assert_eq!(error.error_type().as_str(), "trap");
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn reading_a_file_is_denied() {
    let dir = ScratchDir::new("read-file");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    assert_denied(call(&hostile, "read-file", "{}").await);
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn no_environment_variable_is_visible() {
    assert!(
        std::env::var_os("PATH").is_some(),
        "the host itself has a PATH"
    );
    let dir = ScratchDir::new("env-var");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    assert_denied(call(&hostile, "env-var", "{}").await);
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn opening_a_socket_is_denied_and_never_connects() {
    let listener = StubServer::start(200).await;
    let dir = ScratchDir::new("socket");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    assert_denied(
        call(
            &hostile,
            "socket",
            &format!(r#"{{"port": {}}}"#, listener.port()),
        )
        .await,
    );
    assert_eq!(listener.connections(), 0);
    assert_next_call_works(&hostile).await;
}

#[tokio::test]
async fn failed_calls_are_counted_by_error_type() {
    let dir = ScratchDir::new("stats");
    let set = hostile_set(&dir).await;
    let hostile = set.handler("HOSTILE").unwrap();
    let before = hostile.stats();
    let _ = call(&hostile, "trap", "{}").await;
    let _ = call(&hostile, "loop", "{}").await;
    let _ = call(&hostile, "ok", "{}").await;
    let after = hostile.stats();
    assert_eq!(after.calls - before.calls, 3);
    assert_eq!(
        (after.traps - before.traps, after.timeouts - before.timeouts),
        (1, 1)
    );
}

#[tokio::test]
async fn claim_scopes_asked_while_every_instance_is_busy_start_no_instance_each_time() {
    let dir = ScratchDir::new("control-instance");
    dir.add_plugin("hostile", HOSTILE);
    dir.add_manifest("hostile", "[limits]\nmax_concurrency = 2\n");
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let hostile = set.handler("HOSTILE").unwrap();
    // As in the relay: each turn asks for the scope while the last turn's publishes hold every
    // work instance.
    for _ in 0..5 {
        let scope = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            hostile.claim_scope().await
        };
        let (first, second, scope) = tokio::join!(
            call(&hostile, "sleep", r#"{"ms": 100}"#),
            call(&hostile, "sleep", r#"{"ms": 100}"#),
            scope
        );
        assert_eq!(
            (first, second),
            (Ok(PublishResult::Success), Ok(PublishResult::Success))
        );
        scope.expect("the scope answers");
    }
    assert_eq!(
        hostile.stats().instances_started,
        3,
        "two for the publishes and one for control calls, however many turns"
    );
}

#[tokio::test]
async fn a_component_needing_more_of_the_pool_than_one_instance_may_hold_is_not_loaded() {
    let dir = ScratchDir::new("caps");
    dir.add_plugin("noop", NOOP);
    // A Rust component has 3 core instances; an engine that grants each component 2 refuses it,
    // as the default engine refuses a component built with a hundred.
    let engine = PluginEngine::new(EngineConfig {
        max_instances: 8,
        per_component: ComponentCaps {
            core_instances: 2,
            ..ComponentCaps::default()
        },
        ..EngineConfig::default()
    })
    .expect("the plugin engine starts");
    let set = PluginSet::load_dir(&engine, dir.path()).await;
    assert!(set.handler("NOOP").is_none(), "its type claims nothing");
    let status = set.statuses().next().expect("the file has a status");
    let error = status.last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("core module instances") && error.contains("maximum of 2"),
        "{error}"
    );
}
