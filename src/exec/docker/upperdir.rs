//! A container's filesystem changes read from its overlay upper directory
//! on the host, instead of the engine's diff: on fuse-overlayfs the engine
//! compares the whole merged tree with the whole image (seconds on a
//! Debian image), while everything the container changed is in its upper
//! directory (milliseconds).
//!
//! The list is the one the engine's (naive) diff makes: an entry of the
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
    Lower, OPAQUE_MARKER, WHITEOUT_PREFIX, is_dir, is_marker, is_opaque, is_whiteout, kind,
    open_root, stat_at, xattr_at,
};
use crate::exec::{ChangeKind, FsChange, FsChanges};

/// Deepest nesting walked; deeper makes the walk give up.
pub const MAX_WALK_DEPTH: usize = 512;
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
    fn shown(&self) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(self.path))
    }

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
        if self.entries % 256 == 0 && self.started.elapsed() > self.budget {
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
        // In name order, so the same changes make the same list.
        let mut names = super::overlay::entries(upper, &shown)?;
        names.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
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
        if !opaque && here.lower.lookup(name)?.is_some() {
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
