//! The executor seam: where a `bash` tool call actually runs. The loop only
//! knows this trait; `local` runs a child process on the host, `docker` a
//! hardened container per run.

pub mod accounts;
pub mod backend;
pub mod capture;
pub mod disk;
pub mod docker;
pub mod egress;
pub mod host_dirs;
pub mod liveness;
pub mod local;
pub mod nosuid;
pub mod seccomp;
pub mod shell;
pub mod strip;
pub mod supervisor;
pub mod temp_dirs;
pub mod tree;

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::hostfs::OutputFile;

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Shell text, run as `bash -c COMMAND` (or `sh -c` without bash);
    /// with `--shell persistent`, through [`shell::WRAPPER`].
    pub command: String,
    /// Hard limit on the command's wall time; every process it started is
    /// killed when it passes.
    pub timeout: Duration,
    /// How many bytes of output to keep in memory for the result
    /// (head + tail); the rest is counted, not kept.
    pub max_output_bytes: usize,
    /// When set, the whole output (stdout and stderr interleaved) is also
    /// streamed to this new file of the run directory, up to
    /// `capture::MAX_FULL_OUTPUT_BYTES` and the run's output budget.
    pub full_output: Option<OutputFile>,
    /// Cancelled on Ctrl-C: kill the command and return promptly.
    pub cancel: CancellationToken,
}

/// What a finished (or killed) command produced.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ExecOutput {
    /// stdout and stderr interleaved, head + tail with a marker stating how
    /// many bytes were left out; non-UTF-8 decoded lossily; the executor's
    /// secrets redacted.
    pub output: String,
    /// Exit code; `None` when killed by a signal or a timeout.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Killed because Ctrl-C was pressed.
    pub cancelled: bool,
    /// Killed by the memory limit (docker only).
    pub oom_killed: bool,
    /// Every byte the command wrote, kept or not.
    pub bytes_seen: u64,
    pub duration_ms: u64,
}

/// A process running in a sandbox (see [`Executor::processes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    /// Its pid, as the sandbox numbers them.
    pub pid: u32,
    /// Its real uid.
    pub uid: u32,
    /// Its command line: arguments joined by spaces, `\` and every byte
    /// outside printable ASCII as `\xNN`, cut at about 200 characters with
    /// `...`; `[name]` when it has none. The sandbox chose it: a signal to
    /// show, never to trust.
    pub cmdline: String,
}

/// Errors of the executor layer: the sandbox itself failed, not the command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start the command: {0}")]
    Spawn(String),
    #[error("I/O error while running the command: {0}")]
    Io(#[from] std::io::Error),
    /// The backend's engine cannot be reached; `engine` names it
    /// ("Docker") and `hint` says how to bring it up.
    #[error("{engine} is not reachable: {detail}")]
    EngineUnavailable {
        engine: &'static str,
        detail: String,
        hint: String,
    },
    #[error("{engine} error during {op}: {detail}")]
    Engine {
        engine: &'static str,
        op: &'static str,
        detail: String,
    },
    #[error("{engine} did not answer within {secs}s during {op}")]
    EngineTimeout {
        engine: &'static str,
        op: &'static str,
        secs: u64,
    },
    #[error("image '{image}' is not available: {detail}")]
    ImageUnavailable { image: String, detail: String },
    #[error("the sandbox died: {detail}")]
    SandboxDied { detail: String },
    /// The command's processes could not be killed (or could not be
    /// verified gone): the sandbox cannot be trusted with another command.
    #[error("the sandbox cannot be recovered: {detail}")]
    Unrecoverable { detail: String },
    #[error("refused: {0}")]
    Refused(String),
    /// With userns-remap, a workspace bound as it is (`--disk unlimited`)
    /// whose owner is outside the engine's remapped range.
    #[error(
        "the engine remaps users (userns-remap) from {base_uid}:{base_gid}: the sandbox cannot own the workspace {path} (owned by {uid}:{gid}, outside that range)"
    )]
    RemappedWorkspace {
        path: String,
        uid: u32,
        gid: u32,
        base_uid: u32,
        base_gid: u32,
    },
    #[error("workspace: {0}")]
    Workspace(String),
    #[error("this sandbox cannot {0}")]
    Unsupported(&'static str),
    /// `--shell persistent` needs bash in the sandbox (see [`shell`]).
    #[error("--shell persistent needs bash, which {place} does not have: {detail}")]
    ShellUnavailable { place: &'static str, detail: String },
    #[error("the container runtime '{runtime}' is not registered with the engine (registered: {})", registered.join(", "))]
    RuntimeUnavailable {
        runtime: String,
        registered: Vec<String>,
        hint: String,
    },
    #[error(
        "the container runtime '{runtime}' cannot give the sandbox a network: the engine starts it with '{args}'"
    )]
    RuntimeWithoutNetwork {
        runtime: String,
        args: String,
        hint: String,
    },
    /// An egress allowlist needs the filtering proxy's image, which is
    /// built locally and never pulled.
    #[error("the egress proxy's image '{image}' is not on the engine")]
    ProxyImageMissing { image: String },
    /// The network an allowlisted sandbox's proxy was to reach out through.
    #[error("cannot use egress network '{network}': {detail}")]
    EgressNetwork { network: String, detail: String },
    /// This backend cannot filter a sandbox's egress by host name.
    #[error("the {backend} executor cannot limit a sandbox's network to allowed hosts")]
    AllowlistUnsupported { backend: &'static str },
}

impl ExecError {
    /// Whether the sandbox can still run commands after this error: only
    /// a command that could not start (or a refused request) leaves it
    /// usable; an engine or host failure, a dead or unrecoverable sandbox
    /// ends the run.
    pub fn sandbox_usable(&self) -> bool {
        matches!(self, ExecError::Spawn(_) | ExecError::Unsupported(_))
    }

    /// True when no further command can run (see [`Self::sandbox_usable`]).
    pub fn is_fatal(&self) -> bool {
        !self.sandbox_usable()
    }

    /// What the user can do about it, when that is known.
    pub fn hint(&self) -> Option<String> {
        match self {
            ExecError::EngineUnavailable { hint, .. }
            | ExecError::RuntimeUnavailable { hint, .. }
            | ExecError::RuntimeWithoutNetwork { hint, .. } => Some(hint.clone()),
            ExecError::ProxyImageMissing { .. } => Some(
                "build it with `make sandbox-image` (or `sudo bash sandbox/build-proxy.sh`)"
                    .to_string(),
            ),
            ExecError::EgressNetwork { .. } => Some(
                "give --egress-network the name of an existing, non-internal network \
                 (`docker network ls`), or leave it out to use the engine's bridge"
                    .to_string(),
            ),
            ExecError::AllowlistUnsupported { .. } => Some(
                "use --executor docker for --allow-host (or a task's network_mode = \"allowlist\")"
                    .to_string(),
            ),
            ExecError::ImageUnavailable { image, .. } => Some(image_hint(image)),
            // Giving the directory to the range is no way out: a directory
            // not owned by the person running runner is refused (workspace.rs).
            ExecError::RemappedWorkspace { .. } => Some(
                "drop --disk unlimited: runner then copies the workspace onto a disk the sandbox \
                 owns and gives the work back as your files"
                    .to_string(),
            ),
            ExecError::ShellUnavailable { .. } => Some(
                "run with --shell fresh, or use an image (or a PATH) that has bash".to_string(),
            ),
            _ => None,
        }
    }
}

/// How to make `image` available to the engine: runner's own images are
/// built from its checkout; any other comes from a registry, a saved
/// archive or a Dockerfile (`make sandbox-image` builds none of those).
pub fn image_hint(image: &str) -> String {
    if image.starts_with("runner-sandbox:") {
        return format!(
            "build {image} with `make sandbox-image` in runner's checkout (from Debian packages; no registry needed)"
        );
    }
    format!(
        "make it available to this engine: `docker pull {image}` where a registry is reachable, \
         `docker load -i FILE.tar` for a saved image, or `docker build -t {image} DIR`"
    )
}

/// Variables of the runner's environment a command may see; everything else
/// (API keys above all) is dropped.
pub const ENV_ALLOWLIST: [&str; 4] = ["PATH", "HOME", "LANG", "TERM"];

/// What the model is told when processes a command left running in the
/// background were killed as it ended (`n` of them).
pub fn background_killed_note(n: u32) -> String {
    let (them, were) = if n == 1 {
        ("1 background process", "was")
    } else {
        (&*format!("{n} background processes"), "were")
    };
    format!(
        "[the command exited; {them} it left running {were} killed \
         (each command's processes end with it)]"
    )
}

/// How one path of a sandbox's filesystem differs from its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One path the sandbox changed, as the engine's diff of its filesystem
/// against the image lists it (mounts such as the workspace are not in it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FsChange {
    pub kind: ChangeKind,
    /// Absolute path in the sandbox.
    pub path: String,
}

/// Most entries of a filesystem diff kept in memory (see [`FsChanges`]).
pub const MAX_FS_CHANGES: usize = 100_000;

/// A sandbox's filesystem changes, at most [`MAX_FS_CHANGES`] of them;
/// derefs to the kept list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FsChanges {
    /// The changes kept, in the engine's order.
    pub changes: Vec<FsChange>,
    /// How many more the engine listed past the cap (0: the list is whole).
    pub omitted: usize,
}

impl std::ops::Deref for FsChanges {
    type Target = [FsChange];
    fn deref(&self) -> &[FsChange] {
        &self.changes
    }
}

/// A sandbox: where tool calls run. The loop and eval know only this (and
/// [`backend::Backend`], which starts one).
#[async_trait]
pub trait Executor: Send + Sync {
    /// Short name for messages and the trajectory ("local", "docker").
    fn kind(&self) -> &'static str;

    /// The working directory commands start in, as the command sees it.
    fn workdir(&self) -> String;

    /// Where the absolute sandbox path `path` (as tasks name them:
    /// /tests, /logs, /solution) is, as commands in this sandbox name it:
    /// itself in a sandbox with a filesystem of its own; under a
    /// directory of the sandbox's for a backend whose commands see the
    /// host's (so nothing lands in the host's root).
    fn path(&self, path: &str) -> String {
        path.to_string()
    }

    /// Runs one command to completion, timeout or cancellation. With
    /// `--shell persistent` the command starts from the working directory
    /// and exported variables the calls before it left (see [`shell`]).
    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError>;

    /// Runs one command as `user` (`(uid, gid)`, root included) rather
    /// than the sandbox's user, with no capabilities and no supplementary
    /// group but `gid`, otherwise as [`Executor::execute`] does: the same
    /// environment (HOME included: set another in the command if it
    /// matters), workdir, limits and timeout, and at its end, timeout or
    /// cancellation what it left running is killed, whatever uid it runs
    /// as (kept only when the sandbox keeps background work, as for any
    /// command). With `--shell persistent` it is a fresh command: it
    /// neither sees nor changes the shell's state. A backend that cannot
    /// switch users refuses, as this default does.
    async fn execute_as(
        &self,
        user: (u32, u32),
        req: ExecRequest,
    ) -> Result<ExecOutput, ExecError> {
        let _ = (user, req);
        Err(ExecError::Unsupported("run a command as another user"))
    }

    /// The sandbox's last command (a verifier's test.sh): runs `req` as
    /// `user` like [`Executor::execute_as`]; with `switch_user` it keeps
    /// CAP_SETUID and CAP_SETGID, so it can run code as yet another user
    /// (`setpriv`), and root's file capabilities under the ceiling (CHOWN,
    /// DAC_OVERRIDE, FOWNER, FSETID; never DAC_READ_SEARCH, see
    /// `docker::CAPABILITY_CEILING`); never CAP_KILL.
    /// When it exits, every other process in the sandbox is killed by the
    /// sandbox itself before the exit is reported, so nothing it or the
    /// agent left running can write anything afterwards. The default runs
    /// it, then [`Executor::kill_all`].
    async fn execute_final(
        &self,
        user: (u32, u32),
        switch_user: bool,
        req: ExecRequest,
    ) -> Result<ExecOutput, ExecError> {
        let _ = switch_user;
        let out = match self.execute_as(user, req.clone()).await {
            Err(ExecError::Unsupported(_)) => self.execute(req).await?,
            r => r?,
        };
        match self.kill_all().await {
            Ok(()) | Err(ExecError::Unsupported(_)) => Ok(out),
            Err(e) => Err(e),
        }
    }

    /// Kills every process in the sandbox (the sandbox user's, root's,
    /// any uid's) except runner's own supervisor, and returns once they
    /// are gone (a bounded wait; processes that survive it make the
    /// sandbox unrecoverable). The sandbox still runs commands after it.
    async fn kill_all(&self) -> Result<(), ExecError> {
        Err(ExecError::Unsupported("kill every process it runs"))
    }

    /// The processes running in the sandbox, read from `/proc` by runner's
    /// own helper (never the sandbox's `ps`), without runner's supervisor
    /// and the helper itself; zombies are left out.
    async fn processes(&self) -> Result<Vec<ProcessInfo>, ExecError> {
        Err(ExecError::Unsupported("list its processes"))
    }

    /// Drops the persistent shell's state: the next command starts in the
    /// workdir with the sandbox's environment, as the first one did (the
    /// `restart` of Anthropic's bash tool). With `--shell fresh` there is
    /// nothing to drop and it succeeds; a backend that cannot keep a
    /// persistent shell refuses it, as this default does.
    async fn restart_shell(&self) -> Result<(), ExecError> {
        Err(ExecError::Unsupported("restart a persistent shell"))
    }

    /// What confines commands, as read from the engine and the sandbox
    /// (recorded in `run_started`); `None` when nothing does.
    fn sandbox_security(&self) -> Option<serde_json::Value> {
        None
    }

    /// Every way this sandbox is weaker than the default one, one line
    /// each, as it was actually started (recorded in `run_started`).
    fn loosenings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Copies the content of the host directory `host` into the directory
    /// `dest` of the sandbox (made when missing), links kept as links and
    /// never followed, owned by the sandbox's user.
    async fn upload_dir(&self, host: &std::path::Path, dest: &str) -> Result<(), ExecError>;

    /// [`Executor::upload_dir`], but owned by root and made as root (a
    /// task's /tests and /solution, which the agent's user must not be
    /// able to change); a backend without users uploads as its only one.
    async fn upload_dir_as_root(
        &self,
        host: &std::path::Path,
        dest: &str,
    ) -> Result<(), ExecError> {
        self.upload_dir(host, dest).await
    }

    /// The content of the regular file `path` in the sandbox, at most
    /// `max_bytes`: a bigger file is refused, never cut.
    async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ExecError>;

    /// Writes `data` as the file `path` in the sandbox (its directory made
    /// when missing), owned by the sandbox's user.
    async fn write_file(&self, path: &str, data: &[u8]) -> Result<(), ExecError>;

    /// Copies the sandbox's directory `src` into the empty host directory
    /// `host`, at most `max_bytes`: links stay links and nothing the
    /// sandbox made is followed on the host.
    async fn download_dir(
        &self,
        src: &str,
        host: &std::path::Path,
        max_bytes: u64,
    ) -> Result<(), ExecError>;

    /// What the sandbox changed in its filesystem compared with its image
    /// (tamper evidence for grading), bounded by [`MAX_FS_CHANGES`].
    async fn changes(&self) -> Result<FsChanges, ExecError> {
        Err(ExecError::Unsupported(
            "list the sandbox's filesystem changes",
        ))
    }

    /// Saves the sandbox's filesystem (without its mounts: the workspace
    /// is not in it) as an image a new sandbox can start from; returns its
    /// reference. Nothing of the sandbox's processes is in it. The caller
    /// removes it with [`backend::Backend::remove_image`].
    async fn snapshot(&self) -> Result<String, ExecError> {
        Err(ExecError::Unsupported("snapshot its filesystem"))
    }

    /// Releases everything the executor holds (containers, processes) and
    /// hands the workspace back. Idempotent; called on every exit path.
    async fn shutdown(&self) -> Result<(), ExecError>;

    /// Like [`Executor::shutdown`], but the sandbox's changes to the
    /// workspace are dropped (a verifier's). Idempotent.
    async fn discard(&self) -> Result<(), ExecError> {
        self.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_is_told_how_it_can_be_had() {
        let own = ExecError::ImageUnavailable {
            image: "runner-sandbox:bookworm".into(),
            detail: "gone".into(),
        };
        let own = own.hint().unwrap_or_default();
        assert!(own.contains("make sandbox-image"), "{own}");
        let theirs = ExecError::ImageUnavailable {
            image: "ubuntu".into(),
            detail: "gone".into(),
        };
        let theirs = theirs.hint().unwrap_or_default();
        assert!(
            theirs.contains("`docker pull ubuntu`")
                && theirs.contains("docker load -i")
                && theirs.contains("docker build -t ubuntu"),
            "{theirs}"
        );
        assert!(!theirs.contains("sandbox-image"), "{theirs}");
    }

    #[test]
    fn the_background_note_counts_in_the_right_number() {
        assert!(
            background_killed_note(1).contains("1 background process it left running was killed"),
            "{}",
            background_killed_note(1)
        );
        assert!(
            background_killed_note(3)
                .contains("3 background processes it left running were killed"),
            "{}",
            background_killed_note(3)
        );
    }
}
