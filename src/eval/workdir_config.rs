//! pytest's configuration in the agent's working directory. The workdir
//! is a mount, which the engine's diff of the sandbox never lists, so its
//! `conftest.py`, `pytest.ini`, `pyproject.toml`, `setup.cfg` and
//! `tox.ini` are read as seeded (from the image, before the agent runs)
//! and again before grading: each one added, changed or removed is a
//! `test-config` signal (a task's own project files, left as they came,
//! give none).

use std::path::Path;

use super::evidence::{Signal, TEST_CONFIG_NAMES};
use crate::exec::ExecutorExt;
use crate::exec::{ExecError, Executor};
use crate::hostfs::ReadDir;

/// Largest configuration file compared byte for byte; a bigger one is
/// compared by its being there.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// One configuration file as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Absent,
    /// A regular file's content.
    File(Vec<u8>),
    /// Something there that is not a readable regular file within the
    /// cap (a link, a directory, a file too big or unreadable).
    Other,
}

/// Each configuration name with what the seeded workspace holds there.
pub type SeededConfig = Vec<(&'static str, Seen)>;

/// What the seeded host workspace holds under each name, read without
/// following links (the image's files are the task author's).
pub fn seeded(workspace: &Path) -> SeededConfig {
    let dir = ReadDir::open(workspace).ok();
    TEST_CONFIG_NAMES
        .iter()
        .map(|name| {
            let seen = match &dir {
                None => Seen::Other,
                Some(d) => match d.read_capped(name, MAX_CONFIG_BYTES + 1) {
                    Ok(c) if !c.truncated && c.total_bytes <= MAX_CONFIG_BYTES => {
                        Seen::File(c.text.into_bytes())
                    }
                    Ok(_) => Seen::Other,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::Absent,
                    Err(_) => Seen::Other,
                },
            };
            (*name, seen)
        })
        .collect()
}

/// The signals of the workdir's configuration files that differ from the
/// seeded ones, read in the agent's sandbox as it is before grading.
pub async fn signals(sandbox: &dyn Executor, workdir: &str, seed: &SeededConfig) -> Vec<Signal> {
    let mut out = Vec::new();
    let dir = workdir.trim_end_matches('/');
    for (name, before) in seed {
        let path = format!("{dir}/{name}");
        let now = match sandbox
            .read_file(&sandbox.path(&path), MAX_CONFIG_BYTES)
            .await
        {
            // As the host side reads it: lossy UTF-8.
            Ok(data) => Seen::File(String::from_utf8_lossy(&data).into_owned().into_bytes()),
            Err(e) if super::grade::is_absent(&e) => Seen::Absent,
            Err(ExecError::PathOutside(_)) => return out,
            Err(_) => Seen::Other,
        };
        if now == *before {
            continue;
        }
        let verb = match (before, &now) {
            (Seen::Absent, _) => "added",
            (_, Seen::Absent) => "deleted",
            _ => "modified",
        };
        out.push(Signal {
            kind: "test-config".into(),
            detail: format!(
                "{verb} {} (pytest's configuration or plugins in the working directory, read by a verifier's pytest)",
                crate::terminal::visible(&path)
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeded_workspace_is_read_without_following_links() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("pyproject.toml"), "[project]\n").expect("write");
        std::fs::write(d.path().join("elsewhere"), "x").expect("write");
        std::os::unix::fs::symlink(d.path().join("elsewhere"), d.path().join("tox.ini"))
            .expect("link");
        std::fs::create_dir(d.path().join("setup.cfg")).expect("mkdir");
        let s = seeded(d.path());
        let of = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(
            of("pyproject.toml"),
            Some(Seen::File(b"[project]\n".to_vec()))
        );
        assert_eq!(of("conftest.py"), Some(Seen::Absent));
        assert_eq!(of("tox.ini"), Some(Seen::Other));
        assert_eq!(of("setup.cfg"), Some(Seen::Other));
        assert_eq!(s.len(), TEST_CONFIG_NAMES.len());
    }
}
