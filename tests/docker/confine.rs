//! What a command inside the sandbox can see and reach.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::docker::{BOOKWORM, require_images};
use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::ExecutorExt;

const PROBE: &str = include_str!("../../sandbox/probe.sh");
const CANARY_VAR: &str = "RUNNER_TEST_CANARY_SECRET";

fn parse(out: &str) -> HashMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn probe_shows_confinement() {
    let _s = serial();
    // SAFETY: tests touching the environment hold the serial lock.
    unsafe { std::env::set_var(CANARY_VAR, "leaked-if-you-see-this") };
    let d = docker().await;
    let ws = tempfile::tempdir().unwrap();
    let mut c = cfg("probe");
    c.memory_bytes = 200 << 20;
    c.pids_limit = 77;
    c.workspace = Some(ws.path().to_path_buf());
    c.env = vec![("ALLOWED".into(), "yes".into())];
    let id = c.run_id.clone();
    let ex = start(c).await;
    assert!(ex.loosenings().is_empty());
    let cmd = format!(
        "cat > /tmp/probe.sh <<'PROBE_EOF'\n{PROBE}\nPROBE_EOF\nsh /tmp/probe.sh {CANARY_VAR}; echo allowed=$ALLOWED"
    );
    let out = run(&ex, &cmd, 20.0).await;
    let p = parse(&out.output);
    let mem = (200u64 << 20).to_string();
    let mut expect = vec![
        ("cap_eff", "0000000000000000"),
        ("uid", "1000"),
        ("net_ifaces", "lo"),
        ("root_readonly", "1"),
        ("workspace_writable", "1"),
        ("docker_socket", "0"),
        ("canary_visible", "0"),
        ("allowed", "yes"),
    ];
    if on_gvisor(&ex) {
        // gVisor's /proc shows neither NoNewPrivs nor a seccomp mode (runsc
        // does not apply the engine's profile; the recorded facts say so)
        // and it has no cgroup files: the memory limit holds on the host
        // side (checked by inspect), the process limit is RLIMIT_NPROC.
        let sec = ex.security().expect("security facts");
        assert!(sec.seccomp.starts_with("not applied"), "{sec:?}");
        expect.extend([("seccomp", "0"), ("memory_limit", "unknown")]);
        let nproc = run(&ex, "ulimit -u", 10.0).await;
        assert_eq!(nproc.output.trim(), "77", "{nproc:?}");
        let info = d.inspect_container(ex.container_id(), None).await.unwrap();
        let hc = info.host_config.unwrap_or_default();
        assert_eq!(hc.memory, Some(200 << 20));
        assert_eq!(hc.memory_swap, Some(200 << 20));
    } else {
        expect.extend([
            ("no_new_privs", "1"),
            ("seccomp", "2"),
            ("memory_limit", &mem),
            ("memsw_limit", &mem),
            ("pids_limit", "77"),
        ]);
    }
    for (k, v) in expect {
        assert_eq!(
            p.get(k).map(String::as_str),
            Some(v),
            "{k} in:\n{}",
            out.output
        );
    }
    unsafe { std::env::remove_var(CANARY_VAR) };
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn no_egress_to_host_loopback_listener() {
    let _s = serial();
    let d = docker().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let server = tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            h.fetch_add(1, Ordering::SeqCst);
        }
    });
    let c = cfg("egress");
    let id = c.run_id.clone();
    let ex = start(c).await;
    let cmd = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED) 2>&1; \
         nslookup -timeout=1 example.com 2>&1 | tail -n 2; echo done"
    );
    let out = run(&ex, &cmd, 20.0).await;
    assert!(!out.output.contains("CONNECTED"), "{out:?}");
    assert!(out.output.contains("done"), "{out:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the listener was reached");
    server.abort();
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn workspace_links_never_touch_host_files() {
    let _s = serial();
    let d = docker().await;
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary");
    std::fs::write(&canary, "host secret").unwrap();
    let before = std::fs::metadata(&canary).unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("seed.txt"), "seed").unwrap();
    // A link already in the seed, pointing at the host canary.
    std::os::unix::fs::symlink(&canary, ws.path().join("seed-link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("seed-dirlink")).unwrap();
    let mut c = cfg("links");
    c.workspace = Some(ws.path().to_path_buf());
    let id = c.run_id.clone();
    let ex = start(c).await;
    let cp = canary.display();
    let od = outside.path().display();
    // The sandbox writes through links, makes new ones, and leaves a
    // swapper racing a directory against a link to the host directory.
    let cmd = format!(
        "echo new > made.txt; cat seed.txt; \
         echo pwn > seed-link 2>/dev/null; ln -s {cp} link2; \
         mkdir -p sub/deeper && touch sub/deeper/f; \
         nohup sh -c 'while :; do rm -rf sw; mkdir sw; touch sw/x; rm -rf sw; ln -s {od} sw; done' >/dev/null 2>&1 & \
         sleep 0.5; echo ok"
    );
    let out = run(&ex, &cmd, 20.0).await;
    assert!(
        out.output.contains("seed") && out.output.contains("ok"),
        "{out:?}"
    );
    finish(&d, ex, &id).await;
    let after = std::fs::metadata(&canary).unwrap();
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "host secret");
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode())
    );
    let od_meta = std::fs::metadata(outside.path()).unwrap();
    assert_eq!(
        od_meta.uid(),
        nix::unistd::geteuid().as_raw(),
        "host dir owner unchanged"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "nothing added outside"
    );
    // What the sandbox made comes back owned by the invoking user.
    let me = nix::unistd::geteuid().as_raw();
    for f in ["made.txt", "sub/deeper/f", "link2", "seed.txt"] {
        let m = std::fs::symlink_metadata(ws.path().join(f)).unwrap();
        assert_eq!(m.uid(), me, "{f} owner");
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "new\n"
    );
}

/// The full image: python sockets and DNS get nowhere either.
#[tokio::test]
async fn full_image_python_egress_blocked() {
    let _s = serial();
    let d = docker().await;
    require_images(&[BOOKWORM]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut c = cfg("pyegress");
    c.image = BOOKWORM.into();
    let id = c.run_id.clone();
    let ex = start(c).await;
    let py = format!(
        "import socket\n\
         for target in [('127.0.0.1', {port})]:\n\
         \x20   try:\n\
         \x20       socket.create_connection(target, timeout=2); print('CONNECTED')\n\
         \x20   except OSError as e: print('blocked', e)\n\
         try:\n\
         \x20   socket.getaddrinfo('example.com', 80); print('RESOLVED')\n\
         except OSError as e: print('no dns', e)\n"
    );
    let out = run(
        &ex,
        &format!("python3 - <<'EOF'\n{py}EOF\npython3 -m pytest --version"),
        30.0,
    )
    .await;
    assert!(
        out.output.contains("blocked") && out.output.contains("no dns"),
        "{out:?}"
    );
    assert!(
        !out.output.contains("CONNECTED") && !out.output.contains("RESOLVED"),
        "{out:?}"
    );
    assert!(out.output.contains("pytest"), "{out:?}");
    assert!(listener.accept().is_err(), "the listener was reached");
    finish(&d, ex, &id).await;
}
