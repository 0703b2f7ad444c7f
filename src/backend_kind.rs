//! The backends by name (their recorded names are
//! `run_header::names`). Which code each name starts is
//! `runtime::backends`' table.

/// A kind of sandbox: a new one is a folder under `exec/`, a variant here
/// and a line in `runtime::backends`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A hardened container per run (the default).
    Docker,
    /// A child process on this host: NOT a sandbox.
    Local,
}

impl BackendKind {
    /// Every backend, for sweeps over all of them.
    pub const ALL: [BackendKind; 2] = [BackendKind::Docker, BackendKind::Local];

    /// Whether commands run as host processes, seeing the host's paths
    /// (so the host's PATH and HOME mean something to them).
    pub fn on_host(self) -> bool {
        self == BackendKind::Local
    }
}
