//! Files runner writes at a path the user named (`--json`, `--junit`,
//! `--summary`, `--html`, `--harbor-job`, `runner view --output`) and the
//! records of an output directory: never written through a link.
//!
//! A link at such a path may have been planted (in a shared CI workspace,
//! by a task's doing in a directory reused across runs) to make runner
//! overwrite another file. So a link there is refused, naming the flag; a
//! user who wants the report elsewhere names the real file. The file is
//! written to a new temporary name in the target's directory, opened with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, then renamed over the target: a link
//! swapped in after the check is replaced by the rename, never followed.

use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// An output path that is a link.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: it is a link, and runner never writes a report through a link", .path.display())]
pub struct LinkAtOutput {
    /// The flag that named it (`--json`), or what the file is.
    pub flag: &'static str,
    pub path: PathBuf,
}

impl LinkAtOutput {
    pub fn hint(&self) -> String {
        format!(
            "point {} at the file itself (\"$(readlink -f {})\"), or remove the link",
            self.flag,
            self.path.display()
        )
    }
}

/// Whether `path` itself (not what it leads to) is a link.
fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Refuses an output path that is a link, before anything is run.
pub fn refuse_link(flag: &'static str, path: Option<&Path>) -> Result<(), LinkAtOutput> {
    match path {
        Some(p) if is_link(p) => Err(LinkAtOutput {
            flag,
            path: p.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

fn link_error(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is a link; runner never writes through a link",
            path.display()
        ),
    )
}

/// Writes `bytes` as the file `path` (its parent directories created),
/// replacing the file there; a link at `path` is refused.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if is_link(path) {
        return Err(link_error(path));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.runner-{:016x}", fastrand::u64(..)));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Appends `bytes` to the regular file `path` (created when missing); a
/// link there is refused, never followed.
pub fn append_no_follow(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ELOOP) => link_error(path),
            _ => e,
        })?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_at_the_output_is_refused_and_its_target_kept() {
        let d = tempfile::tempdir().expect("tempdir");
        let canary = d.path().join("canary");
        std::fs::write(&canary, "host").expect("write");
        let out = d.path().join("report.json");
        std::os::unix::fs::symlink(&canary, &out).expect("link");
        assert!(write_replacing(&out, b"x").is_err());
        assert!(append_no_follow(&out, b"x").is_err());
        assert!(refuse_link("--json", Some(&out)).is_err());
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "host");
        let names: Vec<_> = std::fs::read_dir(d.path()).expect("ls").collect();
        assert_eq!(names.len(), 2, "no temporary file left");
    }

    #[test]
    fn a_file_is_replaced_and_its_parents_made() {
        let d = tempfile::tempdir().expect("tempdir");
        let out = d.path().join("a/b/summary.md");
        write_replacing(&out, b"one").expect("write");
        write_replacing(&out, b"two").expect("write");
        append_no_follow(&out, b"+").expect("append");
        assert_eq!(std::fs::read_to_string(&out).expect("read"), "two+");
        assert!(refuse_link("--json", Some(&out)).is_ok());
    }
}
