//! Taking privileges out of a bind-mounted workspace. The sandbox writes
//! the user's own directory there (`--disk unlimited`), and what it leaves
//! is on the host: a setuid-root copy of bash (`chmod 4755` by a root
//! sandbox) or a file capability would give any user of the host root,
//! and a device node (`mknod -m 666 mem c 1 1`) the host's memory. The
//! mount is nosuid and nodev, which protects only the sandbox's side; so
//! after every command and at the end runner walks the workspace on the
//! host, never following a link, and takes the setuid and setgid bits and
//! `security.capability` off every regular file the sandbox made or
//! changed, and removes every device node it made. What the user had
//! there before the run, unchanged since (same inode and ctime), is left.
//!
//! A window remains while a command runs: a host user could execute such a
//! file between its making and the command's end.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::hostfs::{DIR_FLAGS, nix_err};

/// The file capability's extended attribute.
const CAPABILITY: &str = "security.capability";
/// The mode bits that give a program its owner's or group's rights.
const SET_ID: u32 = 0o6000;
/// Deepest directory walked; a deeper tree is an error, not a silent pass.
const MAX_DEPTH: usize = 256;

/// An inode as it was: device, inode number and change time.
type Stamp = (u64, u64, i64, i64);

/// The privileged entries (set-id, capability, device) the user had in the
/// workspace before the run, which are theirs to keep while unchanged.
#[derive(Debug, Default, Clone)]
pub struct Baseline {
    kept: HashSet<Stamp>,
}

/// What one walk took away, by path relative to the workspace.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stripped {
    pub set_id: Vec<String>,
    pub capabilities: Vec<String>,
    pub devices: Vec<String>,
}

impl Stripped {
    pub fn is_empty(&self) -> bool {
        self.set_id.is_empty() && self.capabilities.is_empty() && self.devices.is_empty()
    }
}

fn stamp(st: &FileStat) -> Stamp {
    (st.st_dev, st.st_ino, st.st_ctime, st.st_ctime_nsec)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// What is privileged about an entry.
struct Marks {
    set_id: bool,
    capability: bool,
    device: bool,
}

/// The marks of `name` in the directory `dir` (stat'd as `st`).
fn marks(dir: &OwnedFd, name: &OsStr, st: &FileStat) -> Marks {
    let k = kind(st);
    let regular = k == SFlag::S_IFREG;
    Marks {
        set_id: regular && st.st_mode & SET_ID != 0,
        // lgetxattr through the directory's handle: the entry itself is
        // never followed.
        capability: regular
            && xattr::get(fd_path(dir, Some(name)), CAPABILITY)
                .ok()
                .flatten()
                .is_some(),
        device: k == SFlag::S_IFCHR || k == SFlag::S_IFBLK,
    }
}

/// `/proc/self/fd/N[/name]`: a path to what a handle holds.
fn fd_path(fd: &OwnedFd, name: Option<&OsStr>) -> PathBuf {
    let p = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    match name {
        Some(n) => p.join(n),
        None => p,
    }
}

/// Records the privileged entries of `root` as the user has them.
pub fn baseline(root: &Path) -> io::Result<Baseline> {
    let mut b = Baseline::default();
    walk(root, &mut |dir, name, st, _| {
        let m = marks(dir, name, st);
        if m.set_id || m.capability || m.device {
            b.kept.insert(stamp(st));
        }
        Ok(())
    })?;
    Ok(b)
}

/// Takes the privileges out of everything under `root` that `keep` does
/// not hold as it was.
pub fn strip(root: &Path, keep: &Baseline) -> io::Result<Stripped> {
    let mut out = Stripped::default();
    walk(root, &mut |dir, name, st, rel| {
        let m = marks(dir, name, st);
        if !(m.set_id || m.capability || m.device) || keep.kept.contains(&stamp(st)) {
            return Ok(());
        }
        let shown = rel.display().to_string();
        if m.device {
            match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(nix_err(e, "removing the device node", rel)),
            }
            out.devices.push(shown);
            return Ok(());
        }
        // Pinned by a handle that is never a link's target: what is
        // changed is the file that was looked at.
        let fd = match openat(
            dir,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(nix_err(e, "opening", rel)),
        };
        let now = fstat(&fd).map_err(|e| nix_err(e, "reading", rel))?;
        if kind(&now) != SFlag::S_IFREG {
            return Ok(());
        }
        if now.st_mode & SET_ID != 0 {
            use std::os::unix::fs::PermissionsExt;
            let mode = now.st_mode & 0o7777 & !SET_ID;
            std::fs::set_permissions(fd_path(&fd, None), std::fs::Permissions::from_mode(mode))
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("clearing setuid of {shown}: {e}"))
                })?;
            out.set_id.push(shown.clone());
        }
        if m.capability {
            match xattr::remove_deref(fd_path(&fd, None), CAPABILITY) {
                Ok(()) => out.capabilities.push(shown),
                Err(e) if e.raw_os_error() == Some(nix::libc::ENODATA) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("removing the file capability of {shown}: {e}"),
                    ));
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// What a walk does with each entry: its directory's handle, its name,
/// its stat (not following it) and its path relative to the root.
type Visit<'a> = dyn FnMut(&OwnedFd, &OsStr, &FileStat, &Path) -> io::Result<()> + 'a;

/// Visits every entry under `root`, directories opened relative to their
/// parent's handle with `O_NOFOLLOW` (a link is visited, never entered).
fn walk(root: &Path, visit: &mut Visit<'_>) -> io::Result<()> {
    let fd = nix::fcntl::open(root, DIR_FLAGS, Mode::empty())
        .map_err(|e| nix_err(e, "opening", root))?;
    walk_dir(&fd, Path::new(""), 0, visit)
}

fn walk_dir(dir: &OwnedFd, rel: &Path, depth: usize, visit: &mut Visit<'_>) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "{} is nested deeper than {MAX_DEPTH} directories",
            rel.display()
        )));
    }
    let mut names = Vec::new();
    let mut d = Dir::from_fd(dir.try_clone()?).map_err(|e| nix_err(e, "listing", rel))?;
    for entry in d.iter() {
        let entry = entry.map_err(|e| nix_err(e, "listing", rel))?;
        let bytes = entry.file_name().to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(bytes.to_vec());
        }
    }
    for name in names {
        let name = OsStr::from_bytes(&name);
        let path = rel.join(name);
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since the listing (a command still running).
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(nix_err(e, "reading", &path)),
        };
        visit(dir, name, &st, &path)?;
        if kind(&st) == SFlag::S_IFDIR {
            match openat(dir, name, DIR_FLAGS, Mode::empty()) {
                Ok(sub) => walk_dir(&sub, &path, depth + 1, visit)?,
                // Swapped for a link or removed since: not entered.
                Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => {}
                Err(e) => return Err(nix_err(e, "opening", &path)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn set_id_bits_and_capabilities_go_and_the_users_own_stay() {
        let ws = tempfile::tempdir().expect("tempdir");
        let theirs = ws.path().join("theirs");
        std::fs::write(&theirs, "x").expect("write");
        chmod(&theirs, 0o4755);
        let keep = baseline(ws.path()).expect("baseline");

        std::fs::create_dir_all(ws.path().join("a/b")).expect("mkdir");
        for (f, mode) in [("suid", 0o4755), ("a/b/sgid", 0o2711), ("plain", 0o644)] {
            std::fs::write(ws.path().join(f), "x").expect("write");
            chmod(&ws.path().join(f), mode);
        }
        // A link to a set-id file outside is a link: never followed.
        let outside = tempfile::tempdir().expect("tempdir");
        let target = outside.path().join("t");
        std::fs::write(&target, "x").expect("write");
        chmod(&target, 0o4755);
        std::os::unix::fs::symlink(&target, ws.path().join("link")).expect("link");
        // CAP_SETUID=ep, as `setcap cap_setuid+ep` writes it.
        let cap: [u8; 20] = [
            1, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let capped = ws.path().join("capped");
        std::fs::write(&capped, "x").expect("write");
        let can_cap = xattr::set(&capped, CAPABILITY, &cap).is_ok();
        // Root sets it on any filesystem with xattrs, which /tmp is here.
        assert!(can_cap || !nix::unistd::geteuid().is_root());

        let s = strip(ws.path(), &keep).expect("strip");
        let mode = |f: &str| std::fs::metadata(ws.path().join(f)).expect("stat").mode() & 0o7777;
        assert_eq!(
            (mode("suid"), mode("a/b/sgid"), mode("plain")),
            (0o755, 0o711, 0o644)
        );
        assert_eq!(mode("theirs"), 0o4755, "the user's own file was changed");
        assert_eq!(
            std::fs::metadata(&target).expect("stat").mode() & 0o7777,
            0o4755
        );
        let mut set_id = s.set_id.clone();
        set_id.sort();
        assert_eq!(set_id, ["a/b/sgid", "suid"]);
        if can_cap {
            assert_eq!(xattr::get(&capped, CAPABILITY).expect("get"), None);
            assert_eq!(s.capabilities, ["capped"]);
        }
        // Changing the user's file makes it the sandbox's.
        std::fs::write(&theirs, "changed").expect("write");
        chmod(&theirs, 0o4755);
        strip(ws.path(), &keep).expect("strip");
        assert_eq!(mode("theirs"), 0o755);
        assert!(strip(ws.path(), &keep).expect("strip").is_empty());
    }
}
