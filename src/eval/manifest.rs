//! What an eval output directory says about itself: `suite.json` (which
//! suite, with which settings, which shard of it) and one `attempt.json`
//! per finished attempt. `--resume` continues a directory from them and
//! `runner eval merge` puts shards back together from them.
//!
//! The fingerprint is a SHA-256 over the suite's task names and every
//! setting that can change a verdict (never over where reports go, how
//! many jobs run at once or which shard this is). Secrets typed with
//! `--env` enter it hashed, and never appear in `settings`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::outcome::Attempt;
use super::settings::EvalSettings;

/// Version of `suite.json` and `attempt.json` (documented in docs/02-eval.md).
pub const MANIFEST_VERSION: u32 = 1;

/// The manifest's file name in an output directory.
pub const SUITE_FILE: &str = "suite.json";

/// An attempt record's file name in its run directory.
pub const ATTEMPT_FILE: &str = "attempt.json";

/// Which part of a suite a process runs: the tasks whose index in the
/// suite's name order is `index - 1` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 1-based.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `I/N` (1 <= I <= N).
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}' is not I/N (such as 2/3)"))?;
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not I/N (such as 2/3)"))
        };
        let (index, count) = (num(i)?, num(n)?);
        if count == 0 || index == 0 || index > count {
            return Err(format!(
                "'{s}': I must be between 1 and N, and N at least 1"
            ));
        }
        Ok(Shard { index, count })
    }

    /// Whether the task at `position` of the suite's name order is ours.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `suite.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteManifest {
    pub format: u32,
    /// The first run's id (`eval-<time>-<hex>`); kept across resumes.
    pub id: String,
    /// SHA-256 (hex) over `tasks` and the settings that change verdicts.
    pub fingerprint: String,
    /// Every task of the suite, in name order (all shards').
    pub tasks: Vec<String>,
    pub attempts_per_task: u32,
    /// The settings of the fingerprint, for messages (no secrets).
    pub settings: serde_json::Value,
    /// `None`: the whole suite.
    pub shard: Option<Shard>,
    /// The tasks this directory runs (the shard's part of `tasks`).
    pub shard_tasks: Vec<String>,
    pub started_at: chrono::DateTime<chrono::Local>,
    /// The command that started the suite, for `runner eval --resume DIR`
    /// alone; absent in a manifest of an older runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<Invocation>,
}

/// `runner eval`'s arguments as typed (secrets redacted) and the directory
/// they were typed in (relative paths are relative to it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    pub cwd: PathBuf,
    pub args: Vec<String>,
}

/// Why an output directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a runner eval manifest: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} has format {found}; this runner reads format {MANIFEST_VERSION}")]
    Format { path: PathBuf, found: u32 },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ManifestError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            ManifestError::Read { .. } => {
                "give the output directory of an earlier `runner eval` (it holds suite.json)"
            }
            ManifestError::Parse { .. } | ManifestError::Format { .. } => {
                "use the runner that wrote it, or start afresh with another --output-dir"
            }
            ManifestError::Write { .. } => "check that the output directory is writable",
        }
    }
}

/// The settings that can change a verdict, as JSON without secrets, and
/// the extra bytes (secret values) that only enter the hash.
pub fn verdict_settings(args: &EvalSettings) -> (serde_json::Value, Vec<u8>) {
    let a = &args.agent;
    let env_names: Vec<&str> = a
        .env
        .iter()
        .map(|kv| kv.split_once('=').map_or(kv.as_str(), |(k, _)| k))
        .collect();
    let public = serde_json::json!({
        "agent": args.agent_kind.as_str(),
        "provider": format!("{:?}", a.provider).to_lowercase(),
        "model": a.model,
        "base_url": a.base_url,
        "script": a.script,
        "max_steps": a.max_steps,
        "max_cost_usd": a.max_cost_usd,
        "timeout_secs": a.timeout_secs,
        "max_command_timeout_secs": a.max_command_timeout_secs,
        "max_tokens": a.max_tokens,
        "system": a.system.is_some() || a.system_file.is_some(),
        "env": env_names,
        "deny": a.deny,
        "default_deny": a.default_deny,
        "tools": a.tools,
        "shell": format!("{:?}", a.shell).to_lowercase(),
        "executor": format!("{:?}", args.backend).to_lowercase(),
        "allow_internet": args.allow_internet,
        "cpus": args.cpus,
        "memory": args.memory,
        "agent_timeout_secs": args.agent_timeout_secs,
        "verifier_timeout_secs": args.verifier_timeout_secs,
        "pids_limit": args.pids_limit,
        "user": args.user,
        "read_only_rootfs": args.read_only_rootfs,
        "grading": args.grading.map(|g| g.as_str()),
        "regrade_flagged": args.regrade_flagged,
        "disk": args.disk,
        "runtime": args.runtime,
        "seccomp": args.seccomp,
    });
    let mut secret = Vec::new();
    for kv in &a.env {
        secret.extend_from_slice(kv.as_bytes());
        secret.push(0);
    }
    for text in [&a.system, &a.price].into_iter().flatten() {
        secret.extend_from_slice(text.as_bytes());
        secret.push(0);
    }
    (public, secret)
}

/// The fingerprint of a suite: its task names, attempts and settings.
pub fn fingerprint(
    tasks: &[String],
    attempts: u32,
    settings: &serde_json::Value,
    secret: &[u8],
) -> String {
    let mut h = Sha256::new();
    h.update(format!("runner-eval-suite/{MANIFEST_VERSION}\n").as_bytes());
    for t in tasks {
        h.update(t.as_bytes());
        h.update([0]);
    }
    h.update(attempts.to_le_bytes());
    h.update(settings.to_string().as_bytes());
    h.update([0]);
    h.update(secret);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads `dir/suite.json`.
pub fn read_suite(dir: &Path) -> Result<SuiteManifest, ManifestError> {
    let path = dir.join(SUITE_FILE);
    let text = read_small(&path)?;
    // The format first, so a newer manifest says so rather than "bad field".
    let format = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64));
    if let Some(found) = format.filter(|f| *f != u64::from(MANIFEST_VERSION)) {
        return Err(ManifestError::Format {
            path,
            found: u32::try_from(found).unwrap_or(u32::MAX),
        });
    }
    serde_json::from_str(&text).map_err(|source| ManifestError::Parse { path, source })
}

/// Writes `dir/suite.json` (atomically).
pub fn write_suite(dir: &Path, m: &SuiteManifest) -> Result<(), ManifestError> {
    let path = dir.join(SUITE_FILE);
    let text = serde_json::to_string_pretty(m).map_err(std::io::Error::other);
    text.and_then(|t| write_atomic(&path, &t))
        .map_err(|source| ManifestError::Write { path, source })
}

/// The record of a finished attempt in `run_dir`, when there is a readable one.
pub fn read_attempt(run_dir: &Path) -> Option<Attempt> {
    let path = run_dir.join(ATTEMPT_FILE);
    let text = read_small(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::warn!("ignoring {}: {e}", path.display());
            None
        }
    }
}

/// Writes the attempt's record into its run directory (atomically: a
/// SIGKILL leaves the old record or the new one, never half of one).
pub fn write_attempt(a: &Attempt) -> Result<(), ManifestError> {
    let path = a.run_dir.join(ATTEMPT_FILE);
    let text = serde_json::to_string_pretty(a).map_err(std::io::Error::other);
    text.and_then(|t| write_atomic(&path, &t))
        .map_err(|source| ManifestError::Write { path, source })
}

/// Most bytes a manifest or attempt record may have: they are small, and
/// an attempt directory is partly the sandbox's doing.
const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a small regular file without following a link at its name.
fn read_small(path: &Path) -> Result<String, ManifestError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    if !f.metadata().map_err(err)?.is_file() {
        return Err(err(std::io::Error::other("not a regular file")));
    }
    let mut text = String::new();
    f.take(MAX_RECORD_BYTES)
        .read_to_string(&mut text)
        .map_err(err)?;
    Ok(text)
}

/// Writes `text` to a temporary file beside `path`, syncs it and renames
/// it over `path` (a link there is refused).
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    crate::output_path::write_replacing(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_partition() {
        assert_eq!(Shard::parse("2/3"), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "1/0", "x/3", "3", "-1/3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let shards: Vec<Shard> = (1..=3).map(|i| Shard { index: i, count: 3 }).collect();
        for pos in 0..10 {
            assert_eq!(shards.iter().filter(|s| s.holds(pos)).count(), 1);
        }
        assert!(shards[0].holds(0) && shards[1].holds(1) && shards[0].holds(3));
    }

    #[test]
    fn the_fingerprint_follows_tasks_settings_and_secrets() {
        let s = serde_json::json!({"agent": "oracle"});
        let base = fingerprint(&["a".into(), "b".into()], 1, &s, b"");
        assert_eq!(base, fingerprint(&["a".into(), "b".into()], 1, &s, b""));
        assert_ne!(base, fingerprint(&["a".into()], 1, &s, b""));
        assert_ne!(base, fingerprint(&["a".into(), "b".into()], 2, &s, b""));
        assert_ne!(
            base,
            fingerprint(
                &["a".into(), "b".into()],
                1,
                &serde_json::json!({"agent": "nop"}),
                b""
            )
        );
        assert_ne!(base, fingerprint(&["a".into(), "b".into()], 1, &s, b"K=v"));
        // Names run together differently are different suites.
        assert_ne!(
            fingerprint(&["ab".into()], 1, &s, b""),
            fingerprint(&["a".into(), "b".into()], 1, &s, b"")
        );
        assert_eq!(base.len(), 64);
    }

    #[test]
    fn records_survive_a_round_trip_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("t").join("1");
        let mut a = Attempt::not_run(
            "t",
            1,
            run.clone(),
            super::super::outcome::Status::Fail,
            String::new(),
        );
        a.reward = Some(0.0);
        write_attempt(&a).unwrap();
        let back = read_attempt(&run).unwrap();
        assert_eq!(back.task, "t");
        assert_eq!(back.status, super::super::outcome::Status::Fail);
        // A link planted at the record's name is not read through.
        let other = dir.path().join("u");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(run.join(ATTEMPT_FILE), other.join(ATTEMPT_FILE)).unwrap();
        assert!(read_attempt(&other).is_none());
        // A newer format is named as such.
        std::fs::write(dir.path().join(SUITE_FILE), r#"{"format": 99}"#).unwrap();
        assert!(matches!(
            read_suite(dir.path()),
            Err(ManifestError::Format { found: 99, .. })
        ));
    }
}
