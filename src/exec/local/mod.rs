//! The local executor: commands run on the host, through runner's own
//! supervisor (sandbox/supervisor) started as a child process in its
//! unconfined mode (see `host`), so the exec contract is the one the
//! docker backend has: each command in a session of its own, everything
//! it started killed at its end (unless `keep_background`) and the model
//! told, bounded drains, the persistent shell's state descriptor. What is
//! local stays here: the environment, the shell found on PATH, the
//! workdir and the path checks of file work.
//!
//! This is not a sandbox: a command can read and write anything the runner
//! can. What it guarantees is a clean environment (exactly the allowlisted
//! and configured variables: no API keys), bounded output memory, and that
//! nothing the command started in its session outlives the call. A
//! process that starts a session of its own (`setsid`, a daemon) escapes
//! that last guarantee, though it cannot make the call hang; use the
//! docker executor for untrusted work.

mod backend;
mod env;
mod files;
mod host;
mod run;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::shell::{ShellMode, ShellSession};
use super::supervisor::run as sup_run;
use super::{
    ExecError, ExecOutput, ExecRequest, Executor, Extras, Owner, SandboxInfo, ShellState, Work,
};
use crate::redact::Redactor;
pub use backend::LocalBackend;
use env::{child_env, find_shell};

pub use super::ENV_ALLOWLIST;

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
    /// What it is (its root included, once given one).
    info: SandboxInfo,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    redactor: Redactor,
    keep_background: bool,
    /// The supervisor, started by the first command.
    host: OnceCell<host::Host>,
    /// Cancellation of the commands still running, for `shutdown`.
    live: Mutex<HashMap<u64, CancellationToken>>,
    next: AtomicU64,
    /// The persistent shell's state; `None` with `--shell fresh`.
    session: Option<ShellSession>,
    closed: AtomicBool,
    /// Where the sandbox's absolute paths (a task's /tests, /logs) live
    /// on the host, removed with the executor; `None`: they are refused.
    root: Option<(tempfile::TempDir, PathBuf)>,
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
        let info = SandboxInfo {
            kind: "local",
            workdir: config.workdir.display().to_string(),
            ..SandboxInfo::default()
        };
        LocalExecutor {
            workdir: config.workdir,
            info,
            shell: find_shell(path),
            env,
            redactor: Redactor::default(),
            keep_background: config.keep_background,
            host: OnceCell::new(),
            live: Mutex::default(),
            next: AtomicU64::new(0),
            session,
            closed: AtomicBool::new(false),
            root: None,
        }
    }

    /// Gives the sandbox a root of its own: a new directory under which
    /// the absolute paths tasks name (/tests, /logs, /solution) are
    /// mapped (see [`SandboxInfo::path`]), named to commands by
    /// `RUNNER_SANDBOX_ROOT`. The host's own root is never written.
    pub fn with_root(mut self) -> io::Result<LocalExecutor> {
        let root = super::temp_dirs::create(super::temp_dirs::LOCAL_ROOT_PREFIX)?;
        // Resolved (TMPDIR may be a link), so `readlink -f` of a path under
        // it starts with exactly what `path` hands out.
        let real = root.path().canonicalize()?;
        self.env.retain(|(k, _)| k != SANDBOX_ROOT_ENV);
        self.env
            .push((SANDBOX_ROOT_ENV.into(), real.as_os_str().to_os_string()));
        self.info.root = Some(real.clone());
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

    fn contained(&self, path: &str) -> Result<PathBuf, ExecError> {
        let root = self.root.as_ref().map(|(_, r)| r.as_path());
        files::contained(&self.workdir, root, path)
    }
}

#[async_trait]
impl Executor for LocalExecutor {
    fn info(&self) -> &SandboxInfo {
        &self.info
    }

    fn extras(&self) -> Extras<'_> {
        Extras {
            shell: Some(self),
            ..Extras::default()
        }
    }

    /// Exit codes: the shell's own, or 128 + signal when the main process
    /// died of a signal we did not send (as bash reports it, and as docker
    /// does); `None` after a timeout, cancellation or shutdown.
    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.run(req).await
    }

    /// `dest` is a path on this host (relative ones are taken from the
    /// workdir); everything is runner's user's, whatever `owner` says.
    async fn upload(&self, host: &Path, dest: &str, _owner: Owner) -> Result<(), ExecError> {
        files::upload_dir(host, self.contained(dest)?).await
    }

    async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ExecError> {
        files::read_file(self.contained(path)?, max_bytes).await
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<(), ExecError> {
        files::write_file(self.contained(path)?, data).await
    }

    async fn download_dir(&self, src: &str, host: &Path, max_bytes: u64) -> Result<(), ExecError> {
        files::download_dir(self.contained(src)?, host, max_bytes).await
    }

    /// Kills the running commands (they report `cancelled`) and what
    /// earlier ones were allowed to leave running; the workspace is the
    /// host's directory, so there is nothing to drop.
    async fn close(&self, _work: Work) -> Result<(), ExecError> {
        self.closed.store(true, Ordering::SeqCst);
        for cancel in self.live.lock().unwrap_or_else(|e| e.into_inner()).values() {
            cancel.cancel();
        }
        if let Some(host) = self.host.get() {
            match sup_run::kill_all(&host.supervisor).await {
                Ok(Ok(_)) => {}
                Ok(Err(why)) => tracing::warn!("the local supervisor's kill: {why}"),
                // Its stream is gone, and with it the supervisor, which
                // kills what its commands left as it goes.
                Err(e) => tracing::debug!("the local supervisor is gone: {e}"),
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ShellState for LocalExecutor {
    async fn restart_shell(&self) -> Result<(), ExecError> {
        if let Some(session) = &self.session {
            session.restart();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
