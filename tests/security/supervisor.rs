//! Attacks on the in-sandbox supervisor (issue 10), as the sandbox user and
//! as root: a command can neither signal, trace nor write into the
//! supervisor or its stream; fake frames are only output; and a supervisor
//! killed anyway is a dead sandbox, reported at once, never a hang.

use std::time::{Duration, Instant};

use runner::exec::Executor;
use runner::exec::docker::DockerExecutor;
use runner_supervisor::protocol::{HELPER_UID, Reply, SUPERVISOR_UID, encode};

use crate::support::docker::BOOKWORM;
use crate::support::executor::{cfg, docker, finish, on_gvisor, run, start, stray_processes};
use crate::support::serial::serial;
use runner::exec::ExecutorExt;
use runner::exec::Users;

/// The sandbox users attacked: uid 1000, root, and root keeping what a
/// root task needs (`ROOT_TASK_CAPS`: chown, low ports...), as eval's root
/// agents do.
const USERS: [(&str, bool); 3] = [
    (runner::exec::docker::DEFAULT_USER, false),
    ("0:0", false),
    ("0:0", true),
];

/// CapEff of a command: none, or exactly `ROOT_TASK_CAPS` (CHOWN 0,
/// FOWNER 3, FSETID 4, NET_BIND_SERVICE 10, SYS_CHROOT 18).
fn expected_caps(task_caps: bool) -> &'static str {
    if task_caps {
        "0000000000040419"
    } else {
        "0000000000000000"
    }
}

fn with_task_caps(c: &mut runner::exec::docker::DockerConfig, task_caps: bool) {
    if task_caps {
        c.cap_add = runner::exec::backend::ROOT_TASK_CAPS
            .iter()
            .map(|c| c.to_string())
            .collect();
    }
}

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
    for (user, task_caps) in USERS {
        let mut c = cfg("sup-signal");
        c.user = user.into();
        with_task_caps(&mut c, task_caps);
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
    for (user, task_caps) in USERS {
        let mut c = cfg("sup-proc");
        c.image = BOOKWORM.into();
        c.user = user.into();
        with_task_caps(&mut c, task_caps);
        let id = c.run_id.clone();
        let ex = start(c).await;
        // Its stream is its stdin and stdout: reading the one would steal
        // runner's requests, writing the other would forge replies.
        for read in ["/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/mem"] {
            let out = run(
                &ex,
                &format!("timeout 2 head -c 1 {read} > /dev/null && echo STOLE; echo done"),
                10.0,
            )
            .await;
            assert!(!out.output.contains("STOLE"), "{user}: {read}: {out:?}");
        }
        // Giving the stream's pipes their mode bits back first (root owns
        // them) does not help either.
        run(
            &ex,
            "chmod 666 /proc/1/fd/0 /proc/1/fd/1 2>/dev/null; true",
            10.0,
        )
        .await;
        // Nor the FIFO the supervisor's frames take past the engine.
        for peek in ["ls /.runner-out", "echo forged > /.runner-out/out"] {
            let out = run(&ex, &format!("{peek} && echo REACHED; echo done"), 10.0).await;
            assert!(!out.output.contains("REACHED"), "{user}: {peek}: {out:?}");
        }
        for target in ["/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/mem"] {
            let out = run(
                &ex,
                &format!("echo forged > {target} && echo WROTE; echo done"),
                10.0,
            )
            .await;
            assert!(!out.output.contains("WROTE"), "{user}: {target}: {out:?}");
        }
        // The supervisor's /proc entries are its own uid's, which no
        // command has. (gVisor 20221219 checks less: it shows what the
        // descriptors point at, `host:[1]`, and the environ and maps,
        // which hold only the container's own environment: runner's
        // command environment travels in each request, never in the
        // supervisor's. Reading or writing the stream and the memory stay
        // refused there too, above.)
        let peeks = [
            "ls /proc/1/fd",
            "readlink /proc/1/fd/0",
            "readlink /proc/1/fd/1",
            "cat /proc/1/environ",
            "cat /proc/1/maps",
        ];
        for peek in peeks.iter().filter(|_| !on_gvisor(&ex)) {
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
        // What a command gets: no capability at all, whoever it runs as;
        // or, for a root task, exactly what it needs and nothing that
        // reaches the supervisor.
        let caps = run(&ex, "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status", 10.0).await;
        for line in caps.output.lines() {
            assert!(
                line.ends_with(expected_caps(task_caps)),
                "{user} {task_caps}: {line}"
            );
        }
        if task_caps {
            // And they work: a root task's chown.
            let out = run(
                &ex,
                "touch /tmp/owned && chown 1000:1000 /tmp/owned && python3 -c 'import os; print(os.stat(\"/tmp/owned\").st_uid)'",
                10.0,
            )
            .await;
            assert_eq!(out.output.trim(), "1000", "{out:?}");
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

/// A command of 100 KB (a heredoc) runs; one over the stream's frame
/// limit is refused as an error the model can read, and the sandbox goes
/// on.
#[tokio::test]
async fn a_long_command_runs_and_a_huge_one_is_refused_without_harm() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("sup-long");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let body = "x".repeat(100_000);
    let out = run(
        &ex,
        &format!("cat > /tmp/long <<'EOF'\n{body}\nEOF\nwc -c < /tmp/long"),
        20.0,
    )
    .await;
    assert_eq!(out.output.trim(), "100001", "{out:?}");
    let huge = format!("echo {}", "y".repeat(5 << 20));
    match ex.execute(crate::support::executor::req(&huge, 20.0)).await {
        Err(e) => {
            assert!(e.sandbox_usable(), "{e}");
            assert!(e.to_string().contains("more than"), "{e}");
        }
        Ok(o) => panic!("a 5 MiB command ran: {o:?}"),
    }
    still_serves(&ex).await;
    finish(&d, ex, &id).await;
}

/// Commands are the out-of-memory killer's first choice, not the
/// supervisor; and a file request leaves kept background work alone.
#[tokio::test]
async fn commands_go_first_under_memory_pressure_and_file_requests_spare_background_work() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("sup-oomadj");
    c.keep_background = true;
    let id = c.run_id.clone();
    let ex = start(c).await;
    if !on_gvisor(&ex) {
        let out = run(&ex, "cat /proc/self/oom_score_adj", 10.0).await;
        assert_eq!(out.output.trim(), "1000", "{out:?}");
    }
    run(&ex, "sleep 300 >/dev/null 2>&1 &", 10.0).await;
    ex.write_file("/tmp/f.txt", b"data").await.unwrap();
    assert_eq!(ex.read_file("/tmp/f.txt", 100).await.unwrap(), b"data");
    let out = run(&ex, "pidof sleep >/dev/null && echo alive", 10.0).await;
    assert_eq!(out.output.trim(), "alive", "{out:?}");
    ex.shutdown().await.unwrap();
    drop(ex);
    assert!(
        crate::support::executor::containers_of(&d, &id)
            .await
            .is_empty()
    );
}

/// A command runner runs as root in a sandbox of uid 1000 (a verifier's,
/// `execute_as`) has no capability: it cannot signal, trace or read the
/// supervisor either, and the sandbox serves on.
#[tokio::test]
async fn a_root_command_of_execute_as_cannot_signal_or_trace_the_supervisor() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("sup-as-root");
    c.image = BOOKWORM.into();
    let id = c.run_id.clone();
    let ex = start(c).await;
    let as_root = |cmd: &str| {
        let ex = &ex;
        let r = crate::support::executor::req(cmd, 10.0);
        async move {
            ex.execute_as((0, 0), r)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    assert_eq!(as_root("id -u").await.output.trim(), "0");
    for attack in [
        "kill -9 1; echo rc=$?",
        "kill -9 -1; echo rc=$?",
        "kill -TERM 1; kill -HUP 1; echo rc=$?",
    ] {
        let out = as_root(attack).await;
        assert!(out.output.contains("rc="), "{attack}: {out:?}");
        still_serves(&ex).await;
    }
    for read in ["/proc/1/mem", "/proc/1/fd/0"] {
        let out = as_root(&format!(
            "timeout 2 head -c 1 {read} > /dev/null && echo STOLE; echo done"
        ))
        .await;
        assert!(!out.output.contains("STOLE"), "{read}: {out:?}");
        assert!(out.output.contains("done"), "{read}: {out:?}");
    }
    let out = as_root(
        "python3 -c 'import ctypes; l=ctypes.CDLL(None); \
         print(\"attach\", l.ptrace(16, 1, 0, 0), l.ptrace(0x4206, 1, 0, 0))'",
    )
    .await;
    assert_eq!(out.output.trim(), "attach -1 -1", "{out:?}");
    let caps = as_root("grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status").await;
    assert_eq!(caps.output.lines().count(), 3, "{caps:?}");
    for line in caps.output.lines() {
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    still_serves(&ex).await;
    // The uids of the supervisor and of its process-list helper are never
    // lent to a command.
    for user in [
        (SUPERVISOR_UID, 0),
        (0, SUPERVISOR_UID),
        (HELPER_UID, HELPER_UID),
        (1000, HELPER_UID),
    ] {
        match ex
            .execute_as(user, crate::support::executor::req("id", 10.0))
            .await
        {
            Err(e) => assert!(
                e.sandbox_usable() && e.to_string().contains("supervisor"),
                "{e}"
            ),
            Ok(o) => panic!("ran as {user:?}: {o:?}"),
        }
    }
    still_serves(&ex).await;
    finish(&d, ex, &id).await;
}

/// In a sandbox of uid 1000, `execute_as((0, 0))` really runs as root (no
/// supplementary group but 0), the sandbox user's commands stay uid 1000,
/// and what the root command leaves behind (at its end or its timeout) is
/// killed with it.
#[tokio::test]
async fn execute_as_root_is_root_and_what_it_leaves_dies_with_it() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("sup-as-bg");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = ex
        .execute_as(
            (0, 0),
            crate::support::executor::req("id -u; id -g; id -G", 10.0),
        )
        .await
        .unwrap();
    assert_eq!(out.output, "0\n0\n0\n", "{out:?}");
    assert_eq!(run(&ex, "id -u", 10.0).await.output, "1000\n");
    let out = ex
        .execute_as(
            (0, 0),
            crate::support::executor::req("sleep 300 >/dev/null 2>&1 & echo started", 10.0),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(out.output.contains("background process"), "{out:?}");
    still_serves(&ex).await;
    // A timeout kills the command and its background child alike.
    let started = Instant::now();
    let out = ex
        .execute_as(
            (0, 0),
            crate::support::executor::req("sleep 301 >/dev/null 2>&1 & sleep 100", 2.0),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    still_serves(&ex).await;
    // Another uid than both works the same way.
    let out = ex
        .execute_as(
            (4321, 4322),
            crate::support::executor::req("id -u; id -g; sleep 302 >/dev/null 2>&1 &", 10.0),
        )
        .await
        .unwrap();
    assert!(out.output.starts_with("4321\n4322\n"), "{out:?}");
    still_serves(&ex).await;
    finish(&d, ex, &id).await;
}
