//! Who runs runner, for the workspace rules: the effective user, and under
//! `sudo` the person behind it (`SUDO_UID`, or `SUDO_USER` looked up), whose
//! home is then their own and root's someone else's. And every home of the
//! machine: the passwd database's, each directory under /home, and /root.

use std::path::{Path, PathBuf};

use nix::unistd::{Uid, User};

/// Homes that are shared places, not one user's (system accounts have
/// `/` or `/tmp` as their home).
const NOT_A_HOME: &[&str] = &["/", "/tmp", "/var/tmp", "/home", "/nonexistent"];
/// The directory each user's home is usually in.
const HOMES_DIR: &str = "/home";
/// The superuser's home, in case the passwd database says otherwise.
const ROOT_HOME: &str = "/root";

/// The user runner acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoker {
    /// The effective uid of this process.
    pub euid: u32,
    /// The person: `SUDO_UID`/`SUDO_USER` when root was reached through
    /// sudo, else the effective user.
    pub uid: u32,
    /// Whether `uid` comes from sudo's variables.
    pub through_sudo: bool,
}

impl Invoker {
    /// This process's invoker.
    pub fn current() -> Invoker {
        let euid = nix::unistd::geteuid().as_raw();
        let sudo = (euid == 0).then(sudo_uid).flatten().filter(|u| *u != 0);
        Invoker {
            euid,
            uid: sudo.unwrap_or(euid),
            through_sudo: sudo.is_some(),
        }
    }

    /// Whether a directory owned by `owner` is the invoker's: the person's,
    /// or (when runner is root) root's own.
    pub fn owns(&self, owner: u32) -> bool {
        owner == self.uid || owner == self.euid
    }

    /// The person's own homes: the passwd entry's, and `$HOME` unless sudo
    /// says the person is another user than the one `$HOME` may be.
    pub fn own_homes(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if !self.through_sudo
            && let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty())
        {
            out.push(crate::workspace::resolve(Path::new(&h)));
        }
        if let Some(h) = home_of(self.uid) {
            out.push(h);
        }
        out
    }
}

/// The uid sudo names, when it names one.
fn sudo_uid() -> Option<u32> {
    if let Some(uid) = std::env::var("SUDO_UID")
        .ok()
        .and_then(|u| u.trim().parse().ok())
    {
        return Some(uid);
    }
    let name = std::env::var("SUDO_USER").ok()?;
    User::from_name(name.trim())
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
}

fn home_of(uid: u32) -> Option<PathBuf> {
    let u = User::from_uid(Uid::from_raw(uid)).ok().flatten()?;
    let dir = crate::workspace::resolve(&u.dir);
    (!NOT_A_HOME.iter().any(|n| dir == Path::new(n))).then_some(dir)
}

/// A user's name, or `uid N` for a uid without one.
pub fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    }
}

/// Every home of the machine with the name of whom it is: the passwd
/// database's, each directory in /home (also one without an entry), and
/// /root.
pub fn all_homes() -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut add = |dir: PathBuf, who: String| {
        let dir = crate::workspace::resolve(&dir);
        if !NOT_A_HOME.iter().any(|n| dir == Path::new(n)) && !out.iter().any(|(d, _)| *d == dir) {
            out.push((dir, who));
        }
    };
    add(PathBuf::from(ROOT_HOME), "root".into());
    for (dir, name) in passwd_homes() {
        add(dir, name);
    }
    if let Ok(entries) = std::fs::read_dir(HOMES_DIR) {
        for e in entries.flatten() {
            let who = {
                use std::os::unix::fs::MetadataExt;
                // Its owner, when it has no passwd entry of its own.
                std::fs::symlink_metadata(e.path())
                    .map(|m| user_name(m.uid()))
                    .unwrap_or_else(|_| e.file_name().to_string_lossy().into_owned())
            };
            add(e.path(), who);
        }
    }
    out
}

/// The (home, name) pairs of /etc/passwd, the passwd database's files
/// source (users of another source, such as LDAP, are found by their
/// directory in /home).
fn passwd_homes() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            let (name, dir) = (f.first()?, f.get(5)?);
            (!name.is_empty() && dir.starts_with('/'))
                .then(|| (PathBuf::from(dir), name.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_home_and_the_home_dirs_are_homes_and_slash_is_not() {
        let homes = all_homes();
        assert!(
            homes
                .iter()
                .any(|(d, w)| d == Path::new("/root") && w == "root")
        );
        assert!(!homes.iter().any(|(d, _)| d == Path::new("/")));
        let me = Invoker::current();
        assert!(me.owns(me.euid));
    }
}
