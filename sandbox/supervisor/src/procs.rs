//! Processes: the supervisor's own privileges and signals, reaping (it is
//! PID 1 of its sandbox, so every orphan comes to it), and the kill that
//! verifies nothing is left.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use runner_supervisor::protocol::SUPERVISOR_UID;

/// Root's file capabilities, which the supervisor holds only to lend a
/// verifier's last command (see `cmd::identity`), never to use itself:
/// CHOWN (0), DAC_OVERRIDE (1), FOWNER (3), FSETID (4). Never
/// DAC_READ_SEARCH (2): with it the engine's seccomp profile allows
/// `open_by_handle_at`, which opens the host's files through any bind
/// mount; DAC_OVERRIDE already reads every file.
pub const VERIFIER_FILE_CAPS: u64 = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 4);
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Every catchable signal but SIGCHLD is ignored: runner alone ends the
/// supervisor (by closing its stream). Commands get the defaults back.
pub fn ignore_signals() {
    for sig in 1..libc::SIGRTMAX() {
        if matches!(sig, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD) {
            continue;
        }
        // SAFETY: installing SIG_IGN has no handler to be unsafe in.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// When started as root: moves to [`SUPERVISOR_UID`] keeping only the four
/// capabilities it needs (and `extra`, the ones a root sandbox user's
/// commands may keep: none of them a way into the supervisor), its `/proc`
/// files owned by that uid (so no
/// process of another uid may trace it or open them). Returns whether
/// it did; a supervisor started by another user stays as it is.
pub fn confine(extra: u64) -> Result<bool, String> {
    // SAFETY: plain syscalls on the calling process's credentials, made
    // before any other thread exists.
    unsafe {
        if libc::getuid() != 0 {
            return Ok(false);
        }
        // The stream (stdin, stdout, stderr) is the engine's pipes, owned
        // by root: with no mode bits, a root command cannot reopen them
        // through /proc/1/fd (gVisor checks only the file's own
        // permissions there). Done while still their owner; best effort
        // (an engine's pipes may not take a mode).
        for fd in 0..3 {
            libc::fchmod(fd, 0);
        }
        // Room in the stream towards runner (best effort).
        libc::fcntl(1, libc::F_SETPIPE_SZ, 1 << 20);
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            return Err(os_err("PR_SET_KEEPCAPS"));
        }
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(os_err("setgroups"));
        }
        if libc::setresgid(SUPERVISOR_UID, SUPERVISOR_UID, SUPERVISOR_UID) != 0 {
            return Err(os_err("setresgid"));
        }
        if libc::setresuid(SUPERVISOR_UID, SUPERVISOR_UID, SUPERVISOR_UID) != 0 {
            return Err(os_err("setresuid"));
        }
        // Its own four, and the ones a root sandbox user's commands keep
        // (`--caps`): a command can only hold what the supervisor has.
        let own = [CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP]
            .iter()
            .fold(VERIFIER_FILE_CAPS, |m, c| m | (1 << c));
        let mask = own | extra;
        let low = u32::try_from(mask & 0xffff_ffff).unwrap_or(0);
        let high = u32::try_from(mask >> 32).unwrap_or(0);
        let header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let data = [
            CapData {
                effective: low,
                permitted: low,
                inheritable: 0,
            },
            CapData {
                effective: high,
                permitted: high,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(os_err("capset"));
        }
        // Dumpable on purpose: the uid change just made it non-dumpable,
        // and the /proc entries of a non-dumpable process belong to root,
        // which a root command is (gVisor then lets it open the stream
        // through /proc/1/fd). Dumpable, they are the supervisor's own uid,
        // which no command has, and tracing needs that uid or
        // CAP_SYS_PTRACE.
        if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
            return Err(os_err("PR_SET_DUMPABLE"));
        }
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    Ok(true)
}

/// Collects every child's exit (orphans included) and hands those of the
/// commands to whoever waits for them.
pub struct Reaper {
    waiting: Mutex<HashMap<i32, Sender<crate::cmd::Event>>>,
    wake: Condvar,
}

impl Reaper {
    pub fn start() -> &'static Reaper {
        let r: &'static Reaper = Box::leak(Box::new(Reaper {
            waiting: Mutex::new(HashMap::new()),
            wake: Condvar::new(),
        }));
        std::thread::spawn(move || r.run());
        r
    }

    /// Runs `spawn` (which forks) with the table locked, then registers
    /// the pid it returns, so an exit that comes at once is never lost.
    pub fn spawn_with<E>(
        &self,
        tx: Sender<crate::cmd::Event>,
        spawn: impl FnOnce() -> Result<i32, E>,
    ) -> Result<i32, E> {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let pid = spawn()?;
        w.insert(pid, tx);
        self.wake.notify_all();
        Ok(pid)
    }

    fn run(&self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only to `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
            if pid > 0 {
                let tx = self
                    .waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&pid);
                if let Some(tx) = tx {
                    let _ = tx.send(crate::cmd::Event::Exited(status));
                }
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // No children: sleep until one is registered (unless one was
            // while this thread looked).
            let w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if w.is_empty() {
                let _ = self.wake.wait_timeout(w, Duration::from_millis(200));
            }
        }
    }
}

/// Processes alive in the sandbox other than the supervisor (and PID 1):
/// zombies do not count.
pub fn live() -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me || pid == 1 {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        if matches!(state, Some(Some('Z' | 'X')) | None) {
            continue;
        }
        out.push(pid);
    }
    out
}

/// Kills every process of the sandbox but the supervisor until none is
/// left (about 2 s at most): `(found, stuck)`, how many were alive before
/// and how many survived. Only for a confined supervisor, which alone may
/// signal them all and is the only process spared.
pub fn kill_all() -> (u32, u32) {
    let count = |v: Vec<i32>| u32::try_from(v.len()).unwrap_or(u32::MAX);
    let found = count(live());
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        // SAFETY: kill(2) with -1: every process we may signal but
        // ourselves and init.
        unsafe {
            libc::kill(-1, libc::SIGKILL);
        }
        let left = live();
        if left.is_empty() {
            return (found, 0);
        }
        if Instant::now() >= until {
            return (found, count(left));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Live (non-zombie) processes of session `sid`, the supervisor left
/// out: the session is asked with one `getsid` per process and only
/// members have their `stat` read, which keeps the scan cheap on a busy
/// host. Empty where there is no `/proc`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        // SAFETY: getsid(2) only reads the kernel's process table.
        .filter(|&pid| pid != me && unsafe { libc::getsid(pid) } == sid)
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        })
        .collect()
}

/// Kills session `sid` (a command's: the shell led it) until no live
/// member is left or `limit` passes: its process group, then members
/// that moved to a group of their own (`set -m` jobs). `(found, stuck)`:
/// how many were alive and how many survived. The unconfined
/// supervisor's kill; one that left the session (`setsid`) escapes it.
pub fn kill_session(sid: i32, limit: Duration) -> (u32, u32) {
    let count = |v: &[i32]| u32::try_from(v.len()).unwrap_or(u32::MAX);
    // Counted only while the group itself lives (one signal-0 probe):
    // jobs that moved to a group of their own (`set -m`) are killed all
    // the same, just not counted.
    // SAFETY: kill(2) with signal 0 only probes the group.
    let group_alive = unsafe { libc::kill(-sid, 0) } == 0;
    let mut left = session_members(sid);
    let found = if group_alive { count(&left) } else { 0 };
    let until = Instant::now() + limit;
    loop {
        // SAFETY: kill(2) of the session's process group and of its
        // members, processes of the caller's own uid.
        unsafe {
            libc::kill(-sid, libc::SIGKILL);
            for &pid in &left {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        left = session_members(sid);
        if left.is_empty() {
            return (found, 0);
        }
        if Instant::now() >= until {
            return (found, count(&left));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
