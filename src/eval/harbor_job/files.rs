//! Copying an attempt's files (its trajectory, command outputs, verifier
//! log, reward file) into the Harbor layout without ever following a
//! link: every directory is opened relative to its parent's handle with
//! `O_NOFOLLOW`, every file with `O_NOFOLLOW | O_NONBLOCK` (a fifo put in
//! place of a file cannot block the copy) and checked to be a regular file
//! after opening. Links, fifos, sockets and devices are left out; the
//! copies are created through [`HostDir`] (`O_EXCL | O_NOFOLLOW`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

use crate::hostfs::{DIR_FLAGS, HostDir, nix_err};

/// Deepest nesting copied.
const MAX_DEPTH: usize = 32;

const FILE_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_CLOEXEC);

/// An attempt's directory, opened without following a link.
pub struct Source {
    fd: OwnedFd,
    path: std::path::PathBuf,
}

impl Source {
    /// Opens `path`; `None` when it does not exist (an attempt that never
    /// got a run directory).
    pub fn open(path: &Path) -> io::Result<Option<Source>> {
        match nix::fcntl::open(path, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(Source {
                fd,
                path: path.to_path_buf(),
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(nix_err(e, "opening", path)),
        }
    }

    /// The subdirectory `name`, when it is a real directory.
    pub fn dir(&self, name: &str) -> io::Result<Option<Source>> {
        let path = self.path.join(name);
        match openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(Source { fd, path })),
            // Absent, a link (ELOOP) or not a directory: nothing to copy.
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP) => Ok(None),
            Err(nix::errno::Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(nix_err(e, "opening", &path)),
        }
    }

    /// The regular file `name`, opened; `None` when it is absent or not a
    /// regular file (a link, a fifo).
    fn file(&self, name: &str) -> io::Result<Option<File>> {
        let path = self.path.join(name);
        let fd = match openat(&self.fd, name, FILE_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP) => return Ok(None),
            Err(e) => return Err(nix_err(e, "opening", &path)),
        };
        let st = fstat(fd.as_fd()).map_err(|e| nix_err(e, "reading", &path))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Ok(None);
        }
        Ok(Some(File::from(fd)))
    }

    /// Copies the regular file `name` to `dst/dst_name`; false when there
    /// was none.
    pub fn copy_file(&self, name: &str, dst: &HostDir, dst_name: &str) -> io::Result<bool> {
        let Some(mut src) = self.file(name)? else {
            return Ok(false);
        };
        let mut out = dst.create_file(dst_name)?;
        io::copy(&mut src, &mut out)?;
        Ok(true)
    }

    /// Copies every directory and regular file below this one into `dst`
    /// (an existing directory); links and special files are left out.
    pub fn copy_tree(&self, dst: &HostDir) -> io::Result<()> {
        self.copy_below(dst, 0)
    }

    fn copy_below(&self, dst: &HostDir, depth: usize) -> io::Result<()> {
        if depth >= MAX_DEPTH {
            return Ok(());
        }
        let dup = self.fd.try_clone()?;
        let mut listing = Dir::from_fd(dup).map_err(|e| nix_err(e, "listing", &self.path))?;
        let mut entries = Vec::new();
        for entry in listing.iter() {
            let entry = entry.map_err(|e| nix_err(e, "listing", &self.path))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            // Names runner cannot recreate as one path component are left out.
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            entries.push((name.to_string(), entry.file_type()));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in entries {
            match kind {
                Some(Type::Directory) => {
                    if let Some(sub) = self.dir(&name)? {
                        sub.copy_below(&dst.create_dir(&name)?, depth + 1)?;
                    }
                }
                Some(Type::File) | None => {
                    self.copy_file(&name, dst, &name)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_fifos_in_a_run_directory_are_never_followed() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), "host secret").expect("write");
        let run = tempfile::tempdir().expect("tempdir");
        std::fs::write(run.path().join("trajectory.jsonl"), "{}\n").expect("write");
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            run.path().join("verifier.log"),
        )
        .expect("link");
        std::fs::create_dir(run.path().join("outputs")).expect("mkdir");
        std::fs::write(run.path().join("outputs/1.log"), "out").expect("write");
        std::os::unix::fs::symlink(outside.path(), run.path().join("outputs/escape"))
            .expect("link");
        nix::unistd::mkfifo(&run.path().join("outputs/fifo"), Mode::S_IRWXU).expect("fifo");

        let src = Source::open(run.path()).expect("open").expect("exists");
        let base = tempfile::tempdir().expect("tempdir");
        let dst = HostDir::create(&base.path().join("agent")).expect("create");
        assert!(
            !src.copy_file("verifier.log", &dst, "test-stdout.txt")
                .expect("copy")
        );
        assert!(
            src.copy_file("trajectory.jsonl", &dst, "t.jsonl")
                .expect("copy")
        );
        src.dir("outputs")
            .expect("open")
            .expect("exists")
            .copy_tree(&dst.create_dir("outputs").expect("mkdir"))
            .expect("copy");
        let mut copied: Vec<String> = walk(&base.path().join("agent"));
        copied.sort();
        assert_eq!(copied, ["outputs", "outputs/1.log", "t.jsonl"]);
        assert!(
            Source::open(&run.path().join("nothing"))
                .expect("open")
                .is_none()
        );
    }

    fn walk(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).expect("read") {
                let p = e.expect("entry").path();
                out.push(
                    p.strip_prefix(root)
                        .expect("below")
                        .to_string_lossy()
                        .into_owned(),
                );
                if p.symlink_metadata().expect("meta").is_dir() {
                    todo.push(p);
                }
            }
        }
        out
    }
}
