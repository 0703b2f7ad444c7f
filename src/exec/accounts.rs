//! Who a user named as images and tasks name them (`agent`, `1000`,
//! `agent:staff`, `1000:1000`, empty for root) is, from an image's
//! `/etc/passwd` and `/etc/group` (see [`crate::exec::backend::Seeded`]),
//! resolved the way Docker resolves a container's `User`: a numeric uid
//! needs no entry (its group is then 0 and its home `/`), a name does.
//!
//! Both files come out of the image, so they are hostile data: lines that
//! do not parse are skipped, nothing is followed, nothing is trusted
//! beyond the numbers it gives.

/// A resolved user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Its home directory from passwd; `/` without an entry (as Docker).
    pub home: String,
    /// Its name in passwd, when it has an entry.
    pub name: Option<String>,
}

/// One passwd line: `name:password:uid:gid:gecos:home:shell`.
struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

fn passwd_entries(passwd: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    passwd.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 6 || f[0].is_empty() || f[0].starts_with('#') {
            return None;
        }
        Some(PasswdEntry {
            name: f[0],
            uid: f[2].trim().parse().ok()?,
            gid: f[3].trim().parse().ok()?,
            home: f[5],
        })
    })
}

/// `(name, gid)` of each group line: `name:password:gid:members`.
fn group_entries(group: &str) -> impl Iterator<Item = (&str, u32)> {
    group.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 3 || f[0].is_empty() || f[0].starts_with('#') {
            return None;
        }
        Some((f[0], f[2].trim().parse().ok()?))
    })
}

/// Resolves `user` (`name`, `uid`, `name:group`, `uid:gid`, `uid:group`,
/// `name:gid`; empty is root) against the image's `passwd` and `group`
/// (`None`: the image has no such file). A name that no entry has, in
/// either part, is an error naming it.
pub fn resolve(user: &str, passwd: Option<&str>, group: Option<&str>) -> Result<Account, String> {
    let spec = user.trim();
    let (user_part, group_part) = match spec.split_once(':') {
        Some((u, g)) => (u.trim(), Some(g.trim())),
        None => (spec, None),
    };
    let entries = || passwd_entries(passwd.unwrap_or_default());
    let numeric = user_part.parse::<u32>().ok();
    let entry = match (user_part, numeric) {
        ("", _) => entries().find(|e| e.uid == 0),
        (_, Some(uid)) => entries().find(|e| e.uid == uid),
        (name, None) => entries().find(|e| e.name == name),
    };
    let mut account = match (entry, numeric) {
        (Some(e), _) => Account {
            uid: e.uid,
            gid: e.gid,
            home: if e.home.is_empty() {
                "/".to_string()
            } else {
                e.home.to_string()
            },
            name: Some(e.name.to_string()),
        },
        // Root, or a numeric uid without an entry: what Docker gives it.
        (None, uid) if user_part.is_empty() || uid.is_some() => Account {
            uid: uid.unwrap_or(0),
            gid: 0,
            home: "/".to_string(),
            name: None,
        },
        (None, _) => {
            return Err(format!(
                "the user '{user_part}' has no entry in the image's /etc/passwd{}",
                if passwd.is_none() {
                    " (the image has none, or it is not a regular file)"
                } else {
                    ""
                }
            ));
        }
    };
    match group_part {
        None => {}
        Some("") => return Err(format!("the user '{spec}' names an empty group")),
        Some(g) => {
            account.gid = match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group_entries(group.unwrap_or_default())
                    .find(|(name, _)| *name == g)
                    .map(|(_, gid)| gid)
                    .ok_or_else(|| {
                        format!("the group '{g}' has no entry in the image's /etc/group")
                    })?,
            };
        }
    }
    Ok(account)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment\n\
        broken line\n\
        bad:x:notanumber:0::/nowhere:/bin/sh\n\
        agent:x:1000:1001:Agent,,,:/home/agent:/bin/bash\n\
        nohome:x:1002:1002:::/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:agent\nagent:x:1001:\n";

    fn ok(user: &str) -> Account {
        resolve(user, Some(PASSWD), Some(GROUP)).unwrap()
    }

    #[test]
    fn names_and_uids_resolve_through_passwd() {
        assert_eq!(
            ok("agent"),
            Account {
                uid: 1000,
                gid: 1001,
                home: "/home/agent".into(),
                name: Some("agent".into()),
            }
        );
        assert_eq!(ok("1000"), ok("agent"));
        assert_eq!(ok(" agent "), ok("agent"));
        assert_eq!(ok("nohome").home, "/");
    }

    #[test]
    fn empty_and_zero_are_root() {
        let root = Account {
            uid: 0,
            gid: 0,
            home: "/root".into(),
            name: Some("root".into()),
        };
        assert_eq!(ok(""), root);
        assert_eq!(ok("0"), root);
        assert_eq!(ok("root"), root);
        assert_eq!(ok("0:0"), root);
        // No passwd at all: root with Docker's defaults.
        assert_eq!(
            resolve("", None, None).unwrap(),
            Account {
                uid: 0,
                gid: 0,
                home: "/".into(),
                name: None,
            }
        );
    }

    #[test]
    fn a_numeric_uid_needs_no_entry() {
        assert_eq!(
            ok("4242"),
            Account {
                uid: 4242,
                gid: 0,
                home: "/".into(),
                name: None,
            }
        );
        assert_eq!(resolve("4242:77", None, None).unwrap().gid, 77);
    }

    #[test]
    fn groups_by_name_or_number() {
        let a = ok("agent:staff");
        assert_eq!((a.uid, a.gid, a.home.as_str()), (1000, 50, "/home/agent"));
        assert_eq!(ok("agent:99").gid, 99);
        assert_eq!(ok("1000:1000").gid, 1000);
        assert_eq!(ok("4242:staff").gid, 50);
    }

    #[test]
    fn unknown_names_are_errors_naming_them() {
        let e = resolve("ghost", Some(PASSWD), Some(GROUP)).unwrap_err();
        assert!(e.contains("'ghost'") && e.contains("/etc/passwd"), "{e}");
        let e = resolve("ghost", None, None).unwrap_err();
        assert!(e.contains("'ghost'") && e.contains("has none"), "{e}");
        let e = resolve("agent:nogroup", Some(PASSWD), Some(GROUP)).unwrap_err();
        assert!(e.contains("'nogroup'") && e.contains("/etc/group"), "{e}");
        let e = resolve("agent:", Some(PASSWD), Some(GROUP)).unwrap_err();
        assert!(e.contains("empty group"), "{e}");
        // A malformed line never matches, even by its name.
        assert!(resolve("bad", Some(PASSWD), Some(GROUP)).is_err());
        assert!(resolve("broken line", Some(PASSWD), Some(GROUP)).is_err());
    }
}
