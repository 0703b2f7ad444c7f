//! The docker executor through the library: a sandbox config for a test,
//! starting, running commands, and checking that nothing of the run is
//! left. These tests need a running Docker engine and the
//! `runner-sandbox:tiny` image; without them they FAIL (never skip) with a
//! message saying what to do.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;
use runner::exec::docker::{
    DockerConfig, DockerExecutor, Kernel, LABEL_MANAGED, LABEL_RUN_ID, MANAGED_VALUE,
};
use runner::exec::{ExecOutput, ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

use super::docker::{TINY, require_docker, test_runtime};
use runner::exec::ExecutorExt;

/// Passes the preflight, then connects as runner does.
pub async fn docker() -> Docker {
    require_docker();
    runner::exec::docker::connect()
        .await
        .unwrap_or_else(|e| panic!("these tests need a running Docker engine: {e}"))
}

/// A unique run id for a test, so its containers can be found by label.
pub fn run_id(test: &str) -> String {
    format!("test-{test}-{}-{:x}", std::process::id(), fastrand::u32(..))
}

/// A sandbox of the tiny image for `test`, on the runtime under test.
pub fn cfg(test: &str) -> DockerConfig {
    DockerConfig {
        image: TINY.into(),
        run_id: run_id(test),
        memory_bytes: 256 << 20,
        pids_limit: 128,
        runtime: test_runtime(),
        ..Default::default()
    }
}

/// Whether the sandbox runs on gVisor (runsc) rather than the host's kernel,
/// as the executor read it from the engine.
pub fn on_gvisor(ex: &DockerExecutor) -> bool {
    ex.security().map(|s| s.kernel) == Some(Kernel::Gvisor)
}

pub async fn start(cfg: DockerConfig) -> DockerExecutor {
    DockerExecutor::start(cfg)
        .await
        .unwrap_or_else(|e| panic!("starting the sandbox failed: {e}"))
}

pub fn req(command: &str, timeout_secs: f64) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        timeout: Duration::from_secs_f64(timeout_secs),
        max_output_bytes: 16 << 10,
        full_output: None,
        cancel: CancellationToken::new(),
    }
}

/// Runs a command and returns its output, failing the test on an executor error.
pub async fn run(ex: &DockerExecutor, command: &str, timeout_secs: f64) -> ExecOutput {
    ex.execute(req(command, timeout_secs))
        .await
        .unwrap_or_else(|e| panic!("command {command:?} failed in the executor: {e}"))
}

/// Ids of the containers (running or not) of the run `run_id`: the
/// query of [`super::docker::containers_of_run`], through bollard.
pub async fn containers_of(d: &Docker, run_id: &str) -> Vec<String> {
    let filter = HashMap::from([(
        "label".to_string(),
        vec![
            format!("{LABEL_MANAGED}={MANAGED_VALUE}"),
            format!("{LABEL_RUN_ID}={run_id}"),
        ],
    )]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filter)
        .build();
    d.list_containers(Some(opts))
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// Shuts down and asserts nothing of the run is left.
pub async fn finish(d: &Docker, ex: DockerExecutor, run_id: &str) {
    ex.shutdown().await.expect("shutdown");
    ex.shutdown().await.expect("second shutdown is a no-op");
    drop(ex);
    assert!(
        containers_of(d, run_id).await.is_empty(),
        "containers left for {run_id}"
    );
}

/// Processes in the container other than its supervisor (PID 1) and the
/// listing itself, as `pid user args` lines.
pub async fn stray_processes(ex: &DockerExecutor) -> Vec<String> {
    let out = run(ex, "ps -o pid,user,args", 10.0).await;
    out.output
        .lines()
        .skip(1)
        .filter(|l| {
            let args = l.split_whitespace().skip(2).collect::<Vec<_>>().join(" ");
            !(args.starts_with(runner::exec::supervisor::binary::IN_SANDBOX)
                || args.contains("ps -o pid,user,args"))
        })
        .map(str::to_string)
        .collect()
}
