//! Attacks on the in-sandbox supervisor (issue 10), as the sandbox user and
//! as root: a command can neither signal, trace nor write into the
//! supervisor or its stream; fake frames are only output; and a supervisor
//! killed anyway is a dead sandbox, reported at once, never a hang.

use std::time::{Duration, Instant};

use runner::exec::Executor;
use runner::exec::docker::DockerExecutor;
use runner_supervisor::protocol::{Reply, encode};

use crate::support::docker::BOOKWORM;
use crate::support::executor::{cfg, docker, finish, run, start, stray_processes};
use crate::support::serial::serial;

const USERS: [&str; 2] = [runner::exec::docker::DEFAULT_USER, "0:0"];

/// The sandbox still runs commands, and nothing but the supervisor is left.
async fn still_serves(ex: &DockerExecutor) {
    let left = stray_processes(ex).await;
    assert!(left.is_empty(), "left running: {left:?}");
    assert_eq!(run(ex, "echo next", 10.0).await.output, "next\n");
}

#[tokio::test]
async fn commands_cannot_signal_the_supervisor() {
    let _s = serial();
    let d = docker().await;
    for user in USERS {
        let mut c = cfg("sup-signal");
        c.user = user.into();
        let id = c.run_id.clone();
        let ex = start(c).await;
        for attack in [
            "kill -9 -1; echo rc=$?",
            "kill -9 1; echo rc=$?",
            "kill -TERM 1; kill -INT 1; kill -HUP 1; echo rc=$?",
            "pkill -9 -f runner-supervisor; echo rc=$?",
            "kill -9 $PPID; echo rc=$?",
        ] {
            let out = run(&ex, attack, 10.0).await;
            eprintln!("{user}: {attack}: {out:?}");
            assert!(out.output.contains("rc="), "{user}: {attack}: {out:?}");
            still_serves(&ex).await;
        }
        finish(&d, ex, &id).await;
    }
}

#[tokio::test]
async fn commands_cannot_open_trace_or_write_into_the_supervisor() {
    let _s = serial();
    let d = docker().await;
    for user in USERS {
        let mut c = cfg("sup-proc");
        c.image = BOOKWORM.into();
        c.user = user.into();
        let id = c.run_id.clone();
        let ex = start(c).await;
        // Its stream is its stdin and stdout; its memory and environment
        // would tell the stream's peers.
        for target in ["/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/mem"] {
            let out = run(
                &ex,
                &format!("echo forged > {target} && echo WROTE; echo done"),
                10.0,
            )
            .await;
            assert!(!out.output.contains("WROTE"), "{user}: {target}: {out:?}");
        }
        // (A root command may list the descriptor numbers: a non-dumpable
        // process's /proc entries belong to root. Nothing behind them.)
        for peek in [
            "readlink /proc/1/fd/0",
            "readlink /proc/1/fd/1",
            "cat /proc/1/environ",
            "cat /proc/1/maps",
        ] {
            let out = run(&ex, &format!("{peek} && echo READ"), 10.0).await;
            assert!(!out.output.contains("READ"), "{user}: {peek}: {out:?}");
        }
        // PTRACE_ATTACH (16) and PTRACE_SEIZE (0x4206) on PID 1.
        let out = run(
            &ex,
            "python3 -c 'import ctypes; l=ctypes.CDLL(None); \
             print(\"attach\", l.ptrace(16, 1, 0, 0), l.ptrace(0x4206, 1, 0, 0))'",
            10.0,
        )
        .await;
        assert_eq!(out.output.trim(), "attach -1 -1", "{user}: {out:?}");
        // What a command gets: no capability at all, whoever it runs as.
        let caps = run(&ex, "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status", 10.0).await;
        for line in caps.output.lines() {
            assert!(line.ends_with("0000000000000000"), "{user}: {line}");
        }
        still_serves(&ex).await;
        finish(&d, ex, &id).await;
    }
}

/// Bytes that look like the supervisor's own frames (an exit with success
/// for every likely request id, then a greeting) are the command's output,
/// byte for byte; the real exit code wins.
#[tokio::test]
async fn fake_frames_in_the_output_are_only_output() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("sup-frames");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let mut forged = Vec::new();
    for rid in 0..8 {
        forged.extend(encode(
            &Reply::Exit {
                id: rid,
                code: Some(0),
                signal: None,
                timed_out: false,
                cancelled: false,
                leftovers: 0,
                stuck: 0,
                output_open: false,
                state: false,
                state_overflow: false,
            },
            b"",
        ));
    }
    let hex: String = forged.iter().map(|b| format!("\\x{b:02x}")).collect();
    let out = run(&ex, &format!("printf '{hex}'; exit 7"), 10.0).await;
    assert_eq!(out.exit_code, Some(7), "{out:?}");
    assert_eq!(
        out.bytes_seen,
        u64::try_from(forged.len()).unwrap(),
        "{out:?}"
    );
    // A frame longer than the limit, announced and never finished.
    let out = run(&ex, "printf '\\377\\377\\377\\377'; exit 5", 10.0).await;
    assert_eq!(out.exit_code, Some(5), "{out:?}");
    still_serves(&ex).await;
    finish(&d, ex, &id).await;
}

/// The supervisor killed from the host in the middle of a command: the
/// command ends with "the sandbox died" within seconds, not at its
/// timeout.
#[tokio::test]
async fn a_supervisor_killed_from_outside_is_a_dead_sandbox_at_once() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("sup-dies");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let info = d.inspect_container(ex.container_id(), None).await.unwrap();
    let host_pid = info.state.and_then(|s| s.pid).unwrap();
    assert!(host_pid > 0);
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(host_pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let started = Instant::now();
    let r = ex
        .execute(crate::support::executor::req("sleep 100", 120.0))
        .await;
    killer.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    match r {
        Err(runner::exec::ExecError::SandboxDied { detail }) => eprintln!("{detail}"),
        other => panic!("expected SandboxDied, got {other:?}"),
    }
    let _ = ex.shutdown().await;
    drop(ex);
    assert!(
        crate::support::executor::containers_of(&d, &id)
            .await
            .is_empty()
    );
}
