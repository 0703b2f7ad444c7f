//! The machine: its fingerprint, CPU accounting (ours, a child's, the
//! Docker daemon's), and running peer commands with their resource usage.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::TimeVal;
use nix::unistd::{SysconfVar, sysconf};
use serde::Serialize;

/// What the numbers depend on, recorded with every run.
#[derive(Debug, Serialize)]
pub struct Fingerprint {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_mib: u64,
    pub kernel: String,
    pub docker_engine: String,
    pub docker_api: String,
    pub containerd: String,
    pub runc: String,
    pub default_runtime: String,
    pub cgroup_version: String,
    /// 1-minute load average when the run started and ended.
    pub load_start: f64,
    pub load_end: f64,
}

impl Fingerprint {
    pub fn take() -> Fingerprint {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_mib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024);
        let fmt = "{{.Server.Version}}|{{.Server.APIVersion}}|{{range .Server.Components}}{{.Name}}={{.Version}};{{end}}";
        let version = docker_out(&["version", "--format", fmt]).unwrap_or_default();
        let mut parts = version.trim().split('|');
        let engine = parts.next().unwrap_or("").to_string();
        let api = parts.next().unwrap_or("").to_string();
        let comps = parts.next().unwrap_or("");
        let comp = |name: &str| {
            comps
                .split(';')
                .find_map(|c| c.strip_prefix(&format!("{name}=")))
                .unwrap_or("?")
                .to_string()
        };
        let info = docker_out(&["info", "--format", "{{.CgroupVersion}}|{{.DefaultRuntime}}"])
            .unwrap_or_default();
        let (cgroup, runtime) = info.trim().split_once('|').unwrap_or(("?", "?"));
        Fingerprint {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            memory_mib,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            docker_engine: engine,
            docker_api: api,
            containerd: comp("containerd"),
            runc: comp("runc"),
            default_runtime: runtime.to_string(),
            cgroup_version: cgroup.to_string(),
            load_start: load_avg(),
            load_end: f64::NAN,
        }
    }
}

/// The 1-minute load average.
pub fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// CPU time (user + system) this process has used, in ms.
pub fn self_cpu_ms() -> f64 {
    getrusage(UsageWho::RUSAGE_SELF)
        .map_or(f64::NAN, |u| tv_ms(u.user_time()) + tv_ms(u.system_time()))
}

/// A `timeval` in ms.
pub fn tv_ms(tv: TimeVal) -> f64 {
    tv.tv_sec() as f64 * 1e3 + tv.tv_usec() as f64 / 1e3
}

/// CPU time used so far by the Docker engine for `containers`, in ms:
/// dockerd, containerd, and the shims of those containers (with the runc
/// processes they reaped). dockerd and containerd also serve everyone else
/// on this machine, so other Docker work during a measurement inflates it.
pub fn engine_cpu_ms(containers: &[&str]) -> f64 {
    let hz = sysconf(SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(1)
        .max(1) as f64;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return f64::NAN;
    };
    let mut ticks = 0u64;
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised comm, which may contain spaces.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        match &stat[open + 1..close] {
            "dockerd" | "containerd" => {}
            "containerd-shim" => {
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                if !containers.iter().any(|id| cmdline.contains(id)) {
                    continue;
                }
            }
            _ => continue,
        }
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime, stime, cutime, cstime are fields 14..=17; rest[0] is field 3.
        for f in rest.iter().skip(11).take(4) {
            ticks += f.parse::<u64>().unwrap_or(0);
        }
    }
    ticks as f64 * 1e3 / hz
}

/// How a child process went.
#[derive(Debug)]
pub struct ChildRun {
    pub wall_ms: f64,
    /// Its user + system CPU time.
    pub cpu_ms: f64,
    pub max_rss_kib: u64,
    pub status: ExitStatus,
    /// Bytes it wrote to stdout (counted, not kept) unless `keep_stdout`.
    pub stdout_bytes: u64,
    /// Its stdout when `keep_stdout` was set.
    pub stdout: Vec<u8>,
}

/// Runs `cmd` with stderr discarded, counting (or keeping) its stdout,
/// and reaps it with wait4 to learn its own CPU time and peak RSS.
pub fn run_child(cmd: &mut Command, keep_stdout: bool) -> Result<ChildRun, String> {
    let shown = format!("{cmd:?}");
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let mut stdout_bytes = 0u64;
    let mut kept = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match out.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    stdout_bytes += n as u64;
                    if keep_stdout {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the output of {shown}: {e}")),
            }
        }
    }
    let mut status = 0;
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| format!("pid of {shown} too large"))?;
    // Raw libc: nix has no wait4, and its waitpid drops the child's rusage.
    // SAFETY: wait4 writes only the status and the rusage we pass; the pid
    // is our own unreaped child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        return Err(format!(
            "wait4 on {shown} failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(ChildRun {
        wall_ms: started.elapsed().as_secs_f64() * 1e3,
        cpu_ms: tv_ms(ru.ru_utime.into()) + tv_ms(ru.ru_stime.into()),
        max_rss_kib: u64::try_from(ru.ru_maxrss).unwrap_or(0),
        status: ExitStatus::from_raw(status),
        stdout_bytes,
        stdout: kept,
    })
}

/// Runs `docker ARGS`, returning stdout; a failure is an error with stderr.
pub fn docker_out(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`docker {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Label on every container the bench starts itself, so the end of the
/// run (or the next run) removes them whatever happened.
pub const BENCH_LABEL: &str = "runner-bench=1";

/// Starts a long-lived peer container the way mini-swe-agent does
/// (`docker run -d ... IMG sleep`-like), with no network.
pub fn start_peer_container(image: &str) -> Result<String, String> {
    let out = docker_out(&[
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        BENCH_LABEL,
        image,
        "tail",
        "-f",
        "/dev/null",
    ])?;
    Ok(out.trim().to_string())
}

/// Removes every container carrying [`BENCH_LABEL`] (peer containers, and
/// the runner executors the bench starts in-process); returns how many.
/// Containers of other runner runs on this machine are never touched.
pub fn remove_bench_containers() -> usize {
    let filter = format!("label={BENCH_LABEL}");
    let ids = docker_out(&["ps", "-aq", "--filter", &filter]).unwrap_or_default();
    ids.split_whitespace()
        .filter(|id| docker_out(&["rm", "-f", id]).is_ok())
        .count()
}

/// How many processes whose command line contains `needle` run in
/// container `id` (from the host, `docker top`).
pub fn count_processes(id: &str, needle: &str) -> Result<usize, String> {
    let out = docker_out(&["top", id, "-o", "pid,args"])?;
    Ok(out.lines().skip(1).filter(|l| l.contains(needle)).count())
}
