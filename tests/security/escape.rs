//! Issue 21's escape suite: the host-escape techniques a sandbox's inside
//! may try, each made by every principal that gains from it, against the
//! real engine, and the host checked afterwards for any trace.
//!
//! The attacks are one probe (tests/fixtures/escape/probe.py, python3 and
//! ctypes), run once per principal: Shocker (open_by_handle_at to inode 2
//! of every mounted filesystem: /etc/hostname, the workspace, the
//! supervisor, the channel...), the cgroup v1 release_agent,
//! core_pattern, mount and `unshare -Urm` then mount, mknod of the host
//! disk and reading it, sysrq-trigger and /sys knobs, kernel modules, raw
//! sockets, the runtime's binary through /proc/PID/exe (CVE-2019-5736),
//! ptrace of the supervisor, and the calls runner's seccomp profile denies
//! for the kernel code they reach (io_uring, keyrings, bpf, perf,
//! userfaultfd). Every attempt must be refused, and the host must show no
//! trace: a canary the test made is never read (its content is in no
//! output, trajectory or report), no file appears where the attack drops
//! one, the runtimes' binaries, runner's supervisor and the host-wide
//! knobs are unchanged, and no line of the host's /etc/shadow is anywhere
//! in what runner wrote.
//!
//! The principals: a root `tests/test.sh` (eval's verifier, which holds the
//! most) in each of the four grading modes, and once more under the
//! engine's own profile (`--seccomp default`: the capability ceiling alone
//! must stop Shocker there), with the root agent of the same attempts (the
//! oracle's solve.sh as `--user 0:0`); a root agent of a plain run
//! (`--user 0:0 --writable-rootfs`, the scripted model's command); uid
//! 1000, the default sandbox user; and a compose sidecar as root with the
//! capabilities sidecars keep.
//!
//! The runtimes: the engine's default (runc), and runsc in `make test`'s
//! second pass (`RUNNER_TEST_RUNTIME=runsc`). Eval's bookworm sandboxes
//! run these probes on runsc too: the probe is python, which does not use
//! the statx flags Debian's runsc refuses. gVisor's own kernel answers
//! what reaches nothing of the host's: two first steps, a new user
//! namespace (the mount in it is still refused) and a device node of its
//! own (which reads ENXIO), [`GVISOR_STEPS`]; and the kernel-surface calls,
//! which reach gVisor's code, not the host kernel's (runsc applies no OCI
//! seccomp profile unless registered with `--oci-seccomp`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use runner::exec::seccomp::DENIED_SYSCALLS;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::binary::{Dir, Ran, bash, first_tool_output, run, script, walk};
use crate::support::docker::{BOOKWORM, require_images, runtime_args, test_runtime};
use crate::support::eval::{assert_clean, eval_cmd, prelude, run_with_pid, task, toml};
use crate::support::serial::serial;

const PROBE: &str = include_str!("../fixtures/escape/probe.py");

/// Attacks every probe run must report on, so that one cut short or
/// skipped is noticed: a line names the attack itself or one of its
/// targets (`release_agent:/sys/fs/cgroup/...`). Every call runner's
/// seccomp profile denies is one more ([`DENIED_SYSCALLS`]).
const ATTACKS: [&str; 22] = [
    "open_by_handle_at:/etc/hostname",
    "open_by_handle_at:/.runner/supervisor",
    "mount-cgroup:memory",
    "release_agent",
    "notify_on_release",
    "core_pattern",
    "mount-tmpfs",
    "mount-proc",
    "mount-bind",
    "unshare-Urm",
    "mknod",
    "read-block-device",
    "sysrq-trigger",
    "sys",
    "init_module",
    "finit_module",
    "raw-socket:packet",
    "raw-socket:inet",
    "proc-exe:1",
    "proc-exe:1:O_PATH",
    "ptrace-attach",
    "ptrace-seize",
];

/// Attacks on what only a sandbox has (its supervisor as PID 1), not
/// made in a compose sidecar.
const SUPERVISOR_ONLY: [&str; 5] = [
    "open_by_handle_at:/.runner/supervisor",
    "proc-exe:1",
    "proc-exe:1:O_PATH",
    "ptrace-attach",
    "ptrace-seize",
];

/// Where a probe ran.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A sandbox of runner's, its supervisor PID 1.
    Sandbox,
    /// A compose sidecar: the service's own process is PID 1.
    Sidecar,
}

/// First steps gVisor's own kernel (the Sentry) lets through: a user
/// namespace and a device node of the Sentry's, neither the host's. The
/// step after each (a mount; reading the device) must still be refused.
const GVISOR_STEPS: [&str; 2] = ["unshare-Urm", "mknod"];

/// Host-wide knobs the probe opens for writing (and the release_agent of
/// each of the host's cgroup v1 hierarchies, found at [`HostFiles::new`]).
const HOST_KNOBS: [&str; 3] = [
    "/proc/sys/kernel/core_pattern",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/ksm/run",
];

/// The runtimes' binaries a CVE-2019-5736 overwrite would hit.
const RUNTIME_BINARIES: [&str; 4] = ["runc", "runsc", "containerd-shim-runc-v2", "docker-init"];

/// The host files no attack may change (knobs, the runtimes' binaries),
/// by their digests at the start.
struct HostFiles(Vec<(PathBuf, [u8; 32])>);

impl HostFiles {
    fn new() -> HostFiles {
        let mut paths: Vec<PathBuf> = HOST_KNOBS.iter().map(PathBuf::from).collect();
        paths.extend(glob_release_agents());
        paths.extend(RUNTIME_BINARIES.iter().filter_map(|b| on_path(b)));
        HostFiles(
            paths
                .into_iter()
                .filter_map(|p| digest(&p).map(|d| (p, d)))
                .collect(),
        )
    }

    /// One line per file that changed since [`HostFiles::new`].
    fn changed(&self, context: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(path, before)| digest(path).as_ref() != Some(before))
            .map(|(path, _)| format!("{context}: the host's {} changed", path.display()))
            .collect()
    }
}

/// What the host holds for one run's attacks to aim at: a canary only
/// this test's uid may read, in a directory where the attacks try to drop
/// a file.
struct Bait {
    dir: tempfile::TempDir,
    secret: String,
}

impl Bait {
    fn new() -> Bait {
        let dir = tempfile::Builder::new()
            .prefix("runner-escape-bait-")
            .tempdir()
            .expect("create the bait directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod the bait directory");
        let secret = format!("runner-escape-canary-{}-{}", std::process::id(), nanos());
        let canary = dir.path().join("canary");
        std::fs::write(&canary, &secret).expect("write the canary");
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the canary");
        Bait { dir, secret }
    }

    /// The probe's arguments: the canary and the drop prefix, relative to
    /// the root of the host filesystem holding them (what inode 2 opens).
    fn probe_args(&self) -> String {
        let rel = fs_relative(self.dir.path());
        format!("{rel}/canary {rel}/drop")
    }

    /// What the bait shows of the attacks, and any host secret in `seen`
    /// (everything runner printed and wrote), one line each.
    fn traces(&self, seen: &str, context: &str) -> Vec<String> {
        let mut out = Vec::new();
        if seen.contains(&self.secret) {
            out.push(format!(
                "{context}: the host's canary was read from inside the sandbox"
            ));
        }
        let left: Vec<String> = std::fs::read_dir(self.dir.path())
            .expect("list the bait directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "canary")
            .collect();
        if !left.is_empty() {
            out.push(format!(
                "{context}: the host's {} holds files the sandbox made: {left:?}",
                self.dir.path().display()
            ));
        }
        let canary = std::fs::read_to_string(self.dir.path().join("canary"));
        if canary.ok().as_deref() != Some(self.secret.as_str()) {
            out.push(format!("{context}: the host's canary changed"));
        }
        if host_shadow().iter().any(|line| seen.contains(line)) {
            out.push(format!(
                "{context}: a line of the host's /etc/shadow is in runner's output"
            ));
        }
        out
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn digest(path: &Path) -> Option<[u8; 32]> {
    std::fs::read(path).ok().map(|b| Sha256::digest(&b).into())
}

/// The host's cgroup v1 release_agent files.
fn glob_release_agents() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("release_agent"))
        .filter(|p| p.is_file())
        .collect()
}

/// `name` in PATH or the system's binary directories.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// `path` relative to the root of its filesystem: the mount holding it
/// (the longest mount point above it, in the host's mountinfo) joined
/// with the part of that filesystem the mount shows.
fn fs_relative(path: &Path) -> String {
    let path = path.canonicalize().expect("canonical bait path");
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let (root, point) = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((PathBuf::from(f.get(3)?), PathBuf::from(f.get(4)?)))
        })
        .filter(|(_, point)| path.starts_with(point))
        .max_by_key(|(_, point)| point.components().count())
        .expect("a mount holds the bait");
    let rest = path.strip_prefix(&point).expect("under its mount");
    root.join(rest)
        .to_string_lossy()
        .trim_start_matches('/')
        .to_string()
}

/// The lines of the host's /etc/shadow (none when this user cannot read
/// it, in which case no sandbox of its runs could either).
fn host_shadow() -> Vec<String> {
    std::fs::read_to_string("/etc/shadow")
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Every file runner wrote under `dirs` (run directories, reports, its
/// state), with `ran`'s stdout and stderr.
fn everything_written(ran: &Ran, dirs: &[PathBuf]) -> String {
    let mut all = ran.stdout() + &ran.stderr();
    for file in dirs.iter().flat_map(|d| walk(d)) {
        if let Ok(bytes) = std::fs::read(&file) {
            all.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    all
}

/// The probe's output as `(verdict, attack)` lines.
fn verdicts(output: &str) -> Vec<(&str, &str)> {
    output
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?, w.next()?))
        })
        .filter(|(v, _)| ["BLOCKED", "ESCAPE-OK", "UNEXPECTED", "STEP", "REACHED"].contains(v))
        .collect()
}

/// The seccomp profile a probe ran under.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// runner's own (the default): the kernel-surface calls are denied.
    Runner,
    /// `--seccomp default`, the engine's: a loosening that lets io_uring
    /// through; the capability ceiling alone must still stop the rest.
    EngineDefault,
}

/// What is wrong with a probe's report, one line each: it did not run
/// to its end or on the kernel under test, missed an attack, or an attack
/// was not refused (what gVisor's own kernel answers aside: its first
/// steps and the kernel-surface calls).
fn not_held(output: &str, who: &str, filter: Filter, place: Place) -> Vec<String> {
    if !output.contains("PROBE-DONE") {
        return vec![format!("{who}: the probe did not finish:\n{output}")];
    }
    // A sidecar here always runs on the engine's default runtime (see
    // a_root_sidecar_escapes_nowhere).
    let gvisor = place == Place::Sandbox && test_runtime().as_deref() == Some("runsc");
    let surface_open = gvisor || filter == Filter::EngineDefault;
    let lines = verdicts(output);
    let mut out: Vec<String> = output
        .lines()
        .filter(|l| match verdicts(l).first() {
            Some(("BLOCKED", _)) | None => false,
            Some(("STEP", a)) => !(gvisor && GVISOR_STEPS.contains(a)),
            Some(("REACHED", _)) => !surface_open,
            Some(_) => true,
        })
        .map(|l| format!("{who}: {l}"))
        .collect();
    let required = ATTACKS
        .iter()
        .filter(|a| place == Place::Sandbox || !SUPERVISOR_ONLY.contains(a))
        .chain(&DENIED_SYSCALLS);
    for attack in required {
        let prefix = format!("{attack}:");
        if !lines
            .iter()
            .any(|(_, a)| a == attack || a.starts_with(&prefix))
        {
            out.push(format!("{who}: the probe reported nothing on {attack}"));
        }
    }
    // The engine's profile lets io_uring through: its absence would mean
    // the run was not under that profile at all.
    let reached = lines.iter().any(|(v, _)| *v == "REACHED");
    if filter == Filter::EngineDefault && !gvisor && !reached {
        out.push(format!(
            "{who}: no call reached the kernel: not the engine's profile?"
        ));
    }
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("the host's kernel release")
        .trim()
        .to_string();
    let on_host_kernel = output.contains(&format!("release={host_release}\n"));
    if on_host_kernel == gvisor {
        out.push(format!(
            "{who}: the probe ran on the wrong kernel (gVisor expected: {gvisor}):\n{output}"
        ));
    }
    out
}

/// Fails with every problem found, each on its line.
fn assert_none(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "the boundary did not hold:\n{}",
        problems.join("\n")
    );
}

/// The shell command running the probe from its text, as a model would.
fn probe_command(bait: &Bait) -> String {
    format!(
        "python3 - {} <<'RUNNER_PROBE_EOF'\n{PROBE}\nRUNNER_PROBE_EOF",
        bait.probe_args()
    )
}

/// A task whose solve.sh and root tests/test.sh both run the probe; the
/// verifier's reward says only that it ran to its end.
fn escape_task(root: &Path, bait: &Bait) {
    let args = bait.probe_args();
    task(
        root,
        "escape",
        &[
            ("instruction.md", "escape the sandbox\n"),
            ("task.toml", &toml(BOOKWORM, 120, 120)),
            ("solution/probe.py", PROBE),
            (
                "solution/solve.sh",
                &format!("python3 /solution/probe.py {args}\n"),
            ),
            ("tests/probe.py", PROBE),
            (
                "tests/test.sh",
                &format!(
                    "python3 /tests/probe.py {args} > /tmp/probe.out 2>&1\ncat /tmp/probe.out\n\
                     if grep -q PROBE-DONE /tmp/probe.out; then echo 1; else echo 0; fi \
                     > /logs/verifier/reward.txt\n"
                ),
            ),
        ],
    );
}

/// The text of the attempt's file `rel`, which must exist.
fn attempt_file(d: &Dir, rel: &str, ran: &Ran) -> String {
    let p = d.path().join("runs/eval/escape/1").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {p:?}: {e}{}", ran.explain()))
}

/// The eval runs: each grading mode under runner's profile, and shared
/// grading under the engine's own, where the capability ceiling alone
/// must stop Shocker.
const EVAL_RUNS: [(&str, Filter); 5] = [
    ("--grading shared", Filter::Runner),
    ("--grading separate", Filter::Runner),
    ("--grading snapshot", Filter::Runner),
    ("--grading isolated", Filter::Runner),
    ("--grading shared --seccomp default", Filter::EngineDefault),
];

/// Done-when of issue 21: `runner eval` of a task whose root test.sh runs
/// the escapes (Shocker first) writes nothing on the host in any grading
/// mode, and neither does its root agent. The suites run at once.
#[test]
fn a_root_test_sh_and_a_root_agent_escape_nowhere_in_any_grading_mode() {
    let _g = prelude();
    let host = HostFiles::new();
    let dirs: Vec<(Dir, Bait)> = EVAL_RUNS
        .iter()
        .map(|_| (Dir::new(), Bait::new()))
        .collect();
    let ran: Vec<(Ran, u32)> = std::thread::scope(|s| {
        let handles: Vec<_> = EVAL_RUNS
            .iter()
            .zip(&dirs)
            .map(|((flags, _), (d, bait))| {
                escape_task(d.path(), bait);
                let mut args = vec!["escape", "--agent", "oracle", "--user", "0:0"];
                args.extend(flags.split(' '));
                let cmd = eval_cmd(d, &args);
                s.spawn(move || run_with_pid(cmd))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("eval thread"))
            .collect()
    });
    let mut problems = Vec::new();
    for (((flags, filter), (d, bait)), (r, pid)) in EVAL_RUNS.iter().zip(&dirs).zip(&ran) {
        assert_clean(*pid, &r.desc);
        let verifier = attempt_file(d, "verifier.log", r);
        let agent = attempt_file(d, "outputs/oracle.log", r);
        let who = format!("root test.sh, {flags}");
        problems.extend(not_held(&verifier, &who, *filter, Place::Sandbox));
        let who = format!("root agent, {flags}");
        problems.extend(not_held(&agent, &who, *filter, Place::Sandbox));
        let seen = everything_written(r, &[d.path().to_path_buf(), d.home()]);
        problems.extend(bait.traces(&seen, &format!("eval {flags}")));
    }
    problems.extend(host.changed("eval"));
    problems.extend(supervisor_changed());
    assert_none(&problems);
}

/// A plain run's scripted command, as a root agent with a writable root
/// and as uid 1000 (the default user).
#[test]
fn a_root_agent_and_uid_1000_escape_nowhere() {
    let _s = serial();
    require_images(&[BOOKWORM]);
    let host = HostFiles::new();
    let mut problems = Vec::new();
    let principals: [(&str, &[&str]); 2] = [
        ("root agent", &["--user", "0:0", "--writable-rootfs"]),
        ("uid 1000", &[]),
    ];
    for (who, flags) in principals {
        let (d, bait) = (Dir::new(), Bait::new());
        let s = script(
            &d,
            json!([{"tool_calls": [bash(&probe_command(&bait))]}, {"text": "done"}]),
        );
        let mut c = d.scripted(&s);
        c.args(["--executor", "docker", "--image", BOOKWORM])
            // The deny list is no boundary: it must not hide the sandbox's.
            .args(["--no-default-deny", "--output-limit", "100000"])
            .args(runtime_args())
            .args(flags)
            .arg("escape the sandbox");
        let r = run(&mut c);
        r.expect_code(0);
        let output = first_tool_output(&r.events());
        problems.extend(not_held(&output, who, Filter::Runner, Place::Sandbox));
        let seen = everything_written(&r, &[d.path().to_path_buf(), d.home()]);
        problems.extend(bait.traces(&seen, who));
    }
    problems.extend(host.changed("plain runs"));
    problems.extend(supervisor_changed());
    assert_none(&problems);
}

/// A task whose compose sidecar runs the probe as root (its image's user,
/// with the capabilities sidecars keep) and serves the report on its port;
/// test.sh fetches it by service name and prints it.
fn sidecar_task(root: &Path, bait: &Bait) {
    let compose = format!(
        "services:\n  main:\n    depends_on:\n      - probe\n  probe:\n    build:\n      \
         context: ./probe\n    command: [\"sh\", \"-c\", \"mkdir -p /srv/probe && python3 \
         /opt/probe.py {} --sidecar > /srv/probe/out.txt 2>&1; cd /srv/probe && exec python3 \
         -m http.server 8000\"]\n",
        bait.probe_args()
    );
    let fetch = "#!/bin/bash\nmkdir -p /logs/verifier\npython3 -I - <<'PY'\n\
                 import time, urllib.request\nfor _ in range(60):\n    try:\n        \
                 body = urllib.request.urlopen('http://probe:8000/out.txt', timeout=2).read()\n        \
                 if b'PROBE-DONE' in body:\n            break\n    except OSError:\n        pass\n    \
                 time.sleep(0.5)\nelse:\n    body = b'no report from the sidecar'\n\
                 print(body.decode(errors='replace'))\nPY\necho 1 > /logs/verifier/reward.txt\n";
    task(
        root,
        "escape",
        &[
            ("instruction.md", "escape the sidecar\n"),
            (
                "task.toml",
                "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n\
                 [environment]\ncpus = 1\nmemory_mb = 256\n",
            ),
            ("environment/Dockerfile", &format!("FROM {BOOKWORM}\n")),
            ("environment/docker-compose.yaml", &compose),
            (
                "environment/probe/Dockerfile",
                &format!("FROM {BOOKWORM}\nCOPY probe.py /opt/probe.py\n"),
            ),
            ("environment/probe/probe.py", PROBE),
            ("tests/test.sh", fetch),
        ],
    );
}

/// A compose sidecar, as root with the capabilities sidecars keep. Always
/// on the engine's default runtime (runc), as the eval suites are: runsc
/// registered with `--network=none` gives a sidecar no network to report
/// over, and main none to reach it.
#[test]
fn a_root_sidecar_escapes_nowhere() {
    let _g = prelude();
    let host = HostFiles::new();
    let (d, bait) = (Dir::new(), Bait::new());
    sidecar_task(d.path(), &bait);
    let mut cmd = d.runner();
    cmd.args([
        "eval",
        "escape",
        "--agent",
        "nop",
        "--output-dir",
        "runs/eval",
    ]);
    let (r, pid) = run_with_pid(cmd);
    assert_clean(pid, &r.desc);
    let report = attempt_file(&d, "verifier.log", &r);
    let mut problems = not_held(&report, "root sidecar", Filter::Runner, Place::Sidecar);
    let seen = everything_written(&r, &[d.path().to_path_buf(), d.home()]);
    problems.extend(bait.traces(&seen, "root sidecar"));
    problems.extend(host.changed("root sidecar"));
    assert_none(&problems);
}

/// One line if the host's copy of the supervisor, which every sandbox
/// mounts, is no longer runner's own bytes.
fn supervisor_changed() -> Vec<String> {
    let path = runner::exec::supervisor::binary::installed().expect("the installed supervisor");
    let bytes = std::fs::read(&path).expect("read the installed supervisor");
    if bytes == runner::exec::supervisor::binary::SUPERVISOR {
        return Vec::new();
    }
    vec![format!(
        "the host's supervisor {} was changed from inside a sandbox",
        path.display()
    )]
}

/// The probe itself: its verdicts parse and a line naming a target of an
/// attack counts for that attack.
#[test]
fn verdict_lines_parse() {
    let out = "INFO uid=0\nBLOCKED release_agent:/x EROFS\nESCAPE-OK mknod a\nPROBE-DONE\n";
    assert_eq!(
        verdicts(out),
        vec![("BLOCKED", "release_agent:/x"), ("ESCAPE-OK", "mknod")]
    );
}
