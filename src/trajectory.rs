//! The run directory: `trajectory.jsonl`, appended and flushed after every
//! event so that a crash, a limit or Ctrl-C still leaves a complete,
//! parseable file, and `outputs/` with the full output of each command.
//! Secrets are redacted from everything written here.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::event::Event;
use crate::hostfs::{HostDir, OutputDir, OutputFile};

/// Replaces known secret values with a marker.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// Secrets shorter than this are not redacted: they would match ordinary text.
const MIN_SECRET_CHARS: usize = 8;
/// What a secret becomes.
pub const REDACTED: &str = "[REDACTED]";

impl Redactor {
    /// Collects the secret values of the runner's environment: the API keys
    /// and every variable whose name looks like it holds a credential.
    pub fn from_env() -> Self {
        Redactor::from_pairs(std::env::vars())
    }

    /// Secrets among `(name, value)` pairs: the values of names that look
    /// like credentials (also used for `--env` pairs given to commands).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let secrets = pairs
            .into_iter()
            .filter(|(name, _)| {
                let upper = name.to_ascii_uppercase();
                ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
                    .iter()
                    .any(|w| upper.contains(w))
            })
            .map(|(_, value)| value)
            .collect();
        Redactor::new(secrets)
    }

    /// Both sets of secrets.
    pub fn merged(mut self, other: Redactor) -> Self {
        self.secrets.extend(other.secrets);
        Redactor::new(self.secrets)
    }

    pub fn new(secrets: Vec<String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= MIN_SECRET_CHARS)
            .collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
            // Secrets also appear JSON-escaped in serialized events.
            let escaped = serde_json::to_string(s).unwrap_or_default();
            let escaped = escaped.trim_matches('"');
            if escaped != s && out.contains(escaped) {
                out = out.replace(escaped, REDACTED);
            }
        }
        out
    }
}

/// An open run directory. Every file in it is created through directory
/// handles that never follow links ([`crate::hostfs`]).
#[derive(Debug)]
pub struct RunDir {
    dir: OutputDir,
    outputs: OutputDir,
    file: Mutex<File>,
    redactor: Redactor,
}

/// The run directory could not be made or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the run directory {path}: {source}")]
pub struct RunDirError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Bytes all of a run's output files may take together unless the run
/// says otherwise (its `--disk`).
pub const DEFAULT_OUTPUT_BUDGET_BYTES: u64 = 10 << 30;

impl RunDir {
    /// Creates `path` (and `outputs/` in it) and opens the trajectory; the
    /// run's output files together may take `output_budget_bytes`.
    pub fn create(
        path: &Path,
        redactor: Redactor,
        output_budget_bytes: u64,
    ) -> Result<Self, RunDirError> {
        let err = |source| RunDirError {
            path: path.to_path_buf(),
            source,
        };
        let dir = HostDir::create(path).map_err(err)?;
        let outputs = dir.create_dir("outputs").map_err(err)?;
        // Exclusive create: an existing trajectory is another run's record
        // and is never appended to or overwritten.
        let mut file = dir.create_file("trajectory.jsonl").map_err(err)?;
        // Append mode is not needed: only this handle writes, at its end.
        let _ = file.flush();
        let dir = OutputDir::new(dir, output_budget_bytes);
        let outputs = OutputDir::sharing_budget(outputs, &dir);
        Ok(RunDir {
            dir,
            outputs,
            file: Mutex::new(file),
            redactor,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory of full command outputs.
    pub fn outputs(&self) -> &OutputDir {
        &self.outputs
    }

    pub fn outputs_dir(&self) -> PathBuf {
        self.outputs.path().to_path_buf()
    }

    /// A file directly in the run directory (e.g. `verifier.log`), sharing
    /// the run's output budget.
    pub fn file(&self, name: &str) -> OutputFile {
        self.dir.file(name)
    }

    pub fn trajectory_path(&self) -> PathBuf {
        self.path().join("trajectory.jsonl")
    }

    /// Appends one event as a JSON line and flushes it. Live text deltas
    /// are not kept: the full reply follows in `model_reply`.
    pub fn record(&self, event: &Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        let line = match serde_json::to_string(event) {
            Ok(l) => self.redactor.redact(&l),
            Err(e) => {
                tracing::warn!("cannot serialize an event: {e}");
                return;
            }
        };
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
            tracing::warn!("cannot append to {}: {e}", self.trajectory_path().display());
        }
    }

    /// Redacts the full-output files written during the run, in place.
    /// Output is streamed to disk while the command runs; this makes sure a
    /// secret never stays in them.
    pub fn redact_outputs(&self) {
        if self.redactor.secrets.is_empty() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.outputs_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            let redacted = self.redactor.redact(&text);
            if redacted != text
                && let Err(e) = std::fs::write(entry.path(), redacted)
            {
                tracing::warn!("cannot redact {}: {e}", entry.path().display());
            }
        }
    }
}

/// A fresh run directory name under `base`: `YYYYmmdd-HHMMSS-xxxxxx`.
pub fn new_run_path(base: &Path) -> (String, PathBuf) {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let id = format!("{stamp}-{:06x}", fastrand::u32(..0x100_0000));
    let path = base.join(&id);
    (id, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_plain_and_escaped_secrets_but_not_short_ones() {
        let r = Redactor::new(vec![
            "sk-ant-123456789".into(),
            "short".into(),
            "a\"quoted\"key".into(),
        ]);
        assert_eq!(r.redact("key=sk-ant-123456789."), "key=[REDACTED].");
        assert_eq!(r.redact("short stays"), "short stays");
        let json = serde_json::to_string("x a\"quoted\"key y").expect("serializes");
        assert!(!r.redact(&json).contains("quoted"));
    }

    #[test]
    fn credential_looking_names_are_secrets() {
        let r = Redactor::from_pairs([
            ("GITHUB_TOKEN".to_string(), "ghp-1234567890".to_string()),
            ("LANG".to_string(), "C.UTF-8-long-enough".to_string()),
        ]);
        assert_eq!(
            r.redact("ghp-1234567890 C.UTF-8-long-enough"),
            "[REDACTED] C.UTF-8-long-enough"
        );
    }

    #[test]
    fn every_event_is_a_line_and_deltas_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::create(
            &dir.path().join("r"),
            Redactor::new(vec!["supersecret-value".into()]),
            DEFAULT_OUTPUT_BUDGET_BYTES,
        )
        .expect("creates");
        rd.record(&Event::TextDelta { text: "x".into() });
        rd.record(&Event::UserMessage {
            text: "use supersecret-value".into(),
        });
        rd.record(&Event::Notice {
            message: "n".into(),
        });
        let text = std::fs::read_to_string(rd.trajectory_path()).expect("reads");
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(!text.contains("supersecret-value"));
        for l in lines {
            serde_json::from_str::<serde_json::Value>(l).expect("each line is JSON");
        }
    }
}
