//! Drives `LocalExecutor` through the library API: the exec contract on the
//! host (exit codes, interleaving, the kill protocol, bounded capture, the
//! environment allowlist). Each test that starts a lingering process uses a
//! unique `sleep 1000.NNN` marker so parallel tests cannot see each other's.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner::exec::capture::MAX_FULL_OUTPUT_BYTES;
use runner::exec::local::{ENV_ALLOWLIST, LocalConfig, LocalExecutor};
use runner::exec::{ExecError, ExecOutput, ExecRequest, Executor, background_killed_note};
use runner::hostfs::{HostDir, OutputDir};
use tokio_util::sync::CancellationToken;

use crate::support::binary::peak_rss_kib;
use runner::exec::ExecutorExt;

fn executor(dir: &tempfile::TempDir) -> LocalExecutor {
    LocalExecutor::new(LocalConfig {
        workdir: dir.path().to_path_buf(),
        env: vec![("RUNNER_TEST_VAR".into(), "given".into())],
        ..Default::default()
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

/// Runs `command`, returning the output and the wall time; prints both on
/// failure through the assertion messages of the callers.
async fn run(command: &str, timeout_secs: f64) -> (ExecOutput, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = executor(&dir)
        .execute(request(command, timeout_secs))
        .await
        .unwrap_or_else(|e| panic!("`{command}` failed to run: {e}"));
    (out, started.elapsed())
}

/// Pids of live (non-zombie) processes whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

fn assert_no_survivors(marker: &str) {
    let left = survivors(marker);
    assert!(left.is_empty(), "processes still running: {left:?}");
}

#[tokio::test]
async fn exit_codes_are_reported() {
    let (out, _) = run("exit 3", 10.0).await;
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert!(!out.timed_out && !out.cancelled);
    let (out, _) = run("true", 10.0).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    // Killed by a signal it was not sent by us: 128 + SIGKILL, as bash says.
    let (out, _) = run("kill -9 $$", 10.0).await;
    assert_eq!(out.exit_code, Some(137), "{out:?}");
}

#[tokio::test]
async fn stdout_and_stderr_interleave_in_order() {
    let (out, _) = run("echo a; echo b >&2; echo c; echo d >&2", 10.0).await;
    assert_eq!(out.output, "a\nb\nc\nd\n");
    assert_eq!(out.bytes_seen, 8);
}

#[tokio::test]
async fn runs_in_workdir_with_stdin_closed() {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor(&dir);
    assert_eq!(exec.kind(), "local");
    assert_eq!(exec.workdir(), dir.path().display().to_string());
    let out = exec
        .execute(request("pwd; cat; echo end", 5.0))
        .await
        .unwrap();
    let want = format!("{}\nend\n", dir.path().canonicalize().unwrap().display());
    assert_eq!(out.output, want);
}

#[tokio::test]
async fn timeout_kills_background_children_too() {
    let (out, took) = run("sleep 1000.101 & sleep 1000.101", 2.0).await;
    eprintln!("2 s timeout: returned after {took:?}");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_no_survivors("sleep 1000.101");
}

#[tokio::test]
async fn nohup_children_die_with_the_group() {
    let (out, took) = run("nohup sleep 1000.102 >/dev/null 2>&1 & sleep 1000.102", 1.0).await;
    assert!(
        out.timed_out && took < Duration::from_secs(2),
        "{out:?} {took:?}"
    );
    assert_no_survivors("sleep 1000.102");

    // Even after a clean exit, nothing of the command stays on the host,
    // and the model is told it was killed.
    let (out, took) = run("nohup sleep 1000.103 >/dev/null 2>&1 & echo started", 5.0).await;
    assert_eq!(
        (out.exit_code, out.output.as_str()),
        (
            Some(0),
            format!("started\n{}\n", background_killed_note(1)).as_str()
        )
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_no_survivors("sleep 1000.103");
}

#[tokio::test]
async fn job_control_groups_die_with_the_session() {
    // `set -m` puts each background job in a process group of its own; the
    // kill goes by session, so they die too.
    let (out, took) = run("set -m; sleep 1000.109 & sleep 1000.109 & echo up", 5.0).await;
    assert_eq!((out.exit_code, out.output.as_str()), (Some(0), "up\n"));
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_no_survivors("sleep 1000.109");
}

#[tokio::test]
async fn term_ignoring_loop_is_killed() {
    let (out, took) = run("trap '' TERM; while :; do :; done", 1.0).await;
    assert!(out.timed_out, "{out:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn background_child_holding_stdout_does_not_hang() {
    let (out, took) = run("sleep 1000.104 & echo done", 10.0).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.timed_out);
    assert_eq!(out.output, format!("done\n{}\n", background_killed_note(1)));
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_no_survivors("sleep 1000.104");
}

#[tokio::test]
async fn cancellation_kills_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let req = request("sleep 1000.105 & sleep 1000.105", 30.0);
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let out = executor(&dir).execute(req).await.unwrap();
    let took = started.elapsed();
    assert!(out.cancelled && !out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(took < Duration::from_millis(1300), "took {took:?}");
    assert_no_survivors("sleep 1000.105");
}

#[tokio::test]
async fn shutdown_kills_running_commands_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let exec = Arc::new(executor(&dir));
    let running = {
        let exec = Arc::clone(&exec);
        tokio::spawn(async move { exec.execute(request("sleep 1000.106", 30.0)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    exec.shutdown().await.unwrap();
    exec.shutdown().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("execute returns after shutdown")
        .unwrap()
        .unwrap();
    assert!(out.cancelled, "{out:?}");
    assert_no_survivors("sleep 1000.106");
    let refused = exec.execute(request("true", 5.0)).await;
    assert!(matches!(refused, Err(ExecError::Refused(_))), "{refused:?}");
}

#[tokio::test]
async fn one_gigabyte_flood_keeps_memory_bounded() {
    let started = Instant::now();
    let (out, _) = run("head -c 1073741824 /dev/zero; echo tail-end", 60.0).await;
    let took = started.elapsed();
    // The peak resident set of this test process.
    let peak = peak_rss_kib(std::process::id()).expect("VmHWM of this process");
    eprintln!(
        "1 GiB flood: {took:?}, peak RSS {peak} KiB, bytes_seen {}",
        out.bytes_seen
    );
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.bytes_seen, 1_073_741_824 + 9);
    assert!(out.output.len() < 64 * 1024 + 100, "{}", out.output.len());
    assert!(out.output.contains("bytes omitted of 1073741833 total"));
    assert!(out.output.ends_with("tail-end\n"));
    assert!(peak < 100 * 1024, "peak RSS {peak} KiB");
}

#[tokio::test]
async fn non_utf8_output_is_decoded_lossily() {
    let (out, _) = run(r"printf 'a\377b\n'", 5.0).await;
    assert_eq!(out.output, "a\u{FFFD}b\n");
    assert_eq!(out.bytes_seen, 4);
}

#[tokio::test]
async fn environment_is_exactly_the_allowlist() {
    let (out, _) = run("env", 5.0).await;
    // Names bash sets itself, plus the one the config passes.
    let allowed: Vec<&str> = ENV_ALLOWLIST
        .iter()
        .copied()
        .chain(["PWD", "SHLVL", "_", "OLDPWD", "RUNNER_TEST_VAR"])
        .collect();
    for line in out.output.lines() {
        let name = line.split('=').next().unwrap_or_default();
        assert!(
            allowed.contains(&name),
            "unexpected variable {line:?} in:\n{}",
            out.output
        );
    }
    assert!(
        out.output.contains("RUNNER_TEST_VAR=given\n"),
        "{}",
        out.output
    );
    // Every variable of this test process outside the allowlist stays out,
    // CARGO_* ones included.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if !allowed.contains(&name.as_ref()) {
            assert!(!out.output.contains(&format!("\n{name}=")), "{name} leaked");
        }
    }
}

#[tokio::test]
async fn full_output_file_gets_all_bytes_up_to_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = OutputDir::new(HostDir::create(&dir.path().join("out")).unwrap(), u64::MAX);
    let path = out_dir.file("full.log").path();
    let mut req = request("seq 1 100000", 10.0);
    req.full_output = Some(out_dir.file("full.log"));
    let out = executor(&dir).execute(req).await.unwrap();
    let want: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
    assert_eq!(out.bytes_seen, want.len() as u64);

    let over = MAX_FULL_OUTPUT_BYTES + 1000;
    let mut req = request(&format!("head -c {over} /dev/zero"), 30.0);
    let path = out_dir.file("full2.log").path();
    req.full_output = Some(out_dir.file("full2.log"));
    let out = executor(&dir).execute(req).await.unwrap();
    assert_eq!(out.bytes_seen, over);
    // Streamed, not read whole: the RSS bound of the flood test covers this
    // process, and these tests run in parallel.
    let mut file = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
    let mut body = vec![0u8; 1 << 20];
    for _ in 0..MAX_FULL_OUTPUT_BYTES / (1 << 20) {
        file.read_exact(&mut body).unwrap();
        assert!(body.iter().all(|b| *b == 0));
    }
    let mut marker = String::new();
    file.read_to_string(&mut marker).unwrap();
    assert_eq!(
        marker,
        format!(
            "\n[... 1000 bytes not written: full-output file capped at {MAX_FULL_OUTPUT_BYTES} bytes ...]\n"
        )
    );
}

#[tokio::test]
async fn secrets_are_redacted_from_output() {
    let dir = tempfile::tempdir().unwrap();
    let redactor = runner::redact::Redactor::new(vec!["hunter2".into()]).unwrap();
    let exec = executor(&dir).with_redactor(redactor);
    let out = exec.execute(request("echo pw=hunter2", 5.0)).await.unwrap();
    assert_eq!(out.output, "pw=[REDACTED]\n");
}

#[tokio::test]
async fn missing_workdir_is_a_spawn_error() {
    let exec = LocalExecutor::new(LocalConfig {
        workdir: "/nonexistent/runner-workdir".into(),
        env: Vec::new(),
        ..Default::default()
    });
    let err = exec.execute(request("true", 5.0)).await.unwrap_err();
    assert!(matches!(err, ExecError::Spawn(_)), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/runner-workdir"),
        "{err}"
    );
}

#[tokio::test]
async fn flood_past_the_timeout_returns_on_time() {
    let (out, took) = run("yes", 1.0).await;
    eprintln!(
        "`yes` with 1 s timeout: returned after {took:?}, {} bytes",
        out.bytes_seen
    );
    assert!(out.timed_out, "{out:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(out.bytes_seen > 1_000_000 && out.output.len() < 64 * 1024 + 100);
}

#[tokio::test]
async fn escaped_process_holding_the_pipe_does_not_hang_us() {
    // `setsid` leaves our process group, so the kill cannot reach it: the
    // bounded drain is what lets us return.
    let (out, took) = run("setsid sleep 1000.107 & echo hi", 10.0).await;
    let left = survivors("sleep 1000.107");
    for line in &left {
        let pid: i32 = line.split(':').next().unwrap().parse().unwrap();
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
    assert_eq!((out.exit_code, out.output.as_str()), (Some(0), "hi\n"));
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[tokio::test]
async fn dropping_the_execute_future_kills_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor(&dir);
    let fut = exec.execute(request("sleep 1000.108 & sleep 1000.108", 30.0));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), fut)
            .await
            .is_err()
    );
    // SIGKILL lands asynchronously; give it a moment.
    let until = Instant::now() + Duration::from_secs(1);
    while !survivors("sleep 1000.108").is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_no_survivors("sleep 1000.108");
}

/// The files API on the host: bounded, no-follow, and never outside the
/// working directory or the sandbox's own root (a task's /tests).
#[tokio::test]
async fn files_stay_in_the_workdir_or_the_sandbox_root() {
    let dir = tempfile::tempdir().unwrap();
    let ex = executor(&dir).with_root().expect("a root");
    ex.write_file("in/blob.bin", &[0, 255, 7]).await.unwrap();
    assert_eq!(ex.read_file("in/blob.bin", 3).await.unwrap(), [0, 255, 7]);
    assert!(matches!(
        ex.read_file("in/blob.bin", 2).await,
        Err(ExecError::Refused(_))
    ));
    for outside in [
        "/etc/passwd",
        "../../etc/passwd",
        "missing/../../etc/passwd",
    ] {
        assert!(
            matches!(
                ex.read_file(outside, 1 << 20).await,
                Err(ExecError::PathOutside(_))
            ),
            "{outside} is refused"
        );
    }
    // A link the command made is not followed by a read.
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("leak")).unwrap();
    assert!(ex.read_file("leak", 1 << 20).await.is_err());
    // /tests of a task lands under the sandbox's root, not the host's.
    let tests = ex.path("/tests/test.sh");
    assert!(
        tests.starts_with(&std::env::temp_dir().display().to_string()),
        "{tests}"
    );
    ex.write_file(&tests, b"echo ok\n").await.unwrap();
    assert!(std::path::Path::new(&tests).is_file());
    let out = tempfile::tempdir().unwrap();
    ex.download_dir(&dir.path().display().to_string(), out.path(), 1 << 20)
        .await
        .unwrap();
    assert!(
        std::fs::symlink_metadata(out.path().join("leak"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A FIFO at the path neither hangs the read nor is read.
    nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), ex.read_file("fifo", 10)).await;
    assert!(matches!(read, Ok(Err(_))), "{read:?}");
    std::fs::remove_file(dir.path().join("fifo")).unwrap();
    // A download is bounded like a read.
    let small = tempfile::tempdir().unwrap();
    assert!(
        ex.download_dir(&dir.path().display().to_string(), small.path(), 2)
            .await
            .is_err()
    );
    assert_eq!(
        std::fs::read(out.path().join("in/blob.bin")).unwrap(),
        [0, 255, 7]
    );
}
