//! Users of an image: resolving `[agent] user` and `USER` against its
//! /etc/passwd and /etc/group. (Placeholder until the full resolver lands.)

/// A resolved user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub name: Option<String>,
}

/// Resolves `user` (`name`, `uid`, `name:group`, `uid:gid`, empty = root).
pub fn resolve(user: &str, passwd: Option<&str>, group: Option<&str>) -> Result<Account, String> {
    let _ = group;
    let (u, g) = user.split_once(':').unwrap_or((user, ""));
    let entries: Vec<Vec<&str>> = passwd
        .unwrap_or("")
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .collect();
    let by_name = |n: &str| entries.iter().find(|f| f[0] == n);
    let (uid, gid0, home, name) = if u.is_empty() || u == "root" {
        (0, 0, "/root".to_string(), Some("root".to_string()))
    } else if let Ok(uid) = u.parse::<u32>() {
        match entries.iter().find(|f| f[2] == u) {
            Some(f) => (
                uid,
                f[3].parse().unwrap_or(uid),
                f[5].to_string(),
                Some(f[0].to_string()),
            ),
            None => (uid, uid, "/".to_string(), None),
        }
    } else {
        let f =
            by_name(u).ok_or_else(|| format!("user '{u}' is not in the image's /etc/passwd"))?;
        let uid = f[2]
            .parse()
            .map_err(|_| format!("bad uid for '{u}' in /etc/passwd"))?;
        (
            uid,
            f[3].parse().unwrap_or(uid),
            f[5].to_string(),
            Some(u.to_string()),
        )
    };
    let gid = if g.is_empty() {
        gid0
    } else {
        g.parse()
            .map_err(|_| format!("group '{g}' is not numeric"))?
    };
    Ok(Account {
        uid,
        gid,
        home,
        name,
    })
}
