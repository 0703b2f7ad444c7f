//! The docker executor accepted through the binary, with the scripted
//! model: a SIGKILLed runner and `runner gc`, a remote engine over TCP with
//! copy mode, the confinement probe, a sandbox killed from outside, hostile
//! commands, loosenings, HOME, and a Docker daemon that is down.
//!
//! These tests need a running Docker engine and `runner-sandbox:tiny`
//! (`make sandbox-image`); without them they FAIL, saying so.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::binary::{
    Dir, Exec, Live, bash, kv, of_type, outcome, peak_rss_kib, run, run_id_of, script,
};
use crate::support::docker::{
    BOOKWORM, containers_of_run, docker_cli, require_images, runtime_args,
    test_runtime_forces_no_network, volumes_of_run,
};
// One test at a time: the flood measures the runner's memory and the OOM
// test its container's; on 2 shared cores they must not overlap.
use crate::support::serial::serial;

/// `runner --executor docker --image tiny --provider scripted --script S --json`.
fn docker_runner(d: &Dir, script: &str) -> Command {
    let mut c = d.scripted(script);
    c.args(Exec::Docker.args());
    c
}

/// The id of the run's one container, waiting up to 20 s for it to exist.
fn container_of(run_id: &str) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let ids = containers_of_run(run_id);
        if let Some(id) = ids.first() {
            return id.clone();
        }
        assert!(Instant::now() < until, "no container for run {run_id}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `needle` shows in the container's process list, as `ps`
/// inside it sees it (`docker top` lists host pids, which mean nothing for
/// a gVisor sandbox).
fn wait_for_process(container: &str, needle: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while !docker_cli(&["exec", container, "ps", "-o", "args"])
        .lines()
        .any(|l| l.contains(needle) && !l.contains("ps -o"))
    {
        assert!(
            Instant::now() < until,
            "{needle:?} never ran in {container}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tool_results(events: &[Value]) -> Vec<&Value> {
    of_type(events, "tool_result")
}

fn output_of(result: &Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

/// Whether the run's sandbox ran on gVisor, as its `run_started` recorded.
fn on_gvisor(events: &[Value]) -> bool {
    of_type(events, "run_started")
        .first()
        .is_some_and(|e| e["config"]["sandbox_security"]["kernel"] == "gvisor")
}

#[test]
fn sigkill_mid_command_then_gc_leaves_nothing() {
    let _s = serial();
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("sleep 600")]}, {"text": "never"}]),
    );
    // Copy mode, so the run also owns a volume that gc must remove.
    let mut live = Live::spawn(docker_runner(&d, &s).args(["--workspace-mode", "copy", "go"]));
    let run_id = live.wait_for("run_started", Duration::from_secs(30))["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    let container = container_of(&run_id);
    wait_for_process(&container, "sleep 600");
    live.child.kill().expect("SIGKILL the runner");
    let _ = live.child.wait();
    // A SIGKILLed runner cannot clean up: its container and volume are
    // left for gc (unless another runner's start-up sweep on the same
    // engine gets there first).
    let containers = containers_of_run(&run_id);
    let volumes = volumes_of_run(&run_id);
    eprintln!("left by the SIGKILLed runner: containers {containers:?}, volumes {volumes:?}");

    // gc sweeps the whole engine, which other processes share: its exit
    // code and its warnings also speak of their objects (an image build's
    // containers, another suite's runs), so only what it did with this
    // run's objects is judged.
    let r = run(d.runner().arg("gc"));
    assert!(r.stderr().contains("gc: removed"), "{}", r.explain());
    // gc names a container by the first 12 characters of its id.
    let ours: Vec<&str> = containers
        .iter()
        .map(|c| &c[..c.len().min(12)])
        .chain(volumes.iter().map(String::as_str))
        .collect();
    for warning in r.stderr().lines().filter(|l| l.starts_with("warning:")) {
        assert!(
            !ours.iter().any(|o| warning.contains(o)),
            "gc could not remove this run's objects{}",
            r.explain()
        );
    }
    assert!(containers_of_run(&run_id).is_empty(), "{}", r.explain());
    assert!(volumes_of_run(&run_id).is_empty(), "{}", r.explain());
}

/// socat forwarding a loopback port to the Docker socket, in its own
/// process group, killed (with its per-connection children) on drop.
struct Forward {
    child: Child,
    port: u16,
}

impl Forward {
    fn start() -> Forward {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = Command::new("socat")
            .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
            .arg("UNIX-CONNECT:/var/run/docker.sock")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("this test needs socat: {e}"));
        let fwd = Forward { child, port };
        let until = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "socat never listened on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        fwd
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let pgid =
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"));
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

#[test]
fn remote_engine_over_tcp_copies_the_workspace_back_to_the_invoking_user() {
    const NOBODY: u32 = 65534;
    let _s = serial();
    let fwd = Forward::start();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir ws");
    std::fs::write(ws.join("seed.txt"), "seed-content\n").expect("write seed");
    // As root, the runner runs as an unprivileged user (it needs no socket
    // access: the engine is "remote"), so "owned by the invoking user"
    // means something: not root, not the sandbox's uid 1000.
    let root = nix::unistd::geteuid().is_root();
    let me = if root {
        (NOBODY, NOBODY)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    if root {
        for p in [d.path(), &ws, &ws.join("seed.txt")] {
            nix::unistd::chown(p, Some(NOBODY.into()), Some(NOBODY.into())).expect("chown");
        }
    }
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("cat seed.txt; mkdir -p out && echo made-in-sandbox > out/result.txt; id -u")]},
            {"text": "done", "expect": "seed-content"}
        ]),
    );
    let mut cmd = docker_runner(&d, &s);
    cmd.env("DOCKER_HOST", format!("tcp://127.0.0.1:{}", fwd.port));
    if root {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let r = run(cmd.arg("--workspace").arg(&ws).arg("copy mode"));
    drop(fwd);
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed");
    let results = tool_results(&events);
    assert!(
        output_of(results[0]).contains("1000"),
        "the sandbox user is uid 1000{}",
        r.explain()
    );
    let result = ws.join("out/result.txt");
    assert_eq!(
        std::fs::read_to_string(&result).ok().as_deref(),
        Some("made-in-sandbox\n"),
        "{}",
        r.explain()
    );
    for p in [ws.join("out"), result, ws.join("seed.txt")] {
        let m = std::fs::symlink_metadata(&p).expect("collected entry");
        assert_eq!(
            (m.uid(), m.gid()),
            me,
            "{p:?} belongs to the user who ran runner"
        );
    }
    let run_id = run_id_of(&events);
    assert!(containers_of_run(&run_id).is_empty());
    assert!(volumes_of_run(&run_id).is_empty());
}

#[test]
fn confinement_probe_through_the_binary() {
    let _s = serial();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir ws");
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("sandbox/probe.sh");
    std::fs::copy(&probe, ws.join("probe.sh")).expect("copy probe.sh");
    let canary = "canary-5b1d0e77c4";
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("sh probe.sh RUNNER_CANARY; echo nproc=$(ulimit -u); \
                 sed -n 's/^MemTotal: *\\([0-9]*\\) kB/mem_total_kib=\\1/p' /proc/meminfo")]},
            {"text": "done"}
        ]),
    );
    let r = run(docker_runner(&d, &s)
        .env("RUNNER_CANARY", canary)
        .args(["--memory", "96m", "--pids-limit", "77", "--workspace"])
        .arg(&ws)
        .arg("probe"));
    r.expect_code(0);
    let events = r.events();
    let out = output_of(tool_results(&events)[0]).to_string();
    let p = kv(&out);
    let get = |k: &str| p.get(k).map(String::as_str).unwrap_or("<missing>");
    let why = format!("probe output:\n{out}{}", r.explain());
    assert_eq!(get("cap_eff"), "0000000000000000", "{why}");
    assert!(!["0", "", "<missing>"].contains(&get("uid")), "{why}");
    assert_eq!(get("net_ifaces"), "lo", "{why}");
    assert_eq!(get("root_readonly"), "1", "{why}");
    assert_eq!(get("workspace_writable"), "1", "{why}");
    if on_gvisor(&events) {
        // gVisor's /proc shows no NoNewPrivs line and seccomp mode 0 (runsc
        // does not apply the engine's profile, as run_started records);
        // it has no cgroup files: the memory limit is its MemTotal and the
        // process limit RLIMIT_NPROC.
        assert_eq!(get("seccomp"), "0", "{why}");
        assert_eq!(get("mem_total_kib"), (96u64 << 10).to_string(), "{why}");
        assert_eq!(get("nproc"), "77", "{why}");
    } else {
        assert_eq!(get("no_new_privs"), "1", "{why}");
        assert_eq!(get("seccomp"), "2", "{why}");
        let mem = (96u64 << 20).to_string();
        assert_eq!(get("memory_limit"), mem, "{why}");
        assert_eq!(get("memsw_limit"), mem, "no swap: {why}");
        assert_eq!(get("pids_limit"), "77", "{why}");
    }
    assert_eq!(get("docker_socket"), "0", "{why}");
    assert_eq!(get("canary_visible"), "0", "{why}");
    assert!(!r.stdout().contains(canary), "{why}");
}

#[test]
fn sandbox_killed_from_outside_ends_the_run_with_an_error() {
    let _s = serial();
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("sleep 600")]},
            {"text": "the model must not be called again", "expect": "no tool result says this"}
        ]),
    );
    let mut live = Live::spawn(docker_runner(&d, &s).arg("go"));
    let run_id = live.wait_for("run_started", Duration::from_secs(30))["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    let container = container_of(&run_id);
    wait_for_process(&container, "sleep 600");
    let killed = Instant::now();
    docker_cli(&["kill", &container]);
    let f = live.finish(Duration::from_secs(30));
    eprintln!("docker kill to runner exit: {:?}", killed.elapsed());
    f.expect_code(2);
    assert_eq!(outcome(&f.events), "error", "{}", f.explain());
    let last = f.events.last().expect("events");
    let error = last["error"].as_str().unwrap_or_default();
    assert!(error.contains("sandbox died"), "{}", f.explain());
    assert!(f.stderr.contains("sandbox died"), "{}", f.explain());
    assert_eq!(
        of_type(&f.events, "model_request").len(),
        1,
        "the model is not called after the sandbox died{}",
        f.explain()
    );
    assert!(containers_of_run(&run_id).is_empty());
}

#[test]
fn memory_bomb_is_reported_to_the_model_as_out_of_memory() {
    let _s = serial();
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}")]},
            {"tool_calls": [bash("echo still-alive")], "expect": "out of memory"},
            {"text": "done", "expect": "still-alive"}
        ]),
    );
    let r = run(docker_runner(&d, &s).args(["--memory", "64m", "bomb"]));
    let events = r.events();
    if on_gvisor(&events) {
        // The sandbox's memory is gVisor's sentry's on the host: the host's
        // OOM killer ends the whole sandbox, and the run ends with a named
        // error instead of the model seeing one command killed.
        r.expect_code(2);
        let last = events.last().expect("events");
        let error = last["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("sandbox died") && error.contains("memory limit"),
            "{}",
            r.explain()
        );
        return;
    }
    r.expect_code(0);
    let results = tool_results(&events);
    assert_eq!(results[0]["oom_killed"], true, "{}", r.explain());
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0]["exit_code"].is_null());
    assert!(output_of(results[0]).contains("out of memory"));
    assert_eq!(results[1]["oom_killed"], false);
}

#[test]
fn a_1gb_output_flood_keeps_the_runner_small_and_counts_every_byte() {
    const FLOOD_BYTES: u64 = 1_000_000_000;
    const RSS_LIMIT_KIB: u64 = 100 * 1024;
    let _s = serial();
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [{"name": "bash", "input": {
                "command": format!("head -c {FLOOD_BYTES} /dev/zero | tr '\\0' x"),
                "timeout": 300
            }}]},
            {"text": "done"}
        ]),
    );
    let mut child = docker_runner(&d, &s)
        .arg("flood")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let pid = child.id();
    let started = Instant::now();
    let mut peak_kib = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        match child.try_wait().expect("wait") {
            Some(s) => break s,
            None if started.elapsed() < Duration::from_secs(300) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the flood run did not end within 300 s");
            }
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    eprintln!(
        "1 GB flood through the binary: {:?}, runner peak RSS {} KiB",
        started.elapsed(),
        peak_kib
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(peak_kib > 0, "VmHWM was read");
    assert!(
        peak_kib < RSS_LIMIT_KIB,
        "runner peak RSS {peak_kib} KiB during the flood"
    );
    let traj = d.trajectory();
    let results = tool_results(&traj);
    assert_eq!(results[0]["bytes_seen"], FLOOD_BYTES, "{}", results[0]);
    assert_eq!(results[0]["exit_code"], 0);
    let shown = output_of(results[0]);
    assert!(shown.len() < 12_000, "the model sees {} bytes", shown.len());
    assert!(
        shown.contains(&format!("of {FLOOD_BYTES} total")),
        "{shown:.300}"
    );
    let full = results[0]["full_output"]
        .as_str()
        .expect("full_output path");
    let full = if Path::new(full).is_absolute() {
        Path::new(full).to_path_buf()
    } else {
        d.path().join(full)
    };
    let size = std::fs::metadata(&full).expect("full output file").len();
    assert!(
        (64 << 20..(64 << 20) + 200).contains(&size),
        "full output capped at 64 MiB, got {size}"
    );
}

#[test]
fn loosenings_are_warned_about_and_recorded() {
    let _s = serial();
    let d = Dir::new();
    let s = script(&d, json!([{"text": "done"}]));
    let r = run(docker_runner(&d, &s).args(["--network", "bridge", "--writable-rootfs", "go"]));
    if test_runtime_forces_no_network() {
        // A runtime registered with --network=none cannot loosen the
        // network: the run is refused before anything starts.
        r.expect_code(2);
        assert!(
            r.stderr().contains("cannot give the sandbox a network")
                && r.stderr().contains("hint:"),
            "{}",
            r.explain()
        );
        return;
    }
    r.expect_code(0);
    let err = r.stderr();
    assert!(
        err.contains("warning: sandbox loosened: network 'bridge'"),
        "{}",
        r.explain()
    );
    assert!(
        err.contains("warning: sandbox loosened: root filesystem writable"),
        "{}",
        r.explain()
    );
    let events = r.events();
    let started = of_type(&events, "run_started")[0];
    let loosenings: Vec<&str> = started["config"]["loosenings"]
        .as_array()
        .expect("config.loosenings")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(loosenings[0].contains("bridge"), "{loosenings:?}");
    assert!(loosenings[1].contains("root filesystem"), "{loosenings:?}");
    // On a storage driver without quotas (fuse-overlayfs here), the writable
    // root cannot be bounded by --disk, and that is said too.
    match loosenings.get(2) {
        None => assert_eq!(loosenings.len(), 2),
        Some(l) => {
            assert!(l.contains("not bounded by --disk"), "{loosenings:?}");
            assert_eq!(loosenings.len(), 3, "{loosenings:?}");
        }
    }
    // The default sandbox records none.
    let d2 = Dir::new();
    let s2 = script(&d2, json!([{"text": "done"}]));
    let r2 = run(docker_runner(&d2, &s2).arg("go"));
    r2.expect_code(0);
    let events = r2.events();
    assert_eq!(
        of_type(&events, "run_started")[0]["config"]["loosenings"],
        json!([])
    );
    assert!(!r2.stderr().contains("loosened"), "{}", r2.explain());
}

#[test]
fn home_is_the_sandbox_home_and_writable() {
    let _s = serial();
    let d = Dir::new();
    let host_home = d.path().display().to_string();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash(
                "echo \"home=$HOME\"; mkdir -p ~/.cache/t && echo cached > ~/.cache/t/f && cat ~/.cache/t/f; \
                 echo \"owner=$(stat -c %u ~)\"; echo \"me=$(id -u)\"; \
                 awk '$2 == \"/home/sandbox\" { print \"fstype=\" $3 }' /proc/mounts"
            )]},
            {"text": "done"}
        ]),
    );
    // Dir::runner sets HOME to a directory of the test: a host path.
    let r = run(docker_runner(&d, &s).arg("home"));
    r.expect_code(0);
    let events = r.events();
    let out = output_of(tool_results(&events)[0]).to_string();
    let p = kv(&out);
    assert_eq!(
        p.get("home").map(String::as_str),
        Some("/home/sandbox"),
        "{out}"
    );
    assert!(out.contains("cached"), "{out}");
    assert_eq!(
        p.get("owner"),
        p.get("me"),
        "HOME belongs to the sandbox user: {out}"
    );
    assert_eq!(
        p.get("fstype").map(String::as_str),
        Some("tmpfs"),
        "HOME is a tmpfs: {out}"
    );
    assert!(!out.contains(&host_home), "the host's HOME leaked: {out}");

    // The full image has git: `git config --global` works on the read-only root.
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("git config --global user.name Sandbox && git config --global --get user.name")]},
            {"text": "done"}
        ]),
    );
    require_images(&[BOOKWORM]);
    let r = run(d
        .runner()
        .args([
            "--executor",
            "docker",
            "--image",
            BOOKWORM,
            "--provider",
            "scripted",
            "--script",
            &s,
            "--json",
        ])
        .args(runtime_args())
        .arg("git"));
    r.expect_code(0);
    let events = r.events();
    let res = tool_results(&events)[0];
    assert_eq!(res["exit_code"], 0, "{}", r.explain());
    assert!(output_of(res).contains("Sandbox"), "{}", r.explain());
}

#[test]
fn docker_down_is_one_error_line_with_a_hint_and_exit_2() {
    let d = Dir::new();
    let s = script(&d, json!([{"text": "never"}]));
    let r = run(d
        .runner()
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .args([
            "--executor",
            "docker",
            "--provider",
            "scripted",
            "--script",
            &s,
            "go",
        ]));
    r.expect_code(2);
    assert!(r.elapsed < Duration::from_secs(5), "took {:?}", r.elapsed);
    let err = r.stderr();
    let lines: Vec<&str> = err.lines().collect();
    let errors: Vec<&&str> = lines.iter().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line{}", r.explain());
    assert!(
        errors[0].contains("Docker is not reachable"),
        "{}",
        r.explain()
    );
    assert!(errors[0].contains("/nonexistent.sock"), "{}", r.explain());
    let at = lines
        .iter()
        .position(|l| l.starts_with("error:"))
        .unwrap_or(0);
    assert!(
        lines.get(at + 1).is_some_and(|l| l.starts_with("hint: ")),
        "a hint follows the error{}",
        r.explain()
    );
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "error");
    assert_eq!(of_type(&traj, "model_request").len(), 0);
}

#[test]
fn timeout_kills_every_process_the_command_started() {
    let _s = serial();
    let d = Dir::new();
    let escaping = "echo before; setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & \
        (trap '' TERM; while :; do sleep 1; done) & (sleep 1003 &); sleep 1004";
    let s = script(
        &d,
        json!([
            {"tool_calls": [{"name": "bash", "input": {"command": escaping, "timeout": 2}}]},
            {"tool_calls": [bash("ps -o pid,args")], "expect": "timed out"},
            {"text": "done"}
        ]),
    );
    let r = run(docker_runner(&d, &s).arg("escape"));
    r.expect_code(0);
    let events = r.events();
    let results = tool_results(&events);
    assert_eq!(results[0]["timed_out"], true, "{}", r.explain());
    assert!(output_of(results[0]).contains("before"), "{}", r.explain());
    let ms = results[0]["duration_ms"].as_u64().unwrap_or(u64::MAX);
    eprintln!(
        "timeout: deadline to every process gone {} ms",
        ms.saturating_sub(2000)
    );
    assert!(ms < 6000, "the kill took {ms} ms after start");
    let ps = output_of(results[1]);
    assert!(ps.contains("ps -o pid,args"), "ps works: {ps}");
    assert!(
        !ps.contains("sleep 100") && !ps.contains("echo before"),
        "no process of the timed-out command survives:\n{ps}"
    );
}

#[test]
fn allow_host_gives_the_sandbox_only_those_names_and_cleans_up() {
    use crate::support::egress::{ALLOWED_BODY, PROBE, World, results};
    let _s = serial();
    let world = World::new("cli");
    let d = Dir::new();
    let probe = format!("python3 - {} <<'PY'\n{PROBE}PY", world.allowed_ip);
    let s = script(
        &d,
        json!([{"tool_calls": [bash(&probe)]}, {"text": "done"}]),
    );
    let r = run(d
        .runner()
        .args([
            "--executor",
            "docker",
            "--image",
            BOOKWORM,
            "--provider",
            "scripted",
            "--script",
            &s,
            "--json",
            "--allow-host",
            "allowed.runner-test",
            "--allow-host",
            "*.Wild.runner-test",
            "--egress-network",
            &world.network,
        ])
        .args(runtime_args())
        .arg("probe the network"));
    if test_runtime_forces_no_network() {
        // No sandbox of this runtime has a network: refused before start.
        r.expect_code(2);
        assert!(
            r.stderr().contains("cannot give the sandbox a network")
                && r.stderr().contains("--allow-host"),
            "{}",
            r.explain()
        );
        return;
    }
    r.expect_code(0);
    let events = r.events();
    let started = of_type(&events, "run_started")[0];
    assert_eq!(started["config"]["network"], "allowlist", "{}", r.explain());
    assert_eq!(
        started["config"]["allowed_hosts"],
        json!(["allowed.runner-test", "*.wild.runner-test"]),
        "normalized"
    );
    assert!(
        r.stderr().contains(
            "sandbox loosened: egress allowlist: only allowed.runner-test, *.wild.runner-test"
        ),
        "{}",
        r.explain()
    );
    let out = output_of(tool_results(&events)[0]).to_string();
    let got = results(&out);
    let ok = format!("200 {ALLOWED_BODY}");
    assert_eq!(got.get("allowed"), Some(&ok), "{out}");
    assert_eq!(got.get("wildcard-below"), Some(&ok), "{out}");
    for refused in ["denied", "ip-literal", "other-alias", "wildcard-bare"] {
        assert!(
            got.get(refused).is_some_and(|v| v.starts_with("403")),
            "{refused}: {out}"
        );
    }
    assert!(
        got.get("direct-ip").is_some_and(|v| v.starts_with("ERR")),
        "{out}"
    );
    // The proxy and the network went with the sandbox.
    let run_id = run_id_of(&events);
    assert!(containers_of_run(&run_id).is_empty(), "containers left");
    let networks = docker_cli(&[
        "network",
        "ls",
        "-q",
        "--filter",
        &format!("label={}={run_id}", runner::exec::docker::LABEL_RUN_ID),
    ]);
    assert!(networks.is_empty(), "networks left: {networks}");
}

#[test]
fn a_sigkilled_allowlisted_run_leaves_its_proxy_and_network_to_gc() {
    use crate::support::egress::{World, exists};
    let _s = serial();
    if test_runtime_forces_no_network() {
        assert_allowlist_refused_by_the_runtime();
        return;
    }
    let world = World::new("gc");
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("sleep 600")]}, {"text": "never"}]),
    );
    let mut live = Live::spawn(docker_runner(&d, &s).args([
        "--allow-host",
        "allowed.runner-test",
        "--egress-network",
        &world.network,
        "go",
    ]));
    let run_id = live.wait_for("run_started", Duration::from_secs(30))["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    let container = container_of(&run_id);
    wait_for_process(&container, "sleep 600");
    let label = format!("label={}={run_id}", runner::exec::docker::LABEL_RUN_ID);
    let networks = docker_cli(&["network", "ls", "-q", "--filter", &label]);
    assert!(!networks.is_empty(), "the run has its egress network");
    live.child.kill().expect("SIGKILL the runner");
    let _ = live.child.wait();
    // The proxy runs tinyproxy, not runner's supervisor: it outlives a
    // SIGKILLed runner until gc (or another runner's start-up sweep).
    let proxies = docker_cli(&[
        "ps",
        "-q",
        "--filter",
        &label,
        "--filter",
        "label=runner.service=runner-egress-proxy",
    ]);
    eprintln!("left by the SIGKILLed runner: proxy {proxies:?}, networks {networks:?}");
    let r = run(d.runner().arg("gc"));
    assert!(r.stderr().contains("gc: removed"), "{}", r.explain());
    let until = Instant::now() + Duration::from_secs(20);
    while !containers_of_run(&run_id).is_empty() {
        assert!(Instant::now() < until, "containers left: {}", r.explain());
        std::thread::sleep(Duration::from_millis(200));
    }
    for n in networks.lines() {
        assert!(!exists("network", n), "network {n} left{}", r.explain());
    }
}

#[test]
fn ctrl_c_in_an_allowlisted_run_removes_its_proxy_and_network() {
    use crate::support::egress::World;
    let _s = serial();
    if test_runtime_forces_no_network() {
        assert_allowlist_refused_by_the_runtime();
        return;
    }
    let world = World::new("sigint");
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("sleep 600")]}, {"text": "never"}]),
    );
    let mut live = Live::spawn(docker_runner(&d, &s).args([
        "--allow-host",
        "allowed.runner-test",
        "--egress-network",
        &world.network,
        "go",
    ]));
    let run_id = live.wait_for("run_started", Duration::from_secs(30))["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    let container = container_of(&run_id);
    wait_for_process(&container, "sleep 600");
    let label = format!("label={}={run_id}", runner::exec::docker::LABEL_RUN_ID);
    assert!(
        !docker_cli(&["network", "ls", "-q", "--filter", &label]).is_empty(),
        "the run has its egress network"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(live.child.id()).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
    let status = live.child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{}", live.desc);
    assert!(
        containers_of_run(&run_id).is_empty(),
        "sandbox or proxy left"
    );
    let networks = docker_cli(&["network", "ls", "-q", "--filter", &label]);
    assert!(networks.is_empty(), "network left: {networks}");
}

/// On a runtime registered with `--network=none` no sandbox has a network:
/// an allowlisted run is refused before anything starts, saying so.
fn assert_allowlist_refused_by_the_runtime() {
    let d = Dir::new();
    let s = script(&d, json!([{"text": "never"}]));
    let r = run(docker_runner(&d, &s).args(["--allow-host", "allowed.runner-test", "go"]));
    r.expect_code(2);
    assert!(
        r.stderr().contains("cannot give the sandbox a network")
            && r.stderr().contains("--allow-host"),
        "{}",
        r.explain()
    );
    let run_id = run_id_of(&r.events());
    assert!(containers_of_run(&run_id).is_empty(), "{}", r.explain());
}

#[test]
fn a_continuation_runs_in_a_fresh_sandbox_on_the_same_workspace() {
    let _s = serial();
    require_images(&[crate::support::docker::TINY]);
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let first = script(
        &d,
        json!([{"tool_calls": [{"name": "bash", "input": {"command": "echo one > one.txt; hostname > host-1"}}]},
               {"text": "done"}]),
    );
    let r = run(docker_runner(&d, &first)
        .arg("--workspace")
        .arg(&ws)
        .arg("write one.txt"));
    r.expect_code(0);
    let run_id = run_id_of(&r.events());
    let next = d.write(
        "script-2.json",
        &json!([{"tool_calls": [{"name": "bash", "input": {"command": "cat one.txt; echo two > two.txt; hostname > host-2"}}]},
                {"text": "done again"}])
        .to_string(),
    );
    let r = run(d
        .runner()
        .arg("continue")
        .arg(d.run_dir())
        .arg("and two.txt")
        .arg("--script")
        .arg(&next)
        .args(Exec::Docker.args())
        .arg("--workspace")
        .arg(&ws)
        .arg("--json"));
    r.expect_code(0);
    let events = r.events();
    let results = tool_results(&events);
    assert!(
        output_of(results[0]).starts_with("one\n"),
        "the continuation did not see the run's file: {}",
        r.explain()
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("two.txt")).unwrap(),
        "two\n"
    );
    let host = |n: &str| std::fs::read_to_string(ws.join(n)).unwrap();
    assert_ne!(
        host("host-1"),
        host("host-2"),
        "the same sandbox was reused"
    );
    assert!(
        containers_of_run(&run_id).is_empty(),
        "the continuation left a container of run {run_id}"
    );
}
