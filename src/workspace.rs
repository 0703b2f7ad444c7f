//! The run's workspace on the host: an existing directory, or a scratch
//! directory that is removed after a successful run unless kept.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Where the agent's files live on the host.
#[derive(Debug)]
pub struct Workspace {
    path: PathBuf,
    scratch: Option<TempDir>,
}

impl Workspace {
    /// Uses `dir` (which must exist) or makes a scratch directory.
    pub fn prepare(dir: Option<&Path>) -> std::io::Result<Self> {
        match dir {
            Some(d) => {
                let meta = std::fs::metadata(d)?;
                if !meta.is_dir() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        format!("{} is not a directory", d.display()),
                    ));
                }
                Ok(Workspace {
                    path: std::fs::canonicalize(d)?,
                    scratch: None,
                })
            }
            None => {
                let tmp = tempfile::Builder::new().prefix("runner-ws-").tempdir()?;
                Ok(Workspace {
                    path: tmp.path().to_path_buf(),
                    scratch: Some(tmp),
                })
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_scratch(&self) -> bool {
        self.scratch.is_some()
    }

    /// Ends the workspace's life: a scratch directory is removed unless
    /// `keep`. Returns the path when the files are still there.
    pub fn finish(self, keep: bool) -> Option<PathBuf> {
        match self.scratch {
            Some(tmp) if keep => Some(tmp.keep()),
            Some(tmp) => {
                let _ = tmp.close();
                None
            }
            None => Some(self.path),
        }
    }
}
