//! `--shell persistent` on the local executor: what carries over between
//! commands, and that every guarantee of a fresh shell still holds (kill of
//! everything at the timeout, exit codes, bounded output, background
//! processes killed and counted).

use std::time::{Duration, Instant};

use runner::exec::ExecutorExt;
use runner::exec::ShellState;
use runner::exec::background_killed_note;
use runner::exec::local::{LocalConfig, LocalExecutor};
use runner::exec::shell::ShellMode;
use runner::exec::{ExecOutput, ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

fn persistent(dir: &tempfile::TempDir, keep_background: bool) -> LocalExecutor {
    LocalExecutor::new(LocalConfig {
        workdir: dir.path().to_path_buf(),
        env: vec![("BASE_VAR".into(), "base".into())],
        keep_background,
        shell: ShellMode::Persistent,
    })
}

fn request(command: &str, timeout_secs: f64) -> ExecRequest {
    ExecRequest {
        command: command.to_string(),
        timeout: Duration::from_secs_f64(timeout_secs),
        max_output_bytes: 64 * 1024,
        full_output: None,
        cancel: CancellationToken::new(),
    }
}

async fn run(ex: &LocalExecutor, command: &str, timeout_secs: f64) -> (ExecOutput, Duration) {
    let started = Instant::now();
    let out = ex
        .execute(request(command, timeout_secs))
        .await
        .unwrap_or_else(|e| panic!("`{command}` failed to run: {e}"));
    eprintln!("`{command}` -> {out:?}");
    (out, started.elapsed())
}

fn alive(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(marker)
    })
}

#[tokio::test]
async fn cd_export_unset_survive_a_timeout_and_stdin_waits() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let ex = persistent(&dir, false);
    run(&ex, "mkdir sub && cd sub", 5.0).await;
    run(&ex, "export X=1; unset BASE_VAR", 5.0).await;
    // A hung command is killed at its timeout with what it started; its
    // own cd and export are lost, the session goes on.
    let (out, took) = run(
        &ex,
        "cd /; export X=2; sleep 1000.301 & sleep 1000.301",
        1.0,
    )
    .await;
    assert!(out.timed_out && took < Duration::from_secs(2), "{took:?}");
    assert!(!alive("sleep 1000.301"));
    // Input waits get EOF at once.
    let (out, took) = run(&ex, "cat; read -r line; echo read=$?", 5.0).await;
    assert_eq!(out.output, "read=1\n");
    assert!(took < Duration::from_secs(2));
    let (out, _) = run(&ex, r#"pwd; echo "X=$X BASE=${BASE_VAR-unset}""#, 5.0).await;
    assert_eq!(
        out.output,
        format!("{}/sub\nX=1 BASE=unset\n", ws.display())
    );
    assert_eq!(out.exit_code, Some(0));
    ex.restart_shell().await.unwrap();
    let (out, _) = run(&ex, r#"pwd; echo "X=${X-unset} BASE=$BASE_VAR""#, 5.0).await;
    assert_eq!(out.output, format!("{}\nX=unset BASE=base\n", ws.display()));
}

#[tokio::test]
async fn exit_codes_and_output_are_those_of_a_fresh_shell() {
    let dir = tempfile::tempdir().unwrap();
    let ex = persistent(&dir, false);
    let (out, _) = run(&ex, "echo a; echo b >&2; exit 3", 5.0).await;
    assert_eq!((out.exit_code, out.output.as_str()), (Some(3), "a\nb\n"));
    assert_eq!(out.bytes_seen, 4);
    let (out, _) = run(&ex, "kill -9 $$", 5.0).await;
    assert_eq!(out.exit_code, Some(137));
    let (out, _) = run(&ex, "echo $# $0", 5.0).await;
    assert_eq!(out.output, "0 runner-shell\n");
}

#[tokio::test]
async fn background_processes_are_killed_and_counted_as_in_fresh_mode() {
    let dir = tempfile::tempdir().unwrap();
    let ex = persistent(&dir, false);
    let (out, took) = run(
        &ex,
        "nohup sleep 1000.302 >/dev/null 2>&1 & cd /; echo started",
        5.0,
    )
    .await;
    assert_eq!(
        out.output,
        format!("started\n{}\n", background_killed_note(1))
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(!alive("sleep 1000.302"));
    let (out, _) = run(&ex, "pwd", 5.0).await;
    assert_eq!(out.output, "/\n");
}

#[tokio::test]
async fn a_kept_background_process_holding_the_state_pipe_does_not_delay_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let ex = persistent(&dir, true);
    // The background job inherits the state descriptor and never closes it.
    let (out, took) = run(&ex, "sleep 1000.303 & cd /tmp; echo ok", 5.0).await;
    assert_eq!(out.output, "ok\n");
    assert!(took < Duration::from_millis(500), "{took:?}");
    let (out, _) = run(&ex, "pwd", 5.0).await;
    assert_eq!(out.output, "/tmp\n");
    ex.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oversized_state_is_refused_with_a_note_and_the_old_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let ex = persistent(&dir, false);
    run(&ex, "cd /", 5.0).await;
    let (out, _) = run(
        &ex,
        "cd /tmp; export BIG=$(head -c 300000 /dev/zero | tr '\\0' x); echo set",
        10.0,
    )
    .await;
    assert_eq!(out.exit_code, Some(0));
    assert!(
        out.output
            .starts_with("set\n[runner: the shell state is larger than"),
        "{}",
        out.output
    );
    let (out, _) = run(&ex, "pwd; echo ${#BIG}", 5.0).await;
    assert_eq!(out.output, "/\n0\n");
}
