//! A container's filesystem changes read from its overlay upper directory
//! on the host, instead of the engine's diff: on fuse-overlayfs the engine
//! compares the whole merged tree with the whole image (seconds on a
//! Debian image), while everything the container changed is in its upper
//! directory (milliseconds).
//!
//! The list is the one the engine's naive diff (fuse-overlayfs') makes: an entry of the
//! upper directory that the lower layers do not show is added (and so is
//! everything under it); one they show is modified when its mode, owner,
//! device, or (not for directories) size or modification time differ, or
//! its file capability; a whiteout of a name the lower layers show is a
//! deletion; an opaque directory deletes every name of the lower layers
//! it does not have itself; and a directory that is not itself listed but
//! holds a listed change is modified (the root excepted).
//!
//! The upper directory is written by the sandbox: nothing in it is
//! followed (see [`super::overlay`]), and the walk is bounded in depth,
//! entries and time; past a bound it stops and says why, and the caller
//! asks the engine instead.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::stat::{FileStat, SFlag};

use super::overlay::{
    Lower, OPAQUE_MARKER, WHITEOUT_PREFIX, is_dir, is_marker, is_opaque, is_plain_name,
    is_whiteout, kind, open_root, overrides_stat, stat_at, xattr_at,
};
use crate::exec::{ChangeKind, FsChange, FsChanges};

/// Deepest nesting walked; deeper makes the walk give up (the walk
/// recurses, on a blocking thread's 2 MiB stack).
pub const MAX_WALK_DEPTH: usize = 128;
/// Most upper-directory entries looked at before giving up.
pub const MAX_WALK_ENTRIES: usize = 2_000_000;
/// The file capability attribute, which the engine's diff compares too.
const CAPABILITY_XATTR: &str = "security.capability";

/// Why a walk of the upper directory gave up.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("reading the layers failed: {0}")]
    Io(#[from] io::Error),
    #[error("deeper than {MAX_WALK_DEPTH} directories at {0}")]
    TooDeep(String),
    #[error("more than {MAX_WALK_ENTRIES} entries")]
    TooManyEntries,
    #[error("{0} keeps its owner or mode in an attribute")]
    StatOverride(String),
    #[error("not done within {0:?}")]
    OverBudget(Duration),
}

/// The bounds of one walk.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Changes kept; the rest are counted.
    pub keep: usize,
    /// How long the walk may take.
    pub budget: Duration,
}

/// The changes of the overlay with upper directory `upper` over the lower
/// layers `lowers` (topmost first), as the engine's diff lists them.
pub fn changes(upper: &Path, lowers: &[PathBuf], bounds: Bounds) -> Result<FsChanges, WalkError> {
    let root = open_root(upper)?;
    let lower = Lower::roots(lowers)?;
    let mut walk = Walk {
        out: FsChanges::default(),
        keep: bounds.keep,
        started: Instant::now(),
        budget: bounds.budget,
        entries: 0,
    };
    let opaque = is_opaque(&root, Path::new("/"))?;
    walk.dir(&root, &lower, b"", opaque, 0)?;
    Ok(walk.out)
}

/// The state of one walk: what was found and what is left of its bounds.
struct Walk {
    out: FsChanges,
    keep: usize,
    started: Instant,
    budget: Duration,
    entries: usize,
}

/// One directory being walked: its handle in the upper layer, the lower
/// layers' view of it, and its path in the container.
struct Here<'a> {
    upper: &'a OwnedFd,
    lower: &'a Lower,
    path: &'a [u8],
}

impl Here<'_> {
    /// The directory's path in the container, for messages.
    fn shown(&self) -> PathBuf {
        if self.path.is_empty() {
            return PathBuf::from("/");
        }
        PathBuf::from(OsStr::from_bytes(self.path))
    }

    /// The path in the container of entry `name` of this directory.
    fn child(&self, name: &OsStr) -> Vec<u8> {
        let mut p = self.path.to_vec();
        p.push(b'/');
        p.extend_from_slice(name.as_bytes());
        p
    }
}

impl Walk {
    /// How many changes were found so far, kept or not.
    fn total(&self) -> usize {
        self.out.changes.len() + self.out.omitted
    }

    /// Keeps a change at the end of the list (or counts it).
    fn push(&mut self, kind: ChangeKind, path: &[u8]) {
        let at = self.out.changes.len();
        self.insert(at, kind, path);
    }

    /// Keeps a change at index `at` of the kept list (a directory goes
    /// before what changed inside it, as in the engine's list), or counts
    /// it when the list is full; one pushed out of a full list is counted.
    fn insert(&mut self, at: usize, kind: ChangeKind, path: &[u8]) {
        if at >= self.keep {
            self.out.omitted += 1;
            return;
        }
        let change = FsChange {
            kind,
            path: engine_text(path),
        };
        self.out
            .changes
            .insert(at.min(self.out.changes.len()), change);
        if self.out.changes.len() > self.keep {
            self.out.changes.truncate(self.keep);
            self.out.omitted += 1;
        }
    }

    /// Counts one entry against the bounds.
    fn tick(&mut self) -> Result<(), WalkError> {
        self.entries += 1;
        if self.entries > MAX_WALK_ENTRIES {
            return Err(WalkError::TooManyEntries);
        }
        if self.entries.is_multiple_of(256) && self.started.elapsed() > self.budget {
            return Err(WalkError::OverBudget(self.budget));
        }
        Ok(())
    }

    /// Walks the upper directory `upper` at `path`; `opaque` when the lower
    /// layers' content of it does not show through (it or a parent is
    /// opaque).
    fn dir(
        &mut self,
        upper: &OwnedFd,
        lower: &Lower,
        path: &[u8],
        opaque: bool,
        depth: usize,
    ) -> Result<(), WalkError> {
        if depth >= MAX_WALK_DEPTH {
            return Err(WalkError::TooDeep(engine_text(path)));
        }
        let here = Here { upper, lower, path };
        let shown = here.shown();
        let mut present: HashSet<OsString> = HashSet::new();
        // In name order (a whiteout at the name it hides), so the same
        // changes make the same list.
        let left = MAX_WALK_ENTRIES.saturating_sub(self.entries);
        let mut names = super::overlay::entries(upper, &shown, left)?;
        names.sort_unstable_by(|a, b| sort_key(&a.0).cmp(sort_key(&b.0)));
        for (name, _) in names {
            self.tick()?;
            let bytes = name.as_bytes();
            if bytes == OPAQUE_MARKER || bytes == b".wh..opq" {
                continue;
            }
            if is_marker(bytes) {
                let hidden = OsStr::from_bytes(&bytes[WHITEOUT_PREFIX.len()..]);
                self.whiteout(&here, hidden, opaque)?;
                continue;
            }
            let Some(st) = stat_at(upper, &name, &shown)? else {
                // Removed while walking: the engine would not see it either.
                continue;
            };
            if is_whiteout(&st) {
                self.whiteout(&here, &name, opaque)?;
                continue;
            }
            present.insert(name.clone());
            self.entry(&here, &name, &st, opaque, depth)?;
        }
        if opaque {
            // Everything of the lower layers not here is gone.
            let seen_max = MAX_WALK_ENTRIES.saturating_sub(self.entries);
            let mut gone = lower.names(seen_max)?;
            gone.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            for name in gone {
                self.tick()?;
                if !present.contains(&name) {
                    self.push(ChangeKind::Deleted, &here.child(&name));
                }
            }
        }
        Ok(())
    }

    /// A whiteout of `name` in `here`: a deletion when the lower layers
    /// show that name (an opaque directory's deletions are listed from the
    /// lower layers instead).
    fn whiteout(&mut self, here: &Here<'_>, name: &OsStr, opaque: bool) -> Result<(), WalkError> {
        if !opaque && is_plain_name(name) && here.lower.lookup(name)?.is_some() {
            self.push(ChangeKind::Deleted, &here.child(name));
        }
        Ok(())
    }

    /// An entry of the upper layer that the merged view shows.
    fn entry(
        &mut self,
        here: &Here<'_>,
        name: &OsStr,
        st: &FileStat,
        opaque: bool,
        depth: usize,
    ) -> Result<(), WalkError> {
        let path = here.child(name);
        if overrides_stat(here.upper, name)? {
            return Err(WalkError::StatOverride(engine_text(&path)));
        }
        let below = here.lower.lookup(name)?;
        let listed = match &below {
            None => {
                self.push(ChangeKind::Added, &path);
                true
            }
            Some(old) if differs(&old.stat, st) || capability_differs(here, name, old, st)? => {
                self.push(ChangeKind::Modified, &path);
                true
            }
            Some(_) => false,
        };
        if !is_dir(st) {
            return Ok(());
        }
        let shown = here.shown();
        let fd = super::overlay::open_dir_at(here.upper, name, &shown)?;
        let opaque = opaque || is_opaque(&fd, &shown.join(name))?;
        let empty = Lower::empty();
        let lower = below.as_ref().map_or(&empty, |b| &b.dir);
        let (before, at) = (self.total(), self.out.changes.len());
        self.dir(&fd, lower, &path, opaque, depth + 1)?;
        if !listed && self.total() > before {
            self.insert(at, ChangeKind::Modified, &path);
        }
        Ok(())
    }
}

/// Where an upper entry sorts: a whiteout at the name it hides.
fn sort_key(name: &OsStr) -> &[u8] {
    let bytes = name.as_bytes();
    bytes.strip_prefix(WHITEOUT_PREFIX).unwrap_or(bytes)
}

/// Whether the engine's diff counts an entry changed from `old` to `new`:
/// mode (with the kind), owner, group or device differ, or, except for
/// directories, size or modification time (as the engine compares them:
/// equal seconds, and equal nanoseconds unless either is zero).
fn differs(old: &FileStat, new: &FileStat) -> bool {
    if old.st_mode != new.st_mode
        || old.st_uid != new.st_uid
        || old.st_gid != new.st_gid
        || old.st_rdev != new.st_rdev
    {
        return true;
    }
    if kind(old) == SFlag::S_IFDIR {
        return false;
    }
    let same_time = old.st_mtime == new.st_mtime
        && (old.st_mtime_nsec == new.st_mtime_nsec
            || old.st_mtime_nsec == 0
            || new.st_mtime_nsec == 0);
    !same_time || old.st_size != new.st_size
}

/// Whether a regular file's capability attribute differs from the lower
/// layer's (the engine's diff compares it too); other kinds have none.
fn capability_differs(
    here: &Here<'_>,
    name: &OsStr,
    old: &super::overlay::LowerEntry,
    new: &FileStat,
) -> io::Result<bool> {
    if kind(new) != SFlag::S_IFREG || kind(&old.stat) != SFlag::S_IFREG {
        return Ok(false);
    }
    let mine = xattr_at(here.upper, name, CAPABILITY_XATTR)?;
    let theirs = here.lower.xattr_of(old, name, CAPABILITY_XATTR)?;
    Ok(mine != theirs)
}

/// A path as the engine's JSON carries it: each byte that is not part of
/// valid UTF-8 becomes U+FFFD (Go's encoder replaces byte by byte).
pub fn engine_text(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for chunk in path.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    const ALL: Bounds = Bounds {
        keep: 1000,
        budget: Duration::from_secs(60),
    };

    fn list(c: &FsChanges) -> Vec<(ChangeKind, &str)> {
        c.iter().map(|c| (c.kind, c.path.as_str())).collect()
    }

    /// A lower layer with /etc/{a,b}, /opt/old/{x,y} and /bin/tool, and an
    /// empty upper directory.
    fn layers() -> (tempfile::TempDir, tempfile::TempDir) {
        let (upper, lower) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let l = lower.path();
        for d in ["etc", "opt/old", "bin"] {
            fs::create_dir_all(l.join(d)).unwrap();
        }
        for f in ["etc/a", "etc/b", "opt/old/x", "opt/old/y", "bin/tool"] {
            fs::write(l.join(f), "lower").unwrap();
        }
        (upper, lower)
    }

    fn walk(upper: &Path, lower: &Path, bounds: Bounds) -> Result<FsChanges, WalkError> {
        changes(upper, &[lower.to_path_buf()], bounds)
    }

    #[test]
    fn upper_entries_become_the_engines_kinds() {
        use ChangeKind::{Added as A, Deleted as D, Modified as M};
        let (upper, lower) = layers();
        let u = upper.path();
        for d in ["etc", "opt/old", "bin", "new/deep"] {
            fs::create_dir_all(u.join(d)).unwrap();
        }
        fs::write(u.join("etc/a"), "changed, and longer").unwrap();
        fs::write(u.join("etc/.wh.b"), "").unwrap();
        fs::write(u.join("etc/.wh.never-there"), "").unwrap();
        fs::write(u.join("new/deep/f"), "").unwrap();
        // `rm -rf /opt/old && mkdir /opt/old && touch /opt/old/y`.
        fs::write(u.join("opt/old/.wh..wh..opq"), "").unwrap();
        fs::write(u.join("opt/old/y"), "new").unwrap();
        // A directory copied up with nothing changed in it is not listed.
        let got = walk(u, lower.path(), ALL).unwrap();
        assert_eq!(
            list(&got),
            [
                (M, "/etc"),
                (M, "/etc/a"),
                (D, "/etc/b"),
                (A, "/new"),
                (A, "/new/deep"),
                (A, "/new/deep/f"),
                (M, "/opt"),
                (M, "/opt/old"),
                (M, "/opt/old/y"),
                (D, "/opt/old/x"),
            ]
        );
        assert_eq!(got.omitted, 0);
    }

    #[test]
    fn the_list_is_cut_at_the_cap_and_the_rest_counted() {
        let (upper, lower) = layers();
        for i in 0..10 {
            fs::write(upper.path().join(format!("f{i}")), "").unwrap();
        }
        let cut = Bounds { keep: 4, ..ALL };
        let got = walk(upper.path(), lower.path(), cut).unwrap();
        assert_eq!((got.len(), got.omitted), (4, 6));
        // A directory listed after its content still goes before it.
        let (upper, lower) = layers();
        fs::create_dir(upper.path().join("etc")).unwrap();
        for i in 0..5 {
            fs::write(upper.path().join(format!("etc/n{i}")), "").unwrap();
        }
        let got = walk(upper.path(), lower.path(), Bounds { keep: 3, ..ALL }).unwrap();
        assert_eq!(got[0].path, "/etc");
        assert_eq!((got.len(), got.omitted), (3, 3));
    }

    #[test]
    fn too_deep_too_slow_and_not_utf8_are_handled() {
        let (upper, lower) = layers();
        let mut p = upper.path().to_path_buf();
        for _ in 0..MAX_WALK_DEPTH + 1 {
            p.push("d");
        }
        fs::create_dir_all(&p).unwrap();
        // Half the stack of a blocking thread is enough to reach the cap.
        let (u, l) = (upper.path().to_path_buf(), lower.path().to_path_buf());
        let deep = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || walk(&u, &l, ALL))
            .unwrap()
            .join()
            .unwrap();
        assert!(matches!(deep, Err(WalkError::TooDeep(_))), "{deep:?}");
        let (upper, lower) = layers();
        for i in 0..600 {
            fs::write(upper.path().join(format!("f{i}")), "").unwrap();
        }
        let none = Bounds {
            budget: Duration::ZERO,
            ..ALL
        };
        assert!(matches!(
            walk(upper.path(), lower.path(), none),
            Err(WalkError::OverBudget(_))
        ));
        assert_eq!(
            engine_text(b"/a\n\xff\xfe\xe2\x82x"),
            "/a\n\u{fffd}\u{fffd}\u{fffd}\u{fffd}x"
        );
    }

    #[test]
    fn odd_whiteouts_and_stat_overrides_are_not_taken_at_their_word() {
        let (upper, lower) = layers();
        // `.wh...` would hide the parent, `.wh.` nothing: neither is listed,
        // and nothing outside the layer is looked at.
        for n in [".wh...", ".wh..", ".wh."] {
            fs::write(upper.path().join(n), "").unwrap();
        }
        let got = walk(upper.path(), lower.path(), ALL).unwrap();
        assert!(got.is_empty(), "{got:?}");
        // Owner and mode kept in an attribute: the host's stat is not the
        // container's, so the walk gives up.
        fs::write(upper.path().join("f"), "").unwrap();
        xattr::set(
            upper.path().join("f"),
            "user.fuseoverlayfs.override_stat",
            b"0:0:0755",
        )
        .unwrap();
        assert!(matches!(
            walk(upper.path(), lower.path(), ALL),
            Err(WalkError::StatOverride(p)) if p == "/f"
        ));
    }

    #[test]
    fn links_are_listed_and_never_entered_even_when_swapped_in() {
        let (upper, lower) = layers();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("host-secret"), "host").unwrap();
        symlink(outside.path(), upper.path().join("link")).unwrap();
        // Over a lower directory: modified, and its content not looked at.
        symlink(outside.path(), upper.path().join("bin")).unwrap();
        let got = walk(upper.path(), lower.path(), ALL).unwrap();
        assert_eq!(
            list(&got),
            [(ChangeKind::Modified, "/bin"), (ChangeKind::Added, "/link")]
        );
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (d, target, stop) = (
                upper.path().join("race"),
                outside.path().to_path_buf(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = fs::create_dir(&d);
                    let _ = fs::write(d.join("mine"), "");
                    let _ = fs::remove_dir_all(&d);
                    let _ = symlink(&target, &d);
                    let _ = fs::remove_file(&d);
                }
            })
        };
        let mut read = 0;
        for _ in 0..500 {
            if let Ok(got) = walk(upper.path(), lower.path(), ALL) {
                read += 1;
                assert!(
                    got.iter().all(|c| !c.path.contains("host-secret")),
                    "{got:?}"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(read > 0, "every walk gave up");
    }
}
