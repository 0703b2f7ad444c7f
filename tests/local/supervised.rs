//! The supervisor the local executor runs its commands through: a child
//! of runner on the host, which outlives neither the executor nor what it
//! was asked to keep.

use std::time::{Duration, Instant};

use runner::exec::ExecutorExt;
use runner::exec::local::{LocalConfig, LocalExecutor};
use runner::exec::{ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

fn request(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.to_string(),
        timeout: Duration::from_secs(10),
        max_output_bytes: 64 * 1024,
        full_output: None,
        cancel: CancellationToken::new(),
    }
}

fn executor(dir: &tempfile::TempDir, keep_background: bool) -> LocalExecutor {
    LocalExecutor::new(LocalConfig {
        workdir: dir.path().to_path_buf(),
        keep_background,
        ..Default::default()
    })
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Waits up to 3 s for `pid` to end; whether it did.
async fn ends(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(3);
    while alive(pid) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}

/// The pid the command prints.
async fn pid_of(ex: &LocalExecutor, command: &str) -> u32 {
    let out = ex.execute(request(command)).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let line = out.output.lines().next().unwrap_or_default().to_string();
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("no pid in {out:?}"))
}

#[tokio::test]
async fn the_supervisor_is_runners_child_and_ends_with_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let ex = executor(&dir, false);
    // The shell's parent is the supervisor, and the supervisor's is us.
    let sup = pid_of(&ex, "echo $PPID").await;
    let parent = std::fs::read_to_string(format!("/proc/{sup}/stat")).unwrap();
    let ppid: u32 = parent
        .rsplit_once(") ")
        .and_then(|(_, r)| r.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap();
    assert_eq!(ppid, std::process::id(), "{parent}");
    // Its binary was a private copy, removed once it ran.
    let exe = std::fs::read_link(format!("/proc/{sup}/exe")).unwrap();
    assert!(exe.to_string_lossy().ends_with(" (deleted)"), "{exe:?}");
    drop(ex);
    assert!(
        ends(sup).await,
        "the supervisor {sup} outlived its executor"
    );
}

#[tokio::test]
async fn what_was_kept_in_the_background_dies_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let ex = executor(&dir, true);
    let job = pid_of(&ex, "sleep 1000.391 & echo $!").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        alive(job),
        "the kept job {job} was killed at the command's end"
    );
    ex.shutdown().await.unwrap();
    assert!(ends(job).await, "the kept job {job} outlived shutdown");
}

#[tokio::test]
async fn what_was_kept_in_the_background_dies_with_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let ex = executor(&dir, true);
    let job = pid_of(&ex, "sleep 1000.392 & echo $!").await;
    drop(ex);
    assert!(ends(job).await, "the kept job {job} outlived its executor");
}

/// The host supervisor is never confined, so its kills reach only the
/// command's own session: a process of the same user that runner did not
/// start (here a sleeper this test spawns) lives through a timed-out
/// command, a background job left behind, `kill_all` and the executor's
/// shutdown. A supervisor that took itself for a sandbox's would
/// `kill(-1)` every process the user (or root) may signal.
#[tokio::test]
async fn its_kills_never_reach_a_host_process_it_did_not_start() {
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn a bystander");
    let pid = bystander.id();
    let dir = tempfile::tempdir().unwrap();
    let ex = executor(&dir, false);
    let mut timed_out = request("sleep 30 & sleep 30");
    timed_out.timeout = Duration::from_millis(300);
    let out = ex.execute(timed_out).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    ex.execute(request("sleep 30 &")).await.unwrap();
    // Not offered by the local executor today; asked for when it is.
    if let Some(procs) = ex.extras().processes {
        let _ = procs.kill_all().await;
    }
    ex.shutdown().await.unwrap();
    drop(ex);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = alive(pid);
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(
        still,
        "the host supervisor killed a process it did not start"
    );
}
