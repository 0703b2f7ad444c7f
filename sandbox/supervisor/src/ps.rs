//! `--procs`: the process-list helper. runner runs the supervisor's own
//! binary as a command to list what runs in the sandbox, read straight
//! from `/proc`, never through the sandbox's `ps` (whose binary the
//! sandbox may have replaced), as a uid of its own
//! (`protocol::HELPER_UID`), which no command has: none can trace it or
//! write into its output. The listing leaves out the helper itself and
//! its parent, the supervisor.

use std::io::{Read, Write};

use runner_supervisor::proclist::{escape_cmdline, format_line};

/// The most of a command line read; what is printed is shorter still.
const CMDLINE_READ_MAX: u64 = 4096;

/// The `Name:`, `State:` and first `Uid:` field of a `/proc/PID/status`.
fn status_fields(status: &str) -> (Option<&str>, Option<&str>, Option<u32>) {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let uid = field("Uid:")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    (field("Name:"), field("State:"), uid)
}

/// Prints one line per live process (zombies left out) and exits 0.
pub fn list() -> ! {
    // SAFETY: getppid has no preconditions. (The helper stays dumpable:
    // its /proc entries are then its own uid's, which no command has; not
    // dumpable, gVisor would make them root's.)
    let parent = u32::try_from(unsafe { libc::getppid() }).unwrap_or(0);
    let me = std::process::id();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut out = std::io::stdout().lock();
    for pid in pids.into_iter().filter(|&p| p != me && p != parent) {
        // Gone meanwhile: nothing to list.
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let (name, state, uid) = status_fields(&status);
        if matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X')) {
            continue;
        }
        let Some(uid) = uid else { continue };
        let mut raw = Vec::new();
        if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
            let _ = f.take(CMDLINE_READ_MAX).read_to_end(&mut raw);
        }
        let mut cmdline = escape_cmdline(&raw);
        if cmdline.is_empty() {
            cmdline = format!("[{}]", escape_cmdline(name.unwrap_or("?").as_bytes()));
        }
        if writeln!(out, "{}", format_line(pid, uid, &cmdline)).is_err() {
            std::process::exit(1);
        }
    }
    if out.flush().is_err() {
        std::process::exit(1);
    }
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_status_fields() {
        let s = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(
            super::status_fields(s),
            (Some("sleep"), Some("S (sleeping)"), Some(1000))
        );
        assert_eq!(super::status_fields(""), (None, None, None));
    }
}
