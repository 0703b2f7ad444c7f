//! Per-command latency of the local executor: 200 `true` calls through
//! the library API, timed. Ignored by default (a measurement, not a
//! check); run with `cargo test --release --test local latency -- --ignored
//! --nocapture`.

use std::time::{Duration, Instant};

use runner::exec::ExecutorExt;
use runner::exec::local::{LocalConfig, LocalExecutor};
use runner::exec::{ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

const CALLS: usize = 200;

#[tokio::test]
#[ignore = "a measurement; run it by name"]
async fn two_hundred_true_calls() {
    let dir = tempfile::tempdir().unwrap();
    let ex = LocalExecutor::new(LocalConfig {
        workdir: dir.path().to_path_buf(),
        ..Default::default()
    });
    let req = || ExecRequest {
        command: "true".into(),
        timeout: Duration::from_secs(10),
        max_output_bytes: 64 * 1024,
        full_output: None,
        cancel: CancellationToken::new(),
    };
    // The first call pays for whatever the executor starts once.
    let first = Instant::now();
    assert_eq!(ex.execute(req()).await.unwrap().exit_code, Some(0));
    let first = first.elapsed();
    let mut times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let out = ex.execute(req()).await.unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        times.push(t.elapsed());
    }
    times.sort();
    let total: Duration = times.iter().sum();
    eprintln!(
        "first {first:?}; {CALLS} calls: total {total:?}, mean {:?}, median {:?}, p95 {:?}",
        total / u32::try_from(CALLS).unwrap(),
        times[CALLS / 2],
        times[CALLS * 95 / 100]
    );
    ex.shutdown().await.unwrap();
}
