//! The local executor: a child process on the host, in its own session and
//! process group.
//!
//! This is not a sandbox: a command can read and write anything the runner
//! can. What it guarantees is the exec contract: a clean environment (no API
//! keys), bounded output memory, and that nothing the command started in its
//! session outlives the call (unless `keep_background`); the model is told
//! when background processes were killed. A process that starts a session of
//! its own (`setsid`, a daemon) escapes that last guarantee, though it cannot
//! make the call hang; use the docker executor for untrusted work.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getsid};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout_at};

use super::backend::{Backend, Capabilities, ImageSource, Network, SandboxSpec, Seeded};
use super::capture::Capture;
use super::shell::{MAX_STATE_BYTES, STATE_END, STATE_FD, ShellMode, ShellSession};
use super::{ExecError, ExecOutput, ExecRequest, Executor, background_killed_note};
use crate::redact::Redactor;

pub use super::ENV_ALLOWLIST;

/// After the main process exits, how long background children may keep the
/// output pipe open before the group is killed anyway.
pub const EXIT_GRACE: Duration = Duration::from_millis(150);

/// After a kill, how long we wait for the output to drain and the group to
/// vanish. Bounded because a process outside the session (`setsid`) may hold
/// the pipe forever; waiting for EOF alone could hang the run.
pub const DRAIN_BOUND: Duration = Duration::from_millis(200);

/// Read size from the output pipe (a Linux pipe holds 64 KiB by default).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How to build a [`LocalExecutor`].
#[derive(Debug, Clone, Default)]
pub struct LocalConfig {
    /// Where commands start (the run's workspace).
    pub workdir: PathBuf,
    /// Extra variables (`--env K=V`), set after the allowlisted ones and
    /// overriding them.
    pub env: Vec<(String, String)>,
    /// Leave what a command started in the background running after it
    /// exits (until shutdown); by default it is killed and the model told.
    pub keep_background: bool,
    /// Whether `cd` and exported variables carry over between commands.
    pub shell: ShellMode,
}

/// Runs each command as `bash -c` (or `sh -c`) on the host.
#[derive(Debug)]
pub struct LocalExecutor {
    workdir: PathBuf,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    redactor: Redactor,
    keep_background: bool,
    /// Sessions (= process groups) of commands still running, for `shutdown`.
    live: Arc<Mutex<HashSet<i32>>>,
    /// The persistent shell's state; `None` with `--shell fresh`.
    session: Option<ShellSession>,
    closed: AtomicBool,
    /// Where the sandbox's absolute paths (a task's /tests, /logs) live
    /// on the host, removed with the executor; `None`: they are refused.
    root: Option<(tempfile::TempDir, PathBuf)>,
}

/// Bytes of the regular files under `dir`, links not followed.
fn tree_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = std::fs::symlink_metadata(entry.path())?;
        total = total.saturating_add(if meta.is_dir() {
            tree_bytes(&entry.path())?
        } else if meta.is_file() {
            meta.len()
        } else {
            0
        });
    }
    Ok(total)
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, ExecError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ExecError::Spawn(format!("{what}: {e}")))?
        .map_err(ExecError::Io)
}

/// The variable naming [`LocalExecutor`]'s root to commands, so a script
/// can write `${RUNNER_SANDBOX_ROOT:-}/logs/...` on any backend.
pub const SANDBOX_ROOT_ENV: &str = "RUNNER_SANDBOX_ROOT";

impl LocalExecutor {
    /// Builds the child environment from the runner's and picks the shell
    /// once. HOME stays the host's (tools like git read their config from
    /// it); the workdir is only the starting directory.
    pub fn new(config: LocalConfig) -> LocalExecutor {
        let env = child_env(std::env::vars_os(), &config.env);
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let session = (config.shell == ShellMode::Persistent)
            .then(|| ShellSession::new(config.workdir.display().to_string()));
        LocalExecutor {
            workdir: config.workdir,
            shell: find_shell(path),
            env,
            redactor: Redactor::default(),
            keep_background: config.keep_background,
            live: Arc::default(),
            session,
            closed: AtomicBool::new(false),
            root: None,
        }
    }

    /// `path` (relative ones from the workdir) when it lies in the workdir
    /// or the sandbox's root: host paths are the host's, so an absolute
    /// one elsewhere (a task's /tests) would land in the host's root.
    fn contained(&self, path: &str) -> Result<PathBuf, ExecError> {
        // `..` is refused outright: the containment check below resolves
        // only what exists, so `missing/../../x` would pass it.
        if Path::new(path)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(ExecError::Unsupported(
                "reach files through `..` (commands run on this host)",
            ));
        }
        let p = self.workdir.join(path);
        let in_root = self
            .root
            .as_ref()
            .is_some_and(|(_, r)| crate::workspace::is_inside(&p, r));
        if in_root || crate::workspace::is_inside(&p, &self.workdir) {
            Ok(p)
        } else {
            Err(ExecError::Unsupported(
                "reach files outside its working directory (commands run on this host)",
            ))
        }
    }

    /// Gives the sandbox a root of its own: a new directory under which
    /// the absolute paths tasks name (/tests, /logs, /solution) are
    /// mapped (see [`Executor::path`]), named to commands by
    /// `RUNNER_SANDBOX_ROOT`. The host's own root is never written.
    pub fn with_root(mut self) -> io::Result<LocalExecutor> {
        let root = super::temp_dirs::create(super::temp_dirs::LOCAL_ROOT_PREFIX)?;
        // Resolved (TMPDIR may be a link), so `readlink -f` of a path under
        // it starts with exactly what `path` hands out.
        let real = root.path().canonicalize()?;
        self.env.retain(|(k, _)| k != SANDBOX_ROOT_ENV);
        self.env
            .push((SANDBOX_ROOT_ENV.into(), real.as_os_str().to_os_string()));
        self.root = Some((root, real));
        Ok(self)
    }

    /// Redacts these secrets from every command's output (the returned
    /// text and the full-output file), while it streams.
    pub fn with_redactor(mut self, redactor: Redactor) -> LocalExecutor {
        self.redactor = redactor;
        self
    }

    /// The shell commands run under (an absolute path to bash or sh).
    pub fn shell(&self) -> &Path {
        &self.shell
    }

    /// The complete environment a command receives.
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// With `--shell persistent`, the refusal when the shell found is not
    /// bash (the wrapper needs it).
    pub fn check_shell(&self) -> Result<(), ExecError> {
        if self.session.is_some() && self.shell.file_name() != Some(OsStr::new("bash")) {
            return Err(ExecError::ShellUnavailable {
                place: "this host's PATH",
                detail: format!("the only shell found is {}", self.shell.display()),
            });
        }
        Ok(())
    }

    fn spawn(&self, command: &str) -> Result<Spawned, ExecError> {
        let spawn_err = |what: &str, e: io::Error| {
            ExecError::Spawn(format!(
                "{what} for `{} -c` in {}: {e}",
                self.shell.display(),
                self.workdir.display()
            ))
        };
        // One pipe for both streams keeps stdout and stderr in write order.
        let (reader, writer) = io::pipe().map_err(|e| spawn_err("creating the output pipe", e))?;
        let writer2 = writer
            .try_clone()
            .map_err(|e| spawn_err("duplicating the output pipe", e))?;
        let mut cmd = Command::new(&self.shell);
        cmd.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer2);
        let mut state_writer = None;
        let mut state = None;
        match &self.session {
            None => {
                cmd.arg("-c").arg(command).current_dir(&self.workdir);
            }
            Some(session) => {
                // argv[0] is "bash": ours is the one found on PATH.
                let prepared = session.prepare(command);
                // `prepared.cwd` is the workdir, as a string: the path
                // itself is exact.
                cmd.args(prepared.argv.iter().skip(1))
                    .current_dir(&self.workdir)
                    .envs(prepared.env);
                let (r, w) = io::pipe().map_err(|e| spawn_err("creating the state pipe", e))?;
                let fd = w.as_raw_fd();
                // SAFETY: only async-signal-safe calls (fcntl, dup2) on
                // descriptors the child owns; nothing of the parent's
                // memory is touched.
                unsafe {
                    cmd.pre_exec(move || give_state_fd(fd));
                }
                state_writer = Some(w);
                state = Some(r);
            }
        }
        // A new session (hence a new process group) per command: the kill
        // reaches background jobs even when they get their own group
        // (`set -m`), and the command has no controlling terminal to read the
        // user's keystrokes from. `setsid` also does what `process_group(0)`
        // would (and fails if combined with it).
        // SAFETY: `setsid` is async-signal-safe and touches no parent memory.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
        }
        let child = cmd.spawn().map_err(|e| spawn_err("starting", e))?;
        // Our copies of the write ends live in `cmd` (and `state_writer`);
        // drop them now or the pipes never reach EOF.
        drop(cmd);
        drop(state_writer);
        Ok(Spawned {
            output: reader,
            child,
            state,
        })
    }
}

/// A started command: the read end of its output, the shell, and the read
/// end of its state pipe (persistent shell).
struct Spawned {
    output: io::PipeReader,
    child: Child,
    state: Option<io::PipeReader>,
}

/// In the child, before exec: the state pipe's write end `fd` becomes
/// [`STATE_FD`], open across exec. `dup2` onto itself would leave
/// close-on-exec set, hence the flag is cleared when it already is 3.
/// Whatever the child had at 3 before is close-on-exec (every descriptor
/// runner opens is), so replacing it loses nothing the command needs; the
/// pipes are made before the spawn, so std's own exec-error pipe is never
/// the one at 3 (were 3 free, one of ours would have taken it).
fn give_state_fd(fd: std::os::fd::RawFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
    // SAFETY: `fd` is open in the child (inherited from the parent, which
    // keeps it open until the spawn returns).
    let source = unsafe { BorrowedFd::borrow_raw(fd) };
    if fd == STATE_FD {
        fcntl(source, FcntlArg::F_SETFD(FdFlag::empty()))?;
        return Ok(());
    }
    // SAFETY: the target number is only handed to dup2 and never closed
    // (ManuallyDrop): it becomes the child's STATE_FD.
    let mut target = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(STATE_FD) });
    nix::unistd::dup2(source, &mut target)?;
    Ok(())
}

/// The child environment: allowlisted host variables, then `extra`.
fn child_env(
    host: impl Iterator<Item = (OsString, OsString)>,
    extra: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = host
        .filter(|(k, _)| ENV_ALLOWLIST.iter().any(|a| k == a))
        .collect();
    for (k, v) in extra {
        env.retain(|(old, _)| old != k.as_str());
        env.push((k.into(), v.into()));
    }
    env
}

/// First executable `bash` on `path`, else `sh`, else `/bin/sh`.
fn find_shell(path: Option<&OsStr>) -> PathBuf {
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for name in ["bash", "sh"] {
        for dir in &dirs {
            let candidate = dir.join(name);
            let executable = std::fs::metadata(&candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if executable {
                return candidate;
            }
        }
    }
    PathBuf::from("/bin/sh")
}

/// SIGKILLs everything one command started: its process group at once, then
/// any live process of its session that moved to another group (`set -m`
/// jobs). Returns whether such a live process was found.
fn kill_session(sid: i32) -> bool {
    match killpg(Pid::from_raw(sid), Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(sid, error = %e, "cannot kill process group"),
    }
    let members = live_session_members(sid);
    for &pid in &members {
        let _ = kill(pid, Signal::SIGKILL);
    }
    !members.is_empty()
}

/// Non-zombie processes of session `sid`. The pids come from `/proc`; the
/// session is asked with one `getsid` call per process, and only members
/// have their `stat` read (to leave out zombies), which keeps the scan cheap
/// on a busy host. Empty where there is no `/proc`.
fn live_session_members(sid: i32) -> Vec<Pid> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = nix::unistd::getpid().as_raw();
    procs
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            if pid == me || getsid(Some(Pid::from_raw(pid))).ok()?.as_raw() != sid {
                return None;
            }
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ...`; comm may hold spaces and parens, so
            // the state is read after the last ')'.
            let (_, rest) = stat.rsplit_once(')')?;
            let state = rest.split_whitespace().next()?;
            (!matches!(state, "Z" | "X")).then_some(Pid::from_raw(pid))
        })
        .collect()
}

/// Kills the command when dropped without `kill`: a cancelled `execute`
/// future (or an error path) must not leave it running.
struct SessionGuard {
    sid: i32,
    live: Arc<Mutex<HashSet<i32>>>,
    killed: bool,
}

impl SessionGuard {
    fn new(sid: i32, live: &Arc<Mutex<HashSet<i32>>>) -> SessionGuard {
        live.lock().unwrap_or_else(|e| e.into_inner()).insert(sid);
        SessionGuard {
            sid,
            live: Arc::clone(live),
            killed: false,
        }
    }

    fn kill(&mut self) {
        kill_session(self.sid);
        self.killed = true;
    }

    /// Leaves the session running (`keep_background`): only `shutdown`
    /// kills it then, so it stays registered.
    fn keep(mut self) {
        self.killed = true;
        self.sid = -1;
    }

    /// Kills again until no live process of the session is left (bounded),
    /// so that "returned" means "dead" for the caller and a process forked
    /// during the first kill is caught too. Killed orphans stay zombies until
    /// init reaps them, which can take a while; they count as gone.
    async fn wait_gone(&self, until: Instant) {
        while kill_session(self.sid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.sid < 0 {
            // Kept: stays in `live` for shutdown.
            return;
        }
        if !self.killed {
            kill_session(self.sid);
        }
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.sid);
    }
}

/// The read side of the output pipe, feeding a capture.
struct Pump {
    pipe: pipe::Receiver,
    buf: Vec<u8>,
    capture: Capture,
    eof: bool,
}

impl Pump {
    /// One read; cancel-safe (nothing is lost if dropped while waiting).
    async fn read_once(&mut self) -> Result<(), ExecError> {
        let n =
            self.pipe.read(&mut self.buf).await.map_err(|e| {
                io::Error::new(e.kind(), format!("reading the command's output: {e}"))
            })?;
        if n == 0 {
            self.eof = true;
        } else {
            self.capture.feed(&self.buf[..n])?;
        }
        Ok(())
    }

    /// Reads until EOF or `until`, whichever comes first.
    async fn drain(&mut self, until: Instant) -> Result<(), ExecError> {
        let to_eof = async {
            while !self.eof {
                self.read_once().await?;
            }
            Ok(())
        };
        timeout_at(until, to_eof).await.unwrap_or(Ok(()))
    }
}

/// The read side of the state pipe (persistent shell): the dump, bounded.
struct StatePump {
    pipe: pipe::Receiver,
    data: Vec<u8>,
    /// More than [`MAX_STATE_BYTES`] arrived: the rest was read and dropped
    /// (not left unread, which would block the shell writing it).
    overflow: bool,
    eof: bool,
}

impl StatePump {
    fn new(reader: io::PipeReader) -> Result<StatePump, ExecError> {
        let pipe = pipe::Receiver::from_owned_fd(reader.into())
            .map_err(|e| io::Error::new(e.kind(), format!("watching the state pipe: {e}")))?;
        Ok(StatePump {
            pipe,
            data: Vec::new(),
            overflow: false,
            eof: false,
        })
    }

    /// One read; cancel-safe.
    async fn read_once(&mut self) -> Result<(), ExecError> {
        let mut buf = [0u8; 16 * 1024];
        let n = self
            .pipe
            .read(&mut buf)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("reading the shell's state: {e}")))?;
        if n == 0 {
            self.eof = true;
        } else if self.data.len() + n > MAX_STATE_BYTES {
            self.overflow = true;
        } else {
            self.data.extend_from_slice(&buf[..n]);
        }
        Ok(())
    }

    /// Whether a whole dump has arrived (its end marker last): a process
    /// the command left running may hold the pipe, so EOF is not awaited.
    fn complete(&self) -> bool {
        let end = format!("\0{STATE_END}\0");
        self.data.ends_with(end.as_bytes())
    }

    /// Reads until EOF, a whole dump or `until`, whichever comes first.
    async fn drain(&mut self, until: Instant) -> Result<(), ExecError> {
        let to_end = async {
            while !self.eof && !self.complete() {
                self.read_once().await?;
            }
            Ok(())
        };
        timeout_at(until, to_end).await.unwrap_or(Ok(()))
    }
}

/// Reads the state pipe when there is one; never ready otherwise.
async fn read_state(state: &mut Option<StatePump>) -> Result<(), ExecError> {
    match state {
        Some(s) => s.read_once().await,
        None => std::future::pending().await,
    }
}

/// Takes the dump of a command that exited as the session's state (see
/// [`ShellSession::save`]).
fn save_state(session: &ShellSession, state: &StatePump) -> Option<String> {
    session.save(Some(&state.data), state.overflow)
}

/// Why the main phase of a command ended.
enum End {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

#[async_trait]
impl Executor for LocalExecutor {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn workdir(&self) -> String {
        self.workdir.display().to_string()
    }

    fn path(&self, path: &str) -> String {
        match &self.root {
            Some((_, root)) if path.starts_with('/') => root
                .join(path.trim_start_matches('/'))
                .display()
                .to_string(),
            _ => path.to_string(),
        }
    }

    /// Exit codes: the shell's own, or 128 + signal when the main process
    /// died of a signal we did not send (as bash reports it, and as docker
    /// does); `None` after a timeout or cancellation.
    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ExecError::Refused(
                "the local executor was shut down".into(),
            ));
        }
        let started = Instant::now();
        let mut capture = Capture::new(req.max_output_bytes).with_redactor(&self.redactor);
        if let Some(file) = &req.full_output {
            capture = capture.with_output_file(file)?;
        }
        self.check_shell()?;
        let Spawned {
            output: reader,
            mut child,
            state,
        } = self.spawn(&req.command)?;
        let mut state = state.map(StatePump::new).transpose()?;
        // The shell leads its own session and process group: sid = pgid = pid.
        let sid = child.id().and_then(|id| i32::try_from(id).ok());
        let Some(sid) = sid else {
            return Err(ExecError::Spawn("the shell has no process id".into()));
        };
        let mut group = SessionGuard::new(sid, &self.live);
        if self.closed.load(Ordering::SeqCst) {
            // `shutdown` ran between our check and the registration above.
            group.kill();
        }
        let pipe = pipe::Receiver::from_owned_fd(reader.into())
            .map_err(|e| io::Error::new(e.kind(), format!("watching the output pipe: {e}")))?;
        let mut pump = Pump {
            pipe,
            buf: vec![0; READ_CHUNK_BYTES],
            capture,
            eof: false,
        };

        // Timeout, cancellation and exit race in one select; output is read
        // all along so a chatty command never blocks on a full pipe.
        let deadline = tokio::time::sleep(req.timeout);
        tokio::pin!(deadline);
        let end = loop {
            tokio::select! {
                biased;
                () = req.cancel.cancelled() => break End::Cancelled,
                status = child.wait() => break End::Exited(status.map_err(|e| {
                    io::Error::new(e.kind(), format!("waiting for the shell: {e}"))
                })?),
                () = &mut deadline => break End::TimedOut,
                // The state before the output: a flood of output (from a
                // background job) must not starve a dump bigger than the
                // pipe, or the shell would block writing it.
                read = read_state(&mut state), if state.as_ref().is_some_and(|s| !s.eof) => read?,
                read = pump.read_once(), if !pump.eof => read?,
            }
        };

        let exited = matches!(end, End::Exited(_));
        if exited {
            // Let output still in flight arrive; a background child holding
            // the pipe only gets this long before it is killed with the rest.
            pump.drain(Instant::now() + EXIT_GRACE).await?;
        }
        // The shell is gone: whatever of its session still runs, it left
        // in the background. One signal-0 probe of its process group keeps
        // the common case to a syscall; only then is /proc scanned to count
        // (jobs that moved to a group of their own are killed all the same,
        // just not counted).
        let left = if exited && killpg(Pid::from_raw(sid), None).is_ok() {
            live_session_members(sid).len()
        } else {
            0
        };
        let keep = exited && self.keep_background && !self.closed.load(Ordering::SeqCst);
        let until = Instant::now() + DRAIN_BOUND;
        if keep {
            pump.drain(until).await?;
            group.keep();
        } else {
            group.kill();
            if !exited {
                // Reap the shell; bounded in case the kill cannot land (D
                // state), then tokio's orphan reaper takes over.
                let _ = timeout_at(until, child.wait()).await;
            }
            pump.drain(until).await?;
            group.wait_gone(until).await;
        }
        let state_note = match (&self.session, state.as_mut()) {
            (Some(session), Some(state)) if exited => {
                state.drain(until).await?;
                save_state(session, state)
            }
            // Killed (timeout, Ctrl-C): no dump; the state stays as it was.
            _ => None,
        };

        let shut_down = self.closed.load(Ordering::SeqCst);
        let (exit_code, timed_out, cancelled) = match end {
            // Killed by `shutdown` rather than dying on its own.
            End::Exited(status) if shut_down && status.signal().is_some() => (None, false, true),
            End::Exited(status) => (
                status.code().or(status.signal().map(|s| 128 + s)),
                false,
                false,
            ),
            End::TimedOut => (None, true, false),
            End::Cancelled => (None, false, true),
        };
        let (mut output, bytes_seen) = pump.capture.finish()?;
        if left > 0 && !keep {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&background_killed_note(crate::convert::u32_from_usize(
                left,
            )));
            output.push('\n');
        }
        if let Some(note) = state_note {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&note);
            output.push('\n');
        }
        Ok(ExecOutput {
            output,
            exit_code,
            timed_out,
            cancelled,
            oom_killed: false,
            bytes_seen,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// `dest` is a path on this host (relative ones are taken from the
    /// workdir).
    async fn upload_dir(&self, host: &Path, dest: &str) -> Result<(), ExecError> {
        let dest = self.contained(dest)?;
        let host = host.to_path_buf();
        blocking("copying files", move || {
            std::fs::create_dir_all(&dest)?;
            super::tree::copy_tree(&host, &dest, None).map(|_| ())
        })
        .await
    }

    async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ExecError> {
        let path = self.contained(path)?;
        let shown = path.display().to_string();
        let data = blocking("reading a file", move || {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            // O_NONBLOCK: a FIFO planted at the path must not hang the open.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits(),
                )
                .open(&path)?;
            if !f.metadata()?.is_file() {
                return Err(io::Error::other("not a regular file"));
            }
            let mut data = Vec::new();
            f.take(max_bytes.saturating_add(1)).read_to_end(&mut data)?;
            Ok(data)
        })
        .await?;
        if u64::try_from(data.len()).unwrap_or(u64::MAX) > max_bytes {
            return Err(ExecError::Refused(format!(
                "cannot read '{shown}': larger than {max_bytes} bytes"
            )));
        }
        Ok(data)
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<(), ExecError> {
        let path = self.contained(path)?;
        let data = data.to_vec();
        blocking("writing a file", move || {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .open(&path)?;
            f.write_all(&data)
        })
        .await
    }

    async fn download_dir(&self, src: &str, host: &Path, max_bytes: u64) -> Result<(), ExecError> {
        let src = self.contained(src)?;
        let host = host.to_path_buf();
        let report = blocking("copying files", move || {
            let size = tree_bytes(&src)?;
            if size > max_bytes {
                return Err(io::Error::other(format!(
                    "{} holds {size} bytes, more than the {max_bytes} allowed",
                    src.display()
                )));
            }
            super::tree::copy_tree(&src, &host, None)
        })
        .await?;
        if !report.skipped.is_empty() {
            tracing::warn!(skipped = ?report.skipped, "entries not copied (special files)");
        }
        Ok(())
    }

    async fn restart_shell(&self) -> Result<(), ExecError> {
        if let Some(session) = &self.session {
            session.restart();
        }
        Ok(())
    }

    async fn shutdown(&self) -> Result<(), ExecError> {
        self.closed.store(true, Ordering::SeqCst);
        let groups: Vec<i32> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        for sid in groups {
            kill_session(sid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

/// The local backend: commands run on this host, in the workspace. It has
/// no images: an image name is only recorded, and seeding leaves the
/// workspace as it is. NOT a sandbox (see the module comment); eval on it
/// is for tests of the sandbox seam.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalBackend;

#[async_trait]
impl Backend for LocalBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "local",
            isolated: false,
            networks: vec![Network::Bridge],
            images: false,
        }
    }

    async fn prepare_image(&self, source: ImageSource<'_>) -> Result<String, ExecError> {
        match source {
            ImageSource::Named(name) => Ok(name.to_string()),
            ImageSource::Build { .. } => Err(ExecError::Unsupported("build images")),
        }
    }

    async fn seed(&self, _image: &str, host: &Path, _run_id: &str) -> Result<Seeded, ExecError> {
        Ok(Seeded {
            workdir: host.display().to_string(),
            skipped: 0,
            image_user: None,
            passwd: None,
            group: None,
        })
    }

    async fn start(&self, spec: SandboxSpec) -> Result<Arc<dyn Executor>, ExecError> {
        // Host processes reach whatever the host reaches: no list of
        // names can be held to.
        if spec.network == Network::Allowlist {
            return Err(ExecError::AllowlistUnsupported { backend: "local" });
        }
        let workdir = match (&spec.workdir, &spec.workspace) {
            (Some(w), _) => PathBuf::from(w),
            (None, Some(ws)) => ws.host.clone(),
            (None, None) => std::env::current_dir()?,
        };
        let executor = LocalExecutor::new(LocalConfig {
            workdir,
            env: spec.env.clone(),
            keep_background: spec.keep_background,
            shell: spec.shell,
        })
        .with_redactor(spec.redactor.clone())
        .with_root()?;
        executor.check_shell()?;
        Ok(Arc::new(executor))
    }
}
