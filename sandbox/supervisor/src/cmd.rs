//! One command: forked and executed as the sandbox user (or the user its
//! request names) in a session of its own, its output framed as it comes,
//! and at its end (exit, timeout, kill) everything it left running killed
//! and checked gone. A confined supervisor's kill is `kill(-1)` with
//! CAP_KILL: every process of every uid but its own, so what a command
//! started dies whichever user either of them ran as. An unconfined one
//! (on the host, for the local backend) kills the command's session: its
//! process group and any member that moved to a group of its own.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use runner_supervisor::protocol::{CHUNK, HELPER_UID, PROCS_FLAG, Reply, Request, SUPERVISOR_UID};

use crate::{Shared, procs};

/// The size asked for the command's output pipe.
const PIPE_BYTES: libc::c_int = 1 << 20;
/// After the command's end, how long its output may take to close.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// [`DRAIN_LIMIT`] for an unconfined supervisor (on the host).
const HOST_DRAIN_LIMIT: Duration = Duration::from_millis(200);
/// On the host, how long the output of a command that exited may stay
/// open (background jobs holding it) before what it left is killed.
const HOST_EXIT_GRACE: Duration = Duration::from_millis(150);
/// On the host, how long the kill of what a command that exited left
/// running may take.
const HOST_KILL_LIMIT: Duration = Duration::from_millis(200);
/// After a kill, how long the command may take to be reaped.
const REAP_LIMIT: Duration = Duration::from_secs(3);
/// After the output closed, how long the state may take.
const STATE_LIMIT: Duration = Duration::from_millis(500);

/// What a command's controller hears about.
pub enum Event {
    /// The command's process exited (its wait status).
    Exited(i32),
    /// runner asked to kill it.
    Kill,
    /// Its output pipe closed: every writer is gone.
    OutputClosed,
    /// What it wrote on its state descriptor (`None`: more than allowed).
    State(Option<Vec<u8>>),
}

/// The first executable `name` in the `:`-separated `path`.
pub fn find_in_path(name: &str, path: &str) -> Option<String> {
    if name.contains('/') {
        return Some(name.to_string());
    }
    path.split(':').filter(|d| !d.is_empty()).find_map(|d| {
        let p = format!("{d}/{name}");
        let m = std::fs::metadata(&p).ok()?;
        (m.is_file() && m.permissions().mode() & 0o111 != 0).then_some(p)
    })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstring(s: impl AsRef<[u8]>) -> Result<CString, String> {
    CString::new(s.as_ref())
        .map_err(|_| "a NUL byte in the command, its directory or environment".to_string())
}

/// Everything the child needs, made before the fork (the child may not
/// allocate).
struct Plan {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    uid: u32,
    gid: u32,
    confined: bool,
    caps: u64,
    nproc: Option<u64>,
    /// `argv` and `envp` as the NULL-terminated arrays execve takes.
    argv_ptrs: Vec<*const libc::c_char>,
    env_ptrs: Vec<*const libc::c_char>,
}

impl Plan {
    fn seal(mut self) -> Plan {
        self.argv_ptrs = self.argv.iter().map(|c| c.as_ptr()).collect();
        self.argv_ptrs.push(std::ptr::null());
        self.env_ptrs = self.envp.iter().map(|c| c.as_ptr()).collect();
        self.env_ptrs.push(std::ptr::null());
        self
    }
}

/// Whether `argv` is the supervisor's own binary listing processes
/// (`--procs`), the one command [`HELPER_UID`] is lent to.
fn is_procs_helper(argv: &[String]) -> bool {
    let me = std::env::args().next();
    matches!(argv, [bin, flag] if Some(bin) == me.as_ref() && flag == PROCS_FLAG)
}

/// Who a command runs as and the capabilities its bounding set keeps:
/// the sandbox user with the sandbox's `--caps`, or the request's `user`
/// with none. Another user needs a confined supervisor (which alone may
/// switch users) and must not be the supervisor's own uid or gid, nor the
/// helper's for anything but the helper.
fn identity(
    shared: &Shared,
    user: Option<(u32, u32)>,
    switch_user: bool,
    argv: &[String],
) -> Result<(u32, u32, u64), String> {
    let Some((uid, gid)) = user else {
        return Ok((shared.who.uid, shared.who.gid, shared.who.caps));
    };
    if uid == SUPERVISOR_UID || gid == SUPERVISOR_UID {
        return Err(format!(
            "refused to run a command as {uid}:{gid}: that is the supervisor's own uid or gid"
        ));
    }
    if (uid == HELPER_UID || gid == HELPER_UID) && !is_procs_helper(argv) {
        return Err(format!(
            "refused to run a command as {uid}:{gid}: that uid or gid is the supervisor's \
             process-list helper's"
        ));
    }
    if !shared.who.confined && (uid, gid) != (shared.who.uid, shared.who.gid) {
        return Err(format!(
            "cannot run a command as {uid}:{gid}: the supervisor was not started as root"
        ));
    }
    // CAP_SETGID (6) and CAP_SETUID (7), and root's file capabilities
    // (CHOWN, DAC_OVERRIDE, FOWNER, FSETID), which the
    // confined supervisor holds for this; never CAP_KILL or CAP_SETPCAP.
    let caps = if switch_user {
        (1 << 6) | (1 << 7) | crate::procs::VERIFIER_FILE_CAPS
    } else {
        0
    };
    Ok((uid, gid, caps))
}

fn plan(shared: &Shared, job: &Job<'_>) -> Result<Plan, String> {
    let Job {
        argv,
        cwd,
        env,
        nproc,
        user,
        switch_user,
        ..
    } = *job;
    let (uid, gid, caps) = identity(shared, user, switch_user, argv)?;
    let mut vars: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    for (k, v) in env {
        vars.retain(|(old, _)| old != k.as_bytes());
        vars.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    let path_var = vars
        .iter()
        .find(|(k, _)| k == b"PATH")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let first = argv.first().ok_or("an empty command")?;
    let path = find_in_path(first, &path_var).ok_or_else(|| format!("{first}: not found"))?;
    Ok(Plan {
        path: cstring(path)?,
        argv: argv.iter().map(cstring).collect::<Result<_, _>>()?,
        envp: vars
            .into_iter()
            .map(|(mut k, v)| {
                k.push(b'=');
                k.extend_from_slice(&v);
                cstring(k)
            })
            .collect::<Result<_, _>>()?,
        cwd: cstring(cwd)?,
        uid,
        gid,
        confined: shared.who.confined,
        caps,
        nproc,
        argv_ptrs: Vec::new(),
        env_ptrs: Vec::new(),
    }
    .seal())
}

/// The child side of the fork: only async-signal-safe calls. Reports an
/// errno on `err` (which is close-on-exec) when it cannot exec.
///
/// # Safety
/// Call only in a freshly forked child.
unsafe fn child(p: &Plan, null: i32, out: i32, state: Option<i32>, err: i32) -> ! {
    // SAFETY: the caller is a forked child; every call below is a plain
    // syscall on its own process.
    unsafe {
        let fail = |err: i32| -> ! {
            let e = *libc::__errno_location();
            let b = e.to_be_bytes();
            libc::write(err, b.as_ptr().cast(), 4);
            libc::_exit(127)
        };
        // Out of the way of the descriptors set below.
        let err = libc::fcntl(err, libc::F_DUPFD_CLOEXEC, 10);
        if err < 0 {
            libc::_exit(127);
        }
        for sig in 1..libc::SIGRTMAX() {
            libc::signal(sig, libc::SIG_DFL);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        if libc::setsid() < 0 {
            fail(err);
        }
        if libc::dup2(null, 0) < 0 || libc::dup2(out, 1) < 0 || libc::dup2(out, 2) < 0 {
            fail(err);
        }
        if let Some(s) = state {
            if s == 3 {
                libc::fcntl(3, libc::F_SETFD, 0);
            } else if libc::dup2(s, 3) < 0 {
                fail(err);
            }
        }
        if p.confined {
            // No capability can come back, not even to a root command,
            // but those the sandbox was started to give commands.
            // A drop that fails (but for numbers past the kernel's last
            // capability, EINVAL) fails the command: never open.
            for cap in 0..64u32 {
                if p.caps & (1 << cap) == 0
                    && libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) != 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    fail(err);
                }
            }
            // The out-of-memory killer takes a command before the
            // supervisor. Raising one's own score needs no privilege.
            let adj = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if adj >= 0 {
                libc::write(adj, b"1000".as_ptr().cast(), 4);
                libc::close(adj);
            }
            let groups = [p.gid];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setresgid(p.gid, p.gid, p.gid) != 0
                || libc::setresuid(p.uid, p.uid, p.uid) != 0
            {
                fail(err);
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            fail(err);
        }
        if let Some(n) = p.nproc {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &lim) != 0 {
                fail(err);
            }
        }
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            fail(err);
        }
        libc::execve(p.path.as_ptr(), p.argv_ptrs.as_ptr(), p.env_ptrs.as_ptr());
        fail(err)
    }
}

/// Runs one [`Request::Exec`] and sends its output and exit.
pub fn run(
    shared: &Arc<Shared>,
    req: Request,
    feed: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
    (tx, rx): (Sender<Event>, Receiver<Event>),
) {
    let Request::Exec {
        id,
        argv,
        cwd,
        env,
        timeout_ms,
        keep_background,
        nproc,
        state_bytes,
        state_end,
        user,
        switch_user,
        ..
    } = req
    else {
        return;
    };
    let job = Job {
        id,
        argv: &argv,
        cwd: &cwd,
        env: &env,
        nproc,
        timeout: Duration::from_millis(timeout_ms),
        keep_background,
        state_bytes,
        state_end: state_end.as_deref(),
        user,
        switch_user,
    };
    let r = run_inner(shared, &job, feed, (tx, rx));
    shared
        .stdin
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    let _ = match r {
        Ok((exit, state)) => shared.out.send(&exit, state.as_deref().unwrap_or_default()),
        Err(msg) => shared.out.error(id, "spawn", &msg),
    };
}

/// One [`Request::Exec`], unpacked.
struct Job<'a> {
    id: u64,
    argv: &'a [String],
    cwd: &'a str,
    env: &'a [(String, String)],
    nproc: Option<u64>,
    timeout: Duration,
    keep_background: bool,
    state_bytes: Option<u64>,
    state_end: Option<&'a str>,
    /// Another user than the sandbox's (see [`Request::Exec`]).
    user: Option<(u32, u32)>,
    /// `user` keeps CAP_SETUID and CAP_SETGID.
    switch_user: bool,
}

fn run_inner(
    shared: &Arc<Shared>,
    job: &Job<'_>,
    feed: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
    (tx, rx): (Sender<Event>, Receiver<Event>),
) -> Result<(Reply, Option<Vec<u8>>), String> {
    let started = Instant::now();
    let Job {
        id,
        argv,
        state_bytes,
        state_end,
        ..
    } = *job;
    let plan = plan(shared, job)?;
    let io = |e: std::io::Error| e.to_string();
    // The command's stdin: /dev/null, or a pipe fed from the stream.
    let (input, feed) = match feed {
        Some(frx) => {
            let (r, w) = pipe().map_err(io)?;
            (r, Some((w, frx)))
        }
        None => (
            OwnedFd::from(std::fs::File::open("/dev/null").map_err(io)?),
            None,
        ),
    };
    let null = input;
    let (out_r, out_w) = pipe().map_err(io)?;
    // Room for a flood to run ahead of the stream (best effort: up to the
    // system's pipe-max-size).
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(out_r.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
    }
    let state = match state_bytes {
        Some(_) => Some(pipe().map_err(io)?),
        None => None,
    };
    let (err_r, err_w) = pipe().map_err(io)?;
    let state_w = state.as_ref().map(|(_, w)| w.as_raw_fd());
    let pid = shared.reaper.spawn_with(tx.clone(), || {
        // SAFETY: fork; the child runs only `child`, which makes plain
        // syscalls and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error().to_string()),
            0 => unsafe {
                child(
                    &plan,
                    null.as_raw_fd(),
                    out_w.as_raw_fd(),
                    state_w,
                    err_w.as_raw_fd(),
                )
            },
            pid => Ok(pid),
        }
    })?;
    drop(out_w);
    drop(err_w);
    drop(null);
    let state_r = state.map(|(r, w)| {
        drop(w);
        r
    });
    let mut errno = [0u8; 4];
    let mut err_r = std::fs::File::from(err_r);
    if let Ok(4) = read_full(&mut err_r, &mut errno) {
        // It never ran: wait for its exit so nothing is left.
        let _ = wait_exit(&rx, REAP_LIMIT);
        let e = std::io::Error::from_raw_os_error(i32::from_be_bytes(errno));
        return Err(format!(
            "cannot start {}: {e}",
            argv.first().map_or("", |s| s)
        ));
    }
    let done = Arc::new(AtomicBool::new(false));
    let threads = (|| -> std::io::Result<()> {
        if let Some((w, frx)) = feed {
            feed_stdin(shared, id, w, frx)?;
        }
        pump(shared, id, out_r, tx.clone(), done.clone())?;
        if let (Some(r), Some(max)) = (state_r, state_bytes) {
            read_state(r, max, state_end.map(str::to_string), tx.clone())?;
        }
        Ok(())
    })();
    drop(tx);
    if let Err(e) = threads {
        // Nothing would report on the command: it goes.
        kill(shared, pid);
        let _ = wait_exit(&rx, REAP_LIMIT);
        return Err(format!("cannot start a thread for the command: {e}"));
    }
    Ok(watch(shared, job, pid, &rx, started, &done))
}

/// Waits for the end of the started command `pid` (exit, timeout, kill),
/// kills what it left, drains its output and state, and makes its
/// [`Reply::Exit`] and the state.
fn watch(
    shared: &Shared,
    job: &Job<'_>,
    pid: i32,
    rx: &Receiver<Event>,
    started: Instant,
    done: &AtomicBool,
) -> (Reply, Option<Vec<u8>>) {
    let Job {
        id,
        timeout,
        keep_background,
        state_bytes,
        ..
    } = *job;
    let deadline = started + timeout;
    let mut seen = Seen::default();
    let mut timed_out = false;
    let mut cancelled = false;
    while seen.status.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Kill) => {
                cancelled = true;
                break;
            }
            Ok(e) => seen.note(e),
            Err(RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let (leftovers, stuck) = if seen.status.is_none() {
        let (_, stuck) = kill(shared, pid);
        // Its exit; what else comes meanwhile counts too (the output
        // closing above all, which the drain below would wait for).
        seen.wait(rx, REAP_LIMIT, |s| s.status.is_some());
        (0, stuck)
    } else {
        if !shared.who.confined && !keep_background {
            // On the host, output still in flight may arrive and a job
            // about to leave the session (`setsid`) may do so: what holds
            // the output past this is killed with the rest.
            seen.wait(rx, HOST_EXIT_GRACE, |s| s.closed);
        }
        after_exit(shared, pid, keep_background)
    };
    seen.wait(rx, drain_limit(shared), |s| s.closed);
    shared.out.mark(done);
    if state_bytes.is_some() && !timed_out && !cancelled {
        seen.wait(rx, STATE_LIMIT, |s| s.state.is_some());
    }
    let Seen {
        status,
        closed,
        state: got_state,
    } = seen;
    // A killed command's state is not kept: the session goes on from the
    // state before it.
    let killed = timed_out || cancelled;
    let state_overflow = !killed && matches!(got_state, Some(None));
    let state = if killed { None } else { got_state.flatten() };
    let (code, signal) = match status {
        Some(s) if libc::WIFEXITED(s) => (Some(libc::WEXITSTATUS(s)), None),
        Some(s) if libc::WIFSIGNALED(s) => (None, Some(libc::WTERMSIG(s))),
        _ => (None, None),
    };
    (
        Reply::Exit {
            id,
            code,
            signal,
            timed_out,
            cancelled,
            leftovers,
            stuck,
            output_open: !closed,
            state: state.is_some(),
            state_overflow,
        },
        state,
    )
}

/// What a command's controller has heard so far.
#[derive(Default)]
struct Seen {
    /// The command's wait status, once it exited.
    status: Option<i32>,
    /// Its output closed.
    closed: bool,
    /// What it wrote on its state descriptor (`Some(None)`: too much).
    state: Option<Option<Vec<u8>>>,
}

impl Seen {
    /// Takes in `e` (a kill request is not news here).
    fn note(&mut self, e: Event) {
        match e {
            Event::Exited(s) => self.status = self.status.or(Some(s)),
            Event::OutputClosed => self.closed = true,
            Event::State(s) => self.state = Some(s),
            Event::Kill => {}
        }
    }

    /// Takes in events until `enough` says so or `limit` passes.
    fn wait(&mut self, rx: &Receiver<Event>, limit: Duration, enough: impl Fn(&Seen) -> bool) {
        let until = Instant::now() + limit;
        while !enough(self) {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(e) => self.note(e),
                Err(_) => return,
            }
        }
    }
}

/// How long the output may take to close after the command's end: on
/// the host (`--host`) a process that left the session (`setsid`) may
/// hold it forever, and the call must not wait on it for long.
fn drain_limit(shared: &Shared) -> Duration {
    if shared.who.confined {
        DRAIN_LIMIT
    } else {
        HOST_DRAIN_LIMIT
    }
}

/// What a command that exited left running: killed (confined: every
/// process but the supervisor; on the host: its session) unless
/// `keep_background`, then `(found, stuck)`. A kept session on the host
/// is remembered, for `KillAll` and the supervisor's end.
fn after_exit(shared: &Shared, pid: i32, keep_background: bool) -> (u32, u32) {
    if keep_background {
        if !shared.who.confined {
            shared
                .kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(pid);
        }
        (0, 0)
    } else if shared.who.confined {
        if procs::live().is_empty() {
            (0, 0)
        } else {
            procs::kill_all()
        }
    } else {
        procs::kill_session(pid, HOST_KILL_LIMIT)
    }
}

/// Kills the command `pid` and, when confined, every other process but
/// the supervisor (of any uid: the command may have run as another user
/// than the sandbox's, or started a setuid program); unconfined, its
/// session.
fn kill(shared: &Shared, pid: i32) -> (u32, u32) {
    if shared.who.confined {
        procs::kill_all()
    } else {
        let (_, stuck) = procs::kill_session(pid, Duration::from_secs(2));
        (0, stuck)
    }
}

fn wait_exit(rx: &Receiver<Event>, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Exited(s)) => return Some(s),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes the chunks runner sends to the command's stdin, answering each
/// (written, or dropped once the command stopped reading).
fn feed_stdin(
    shared: &Arc<Shared>,
    id: u64,
    w: OwnedFd,
    frx: Receiver<Vec<u8>>,
) -> std::io::Result<()> {
    let s = shared.clone();
    std::thread::Builder::new().spawn(move || {
        use std::io::Write;
        let mut w = std::fs::File::from(w);
        let mut broken = false;
        while let Ok(chunk) = frx.recv() {
            if !broken && w.write_all(&chunk).is_err() {
                broken = true;
            }
            if s.out.send(&Reply::Written { id }, b"").is_err() {
                break;
            }
        }
    })?;
    Ok(())
}

/// Frames the command's output as it comes, until every writer is gone.
fn pump(
    shared: &Arc<Shared>,
    id: u64,
    r: OwnedFd,
    tx: Sender<Event>,
    done: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let s = shared.clone();
    std::thread::Builder::new().spawn(move || {
        let mut f = std::fs::File::from(r);
        let mut buf = vec![0u8; CHUNK];
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // Checked under the stream's lock: once the exit is
                    // sent, nothing of this command follows it.
                    if s.out
                        .send_unless(&done, &Reply::Output { id }, &buf[..n])
                        .is_err()
                    {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(Event::OutputClosed);
    })?;
    Ok(())
}

/// Collects the state descriptor, at most `max` bytes (more: `None`).
fn read_state(r: OwnedFd, max: u64, end: Option<String>, tx: Sender<Event>) -> std::io::Result<()> {
    std::thread::Builder::new().spawn(move || {
        let mut f = std::fs::File::from(r);
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        let mut over = false;
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if u64::try_from(out.len() + n).unwrap_or(u64::MAX) > max {
                        over = true;
                    } else {
                        out.extend_from_slice(&buf[..n]);
                        if end.as_ref().is_some_and(|e| out.ends_with(e.as_bytes())) {
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(Event::State((!over).then_some(out)));
    })?;
    Ok(())
}
