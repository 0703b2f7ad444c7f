//! runner's temporary directories on the host, named in one place, and
//! their sweep by `runner gc`.
//!
//! Each is made in the temp directory with its kind's prefix followed by
//! its owner, the runner process's pid and start time (`runner-ws-
//! 4242.987654-Ab3xYz`; a channel `/run/runner/ch-4242.987654-Ab3xYz`, see
//! [`super::host_dirs`]). A runner killed with SIGKILL cannot remove its own;
//! `runner gc` removes those whose owner is gone, checked the way
//! containers' owner labels are ([`super::liveness`]), and never a live
//! runner's. The owner is in the name, not in a file inside, because what
//! is inside a workspace or a channel directory is partly the sandbox's
//! doing: a forged owner file could make gc remove a live run's directory.
//!
//! Removal does not follow links: `std::fs::remove_dir_all` unlinks a link
//! found inside the tree instead of descending through it, and a top-level
//! entry that is a link is left alone.
//!
//! The disks of `--disk` (`runner-disk-`, [`super::disk`]) hold a dead
//! run's work and are recovered by their own sweep, which runs first.

use std::path::{Path, PathBuf};

use super::{host_dirs, liveness};

/// A run's scratch workspace (no `--workspace`), an eval attempt's.
pub const WORKSPACE_PREFIX: &str = "runner-ws-";
/// An eval suite's cache of seeded image working directories.
pub const SEED_PREFIX: &str = "runner-seed-";
/// A Terminal-Bench 1 task mapped to Harbor's layout.
pub const TB1_PREFIX: &str = "runner-tb1-";
/// The local executor's root for a task's absolute paths.
pub const LOCAL_ROOT_PREFIX: &str = "runner-local-root-";

/// Every prefix [`sweep`] looks at in the temp directory (the channel
/// directories of older runners were there too).
pub const ALL_PREFIXES: [&str; 5] = [
    host_dirs::LEGACY_CHANNEL_PREFIX,
    WORKSPACE_PREFIX,
    SEED_PREFIX,
    TB1_PREFIX,
    LOCAL_ROOT_PREFIX,
];

/// The suffix of the marker beside a scratch workspace kept for the user
/// (`--keep-workspace`, or a run that did not complete): gc leaves it.
const KEPT_SUFFIX: &str = ".kept";

/// Makes a new temporary directory of the kind `prefix` owned by this
/// process (see the module's documentation).
pub fn create(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    create_in(&std::env::temp_dir(), prefix)
}

/// As [`create`], in `base`.
pub fn create_in(base: &Path, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let pid = std::process::id();
    let start = liveness::process_start(pid).unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{pid}.{start}-"))
        .tempdir_in(base)
}

/// Marks the scratch workspace `dir` as kept for the user, so that gc
/// does not take it when its runner has exited.
pub fn mark_kept(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let Some(marker) = kept_marker(dir) else {
        return Ok(());
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&marker)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn kept_marker(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    Some(dir.with_file_name(format!("{name}{KEPT_SUFFIX}")))
}

/// A directory's owner, read from its name after the prefix.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    Process {
        pid: u32,
        start: String,
    },
    /// Named before owners were recorded.
    Unrecorded,
}

fn owner_of(rest: &str) -> Option<Owner> {
    let Some((owner, _random)) = rest.rsplit_once('-') else {
        return Some(Owner::Unrecorded);
    };
    let (pid, start) = owner.split_once('.')?;
    Some(Owner::Process {
        pid: pid.parse().ok()?,
        start: start.to_string(),
    })
}

/// What a sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    pub removed: Vec<PathBuf>,
    pub errors: Vec<String>,
}

/// Seconds since the epoch at which this host booted (`btime`).
fn boot_time() -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Whether the entry `name` (a directory, not a link) of the temp dir is
/// a dead runner's to remove.
fn is_abandoned(dir: &Path, name: &str, meta: &std::fs::Metadata, prefixes: &[&str]) -> bool {
    let Some(rest) = prefixes.iter().find_map(|p| name.strip_prefix(p)) else {
        return false;
    };
    if rest.ends_with(KEPT_SUFFIX) || kept_marker(dir).is_some_and(|m| m.exists()) {
        return false;
    }
    match owner_of(rest) {
        Some(Owner::Process { pid, start }) => {
            let start = (!start.is_empty()).then_some(start.as_str());
            !liveness::is_alive(pid, start)
        }
        // No process running now is older than the boot: a directory last
        // changed before it was left by a runner of an earlier boot.
        Some(Owner::Unrecorded) => {
            matches!((meta.modified(), boot_time()), (Ok(m), Some(b)) if m < b)
        }
        None => false,
    }
}

/// Removes `dir` (named by [`create`] with `prefix`) when its runner is
/// gone and nothing is mounted under it: a `--disk` directory whose runner
/// was killed before it wrote the disk's state, so before anything was
/// mounted there or copied in. Whether it was removed, or why it could
/// not be.
pub fn remove_unfinished(dir: &Path, prefix: &str) -> Result<bool, String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(false);
    };
    if !meta.is_dir() || !is_abandoned(dir, &name, &meta, &[prefix]) || mount_under(dir).is_some() {
        return Ok(false);
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("removing {}: {e}", dir.display())),
    }
}

/// Removes runner's temporary directories whose runner is gone (in the
/// temp directory, and channels in [`host_dirs`]' directories), and
/// kept-markers whose workspace is gone.
pub fn sweep() -> Swept {
    let mut out = Swept::default();
    sweep_in(&std::env::temp_dir(), &ALL_PREFIXES, &mut out);
    for (dir, _) in host_dirs::candidates() {
        sweep_in(&dir, &[host_dirs::CHANNEL_PREFIX], &mut out);
    }
    out
}

fn sweep_in(tmp: &Path, prefixes: &[&str], out: &mut Swept) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_file() && name.starts_with(WORKSPACE_PREFIX) && name.ends_with(KEPT_SUFFIX) {
            let dir = tmp.join(name.trim_end_matches(KEPT_SUFFIX));
            if std::fs::symlink_metadata(&dir).is_err() {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if !meta.is_dir() || !is_abandoned(&path, &name, &meta, prefixes) {
            continue;
        }
        // remove_dir_all descends into mounted filesystems: a disk or a
        // nosuid view still mounted there (a recovery that failed) holds
        // someone's work, never to be deleted through it.
        if let Some(m) = mount_under(&path) {
            out.errors.push(format!(
                "left {}: {} is still mounted there (unmount it, then run runner gc again)",
                path.display(),
                m.display()
            ));
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => out.removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.errors.push(format!("removing {}: {e}", path.display())),
        }
    }
}

/// A mount point at or under `dir`, from the kernel's list of this
/// process's mounts (`/proc/self/mountinfo`, field 5, octal-escaped).
fn mount_under(dir: &Path) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_points(&info).find(|m| m.starts_with(dir))
}

fn mount_points(info: &str) -> impl Iterator<Item = PathBuf> + '_ {
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|raw| PathBuf::from(unescape_octal(raw)))
}

/// Undoes mountinfo's `\ooo` escapes (space, tab, newline, backslash).
fn unescape_octal(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_unescaped() {
        let info = "36 35 98:0 / /mnt/a\\040b rw - ext4 /dev/x rw\n\
                    37 35 98:0 / /tmp/runner-ws-1.2-x/disk rw - ext4 /dev/loop0 rw\n";
        let all: Vec<PathBuf> = mount_points(info).collect();
        assert_eq!(all[0], PathBuf::from("/mnt/a b"));
        assert!(all.iter().any(|m| m.starts_with("/tmp/runner-ws-1.2-x")));
        assert!(!all.iter().any(|m| m.starts_with("/tmp/runner-ws-1.2-y")));
    }

    #[test]
    fn owners_are_read_from_names() {
        assert_eq!(
            owner_of("42.9876-AbC123"),
            Some(Owner::Process {
                pid: 42,
                start: "9876".into()
            })
        );
        assert_eq!(owner_of("AbC123"), Some(Owner::Unrecorded));
        assert_eq!(owner_of("x.y-AbC123"), None);
    }

    #[test]
    fn a_dead_owners_dirs_go_and_a_live_ones_and_kept_ones_stay() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let me = std::process::id();
        let start = liveness::process_start(me).expect("own start");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("canary"), "host").expect("write");
        let mk = |name: &str| {
            let p = tmp.path().join(name);
            std::fs::create_dir_all(p.join("sub")).expect("mkdir");
            // A link a sandbox made: removed, never followed.
            std::os::unix::fs::symlink(outside.path(), p.join("sub/out")).expect("link");
            p
        };
        let live = mk(&format!("{WORKSPACE_PREFIX}{me}.{start}-aaaaaa"));
        let dead = mk(&format!(
            "{}{me}.1-bbbbbb",
            host_dirs::LEGACY_CHANNEL_PREFIX
        ));
        let kept = mk(&format!("{WORKSPACE_PREFIX}{me}.1-cccccc"));
        mark_kept(&kept).expect("mark");
        let fresh_legacy = mk(&format!("{SEED_PREFIX}dddddd"));
        let other = mk("runner-test-eeeeee");
        std::os::unix::fs::symlink(
            outside.path(),
            tmp.path().join(format!("{SEED_PREFIX}1.1-ff")),
        )
        .expect("link");
        let mut swept = Swept::default();
        sweep_in(tmp.path(), &ALL_PREFIXES, &mut swept);
        assert_eq!(swept.removed, vec![dead.clone()], "{swept:?}");
        assert!(!dead.exists());
        for p in [&live, &kept, &fresh_legacy, &other] {
            assert!(p.exists(), "{}", p.display());
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("canary")).expect("read"),
            "host"
        );
        // The kept workspace removed by its user: its marker goes too.
        std::fs::remove_dir_all(&kept).expect("rm");
        sweep_in(tmp.path(), &ALL_PREFIXES, &mut Swept::default());
        assert!(!kept_marker(&kept).expect("marker").exists());
    }

    #[test]
    fn an_unfinished_disk_of_a_dead_runner_goes_and_a_live_ones_stays() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let me = std::process::id();
        let start = liveness::process_start(me).expect("own start");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("canary"), "host").expect("write");
        let prefix = crate::exec::disk::STATE_PREFIX;
        let mk = |name: &str| {
            let p = tmp.path().join(name);
            std::fs::create_dir_all(&p).expect("mkdir");
            std::fs::write(p.join("disk.img"), "").expect("image");
            std::os::unix::fs::symlink(outside.path(), p.join("out")).expect("link");
            p
        };
        let dead = mk(&format!("{prefix}{me}.1-aaaaaa"));
        let live = mk(&format!("{prefix}{me}.{start}-bbbbbb"));
        let link = tmp.path().join(format!("{prefix}{me}.1-cccccc"));
        std::os::unix::fs::symlink(outside.path(), &link).expect("link");
        assert_eq!(remove_unfinished(&dead, prefix), Ok(true));
        assert_eq!(remove_unfinished(&live, prefix), Ok(false));
        assert_eq!(remove_unfinished(&link, prefix), Ok(false));
        assert!(!dead.exists() && live.exists() && link.exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("canary")).expect("read"),
            "host"
        );
    }
}
