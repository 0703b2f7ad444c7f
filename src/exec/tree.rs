//! Copying a directory tree on the host without ever following a link:
//! every directory is opened relative to its parent's handle with
//! `O_NOFOLLOW`, links are copied as links, only directories, regular files
//! and links are copied (fifos, sockets and devices are skipped and named),
//! permission bits beyond 0o777 (setuid, setgid, sticky) are dropped, and
//! every new entry gets the given owner. Used to move a workspace into the
//! sandbox's size-limited filesystem and back.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::hostfs::{DIR_FLAGS, nix_err};
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, fchownat, symlinkat, unlinkat};

/// Deepest nesting copied; deeper entries are skipped and named.
const MAX_DEPTH: usize = 256;

/// What a copy left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CopyReport {
    /// Relative paths not copied (special files, too deep).
    pub skipped: Vec<String>,
    /// Bytes of regular files copied.
    pub bytes: u64,
}

fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| nix_err(e, "opening", path))
}

/// Copies the content of directory `src` into the existing, empty
/// directory `dst`; new entries are owned by `owner` when given.
pub fn copy_tree(src: &Path, dst: &Path, owner: Option<(u32, u32)>) -> io::Result<CopyReport> {
    let s = open_dir_path(src)?;
    let d = open_dir_path(dst)?;
    let mut report = CopyReport::default();
    if let Some((uid, gid)) = owner {
        fchown(
            d.as_fd(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
        )
        .map_err(|e| nix_err(e, "changing the owner of", dst))?;
    }
    copy_dir(&s, &d, Path::new(""), 0, owner, &mut report)?;
    Ok(report)
}

fn names(dir: &OwnedFd, rel: &Path) -> io::Result<Vec<(Vec<u8>, Option<Type>)>> {
    let dup = dir.try_clone()?;
    let mut d = Dir::from_fd(dup).map_err(|e| nix_err(e, "listing", rel))?;
    let mut out = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(|e| nix_err(e, "listing", rel))?;
        let name: &CStr = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        out.push((bytes.to_vec(), entry.file_type()));
    }
    Ok(out)
}

fn copy_dir(
    src: &OwnedFd,
    dst: &OwnedFd,
    rel: &Path,
    depth: usize,
    owner: Option<(u32, u32)>,
    report: &mut CopyReport,
) -> io::Result<()> {
    for (name, _) in names(src, rel)? {
        let name = OsStr::from_bytes(&name);
        let path = rel.join(name);
        let st: FileStat = fstatat(src, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| nix_err(e, "reading", &path))?;
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        let perm = Mode::from_bits_truncate(st.st_mode & 0o777);
        match kind {
            SFlag::S_IFDIR => {
                if depth >= MAX_DEPTH {
                    report.skipped.push(path.display().to_string());
                    continue;
                }
                mkdirat(dst, name, Mode::from_bits_truncate(0o700))
                    .map_err(|e| nix_err(e, "creating", &path))?;
                let s = openat(src, name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| nix_err(e, "opening", &path))?;
                let d = openat(dst, name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| nix_err(e, "opening", &path))?;
                copy_dir(&s, &d, &path, depth + 1, owner, report)?;
                fchmod(d.as_fd(), perm).map_err(|e| nix_err(e, "setting the mode of", &path))?;
                set_owner(&d, owner, &path)?;
            }
            SFlag::S_IFREG => {
                let s = openat(
                    src,
                    name,
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| nix_err(e, "opening", &path))?;
                let d = openat(
                    dst,
                    name,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    perm,
                )
                .map_err(|e| nix_err(e, "creating", &path))?;
                let (s, d) = (File::from(s), File::from(d));
                report.bytes += copy_data(&s, &d).map_err(|e| {
                    io::Error::new(e.kind(), format!("copying {}: {e}", path.display()))
                })?;
                // The creation mode was masked by the umask.
                fchmod(d.as_fd(), perm).map_err(|e| nix_err(e, "setting the mode of", &path))?;
                set_owner(&OwnedFd::from(d), owner, &path)?;
            }
            SFlag::S_IFLNK => {
                let target = readlinkat(src, name).map_err(|e| nix_err(e, "reading", &path))?;
                symlinkat(target.as_os_str(), dst, name)
                    .map_err(|e| nix_err(e, "creating", &path))?;
                if let Some((uid, gid)) = owner {
                    fchownat(
                        dst,
                        name,
                        Some(Uid::from_raw(uid)),
                        Some(Gid::from_raw(gid)),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(|e| nix_err(e, "changing the owner of", &path))?;
                }
            }
            _ => report.skipped.push(path.display().to_string()),
        }
    }
    Ok(())
}

/// Copies the data of `src` into the empty `dst`, keeping holes holes: a
/// sandbox can make files whose size is far larger than the space they
/// take (`truncate -s 1G f`, many times over), and copying their zeros
/// would write far more to the host than its disk limit. Only the data
/// segments (SEEK_DATA .. SEEK_HOLE) are read and written, so the copy
/// takes no more room, nor time, than the data really there. Returns the
/// bytes of data copied.
fn copy_data(src: &File, dst: &File) -> io::Result<u64> {
    use nix::unistd::{Whence, lseek};
    use std::io::{Read, Seek, SeekFrom, Write};
    let size = src.metadata()?.len();
    let (mut r, mut w) = (src, dst);
    let mut copied = 0u64;
    let mut pos: i64 = 0;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let start = match lseek(src, pos, Whence::SeekData) {
            Ok(o) => o,
            // No data past `pos`: the rest is a hole.
            Err(Errno::ENXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = lseek(src, start, Whence::SeekHole)?;
        // lseek returns no negative offset on success; one would be an
        // error, never a wrap to a huge seek.
        let offset = |o: i64| {
            u64::try_from(o).map_err(|_| io::Error::other(format!("lseek returned offset {o}")))
        };
        let (from, to) = (offset(start)?, offset(end)?);
        r.seek(SeekFrom::Start(from))?;
        w.seek(SeekFrom::Start(from))?;
        let mut left = to.saturating_sub(from);
        while left > 0 {
            let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n])?;
            left -= n as u64;
            copied += n as u64;
        }
        pos = end;
    }
    // A trailing hole keeps the file's size.
    dst.set_len(size)?;
    Ok(copied)
}

fn set_owner(fd: &OwnedFd, owner: Option<(u32, u32)>, path: &Path) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        fchown(
            fd.as_fd(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
        )
        .map_err(|e| nix_err(e, "changing the owner of", path))?;
    }
    Ok(())
}

/// Replaces the content of the host directory `dst` with a copy of `src`.
/// The copy goes to a staging directory inside `dst` first, so a failed
/// copy leaves `dst` as it was; then `dst`'s old entries are removed and
/// the staged ones renamed into place.
pub fn replace_contents(
    dst: &Path,
    src: &Path,
    owner: Option<(u32, u32)>,
) -> io::Result<CopyReport> {
    let d = open_dir_path(dst)?;
    let stage_name = format!(".runner-collect-{:08x}", fastrand::u32(..));
    mkdirat(&d, stage_name.as_str(), Mode::from_bits_truncate(0o700))
        .map_err(|e| nix_err(e, "creating a staging directory in", dst))?;
    let stage = dst.join(&stage_name);
    let report = match copy_tree(src, &stage, owner) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&stage);
            return Err(e);
        }
    };
    for (name, _) in names(&d, dst)? {
        if name == stage_name.as_bytes() {
            continue;
        }
        remove_entry(
            &d,
            OsStr::from_bytes(&name),
            &dst.join(OsStr::from_bytes(&name)),
        )?;
    }
    let s = openat(&d, stage_name.as_str(), DIR_FLAGS, Mode::empty())
        .map_err(|e| nix_err(e, "opening", &stage))?;
    for (name, _) in names(&s, &stage)? {
        let name = OsStr::from_bytes(&name);
        renameat(&s, name, &d, name)
            .map_err(|e| nix_err(e, "moving into place", &dst.join(name)))?;
    }
    unlinkat(&d, stage_name.as_str(), UnlinkatFlags::RemoveDir)
        .map_err(|e| nix_err(e, "removing", &stage))?;
    Ok(report)
}

/// Removes one entry of `dir` (a whole tree for a directory; links are
/// removed, never followed).
fn remove_entry(dir: &OwnedFd, name: &OsStr, path: &Path) -> io::Result<()> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| nix_err(e, "reading", path))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
        let sub =
            openat(dir, name, DIR_FLAGS, Mode::empty()).map_err(|e| nix_err(e, "opening", path))?;
        for (n, _) in names(&sub, path)? {
            let n = OsStr::from_bytes(&n);
            remove_entry(&sub, n, &path.join(n))?;
        }
        unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(|e| nix_err(e, "removing", path))
    } else {
        unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| nix_err(e, "removing", path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn copies_without_following_links_or_keeping_setuid() {
        let outside = tempfile::tempdir().expect("tempdir");
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "host").expect("write");
        let src = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(src.path().join("a/b")).expect("mkdir");
        std::fs::write(src.path().join("a/b/f.txt"), "data").expect("write");
        std::fs::write(src.path().join("suid"), "x").expect("write");
        std::fs::set_permissions(
            src.path().join("suid"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .expect("chmod");
        std::os::unix::fs::symlink(&canary, src.path().join("link")).expect("link");
        std::os::unix::fs::symlink(outside.path(), src.path().join("dirlink")).expect("link");
        nix::unistd::mkfifo(&src.path().join("fifo"), Mode::from_bits_truncate(0o644))
            .expect("fifo");
        let dst = tempfile::tempdir().expect("tempdir");
        let rep = copy_tree(src.path(), dst.path(), None).expect("copies");
        assert_eq!(rep.skipped, vec!["fifo".to_string()]);
        assert_eq!(
            std::fs::read_to_string(dst.path().join("a/b/f.txt")).expect("read"),
            "data"
        );
        let m = std::fs::metadata(dst.path().join("suid")).expect("stat");
        assert_eq!(m.mode() & 0o7777, 0o755, "setuid dropped");
        assert!(
            std::fs::symlink_metadata(dst.path().join("link"))
                .expect("l")
                .is_symlink()
        );
        assert!(
            std::fs::symlink_metadata(dst.path().join("dirlink"))
                .expect("l")
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "host");
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 1);
    }

    #[test]
    fn sparse_files_stay_sparse_and_data_is_exact() {
        let src = tempfile::tempdir().expect("tempdir");
        let dst = tempfile::tempdir().expect("tempdir");
        // 1 GiB of apparent size, 8 KiB of data in two places.
        let f = File::create(src.path().join("sparse")).expect("create");
        f.set_len(1 << 30).expect("size");
        let mut w = &f;
        use std::io::{Seek, SeekFrom, Write};
        w.seek(SeekFrom::Start(1 << 20)).expect("seek");
        w.write_all(&[7u8; 4096]).expect("write");
        w.seek(SeekFrom::Start(512 << 20)).expect("seek");
        w.write_all(&[9u8; 4096]).expect("write");
        drop(f);
        std::fs::write(src.path().join("plain"), b"abc").expect("write");
        let rep = copy_tree(src.path(), dst.path(), None).expect("copies");
        let m = std::fs::metadata(dst.path().join("sparse")).expect("stat");
        assert_eq!(m.len(), 1 << 30, "apparent size kept");
        assert!(
            m.blocks() * 512 < 4 << 20,
            "{} bytes allocated",
            m.blocks() * 512
        );
        assert!(rep.bytes < 1 << 20, "{} bytes copied", rep.bytes);
        let data = std::fs::read(dst.path().join("sparse")).expect("read");
        assert_eq!(&data[(1 << 20)..(1 << 20) + 4096], &[7u8; 4096][..]);
        assert_eq!(&data[(512 << 20)..(512 << 20) + 4096], &[9u8; 4096][..]);
        assert!(data[..(1 << 20)].iter().all(|b| *b == 0));
        assert_eq!(
            std::fs::read(dst.path().join("plain")).expect("read"),
            b"abc"
        );
    }

    #[test]
    fn replace_contents_swaps_the_tree_and_leaves_no_staging() {
        let dst = tempfile::tempdir().expect("tempdir");
        std::fs::write(dst.path().join("old.txt"), "old").expect("write");
        std::fs::create_dir(dst.path().join("olddir")).expect("mkdir");
        let src = tempfile::tempdir().expect("tempdir");
        std::fs::write(src.path().join("new.txt"), "new").expect("write");
        replace_contents(dst.path(), src.path(), None).expect("replaces");
        let names: Vec<_> = std::fs::read_dir(dst.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["new.txt".to_string()]);
    }
}
