//! Resource limits and the kill protocol: fork bomb, memory bomb, disk
//! fill, output flood, timeouts with escaping children.

use std::time::Instant;

use runner::exec::Executor;

use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::ExecutorExt;

#[tokio::test]
async fn timeout_kills_every_process_and_container_serves_next_call() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("timeout");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let cmd = "echo before; \
        setsid sleep 1001 & \
        nohup sleep 1002 >/dev/null 2>&1 & \
        (trap '' TERM; while :; do sleep 1; done) & \
        (sleep 1003 &) ; \
        sleep 1004";
    let t = Instant::now();
    let out = run(&ex, cmd, 2.0).await;
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        out.output.contains("before"),
        "partial output kept: {out:?}"
    );
    assert!(t.elapsed().as_secs_f64() < 6.0, "took {:?}", t.elapsed());
    let left = stray_processes(&ex).await;
    assert!(left.is_empty(), "processes survived the kill: {left:?}");
    let next = run(&ex, "echo ok", 10.0).await;
    assert_eq!((next.output.as_str(), next.exit_code), ("ok\n", Some(0)));
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn background_child_holding_stdout_does_not_hang() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("bgchild");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let t = Instant::now();
    let out = run(&ex, "sleep 30 & echo done", 20.0).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.timed_out && out.output.starts_with("done"), "{out:?}");
    assert!(t.elapsed().as_secs_f64() < 5.0, "took {:?}", t.elapsed());
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn fork_bomb_is_contained_and_next_command_works() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("forkbomb");
    c.pids_limit = 32;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = run(&ex, "b(){ b|b& }; b; sleep 5", 4.0).await;
    eprintln!(
        "fork bomb: {} ms, {} bytes, saturated: {}",
        out.duration_ms,
        out.bytes_seen,
        out.output.contains("retry") || out.output.contains("unavailable")
    );
    // gVisor has no cgroup files inside; commands are held to the limit
    // by RLIMIT_NPROC there.
    let limit = if on_gvisor(&ex) {
        "ulimit -u"
    } else {
        "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null"
    };
    let probe = run(&ex, limit, 10.0).await;
    assert_eq!(
        probe.output.trim(),
        "32",
        "pids limit restored after the kill"
    );
    assert!(out.timed_out || out.exit_code.is_some(), "{out:?}");
    let next = run(&ex, "echo alive", 20.0).await;
    assert_eq!(next.output, "alive\n", "{next:?}");
    let left = stray_processes(&ex).await;
    assert!(left.is_empty(), "fork bomb survived: {left:?}");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn memory_bomb_is_reported_as_oom() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("oom");
    c.memory_bytes = 64 << 20;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let bomb = "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}";
    if on_gvisor(&ex) {
        // The sandbox's memory is the sentry's on the host, so the host's
        // OOM killer ends the whole gVisor sandbox, not one command: the
        // run gets a named error and the host is unaffected.
        let err = ex.execute(req(bomb, 60.0)).await.expect_err("sandbox ends");
        let msg = err.to_string();
        assert!(
            matches!(err, runner::exec::ExecError::SandboxDied { .. })
                && msg.contains("memory limit"),
            "{msg}"
        );
        finish(&d, ex, &id).await;
        return;
    }
    let out = run(&ex, bomb, 60.0).await;
    assert!(out.oom_killed, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        out.output.contains("out of memory (limit 64 MiB)"),
        "{out:?}"
    );
    let next = run(&ex, "echo fine", 10.0).await;
    assert_eq!(next.output, "fine\n");
    assert!(!next.oom_killed);
    // A plain `exit 137` is not mistaken for an OOM kill.
    let fake = run(&ex, "exit 137", 10.0).await;
    assert!(!fake.oom_killed && fake.exit_code == Some(137), "{fake:?}");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn tmp_fill_stops_at_tmpfs_size() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("diskfill");
    c.tmp_size_bytes = 16 << 20;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = run(
        &ex,
        "head -c 100000000 /dev/zero > /tmp/big; echo rc=$?; wc -c < /tmp/big",
        30.0,
    )
    .await;
    assert!(out.output.contains("rc=1"), "{out:?}");
    let size: u64 = out.output.lines().last().unwrap().trim().parse().unwrap();
    assert!(size <= 16 << 20, "wrote {size} bytes");
    let root = run(&ex, "echo x > /big 2>&1; echo rc=$?", 10.0).await;
    assert!(root.output.contains("rc=1"), "read-only root: {root:?}");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn output_flood_is_bounded_and_counted_exactly() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("flood");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let t = Instant::now();
    let out = run(&ex, "head -c 1000000000 /dev/zero | tr '\\0' x", 180.0).await;
    eprintln!("1 GB flood took {:?}", t.elapsed());
    assert_eq!(
        out.exit_code,
        Some(0),
        "{:?}",
        &out.output[..200.min(out.output.len())]
    );
    assert_eq!(out.bytes_seen, 1_000_000_000);
    assert!(
        out.output.len() < (16 << 10) + 100,
        "kept {} bytes",
        out.output.len()
    );
    assert!(out.output.contains("bytes omitted"));
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn root_user_timeout_still_kills_everything_and_keeps_container() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("rootkill");
    c.user = "0:0".into();
    let id = c.run_id.clone();
    let ex = start(c).await;
    assert_eq!(ex.loosenings().len(), 1, "{:?}", ex.loosenings());
    let out = run(
        &ex,
        "setsid sleep 1001 & (trap '' TERM; while :; do sleep 1; done) & sleep 1002",
        1.5,
    )
    .await;
    assert!(out.timed_out, "{out:?}");
    let left = stray_processes(&ex).await;
    assert!(left.is_empty(), "processes survived the kill: {left:?}");
    assert_eq!(run(&ex, "id -u", 10.0).await.output, "0\n");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn cancel_kills_the_command_promptly() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("cancel");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let r = req("echo started; nohup sleep 1000 & sleep 1000", 60.0);
    let token = r.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        token.cancel();
    });
    let t = Instant::now();
    let out = ex.execute(r).await.unwrap();
    assert!(
        out.cancelled && !out.timed_out && out.exit_code.is_none(),
        "{out:?}"
    );
    assert!(out.output.contains("started"), "{out:?}");
    assert!(t.elapsed().as_secs_f64() < 4.0, "took {:?}", t.elapsed());
    assert!(stray_processes(&ex).await.is_empty());
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn agent_kill_all_does_not_kill_the_sandbox() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("killall");
    let id = c.run_id.clone();
    let ex = start(c).await;
    // kill(-1) spares the caller (bash's builtin `kill`); the supervisor
    // has a uid of its own, so it is spared too and the container lives
    // on.
    let out = run(&ex, "sleep 100 & kill -9 -1; echo rc=$?", 10.0).await;
    assert!(out.output.starts_with("rc=0\n"), "{out:?}");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(stray_processes(&ex).await.is_empty());
    assert_eq!(
        run(&ex, "echo still-here", 10.0).await.output,
        "still-here\n"
    );
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn endless_output_still_times_out() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("yes");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let t = Instant::now();
    let out = run(&ex, "yes spam", 2.0).await;
    assert!(out.timed_out && out.bytes_seen > 0, "{:?}", out.bytes_seen);
    assert!(t.elapsed().as_secs_f64() < 5.0, "took {:?}", t.elapsed());
    assert!(stray_processes(&ex).await.is_empty());
    finish(&d, ex, &id).await;
}
