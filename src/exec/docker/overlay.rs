//! Reading an overlay filesystem's layers on the host the way the overlay
//! itself merges them: whiteouts (a character device 0:0, or a `.wh.NAME`
//! file) hide a name of the layers below, an opaque directory (the
//! `trusted.overlay.opaque` or `user.fuseoverlayfs.opaque` attribute, or a
//! `.wh..wh..opq` entry) hides all of them. Every directory is opened with
//! `O_NOFOLLOW | O_DIRECTORY` relative to its parent's handle and every
//! entry is looked at with `AT_SYMLINK_NOFOLLOW`: the layers hold what a
//! sandbox wrote, and nothing it made is ever followed on the host.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};

use crate::hostfs::{DIR_FLAGS, nix_err};

/// The prefix of a whiteout file's name: `.wh.NAME` hides `NAME`.
pub const WHITEOUT_PREFIX: &[u8] = b".wh.";
/// The entry that marks its directory opaque (aufs style, which
/// fuse-overlayfs also writes).
pub const OPAQUE_MARKER: &[u8] = b".wh..wh..opq";
/// The attributes that mark a directory opaque, with the value `y`: the
/// kernel's, and fuse-overlayfs' when it cannot write `trusted.*`.
const OPAQUE_XATTRS: [&str; 2] = ["trusted.overlay.opaque", "user.fuseoverlayfs.opaque"];

/// The kind bits of a stat's mode.
pub fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Whether an entry is a directory.
pub fn is_dir(st: &FileStat) -> bool {
    kind(st) == SFlag::S_IFDIR
}

/// Whether an entry is an overlay whiteout: a character device 0:0.
pub fn is_whiteout(st: &FileStat) -> bool {
    kind(st) == SFlag::S_IFCHR && st.st_rdev == 0
}

/// Whether `name` is an overlay bookkeeping entry rather than a file of
/// the merged view: a `.wh.` whiteout or opaque marker.
pub fn is_marker(name: &[u8]) -> bool {
    name.starts_with(WHITEOUT_PREFIX)
}

/// An entry of directory `dir`, not followed; `None` when it is absent.
pub fn stat_at(dir: &OwnedFd, name: &OsStr, shown: &Path) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(nix_err(e, "reading", &shown.join(name))),
    }
}

/// Opens the subdirectory `name` of `dir`; a link there is refused.
pub fn open_dir_at(dir: &OwnedFd, name: &OsStr, shown: &Path) -> io::Result<OwnedFd> {
    openat(dir, name, DIR_FLAGS, Mode::empty())
        .map_err(|e| nix_err(e, "opening", &shown.join(name)))
}

/// Opens a layer's root directory (a path the engine gave, not one the
/// sandbox made); the directory itself must not be a link.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| nix_err(e, "opening", path))
}

/// The entries of directory `dir` with their types as listed (without
/// `.` and `..`), in the order the filesystem gives them; more than `max`
/// is an error, so a directory of millions of entries is never held.
pub fn entries(
    dir: &OwnedFd,
    shown: &Path,
    max: usize,
) -> io::Result<Vec<(OsString, Option<Type>)>> {
    let dup = dir.try_clone()?;
    let mut d = Dir::from_fd(dup).map_err(|e| nix_err(e, "listing", shown))?;
    let mut out = Vec::new();
    for entry in d.iter() {
        if out.len() >= max {
            return Err(io::Error::other(format!(
                "{} holds more than {max} entries",
                shown.display()
            )));
        }
        let entry = entry.map_err(|e| nix_err(e, "listing", shown))?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        out.push((OsString::from_vec(bytes.to_vec()), entry.file_type()));
    }
    Ok(out)
}

/// The extended attribute `key` of entry `name` of `dir`, not followed.
/// The path goes through `/proc/self/fd`, whose entry is the open
/// directory itself (not a path looked up again), so only `name` is
/// resolved, and `lgetxattr` does not follow it.
pub fn xattr_at(dir: &OwnedFd, name: &OsStr, key: &str) -> io::Result<Option<Vec<u8>>> {
    let mut path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    path.push(name);
    none_if_unsupported(xattr::get(&path, key))
}

/// An attribute read where the filesystem keeps none: absent.
fn none_if_unsupported(read: io::Result<Option<Vec<u8>>>) -> io::Result<Option<Vec<u8>>> {
    match read {
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTSUP) => Ok(None),
        other => other,
    }
}

/// Whether entry `name` of `dir` has its owner or mode kept in an
/// attribute (fuse-overlayfs' `override_stat`, when it runs without the
/// right to set them): what the host sees is then not what the
/// container sees.
pub fn overrides_stat(dir: &OwnedFd, name: &OsStr) -> io::Result<bool> {
    let mut path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    path.push(name);
    let names = match xattr::list(&path) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTSUP) => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(names
        .into_iter()
        .any(|n| n.as_bytes().ends_with(b".override_stat")))
}

/// Whether `name` is one entry's name (whiteouts name what they hide,
/// and `.wh...` must not name the parent).
pub fn is_plain_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/')
}

/// Whether the open directory `dir` is opaque: the layers below it do not
/// show through.
pub fn is_opaque(dir: &OwnedFd, shown: &Path) -> io::Result<bool> {
    use xattr::FileExt as _;
    let file = std::fs::File::from(dir.try_clone()?);
    for key in OPAQUE_XATTRS {
        if none_if_unsupported(file.get_xattr(key))?.as_deref() == Some(b"y") {
            return Ok(true);
        }
    }
    Ok(stat_at(dir, OsStr::from_bytes(OPAQUE_MARKER), shown)?.is_some())
}

/// `.wh.NAME`, the whiteout file of `name`.
fn whiteout_name(name: &OsStr) -> OsString {
    let mut v = WHITEOUT_PREFIX.to_vec();
    v.extend_from_slice(name.as_bytes());
    OsString::from_vec(v)
}

/// One directory of the merged lower layers: the layers' copies of it
/// that show through, topmost first (empty: no such directory below).
#[derive(Debug, Default)]
pub struct Lower {
    dirs: Vec<OwnedFd>,
    path: PathBuf,
}

/// An entry of the lower layers as the merged view shows it.
#[derive(Debug)]
pub struct LowerEntry {
    /// The topmost layer's entry.
    pub stat: FileStat,
    /// When it is a directory, the merged directory.
    pub dir: Lower,
    /// Which layer of the directory it was looked up in holds it.
    pub layer: usize,
}

impl Lower {
    /// The merged root of `layers`, topmost first.
    pub fn roots(layers: &[PathBuf]) -> io::Result<Lower> {
        let dirs = layers
            .iter()
            .map(|p| open_root(p))
            .collect::<io::Result<_>>()?;
        Ok(Lower {
            dirs,
            path: PathBuf::from("/"),
        })
    }

    /// No directory: everything looked up in it is absent.
    pub fn empty() -> Lower {
        Lower::default()
    }

    /// The entry `name` as the merged lower layers show it, or `None`
    /// when no layer has it or a whiteout above hides it.
    pub fn lookup(&self, name: &OsStr) -> io::Result<Option<LowerEntry>> {
        if !is_plain_name(name) {
            return Ok(None);
        }
        let mut found: Option<LowerEntry> = None;
        for (at, layer) in self.dirs.iter().enumerate() {
            let Some(st) = stat_at(layer, name, &self.path)? else {
                if stat_at(layer, &whiteout_name(name), &self.path)?.is_some() {
                    break;
                }
                continue;
            };
            if is_whiteout(&st) {
                break;
            }
            let child = self.path.join(name);
            match &mut found {
                None if is_dir(&st) => {
                    let fd = open_dir_at(layer, name, &self.path)?;
                    let opaque = is_opaque(&fd, &child)?;
                    let dir = Lower {
                        dirs: vec![fd],
                        path: child,
                    };
                    found = Some(LowerEntry {
                        stat: st,
                        dir,
                        layer: at,
                    });
                    if opaque {
                        break;
                    }
                }
                // A file hides whatever the layers below have there.
                None => {
                    found = Some(LowerEntry {
                        stat: st,
                        dir: Lower::empty(),
                        layer: at,
                    });
                    break;
                }
                Some(top) if is_dir(&st) => {
                    let fd = open_dir_at(layer, name, &self.path)?;
                    let opaque = is_opaque(&fd, &child)?;
                    top.dir.dirs.push(fd);
                    if opaque {
                        break;
                    }
                }
                // A file below a directory does not show through it.
                Some(_) => break,
            }
        }
        Ok(found)
    }

    /// The names this merged directory shows, each once, in the layers'
    /// order; `seen_max` bounds how many entries are read in all.
    pub fn names(&self, seen_max: usize) -> io::Result<Vec<OsString>> {
        let mut seen: HashSet<OsString> = HashSet::new();
        let mut shown = Vec::new();
        for layer in &self.dirs {
            let left = seen_max.saturating_sub(seen.len());
            for (name, ty) in entries(layer, &self.path, left)? {
                let bytes = name.as_bytes();
                if bytes == OPAQUE_MARKER || bytes == b".wh..opq" {
                    continue;
                }
                if let Some(hidden) = bytes.strip_prefix(WHITEOUT_PREFIX) {
                    seen.insert(OsStr::from_bytes(hidden).to_os_string());
                    continue;
                }
                if !seen.insert(name.clone()) {
                    continue;
                }
                // A device could be a whiteout: look, without following.
                let whiteout = matches!(ty, Some(Type::CharacterDevice) | None)
                    && stat_at(layer, &name, &self.path)?.is_some_and(|st| is_whiteout(&st));
                if !whiteout {
                    shown.push(name);
                }
            }
        }
        Ok(shown)
    }

    /// The extended attribute `key` of `entry`, looked up here as `name`.
    pub fn xattr_of(
        &self,
        entry: &LowerEntry,
        name: &OsStr,
        key: &str,
    ) -> io::Result<Option<Vec<u8>>> {
        match self.dirs.get(entry.layer) {
            Some(layer) => xattr_at(layer, name, key),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn names_of(l: &Lower) -> Vec<String> {
        let mut v: Vec<String> = l
            .names(1000)
            .expect("names")
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn whiteouts_and_opaque_directories_hide_the_layers_below() {
        let top = tempfile::tempdir().expect("tempdir");
        let bottom = tempfile::tempdir().expect("tempdir");
        let (t, b) = (top.path(), bottom.path());
        for d in ["a", "o", "f"] {
            fs::create_dir(b.join(d)).expect("mkdir");
        }
        for f in ["a/x", "a/y", "a/z", "o/old", "f/in", "gone"] {
            fs::write(b.join(f), "b").expect("write");
        }
        fs::create_dir(t.join("a")).expect("mkdir");
        fs::write(t.join("a/.wh.x"), "").expect("write");
        fs::write(t.join("a/new"), "t").expect("write");
        fs::create_dir(t.join("o")).expect("mkdir");
        fs::write(t.join("o/.wh..wh..opq"), "").expect("write");
        fs::write(t.join("o/mine"), "t").expect("write");
        // A file over a directory hides it.
        fs::write(t.join("f"), "t").expect("write");
        fs::write(t.join(".wh.gone"), "").expect("write");
        let root = Lower::roots(&[t.to_path_buf(), b.to_path_buf()]).expect("roots");
        assert_eq!(names_of(&root), ["a", "f", "o"]);
        assert!(root.lookup(OsStr::new("gone")).expect("lookup").is_none());
        let a = root.lookup(OsStr::new("a")).expect("lookup").expect("a");
        assert_eq!(names_of(&a.dir), ["new", "y", "z"]);
        assert!(a.dir.lookup(OsStr::new("x")).expect("lookup").is_none());
        let o = root.lookup(OsStr::new("o")).expect("lookup").expect("o");
        assert_eq!(names_of(&o.dir), ["mine"]);
        let f = root.lookup(OsStr::new("f")).expect("lookup").expect("f");
        assert!(!is_dir(&f.stat) && f.dir.names(10).expect("names").is_empty());
    }

    #[test]
    fn links_in_a_layer_are_never_followed() {
        let layer = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        fs::write(outside.path().join("secret"), "host").expect("write");
        std::os::unix::fs::symlink(outside.path(), layer.path().join("d")).expect("link");
        let root = Lower::roots(&[layer.path().to_path_buf()]).expect("roots");
        let d = root.lookup(OsStr::new("d")).expect("lookup").expect("d");
        assert_eq!(kind(&d.stat), SFlag::S_IFLNK);
        assert!(d.dir.names(10).expect("names").is_empty());
        assert!(
            d.dir
                .lookup(OsStr::new("secret"))
                .expect("lookup")
                .is_none()
        );
        assert!(Lower::roots(&[layer.path().join("d")]).is_err());
    }
}
