//! A task directory is its author's, and a link in it is the author's
//! choice of file: a link that leaves the directory would make runner read
//! a file of the host (task.toml, a compose `env_file`, a Dockerfile) or
//! send one to the engine or into a sandbox (the build context, `tests/`,
//! `solution/`). So before anything in a task directory is read, every
//! link in it is checked and one that leaves is refused, naming it.
//!
//! A link that stays inside (`data -> ../shared/data`) is kept: it is part
//! of the task's tree, and the build context and uploads carry it as a
//! link, never followed. The check resolves each link as the kernel would
//! (through the links it passes), so a chain of inside-looking links that
//! ends outside is refused too; a dangling link is judged by its text.

use std::path::{Component, Path, PathBuf};

use super::TaskError;

/// Refuses the first link under `dir` (the directory itself included)
/// that resolves, or would resolve, outside `dir`.
pub(crate) fn refuse_links_out(dir: &Path) -> Result<(), TaskError> {
    let read = |path: &Path, source| TaskError::Read {
        path: path.to_path_buf(),
        source,
    };
    let root = std::fs::canonicalize(dir).map_err(|e| read(dir, e))?;
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        for entry in std::fs::read_dir(&here).map_err(|e| read(&here, e))? {
            let entry = entry.map_err(|e| read(&here, e))?;
            let rel = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| read(&dir.join(&rel), e))?;
            if kind.is_dir() {
                pending.push(rel);
            } else if kind.is_symlink() {
                check_link(dir, &root, &rel)?;
            }
        }
    }
    Ok(())
}

/// The link `dir/rel` must resolve inside `root` (`dir`, canonical).
fn check_link(dir: &Path, root: &Path, rel: &Path) -> Result<(), TaskError> {
    let path = dir.join(rel);
    let target = std::fs::read_link(&path).map_err(|source| TaskError::Read {
        path: path.clone(),
        source,
    })?;
    let inside = match std::fs::canonicalize(&path) {
        Ok(real) => real.starts_with(root),
        Err(_) => link_stays_inside(rel, &target),
    };
    if inside {
        return Ok(());
    }
    Err(TaskError::LinkOut {
        path,
        target,
        dir: dir.to_path_buf(),
    })
}

/// Whether the link at `rel` (relative to the task dir) to `target` stays
/// inside the task dir, judged by the text alone: relative, and never
/// climbing above the task dir.
pub(super) fn link_stays_inside(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = 0;
    let parent = rel.parent().unwrap_or(Path::new(""));
    for c in parent.components().chain(target.components()) {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::CurDir => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn task_with(links: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        for d in ["tests", "environment/sub", "shared"] {
            std::fs::create_dir_all(t.path().join(d)).expect("mkdir");
        }
        std::fs::write(t.path().join("shared/data"), "x").expect("write");
        for (at, to) in links {
            symlink(to, t.path().join(at)).expect("link");
        }
        t
    }

    #[test]
    fn links_that_stay_inside_are_kept() {
        let t = task_with(&[
            ("environment/data", "../shared/data"),
            ("environment/sub/up", ".."),
            ("tests/dangling", "missing"),
        ]);
        refuse_links_out(t.path()).expect("inside links are fine");
    }

    #[test]
    fn links_that_leave_are_refused_naming_the_link() {
        let outside = tempfile::tempdir().expect("tempdir");
        let out = outside.path().to_string_lossy().into_owned();
        for (at, to) in [
            ("tests/test.sh", "/etc/hostname"),
            ("environment/env", &*out),
            ("tests/up", "../.."),
            ("shared/gone", "../../no-such-file"),
            // Each link inside-looking by its text, the chain ending outside.
            ("environment/sub/x", "../../environment/sub/up/../.."),
        ] {
            let t = task_with(&[("environment/sub/up", "..")]);
            symlink(to, t.path().join(at)).expect("link");
            let err = refuse_links_out(t.path()).expect_err(at);
            assert!(
                matches!(&err, TaskError::LinkOut { path, .. } if path.ends_with(at)),
                "{at}: {err}"
            );
        }
    }
}
