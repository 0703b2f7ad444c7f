//! Whether the runner process that owns an object (a container, a volume,
//! a workspace disk) is still alive on this host: its pid exists, is not a
//! zombie, and started at the recorded time (so a reused pid does not count).

/// Start time of a process in clock ticks since boot (field 22 of
/// /proc/PID/stat), or `None` when it does not exist or is a zombie.
pub fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are
    // counted from the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // Field 3: the state; a zombie has exited and only waits to be reaped.
    if matches!(fields.next(), Some("Z") | Some("X")) {
        return None;
    }
    fields.nth(18).map(str::to_string)
}

/// True when `pid` runs on this host and (when `start` is known) started
/// at `start`.
pub fn is_alive(pid: u32, start: Option<&str>) -> bool {
    match process_start(pid) {
        None => false,
        Some(now) => start.is_none_or(|s| s.is_empty() || s == now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_zombie_is_not() {
        let me = std::process::id();
        let start = process_start(me).expect("own stat");
        assert!(is_alive(me, Some(&start)));
        assert!(!is_alive(me, Some("1")), "a reused pid is another process");
        assert!(!is_alive(4_194_303, None));
        let child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Not waited for: it stays a zombie until reaped.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!is_alive(pid, None), "a zombie counts as dead");
        drop(child);
    }
}
