//! The run's workspace on the host: an existing directory, or a scratch
//! directory that is removed after a successful run unless kept; and the
//! rules that refuse directories which must never be handed to a sandbox.

use std::path::{Component, Path, PathBuf};

use tempfile::TempDir;

use crate::invoker::{Invoker, all_homes, user_name};

/// Where the agent's files live on the host.
#[derive(Debug)]
pub struct Workspace {
    path: PathBuf,
    scratch: Option<TempDir>,
}

impl Workspace {
    /// Uses `dir` (which must exist) or makes a scratch directory.
    pub fn prepare(dir: Option<&Path>) -> std::io::Result<Self> {
        match dir {
            Some(d) => {
                let meta = std::fs::metadata(d)?;
                if !meta.is_dir() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        format!("{} is not a directory", d.display()),
                    ));
                }
                Ok(Workspace {
                    path: std::fs::canonicalize(d)?,
                    scratch: None,
                })
            }
            None => {
                let tmp = crate::exec::temp_dirs::create(crate::exec::temp_dirs::WORKSPACE_PREFIX)?;
                Ok(Workspace {
                    path: tmp.path().to_path_buf(),
                    scratch: Some(tmp),
                })
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_scratch(&self) -> bool {
        self.scratch.is_some()
    }

    /// Ends the workspace's life: a scratch directory is removed unless
    /// `keep`. Returns the path when the files are still there.
    pub fn finish(self, keep: bool) -> Option<PathBuf> {
        match self.scratch {
            Some(tmp) if keep => {
                let path = tmp.keep();
                // Its runner exits next: without the mark gc would take it.
                if let Err(e) = crate::exec::temp_dirs::mark_kept(&path) {
                    tracing::warn!("cannot mark {} as kept: {e}", path.display());
                }
                Some(path)
            }
            Some(tmp) => {
                let _ = tmp.close();
                None
            }
            None => Some(self.path),
        }
    }
}

/// Directories refused as a workspace, with everything below them.
const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var",
];
/// Directories refused as a workspace themselves (their subdirectories,
/// such as a project under /tmp or /srv, are fine).
const SHARED_ROOTS: &[&str] = &[
    "/", "/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/opt", "/srv",
];
/// Subtrees below `/var` that are ordinary scratch space.
const SCRATCH_UNDER_SYSTEM: &[&str] = &["/var/tmp"];
/// Directory names that hold credentials or programs a user runs (keys,
/// cloud and cluster logins, installed tools): refused anywhere in a path.
const CREDENTIAL_DIRS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".gcloud",
    ".kube",
    ".docker",
    ".config",
    ".local",
    ".cargo",
    ".password-store",
];

/// Why a directory must not become a sandbox's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The directory, resolved.
    pub dir: PathBuf,
    /// What the directory is ("/etc is inside the system directory /etc").
    pub why: String,
    /// Whose it is, when it is someone else's.
    pub owner: Option<String>,
}

impl Refusal {
    pub fn new(why: String) -> Refusal {
        Refusal {
            dir: PathBuf::new(),
            why,
            owner: None,
        }
    }

    /// What to do instead.
    pub fn hint(&self) -> String {
        match &self.owner {
            Some(o) => format!(
                "{} belongs to {o}: run runner as {o}, or pass a project directory of your own with --workspace DIR",
                self.dir.display()
            ),
            None => "pass a project directory of your own with --workspace DIR".into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Why `dir` must not become a sandbox's workspace, or `None` when it may.
/// `protected` are runner's own files (its program, the run directory):
/// a workspace containing one of them would let the sandbox change them.
/// Someone else's directory (in another user's home, or owned by another
/// user) is refused too: the sandbox would write their files (a key in
/// `.ssh`, a line in `.bashrc`) with runner's rights.
pub fn refusal(dir: &Path, protected: &[PathBuf]) -> Option<Refusal> {
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut r = refusal_of(&canon, protected)?;
    r.dir = canon;
    Some(r)
}

fn refusal_of(canon: &Path, protected: &[PathBuf]) -> Option<Refusal> {
    let shown = canon.display();
    if SHARED_ROOTS.iter().any(|r| canon == Path::new(r)) {
        return Some(Refusal::new(format!(
            "{shown} is a shared system directory"
        )));
    }
    let scratch = SCRATCH_UNDER_SYSTEM
        .iter()
        .any(|s| canon.starts_with(s) && canon != Path::new(s));
    if !scratch && let Some(t) = SYSTEM_TREES.iter().find(|t| canon.starts_with(t)) {
        return Some(Refusal::new(format!(
            "{shown} is inside the system directory {t}"
        )));
    }
    let me = Invoker::current();
    let own = me.own_homes();
    if own.iter().any(|o| o == canon) {
        return Some(Refusal::new(format!("{shown} is your home directory")));
    }
    if let Some(r) = someone_elses(canon, &me, &own) {
        return Some(r);
    }
    if let Some(c) = canon.components().find_map(|c| match c {
        Component::Normal(n) if CREDENTIAL_DIRS.iter().any(|d| n == *d) => Some(n.to_owned()),
        _ => None,
    }) {
        return Some(Refusal::new(format!(
            "{shown} is in a {} directory, which holds credentials or programs",
            c.to_string_lossy()
        )));
    }
    for p in protected {
        let p = resolve(p);
        if p.starts_with(canon) {
            return Some(Refusal::new(format!(
                "{shown} contains runner's own file {}",
                p.display()
            )));
        }
    }
    None
}

/// Whether `canon` is another user's: inside a home that is not one of
/// `own`, or owned by someone `me` is not.
fn someone_elses(canon: &Path, me: &Invoker, own: &[PathBuf]) -> Option<Refusal> {
    use std::os::unix::fs::MetadataExt;
    let shown = canon.display();
    let theirs = all_homes()
        .into_iter()
        .filter(|(home, _)| !own.contains(home))
        .find(|(home, _)| canon.starts_with(home));
    if let Some((home, who)) = theirs {
        return Some(Refusal {
            why: format!(
                "{shown} is in the home directory of {who} ({})",
                home.display()
            ),
            owner: Some(who),
            ..Refusal::new(String::new())
        });
    }
    let owner = std::fs::metadata(canon).ok()?.uid();
    (!me.owns(owner)).then(|| {
        let who = user_name(owner);
        Refusal {
            why: format!("{shown} is owned by {who}, not by you"),
            owner: Some(who),
            ..Refusal::new(String::new())
        }
    })
}

/// `path` made absolute with its longest existing ancestor resolved
/// (links included); the rest, not there yet, is appended as it is.
pub fn resolve(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            out.extend(rest.iter().rev());
            return out;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Whether `path` (which may not exist yet) lies inside `dir`.
pub fn is_inside(path: &Path, dir: &Path) -> bool {
    resolve(path).starts_with(resolve(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_paths_homes_and_credentials_are_refused() {
        for p in [
            "/",
            "/etc",
            "/etc/cron.d",
            "/home",
            "/var/lib/docker",
            "/usr/local/bin",
            "/tmp",
            "/root",
        ] {
            assert!(refusal(Path::new(p), &[]).is_some(), "{p} accepted");
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(refusal(tmp.path(), &[]), None);
        let ssh = tmp.path().join(".ssh");
        std::fs::create_dir(&ssh).expect("mkdir");
        assert!(refusal(&ssh, &[]).is_some());
        let own = tmp.path().join("bin/runner");
        assert!(
            refusal(tmp.path(), &[own]).is_some(),
            "ancestor of runner's file"
        );
        if let Some(h) = std::env::var_os("HOME") {
            assert!(refusal(Path::new(&h), &[]).is_some());
        }
    }

    #[test]
    fn resolve_handles_paths_not_there_yet() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let canon = std::fs::canonicalize(tmp.path()).expect("canon");
        assert_eq!(resolve(&tmp.path().join("a/b")), canon.join("a/b"));
        assert!(is_inside(&tmp.path().join("runs/x"), tmp.path()));
        assert!(!is_inside(Path::new("/elsewhere/runs"), tmp.path()));
    }
}
