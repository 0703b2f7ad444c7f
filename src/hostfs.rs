//! Files runner writes on the host for a run (the trajectory, command
//! outputs, verifier logs): each is created relative to an open directory
//! handle with `O_NOFOLLOW | O_EXCL`, so nothing a sandbox made (a link
//! planted at a predictable name, a directory swapped for a link) can
//! redirect a write to another file. Directories are opened with
//! `O_NOFOLLOW | O_DIRECTORY` relative to their parent's handle.
//!
//! Everything written through an [`OutputDir`] also draws on one byte
//! budget per run, so the outputs of a run cannot fill the host's disk.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};

/// An open directory on the host that runner writes into.
#[derive(Debug)]
pub struct HostDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// An errno as an I/O error naming what was done to which path.
pub(crate) fn nix_err(e: Errno, what: &str, path: &Path) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// A single path component: no separator, not `.` or `..`.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{name}' is not a plain file name"),
        ));
    }
    Ok(())
}

/// How a directory is opened: never through a link.
pub(crate) const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl HostDir {
    /// Opens (creating it and its parents when missing) the directory
    /// `path`. Its parents are the user's own path and are resolved as
    /// usual; the directory itself must not be a link.
    pub fn create(path: &Path) -> io::Result<HostDir> {
        let path = std::path::absolute(path)?;
        let (Some(parent), Some(last)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory runner can create", path.display()),
            ));
        };
        std::fs::create_dir_all(parent)?;
        let parent_fd = nix::fcntl::open(
            parent,
            DIR_FLAGS.difference(OFlag::O_NOFOLLOW),
            Mode::empty(),
        )
        .map_err(|e| nix_err(e, "opening", parent))?;
        let parent = HostDir {
            fd: parent_fd,
            path: parent.to_path_buf(),
        };
        parent.create_dir(&last.to_string_lossy())
    }

    /// Makes (or opens, when it is already a real directory) the
    /// subdirectory `name`; a link there is refused, never followed.
    pub fn create_dir(&self, name: &str) -> io::Result<HostDir> {
        check_name(name)?;
        let path = self.path.join(name);
        match mkdirat(&self.fd, name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(nix_err(e, "creating", &path)),
        }
        let fd = openat(&self.fd, name, DIR_FLAGS, Mode::empty())
            .map_err(|e| nix_err(e, "opening", &path))?;
        Ok(HostDir { fd, path })
    }

    /// Creates the new file `name` for writing. Anything already there (a
    /// file, a link planted by a sandbox) makes this fail instead.
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        check_name(name)?;
        let path = self.path.join(name);
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::from_bits_truncate(0o644))
            .map_err(|e| nix_err(e, "creating", &path))?;
        Ok(File::from(fd))
    }

    /// Opens the existing regular file `name` for appending (a run's
    /// trajectory, which `runner continue` goes on writing), readable for
    /// a look at its end. A link there is refused, never followed;
    /// nothing is created.
    pub fn append_file(&self, name: &str) -> io::Result<File> {
        check_name(name)?;
        let path = self.path.join(name);
        let flags = OFlag::O_RDWR
            | OFlag::O_APPEND
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::empty())
            .map_err(|e| nix_err(e, "opening", &path))?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(file)
    }

    /// Where this directory is, for messages and reports.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A directory runner reads back (a run or eval output directory, which
/// a sandbox's doing may have put links in): opened, and everything in it
/// opened, with `O_NOFOLLOW` relative to its handle.
#[derive(Debug)]
pub struct ReadDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The start of a file read with a cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    /// Up to the cap's bytes, as UTF-8 (invalid sequences replaced).
    pub text: String,
    /// The file's size in bytes.
    pub total_bytes: u64,
    /// Whether `text` is only the start of the file.
    pub truncated: bool,
}

impl ReadDir {
    /// Opens the directory `path`. Its parents are the user's own path and
    /// are resolved as usual; the directory itself must not be a link.
    pub fn open(path: &Path) -> io::Result<ReadDir> {
        let fd = nix::fcntl::open(path, DIR_FLAGS, Mode::empty())
            .map_err(|e| nix_err(e, "opening", path))?;
        Ok(ReadDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the subdirectory `name`; a link there is refused.
    pub fn dir(&self, name: &str) -> io::Result<ReadDir> {
        check_name(name)?;
        let path = self.path.join(name);
        let fd = openat(&self.fd, name, DIR_FLAGS, Mode::empty())
            .map_err(|e| nix_err(e, "opening", &path))?;
        Ok(ReadDir { fd, path })
    }

    /// Reads at most `cap` bytes of the regular file `name`: a link, a
    /// FIFO or a device there is refused, never opened through or waited on.
    pub fn read_capped(&self, name: &str, cap: u64) -> io::Result<Capped> {
        use std::io::Read as _;
        check_name(name)?;
        let path = self.path.join(name);
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::empty())
            .map_err(|e| nix_err(e, "opening", &path))?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        let mut bytes = Vec::new();
        file.take(cap).read_to_end(&mut bytes)?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        Ok(Capped {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            total_bytes: meta.len().max(read),
            truncated: meta.len() > read,
        })
    }

    /// Whether `name` is here as a regular file or directory (not a link).
    pub fn has(&self, name: &str) -> bool {
        check_name(name).is_ok()
            && nix::sys::stat::fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| {
                    let kind = st.st_mode & nix::libc::S_IFMT;
                    kind == nix::libc::S_IFREG || kind == nix::libc::S_IFDIR
                })
    }

    /// Where this directory is, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A run's output directory with its byte budget.
#[derive(Debug, Clone)]
pub struct OutputDir {
    dir: Arc<HostDir>,
    budget: Arc<AtomicU64>,
    lost: Lost,
}

/// The first write of a directory's files that failed (a full disk),
/// shared like the budget.
type Lost = Arc<std::sync::Mutex<Option<String>>>;

impl OutputDir {
    /// `budget_bytes` bounds everything written through this directory's
    /// files, together.
    pub fn new(dir: HostDir, budget_bytes: u64) -> OutputDir {
        OutputDir {
            dir: Arc::new(dir),
            budget: Arc::new(AtomicU64::new(budget_bytes)),
            lost: Lost::default(),
        }
    }

    /// The same directory, drawing on the same budget as `other`.
    pub fn sharing_budget(dir: HostDir, other: &OutputDir) -> OutputDir {
        OutputDir {
            dir: Arc::new(dir),
            budget: other.budget.clone(),
            lost: other.lost.clone(),
        }
    }

    /// The file `name` in this directory, created when a command starts.
    pub fn file(&self, name: &str) -> OutputFile {
        OutputFile {
            dir: self.dir.clone(),
            name: name.to_string(),
            budget: self.budget.clone(),
            lost: self.lost.clone(),
        }
    }

    /// Why a file of this directory (or of one sharing its budget) could
    /// not be written whole, the first time it happened.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes still allowed.
    pub fn remaining(&self) -> u64 {
        self.budget.load(Ordering::SeqCst)
    }
}

/// One file of an [`OutputDir`], not yet created.
#[derive(Debug, Clone)]
pub struct OutputFile {
    dir: Arc<HostDir>,
    name: String,
    budget: Arc<AtomicU64>,
    lost: Lost,
}

impl OutputFile {
    /// Creates the file (see [`HostDir::create_file`]).
    pub fn create(&self) -> io::Result<File> {
        self.dir.create_file(&self.name)
    }

    /// Where the file is, for messages and the trajectory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// Notes that this file could not be written whole (`why`): its
    /// directory's record is incomplete (see [`OutputDir::lost`]).
    pub fn note_lost(&self, why: String) {
        self.lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    }

    /// Takes up to `want` bytes from the run's budget; returns how many
    /// may be written.
    pub fn take_budget(&self, want: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                granted = want.min(left);
                Some(left - granted)
            });
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_planted_link_is_never_written_through() {
        let outside = tempfile::tempdir().expect("tempdir");
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "host").expect("write");
        let base = tempfile::tempdir().expect("tempdir");
        let dir = HostDir::create(&base.path().join("run")).expect("create");
        std::os::unix::fs::symlink(&canary, base.path().join("run/out.txt")).expect("link");
        let err = dir.create_file("out.txt").expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "host");
        // A dangling link is refused too (O_EXCL), not created through.
        let target = outside.path().join("new-file");
        std::os::unix::fs::symlink(&target, base.path().join("run/dangling")).expect("link");
        assert!(dir.create_file("dangling").is_err());
        assert!(!target.exists());
    }

    #[test]
    fn a_directory_swapped_for_a_link_is_refused() {
        let outside = tempfile::tempdir().expect("tempdir");
        let base = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), base.path().join("outputs")).expect("link");
        let dir = HostDir::create(base.path()).expect("create");
        assert!(dir.create_dir("outputs").is_err());
        assert!(HostDir::create(&base.path().join("outputs")).is_err());
        for bad in ["", ".", "..", "a/b"] {
            assert!(dir.create_file(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_racing_link_swapper_never_redirects_a_write() {
        let outside = tempfile::tempdir().expect("tempdir");
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "host").expect("write");
        let base = tempfile::tempdir().expect("tempdir");
        let dir = HostDir::create(&base.path().join("run")).expect("create");
        let run = base.path().join("run");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (run, canary, stop) = (run.clone(), canary.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..50 {
                        let p = run.join(format!("f{i}"));
                        let _ = std::fs::remove_file(&p);
                        let _ = std::os::unix::fs::symlink(&canary, &p);
                    }
                }
            })
        };
        let mut created = 0;
        for round in 0..200 {
            for i in 0..50 {
                if let Ok(mut f) = dir.create_file(&format!("f{i}")) {
                    let _ = writeln!(f, "round {round}");
                    created += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("swapper");
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "host");
        assert!(created > 0, "no file was ever created: the race never ran");
    }

    #[test]
    fn the_budget_is_shared_and_never_exceeded() {
        let base = tempfile::tempdir().expect("tempdir");
        let out = OutputDir::new(HostDir::create(base.path()).expect("create"), 100);
        let (a, b) = (out.file("a"), out.file("b"));
        assert_eq!(a.take_budget(60), 60);
        assert_eq!(b.take_budget(60), 40);
        assert_eq!(a.take_budget(1), 0);
        assert_eq!(out.remaining(), 0);
    }

    #[test]
    fn reads_back_refuse_links_and_fifos_and_stop_at_the_cap() {
        let base = tempfile::tempdir().expect("tempdir");
        std::fs::write(base.path().join("log"), "0123456789").expect("write");
        std::os::unix::fs::symlink(base.path().join("log"), base.path().join("link"))
            .expect("link");
        nix::unistd::mkfifo(&base.path().join("fifo"), Mode::from_bits_truncate(0o644))
            .expect("fifo");
        std::fs::create_dir(base.path().join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(base.path().join("sub"), base.path().join("sublink"))
            .expect("link");
        let dir = ReadDir::open(base.path()).expect("open");
        let c = dir.read_capped("log", 4).expect("read");
        assert_eq!(
            (c.text.as_str(), c.total_bytes, c.truncated),
            ("0123", 10, true)
        );
        assert!(!dir.read_capped("log", 100).expect("read").truncated);
        assert!(dir.read_capped("link", 100).is_err());
        assert!(dir.read_capped("fifo", 100).is_err());
        assert!(dir.read_capped("../log", 100).is_err());
        assert!(dir.dir("sub").is_ok() && dir.dir("sublink").is_err());
        assert!(dir.has("log") && !dir.has("link") && !dir.has("missing"));
        assert!(ReadDir::open(&base.path().join("sublink")).is_err());
    }
}
