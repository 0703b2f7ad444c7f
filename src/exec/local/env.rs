//! What a local command runs with: the environment (allowlisted host
//! variables, then the configured ones) and the shell found on its PATH.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::exec::ENV_ALLOWLIST;

/// The child environment: allowlisted host variables, then `extra`.
pub fn child_env(
    host: impl Iterator<Item = (OsString, OsString)>,
    extra: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = host
        .filter(|(k, _)| ENV_ALLOWLIST.iter().any(|a| k == a))
        .collect();
    for (k, v) in extra {
        env.retain(|(old, _)| old != k.as_str());
        env.push((k.into(), v.into()));
    }
    env
}

/// First executable `bash` on `path`, else `sh`, else `/bin/sh`.
pub fn find_shell(path: Option<&OsStr>) -> PathBuf {
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for name in ["bash", "sh"] {
        for dir in &dirs {
            let candidate = dir.join(name);
            let executable = std::fs::metadata(&candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if executable {
                return candidate;
            }
        }
    }
    PathBuf::from("/bin/sh")
}
