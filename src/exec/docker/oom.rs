//! Counting the container's OOM kills, before and after every command, so
//! that the kill of any process of it (a pipeline member, a child) is
//! reported, not only a command that itself exits 137.
//!
//! When the engine runs on this host, the count is read from the host's
//! view of the container's memory cgroup (a file read, no exec): cgroup v1
//! `memory.oom_control`, v2 `memory.events`, at the path the container's
//! init shows in `/proc/PID/cgroup`. The path must name the container's id,
//! so a pid from another pid namespace (runner itself in a container) or a
//! reused pid is never trusted. Otherwise (a remote engine) a control exec
//! reads the container's own cgroup files after each command.
//!
//! Under gVisor (`runsc`) the host cgroup holds the whole sandbox and the
//! container sees no cgroup files; the host count still works, but a
//! process over the limit takes the whole sandbox down with it, which the
//! executor reports as the sandbox dying of its memory limit.

use std::path::{Path, PathBuf};

use bollard::Docker;

use super::client::short;
use super::kill::{oom_kill_count, parse_oom_kill};
use crate::exec::ExecError;

/// Where the OOM-kill count comes from.
#[derive(Debug, Clone)]
pub enum OomCounter {
    /// A cgroup file on this host.
    Host(PathBuf),
    /// A control exec in the container.
    InContainer,
}

impl OomCounter {
    /// The host file for the container whose init has host pid `pid`,
    /// when the engine is local and the file can be read; else the exec.
    pub fn locate(id: &str, pid: Option<i64>, engine_local: bool) -> OomCounter {
        let found = pid
            .filter(|p| *p > 0 && engine_local)
            .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/cgroup")).ok())
            .and_then(|text| host_file(&text, id, Path::new("/sys/fs/cgroup")));
        match found {
            Some(path) => OomCounter::Host(path),
            None => OomCounter::InContainer,
        }
    }

    /// The count now, if it can be known without running anything (the
    /// host file); `None` means "use the last count seen".
    pub fn peek(&self) -> Option<u64> {
        match self {
            OomCounter::Host(path) => read_count(path),
            OomCounter::InContainer => None,
        }
    }

    /// The count after a command. `Ok((false, _))` when the container can
    /// no longer start a process (only the exec can tell).
    pub async fn after(
        &self,
        docker: &Docker,
        id: &str,
        user: &str,
    ) -> Result<(bool, Option<u64>), ExecError> {
        if let Some(n) = self.peek() {
            return Ok((true, Some(n)));
        }
        if let OomCounter::Host(path) = self {
            // The cgroup went away (the container is stopping): the exec
            // says whether it still runs.
            tracing::debug!(container = short(id), "cannot read {}", path.display());
        }
        oom_kill_count(docker, id, user).await
    }
}

/// The first readable cgroup file with an `oom_kill` count for the cgroup
/// paths listed in `proc_cgroup` (the text of /proc/PID/cgroup) that name
/// container `id`, under the cgroup mount `root`.
fn host_file(proc_cgroup: &str, id: &str, root: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id.is_empty() || !path.contains(id) {
            continue;
        }
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            candidates.push(root.join("memory").join(rel).join("memory.oom_control"));
        } else if controllers.is_empty() {
            candidates.push(root.join(rel).join("memory.events"));
            candidates.push(root.join("unified").join(rel).join("memory.events"));
        }
    }
    candidates.into_iter().find(|p| read_count(p).is_some())
}

fn read_count(path: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(path).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_and_v2_files_that_name_the_container() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let id = "abc123";
        let v1 = root.join("memory/docker/abc123");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.oom_control"), "under_oom 0\noom_kill 4\n").unwrap();
        let text = "4:memory:/docker/abc123\n0::/docker/abc123\n";
        let found = host_file(text, id, root).unwrap();
        assert_eq!(found, v1.join("memory.oom_control"));
        assert_eq!(read_count(&found), Some(4));
        // Another container's cgroup is never used.
        assert!(host_file("4:memory:/docker/other\n", id, root).is_none());
        // v2: the unified line.
        let v2 = root.join("system.slice/docker-abc123.scope");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        let found = host_file("0::/system.slice/docker-abc123.scope\n", id, root).unwrap();
        assert_eq!(found, v2.join("memory.events"));
        assert!(host_file("garbage\n", id, root).is_none());
    }
}
