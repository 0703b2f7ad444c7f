//! The run directory: `trajectory.jsonl`, appended and flushed after every
//! event so that a crash, a limit or Ctrl-C still leaves a complete,
//! parseable file, and `outputs/` with the full output of each command.
//! Secrets are redacted from every event line as it is written; command
//! output is redacted while it streams (see `exec::capture`).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};

use crate::event::Event;
use crate::hostfs::{HostDir, OutputDir, OutputFile};
use crate::redact::Redactor;

/// An open run directory. Every file in it is created through directory
/// handles that never follow links ([`crate::hostfs`]).
#[derive(Debug)]
pub struct RunDir {
    dir: OutputDir,
    outputs: OutputDir,
    /// Locked while the run directory is open, so that `runner continue`
    /// never appends to a trajectory another runner is still writing.
    file: Mutex<Trajectory>,
    redactor: Redactor,
}

/// The trajectory file, its length in whole lines, and the first append
/// that failed (after which nothing more is appended: the file ends at
/// the fault, a valid prefix of the run, never with a gap in it).
#[derive(Debug)]
struct Trajectory {
    file: Flock<File>,
    len: u64,
    lost: Option<String>,
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
        Self::open(path, redactor, output_budget_bytes, false)
    }

    /// Opens the run directory `path` of an earlier run to go on writing
    /// its trajectory (`runner continue`): events are appended, after a
    /// newline when the file ends in a partial line (a run killed while
    /// writing one), so every new event is a line of its own. The outputs
    /// written from here on may take `output_budget_bytes` minus what the
    /// run directory already holds.
    pub fn reopen(
        path: &Path,
        redactor: Redactor,
        output_budget_bytes: u64,
    ) -> Result<Self, RunDirError> {
        Self::open(path, redactor, output_budget_bytes, true)
    }

    /// [`RunDir::create`], or with `append` [`RunDir::reopen`].
    fn open(
        path: &Path,
        redactor: Redactor,
        output_budget_bytes: u64,
        append: bool,
    ) -> Result<Self, RunDirError> {
        let err = |source| RunDirError {
            path: path.to_path_buf(),
            source,
        };
        let dir = HostDir::create(path).map_err(err)?;
        let outputs = dir.create_dir("outputs").map_err(err)?;
        // Only this handle writes the trajectory, always at its end.
        let (file, budget) = if append {
            let mut file = lock(dir.append_file("trajectory.jsonl").map_err(err)?).map_err(err)?;
            let used = used_bytes(path);
            let len = file.metadata().map_err(err)?.len();
            if len > 0 && !ends_with_newline(&file, len) {
                writeln!(file).map_err(err)?;
            }
            (file, output_budget_bytes.saturating_sub(used))
        } else {
            // Exclusive create: an existing trajectory is another run's
            // record and is never appended to or overwritten.
            let file = dir.create_file("trajectory.jsonl").map_err(err)?;
            (lock(file).map_err(err)?, output_budget_bytes)
        };
        let len = file.metadata().map_err(err)?.len();
        let dir = OutputDir::new(dir, budget);
        let outputs = OutputDir::sharing_budget(outputs, &dir);
        Ok(RunDir {
            dir,
            outputs,
            file: Mutex::new(Trajectory {
                file,
                len,
                lost: None,
            }),
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

    /// Writes the new file `name` directly in the run directory with
    /// `text`, secrets redacted, drawing on the run's output budget (a
    /// text the budget cannot hold is not written).
    pub fn write_text(&self, name: &str, text: &str) -> std::io::Result<()> {
        let text = self.redactor.redact(text);
        let file = self.dir.file(name);
        let len = text.len() as u64;
        if file.take_budget(len) < len {
            return Err(std::io::Error::other("the run's output budget is spent"));
        }
        file.create()?.write_all(text.as_bytes())
    }

    pub fn trajectory_path(&self) -> PathBuf {
        self.path().join("trajectory.jsonl")
    }

    /// Appends one event as a JSON line, in one write. Live text deltas
    /// are not kept: the full reply follows in `model_reply`. An append
    /// that fails (a full disk) is undone to the last whole line and is
    /// the last one tried: [`RunDir::lost`] says so, and the run must not
    /// end as if its record were whole.
    pub fn record(&self, event: &Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        let mut line = match serde_json::to_string(event) {
            Ok(l) => self.redactor.redact_json(&l).into_owned(),
            Err(e) => {
                tracing::warn!("cannot serialize an event: {e}");
                return;
            }
        };
        line.push('\n');
        let mut t = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if t.lost.is_some() {
            return;
        }
        match t.file.write_all(line.as_bytes()) {
            Ok(()) => t.len += line.len() as u64,
            Err(e) => {
                let path = self.trajectory_path();
                // A partial line would make the whole file unreadable as
                // JSON lines: cut it off.
                let len = t.len;
                let undone = t
                    .file
                    .set_len(len)
                    .and_then(|()| t.file.seek(SeekFrom::Start(len)));
                let mut why = format!("cannot append to {}: {e}", path.display());
                if let Err(u) = undone {
                    why.push_str(&format!(" (and cannot cut off the partial line: {u})"));
                }
                why.push_str("; no more events were recorded");
                tracing::warn!("{why}");
                t.lost = Some(why);
            }
        }
    }

    /// Why the run's record is not whole: an append to the trajectory
    /// failed (its events from there on are lost), or a file of the run
    /// directory could not be written whole (a command's full output).
    pub fn lost(&self) -> Option<String> {
        let t = self.file.lock().unwrap_or_else(|e| e.into_inner());
        t.lost.clone().or_else(|| self.dir.lost())
    }
}

/// `file` with an exclusive lock, or an error of kind `WouldBlock` when
/// another runner holds one.
fn lock(file: File) -> std::io::Result<Flock<File>> {
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        if e == nix::errno::Errno::EWOULDBLOCK {
            std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "another runner is writing its trajectory",
            )
        } else {
            std::io::Error::from(e)
        }
    })
}

/// Bytes of the regular files directly in `dir` and in its `outputs/`
/// (links not followed).
fn used_bytes(dir: &Path) -> u64 {
    let size_of = |d: &Path| -> u64 {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    };
    size_of(dir).saturating_add(size_of(&dir.join("outputs")))
}

/// Whether `file`, `len` (> 0) bytes long, ends in a newline.
fn ends_with_newline(file: &File, len: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)
        .is_ok_and(|()| last[0] == b'\n')
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
    fn every_event_is_a_line_and_deltas_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::create(
            &dir.path().join("r"),
            Redactor::new(vec!["supersecret-value".into()]).expect("builds"),
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
