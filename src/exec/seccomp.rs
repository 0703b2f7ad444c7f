//! The system-call filter of every container runner starts (`--seccomp`):
//! runner's own profile by default, the engine's, or a file of the user's.
//!
//! runner's profile is Docker 20.10's default (`sandbox/seccomp/`, moby's
//! `profiles/seccomp/default.json` at v20.10.24, the engine's version here)
//! without [`DENIED_SYSCALLS`], whatever capability the sandbox holds: the
//! engine's profile opens `open_by_handle_at` to CAP_DAC_READ_SEARCH (the
//! "Shocker" escape through a bind-mounted file) and the handle, key,
//! io_uring, BPF and perf calls to CAP_SYS_ADMIN or to everyone, each a
//! history of kernel escapes no task needs.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

/// The calls runner's profile never allows.
pub const DENIED_SYSCALLS: [&str; 11] = [
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
];

/// Docker 20.10.24's default profile, as moby ships it (a data file).
pub const ENGINE_DEFAULT_JSON: &str =
    include_str!("../../sandbox/seccomp/docker-20.10.24-default.json");

/// runner's profile: [`ENGINE_DEFAULT_JSON`] without [`DENIED_SYSCALLS`]
/// (checked by this module's tests).
const RUNNER_JSON: &str = include_str!("../../sandbox/seccomp/runner.json");

/// Most bytes of a user's profile file (the engine's is 13 KB).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A profile's text, as sent to the engine, and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    json: String,
    sha256: String,
}

impl Profile {
    fn new(json: String) -> Profile {
        let sha256 = sha256_hex(json.as_bytes());
        Profile { json, sha256 }
    }

    /// The JSON text the engine is given (`seccomp=<text>`).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The hex SHA-256 of [`Profile::json`], recorded in `run_started`.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

/// runner's profile (the default).
pub static RUNNER_PROFILE: LazyLock<Profile> =
    LazyLock::new(|| Profile::new(RUNNER_JSON.to_string()));

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Which filter the sandboxes get.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Seccomp {
    /// [`RUNNER_PROFILE`].
    #[default]
    Runner,
    /// The engine's own default profile: a loosening (it lets a capable
    /// process reach the calls runner's denies).
    EngineDefault,
    /// A profile read from the user's file, sent as it is.
    File { path: PathBuf, profile: Profile },
}

/// Why a `--seccomp` value was refused.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("cannot read the seccomp profile {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the seccomp profile {path} is larger than {MAX_PROFILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the seccomp profile {path} is not a seccomp profile: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

impl SeccompError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        "give --seccomp runner (the default), default (the engine's profile), or the path of \
         a JSON seccomp profile with \"defaultAction\" and \"syscalls\" (the engine's format, \
         e.g. moby's profiles/seccomp/default.json)"
    }
}

impl Seccomp {
    /// Parses `--seccomp`: `runner`, `default`, or a file's path (read and
    /// checked now, so a bad file fails before anything starts).
    pub fn parse(value: &str) -> Result<Seccomp, SeccompError> {
        match value {
            "runner" => Ok(Seccomp::Runner),
            "default" => Ok(Seccomp::EngineDefault),
            path => Seccomp::from_file(Path::new(path)),
        }
    }

    fn from_file(path: &Path) -> Result<Seccomp, SeccompError> {
        let unreadable = |source| SeccompError::Unreadable {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(unreadable)?;
        if meta.len() > MAX_PROFILE_BYTES {
            return Err(SeccompError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        let invalid = |detail: String| SeccompError::Invalid {
            path: path.to_path_buf(),
            detail,
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| invalid(format!("not JSON ({e})")))?;
        if !value.is_object() || !value["defaultAction"].is_string() {
            return Err(invalid("no \"defaultAction\" string at its top".into()));
        }
        if !(value["syscalls"].is_array() || value["syscalls"].is_null()) {
            return Err(invalid("\"syscalls\" is not a list".into()));
        }
        Ok(Seccomp::File {
            path: path.to_path_buf(),
            profile: Profile::new(text),
        })
    }

    /// The profile to send, `None` for the engine's own.
    pub fn profile(&self) -> Option<&Profile> {
        match self {
            Seccomp::Runner => Some(&RUNNER_PROFILE),
            Seccomp::EngineDefault => None,
            Seccomp::File { profile, .. } => Some(profile),
        }
    }

    /// The name recorded in `sandbox_security.seccomp`: `runner`,
    /// `default`, or `file <path>`.
    pub fn label(&self) -> String {
        match self {
            Seccomp::Runner => "runner".into(),
            Seccomp::EngineDefault => "default".into(),
            Seccomp::File { path, .. } => format!("file {}", path.display()),
        }
    }

    /// The loosening line, `None` for runner's profile. A user's file may
    /// allow anything, so it is one too.
    pub fn loosening(&self) -> Option<String> {
        match self {
            Seccomp::Runner => None,
            Seccomp::EngineDefault => Some(
                "seccomp: the engine's default profile (open_by_handle_at, io_uring and the \
                 key calls reachable again)"
                    .into(),
            ),
            Seccomp::File { path, .. } => Some(format!(
                "seccomp: the user's profile {} instead of runner's",
                path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn names(profile: &Value) -> Vec<String> {
        profile["syscalls"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["names"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn runners_profile_is_the_engines_without_the_denied_calls() {
        let base: Value = serde_json::from_str(ENGINE_DEFAULT_JSON).unwrap();
        let mine: Value = serde_json::from_str(RUNNER_PROFILE.json()).unwrap();
        let mut expected = base.clone();
        let rules = expected["syscalls"].as_array_mut().unwrap();
        for r in rules.iter_mut() {
            r["names"]
                .as_array_mut()
                .unwrap()
                .retain(|n| !DENIED_SYSCALLS.iter().any(|d| n == d));
        }
        rules.retain(|r| !r["names"].as_array().unwrap().is_empty());
        assert_eq!(mine, expected);
        // The base really had the escape's call (for CAP_DAC_READ_SEARCH)
        // and io_uring (for everyone); runner's has neither, in any rule.
        assert!(names(&base).contains(&"open_by_handle_at".to_string()));
        assert!(names(&base).contains(&"io_uring_setup".to_string()));
        for d in DENIED_SYSCALLS {
            assert!(!names(&mine).iter().any(|n| n == d), "{d}");
        }
        assert_eq!(mine["defaultAction"], "SCMP_ACT_ERRNO");
    }

    #[test]
    fn values_parse_and_a_bad_file_is_refused() {
        assert_eq!(Seccomp::parse("runner").unwrap(), Seccomp::Runner);
        assert_eq!(Seccomp::parse("default").unwrap(), Seccomp::EngineDefault);
        assert!(Seccomp::Runner.loosening().is_none());
        assert!(Seccomp::EngineDefault.profile().is_none());
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("a.json", "{"),
            ("b.json", "[]"),
            ("c.json", "{\"syscalls\": 1, \"defaultAction\": \"x\"}"),
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            let e = Seccomp::parse(p.to_str().unwrap()).unwrap_err();
            assert!(matches!(e, SeccompError::Invalid { .. }), "{name}: {e}");
            assert!(e.to_string().contains(name));
        }
        assert!(matches!(
            Seccomp::parse("/nonexistent/p.json"),
            Err(SeccompError::Unreadable { .. })
        ));
        let p = dir.path().join("ok.json");
        std::fs::write(&p, ENGINE_DEFAULT_JSON).unwrap();
        let s = Seccomp::parse(p.to_str().unwrap()).unwrap();
        assert_eq!(s.profile().unwrap().json(), ENGINE_DEFAULT_JSON);
        assert!(s.label().starts_with("file "));
        assert!(s.loosening().is_some());
    }
}
