//! A memory cgroup of the test's own, under the test's own, to have the
//! kernel's OOM killer kill a process: [`MemCgroup::confine`] moves it in
//! with a 1 MiB limit, and its next allocations cannot be reclaimed (the
//! charges it had stay behind, so the limit is accepted at once).
//! cgroup v1 (`memory.limit_in_bytes`, `memory.oom_control`) and v2
//! (`memory.max`, `memory.events`). Removed when dropped.

use std::path::{Path, PathBuf};

const LIMIT: &str = "1M";

pub struct MemCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemCgroup {
    pub fn new(name: &str) -> MemCgroup {
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let base = if v2 {
            let path = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .expect("a cgroup v2 line in /proc/self/cgroup");
            PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'))
        } else {
            let path = own
                .lines()
                .find_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                    ctrl.split(',').any(|c| c == "memory").then_some(path)
                })
                .expect("a memory controller line in /proc/self/cgroup (cgroup v1)");
            PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'))
        };
        let dir = base.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!("cannot make memory cgroup {dir:?} (this test needs root): {e}")
        });
        MemCgroup { dir, v2 }
    }

    /// Moves `pid` in and limits the group to 1 MiB.
    pub fn confine(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {:?}: {e}", self.dir));
        let limit = if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(self.dir.join(limit), LIMIT)
            .unwrap_or_else(|e| panic!("{limit} of {:?}: {e}", self.dir));
    }

    /// How many processes the OOM killer killed in the group.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Whatever is still inside goes back to the parent first.
        let parent = self.dir.parent().map(|p| p.join("cgroup.procs"));
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            if let Some(p) = &parent {
                let _ = std::fs::write(p, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
