//! Container lifecycle: shutdown, panic, death from outside, gc, copy mode
//! over TCP, unreachable Docker, refusals, missing images.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, KillContainerOptionsBuilder};
use runner::exec::docker::{
    DockerConfig, DockerExecutor, LABEL_EXPIRES, LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID,
    LABEL_RUN_ID, MANAGED_VALUE, WorkspaceMode, gc,
};
use runner::exec::{ExecError, Executor};

use crate::support::docker::{TINY, host_name};
use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::ExecutorExt;

/// Sets DOCKER_HOST for the duration of a test (callers hold the lock).
struct DockerHost;
impl DockerHost {
    fn set(v: &str) -> DockerHost {
        // SAFETY: tests touching the environment hold the serial lock.
        unsafe { std::env::set_var("DOCKER_HOST", v) };
        DockerHost
    }
}
impl Drop for DockerHost {
    fn drop(&mut self) {
        unsafe { std::env::remove_var("DOCKER_HOST") };
    }
}

#[tokio::test]
async fn shutdown_removes_and_execute_after_reports_death() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("shutdown");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = ex
        .execute(req("echo shell=${BASH_VERSION:+bash}", 5.0))
        .await
        .unwrap();
    assert!(out.output.contains("shell=bash"), "{}", out.output);
    assert_eq!(containers_of(&d, &id).await.len(), 1);
    ex.shutdown().await.unwrap();
    let err = ex.execute(req("true", 5.0)).await.unwrap_err();
    assert!(matches!(err, ExecError::SandboxDied { .. }), "{err}");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn panic_in_the_owner_still_removes_the_container() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("panic");
    let id = c.run_id.clone();
    let task = tokio::spawn(async move {
        let ex = start(c).await;
        let _ = run(&ex, "true", 5.0).await;
        panic!("simulated crash while the sandbox is up");
    });
    assert!(task.await.is_err());
    assert!(
        containers_of(&d, &id).await.is_empty(),
        "container left after panic"
    );
}

#[tokio::test]
async fn container_killed_from_outside_is_sandbox_died() {
    let _s = serial();
    let d = docker().await;
    let c = cfg("died");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let cid = ex.container_id().to_string();
    let killer = {
        let d = d.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let opts = KillContainerOptionsBuilder::new().signal("KILL").build();
            d.kill_container(&cid, Some(opts)).await
        })
    };
    let err = ex.execute(req("sleep 30", 20.0)).await.unwrap_err();
    killer.await.unwrap().unwrap();
    eprintln!("{err}");
    assert!(matches!(err, ExecError::SandboxDied { .. }), "{err}");
    assert!(err.to_string().contains("sandbox died"), "{err}");
    // The engine removes a dead container at once; its events still say
    // how it ended.
    assert!(err.to_string().contains("killed"), "{err}");
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn gc_removes_containers_of_dead_owners() {
    let _s = serial();
    let d = docker().await;
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let id = run_id("gc");
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), MANAGED_VALUE.to_string()),
        (LABEL_RUN_ID.to_string(), id.clone()),
        (LABEL_OWNER_PID.to_string(), dead_pid.to_string()),
        (LABEL_OWNER_HOST.to_string(), host_name()),
        (LABEL_EXPIRES.to_string(), "99999999999".to_string()),
    ]);
    let body = ContainerCreateBody {
        image: Some(TINY.into()),
        cmd: Some(vec!["sleep".into(), "600".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    // Named as runner names its sandboxes: gc touches nothing else.
    let opts = CreateContainerOptionsBuilder::new()
        .name(&format!("runner-{id}-0000dead"))
        .build();
    d.create_container(Some(opts), body).await.unwrap();
    // A live container of this process must survive the same pass.
    let live = cfg("gc-live");
    let live_id = live.run_id.clone();
    let ex = start(live).await;
    let report = gc(&d).await.unwrap();
    assert!(containers_of(&d, &id).await.is_empty(), "{report:?}");
    assert_eq!(containers_of(&d, &live_id).await.len(), 1);
    finish(&d, ex, &live_id).await;
}

#[tokio::test]
async fn unreachable_or_hanging_docker_fails_fast() {
    let _s = serial();
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    for host in [
        format!("tcp://{}", hang.local_addr().unwrap()),
        format!("tcp://127.0.0.1:{closed_port}"),
    ] {
        let _h = DockerHost::set(&host);
        let t = Instant::now();
        let err = DockerExecutor::start(DockerConfig {
            run_id: run_id("unreach"),
            ..Default::default()
        })
        .await
        .err()
        .expect("start must fail");
        assert!(
            matches!(err, ExecError::EngineUnavailable { .. }),
            "{host}: {err}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "{host}: took {:?}",
            t.elapsed()
        );
    }
}

#[tokio::test]
async fn refuses_docker_socket_parents_and_missing_images() {
    let _s = serial();
    let _d = docker().await;
    for ws in ["/", "/var/run", "/run", "/var"] {
        let mut c = cfg("refuse");
        c.workspace = Some(ws.into());
        let err = DockerExecutor::start(c).await.err().expect("must refuse");
        assert!(matches!(err, ExecError::Refused(_)), "{ws}: {err}");
    }
    // A registry that is not there (closed loopback port): no traffic leaves.
    let mut c = cfg("noimage");
    c.image = "127.0.0.1:9/runner-missing:nope".into();
    let err = DockerExecutor::start(c).await.err().expect("must fail");
    let msg = err.to_string();
    assert!(matches!(err, ExecError::ImageUnavailable { .. }), "{msg}");
    assert!(
        msg.contains("127.0.0.1:9/runner-missing:nope")
            && msg.contains("it is not on this engine and pulling it failed"),
        "{msg}"
    );
    // Not runner's own image: the hint says how to make it available, not
    // to run `make sandbox-image` (which builds only runner-sandbox:*).
    let hint = err.hint().unwrap_or_default();
    assert!(
        hint.contains("docker pull 127.0.0.1:9/runner-missing:nope")
            && hint.contains("docker load -i")
            && !hint.contains("sandbox-image"),
        "{hint}"
    );
}

/// Runs `socat` exposing the local engine on a loopback TCP port.
struct Socat(std::process::Child, u16);
impl Socat {
    fn start() -> Socat {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("socat")
            .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
            .arg("UNIX-CONNECT:/var/run/docker.sock")
            .spawn()
            .unwrap_or_else(|e| {
                panic!("socat is needed for the copy-mode test (apt-get install socat): {e}")
            });
        for _ in 0..50 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Socat(child, port)
    }
}
impl Drop for Socat {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn copy_mode_over_tcp_round_trips_the_workspace() {
    let _s = serial();
    let d = docker().await;
    let socat = Socat::start();
    let _h = DockerHost::set(&format!("tcp://127.0.0.1:{}", socat.1));
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary");
    std::fs::write(&canary, "host").unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "hello").unwrap();
    std::fs::create_dir(ws.path().join("dir")).unwrap();
    std::fs::write(ws.path().join("dir/keep"), "k").unwrap();
    std::os::unix::fs::symlink("in.txt", ws.path().join("rel-link")).unwrap();
    let mut c = cfg("copy");
    c.workspace = Some(ws.path().to_path_buf());
    c.workspace_mode = WorkspaceMode::Auto;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let cmd = format!(
        "cat in.txt dir/keep; readlink rel-link; echo changed > in.txt; echo new > new.txt; \
         rm dir/keep; ln -s {} out-link; mkdir -p a/b; echo deep > a/b/c; id -u",
        canary.display()
    );
    let out = run(&ex, &cmd, 20.0).await;
    assert!(out.output.starts_with("hellokin.txt\n"), "{out:?}");
    assert!(out.output.ends_with("1000\n"), "{out:?}");
    // The bind path is not used: the host file is untouched until shutdown.
    assert_eq!(
        std::fs::read_to_string(ws.path().join("in.txt")).unwrap(),
        "hello"
    );
    ex.shutdown().await.unwrap();
    drop(ex);
    let p = ws.path();
    assert_eq!(
        std::fs::read_to_string(p.join("in.txt")).unwrap(),
        "changed\n"
    );
    assert_eq!(std::fs::read_to_string(p.join("new.txt")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(p.join("a/b/c")).unwrap(), "deep\n");
    assert!(!p.join("dir/keep").exists());
    assert!(
        std::fs::symlink_metadata(p.join("out-link"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(p.join("rel-link")).unwrap(),
        std::path::Path::new("in.txt")
    );
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "host");
    drop(_h);
    assert!(containers_of(&d, &id).await.is_empty());
}

/// Child half of the SIGKILL test: starts a sandbox, reports it, hangs.
#[tokio::test]
#[ignore = "helper run as a child process by sigkilled_runner_leaves_nothing_gc_misses"]
async fn helper_start_and_hang() {
    if std::env::var("RUNNER_TEST_HELPER").is_err() {
        return;
    }
    let mut c = cfg("sigkill");
    c.run_id = std::env::var("RUNNER_TEST_HELPER").unwrap();
    let ex = start(c).await;
    println!("STARTED {}", ex.container_id());
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test]
async fn sigkilled_runner_leaves_nothing_gc_misses() {
    use std::io::BufRead;
    let _s = serial();
    let d = docker().await;
    let id = run_id("sigkill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lifecycle::helper_start_and_hang",
            "--ignored",
            "--nocapture",
        ])
        .env("RUNNER_TEST_HELPER", &id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("STARTED "));
    let cid = line
        .as_deref()
        .and_then(|l| l.strip_prefix("STARTED "))
        .expect("helper did not start a sandbox")
        .to_string();
    assert_eq!(containers_of(&d, &id).await.len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    // No cleanup can run in the killed process: the container ends itself
    // when the connection to its runner closes, and the engine removes it.
    let until = Instant::now() + Duration::from_secs(10);
    while !containers_of(&d, &id).await.is_empty() {
        assert!(
            Instant::now() < until,
            "the container outlived its SIGKILLed runner"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The sweep covers the whole engine, which other processes share: only
    // what it says of this run's container counts (it names containers by
    // the first 12 characters of their id).
    let report = gc(&d).await.unwrap();
    let short = &cid[..cid.len().min(12)];
    assert!(
        !report.errors.iter().any(|e| e.contains(short)),
        "{report:?}"
    );
}
