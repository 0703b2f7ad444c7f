//! The executor seam: where a `bash` tool call actually runs. The loop
//! and eval know only [`Executor`] (a handful of operations: run a
//! command, files in and out, close) and the optional operations a
//! sandbox offers through [`Extras`] ([`Users`], [`Processes`],
//! [`ShellState`], [`FsChangesOf`], [`Snapshots`]), asked for before
//! use, never refused at run time. [`ExecError`] names no backend and
//! says whose doing it can be ([`ExecError::fault`]). Each backend lives
//! in a folder of its own (`local/`: host processes through runner's
//! supervisor; `docker/`: a hardened container per run); runner's table
//! of them is `runtime::backends`.

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

/// A process running in a sandbox (see [`Processes::processes`]).
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
    ImageUnavailable {
        image: String,
        detail: String,
        /// How it can be had, in the backend's words.
        hint: String,
    },
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
    /// A file path the sandbox's file work does not reach (a backend
    /// whose commands see the host's paths holds them to its workdir and
    /// root): the request is refused, the sandbox still usable.
    #[error("this sandbox cannot {0}")]
    PathOutside(&'static str),
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
    ProxyImageMissing { image: String, hint: String },
    /// The network an allowlisted sandbox's proxy was to reach out through.
    #[error("cannot use egress network '{network}': {detail}")]
    EgressNetwork {
        network: String,
        detail: String,
        hint: String,
    },
    /// This backend cannot filter a sandbox's egress by host name.
    #[error("the {backend} executor cannot limit a sandbox's network to allowed hosts")]
    NoAllowlist {
        backend: &'static str,
        hint: &'static str,
    },
    /// The backend cannot do what the task needs (build an image, run
    /// sidecars): said before anything starts, as the backend's
    /// [`backend::Capabilities`] tell.
    #[error("the {backend} executor cannot {what}")]
    Incapable {
        backend: &'static str,
        what: &'static str,
        hint: &'static str,
    },
}

/// Whose doing an [`ExecError`] can be, once the agent's files and
/// processes are in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The sandbox's content may have caused it (a sandbox the agent's
    /// code killed, content the sandbox refused to move, processes that
    /// would not die, an engine error while handling that content):
    /// counted against the agent, conservatively.
    Agent,
    /// What the task asks for is not to be had (its image, an allowlist
    /// or sidecars on a backend without them, a shell its image lacks).
    Task,
    /// The host or the engine failed, or is not set up for it; never the
    /// agent's doing.
    Infrastructure,
}

impl ExecError {
    /// Whether the sandbox can still run commands after this error: only
    /// a command that could not start (or a path refused) leaves it
    /// usable; an engine or host failure, a dead or unrecoverable sandbox
    /// ends the run.
    pub fn sandbox_usable(&self) -> bool {
        matches!(self, ExecError::Spawn(_) | ExecError::PathOutside(_))
    }

    /// Whose doing it can be (see [`Fault`]).
    pub fn fault(&self) -> Fault {
        match self {
            ExecError::EngineUnavailable { .. }
            | ExecError::RuntimeUnavailable { .. }
            | ExecError::RuntimeWithoutNetwork { .. }
            | ExecError::ProxyImageMissing { .. }
            | ExecError::EgressNetwork { .. }
            | ExecError::RemappedWorkspace { .. } => Fault::Infrastructure,
            ExecError::ImageUnavailable { .. }
            | ExecError::NoAllowlist { .. }
            | ExecError::Incapable { .. }
            | ExecError::ShellUnavailable { .. } => Fault::Task,
            ExecError::Spawn(_)
            | ExecError::Io(_)
            | ExecError::Engine { .. }
            | ExecError::EngineTimeout { .. }
            | ExecError::SandboxDied { .. }
            | ExecError::Unrecoverable { .. }
            | ExecError::Refused(_)
            | ExecError::Workspace(_)
            | ExecError::PathOutside(_) => Fault::Agent,
        }
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
            | ExecError::RuntimeWithoutNetwork { hint, .. }
            | ExecError::ImageUnavailable { hint, .. }
            | ExecError::ProxyImageMissing { hint, .. }
            | ExecError::EgressNetwork { hint, .. } => Some(hint.clone()),
            ExecError::NoAllowlist { hint, .. } | ExecError::Incapable { hint, .. } => {
                Some(hint.to_string())
            }
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

/// What a started sandbox is, fixed for its life: reported by
/// [`Executor::info`] and recorded in `run_started`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxInfo {
    /// Short name for messages and the trajectory ("local", "docker").
    pub kind: &'static str,
    /// The working directory commands start in, as the command sees it.
    pub workdir: String,
    /// For a backend whose commands see the host's paths: the directory
    /// under which the sandbox's absolute paths (a task's /tests, /logs,
    /// /solution) live, so nothing lands in the host's root (see
    /// [`SandboxInfo::path`]); `None` in a sandbox with a filesystem of
    /// its own.
    pub root: Option<std::path::PathBuf>,
    /// What confines commands, as read from the engine and the sandbox;
    /// `None` when nothing does.
    pub security: Option<serde_json::Value>,
    /// Every way this sandbox is weaker than the default one, one line
    /// each, as it was actually started.
    pub loosenings: Vec<String>,
}

impl SandboxInfo {
    /// Where the absolute sandbox path `path` is, as commands in this
    /// sandbox name it (see [`SandboxInfo::root`]).
    pub fn path(&self, path: &str) -> String {
        match &self.root {
            Some(root) if path.starts_with('/') => root
                .join(path.trim_start_matches('/'))
                .display()
                .to_string(),
            _ => path.to_string(),
        }
    }
}

/// Who owns what [`Executor::upload`] puts in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The sandbox's user (the agent's files).
    User,
    /// Root, made as root (a task's /tests and /solution, which the
    /// agent's user must not be able to change); a backend without users
    /// uploads as its only one.
    Root,
}

/// What [`Executor::close`] does with the sandbox's changes to the
/// workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Handed back (a run's, an agent's).
    Keep,
    /// Dropped (a verifier's).
    Discard,
}

/// A sandbox: where tool calls run. The loop and eval know only this (and
/// [`backend::Backend`], which starts one), in the shape of Harbor's
/// environment: a handful of operations every backend has, and the
/// optional ones asked for through [`Executor::extras`], never answered
/// with an error at run time.
#[async_trait]
pub trait Executor: Send + Sync {
    /// What this sandbox is.
    fn info(&self) -> &SandboxInfo;

    /// What it can do beyond this contract.
    fn extras(&self) -> Extras<'_>;

    /// Runs one command to completion, timeout or cancellation. With
    /// `--shell persistent` the command starts from the working directory
    /// and exported variables the calls before it left (see [`shell`]).
    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError>;

    /// Copies the content of the host directory `host` into the directory
    /// `dest` of the sandbox (made when missing), links kept as links and
    /// never followed, owned by `owner`.
    async fn upload(
        &self,
        host: &std::path::Path,
        dest: &str,
        owner: Owner,
    ) -> Result<(), ExecError>;

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

    /// Releases everything the executor holds (containers, processes) and
    /// hands the workspace back, or drops the sandbox's changes to it
    /// ([`Work`]). Idempotent; called on every exit path.
    async fn close(&self, work: Work) -> Result<(), ExecError>;
}

/// The optional operations of a sandbox, each present when its backend
/// has it: a caller asks here first and takes its own way without.
#[derive(Clone, Copy, Default)]
pub struct Extras<'a> {
    /// Commands as another user (the verifier's).
    pub users: Option<&'a dyn Users>,
    /// The sandbox's process table: listed and killed as a whole.
    pub processes: Option<&'a dyn Processes>,
    /// A persistent shell's state that can be dropped.
    pub shell: Option<&'a dyn ShellState>,
    /// The filesystem's changes against the image (tamper evidence).
    pub changes: Option<&'a dyn FsChangesOf>,
    /// The filesystem saved as an image.
    pub snapshots: Option<&'a dyn Snapshots>,
}

/// Commands as another user than the sandbox's.
#[async_trait]
pub trait Users: Send + Sync {
    /// Runs one command as `user` (`(uid, gid)`, root included) rather
    /// than the sandbox's user, with no capabilities and no supplementary
    /// group but `gid`, otherwise as [`Executor::execute`] does: the same
    /// environment (HOME included: set another in the command if it
    /// matters), workdir, limits and timeout, and at its end, timeout or
    /// cancellation what it left running is killed, whatever uid it runs
    /// as (kept only when the sandbox keeps background work, as for any
    /// command). With `--shell persistent` it is a fresh command: it
    /// neither sees nor changes the shell's state.
    async fn execute_as(&self, user: (u32, u32), req: ExecRequest)
    -> Result<ExecOutput, ExecError>;

    /// The sandbox's last command (a verifier's test.sh): runs `req` as
    /// `user` like [`Users::execute_as`]; with `switch_user` it keeps
    /// CAP_SETUID and CAP_SETGID, so it can run code as yet another user
    /// (`setpriv`), and root's file capabilities under the ceiling (CHOWN,
    /// DAC_OVERRIDE, FOWNER, FSETID; never DAC_READ_SEARCH, see
    /// `docker::CAPABILITY_CEILING`); never CAP_KILL.
    /// When it exits, every other process in the sandbox is killed by the
    /// sandbox itself before the exit is reported, so nothing it or the
    /// agent left running can write anything afterwards.
    async fn execute_final(
        &self,
        user: (u32, u32),
        switch_user: bool,
        req: ExecRequest,
    ) -> Result<ExecOutput, ExecError>;
}

/// The sandbox's processes, whoever started them.
#[async_trait]
pub trait Processes: Send + Sync {
    /// The processes running in the sandbox, read from `/proc` by runner's
    /// own helper (never the sandbox's `ps`), without runner's supervisor
    /// and the helper itself; zombies are left out.
    async fn processes(&self) -> Result<Vec<ProcessInfo>, ExecError>;

    /// Kills every process in the sandbox (the sandbox user's, root's,
    /// any uid's) except runner's own supervisor, and returns once they
    /// are gone (a bounded wait; processes that survive it make the
    /// sandbox unrecoverable). The sandbox still runs commands after it.
    async fn kill_all(&self) -> Result<(), ExecError>;
}

/// A persistent shell (`--shell persistent`).
#[async_trait]
pub trait ShellState: Send + Sync {
    /// Drops the persistent shell's state: the next command starts in the
    /// workdir with the sandbox's environment, as the first one did (the
    /// `restart` of Anthropic's bash tool). With `--shell fresh` there is
    /// nothing to drop and it succeeds.
    async fn restart_shell(&self) -> Result<(), ExecError>;
}

/// What a sandbox changed in its filesystem.
#[async_trait]
pub trait FsChangesOf: Send + Sync {
    /// What the sandbox changed in its filesystem compared with its image
    /// (tamper evidence for grading), bounded by [`MAX_FS_CHANGES`].
    async fn changes(&self) -> Result<FsChanges, ExecError>;
}

/// A sandbox's filesystem saved as an image.
#[async_trait]
pub trait Snapshots: Send + Sync {
    /// Saves the sandbox's filesystem (without its mounts: the workspace
    /// is not in it) as an image a new sandbox can start from; returns its
    /// reference. Nothing of the sandbox's processes is in it. The caller
    /// removes it with [`backend::Backend::remove_image`].
    async fn snapshot(&self) -> Result<String, ExecError>;
}

type Done<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ExecError>> + Send + 'a>>;

/// Shorthands over [`Executor`], for every executor.
pub trait ExecutorExt: Executor {
    /// [`SandboxInfo::kind`].
    fn kind(&self) -> &'static str {
        self.info().kind
    }
    /// [`SandboxInfo::workdir`].
    fn workdir(&self) -> String {
        self.info().workdir.clone()
    }
    /// [`SandboxInfo::path`].
    fn path(&self, path: &str) -> String {
        self.info().path(path)
    }
    /// [`SandboxInfo::loosenings`].
    fn loosenings(&self) -> Vec<String> {
        self.info().loosenings.clone()
    }
    /// [`SandboxInfo::security`].
    fn sandbox_security(&self) -> Option<serde_json::Value> {
        self.info().security.clone()
    }
    /// [`Executor::upload`] owned by the sandbox's user.
    fn upload_dir<'a>(&'a self, host: &'a std::path::Path, dest: &'a str) -> Done<'a> {
        self.upload(host, dest, Owner::User)
    }
    /// [`Executor::upload`] owned by root.
    fn upload_dir_as_root<'a>(&'a self, host: &'a std::path::Path, dest: &'a str) -> Done<'a> {
        self.upload(host, dest, Owner::Root)
    }
    /// [`Executor::close`], keeping the work.
    fn shutdown(&self) -> Done<'_> {
        self.close(Work::Keep)
    }
    /// [`Executor::close`], dropping the work.
    fn discard(&self) -> Done<'_> {
        self.close(Work::Discard)
    }
}

impl<T: Executor + ?Sized> ExecutorExt for T {}

#[cfg(test)]
mod tests {
    use super::*;

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
