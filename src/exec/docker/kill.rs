//! Control execs: short `sh -c` scripts the runner itself runs inside the
//! container through the engine, for the kill protocol's fallback (when
//! the supervisor could not finish a kill) and the OOM check of a remote
//! engine.
//!
//! The kill protocol. Commands run as `user`; the supervisor (PID 1) runs
//! as a uid of its own. A control exec as `user` running `kill -9 -1` signals every
//! process of that uid in the container except itself; the kernel walks the
//! process list under a lock, so a fork bomb cannot slip new children past
//! it, and `setsid`, `nohup` and `trap '' TERM` do not help against SIGKILL.
//! The supervisor survives because signalling another uid needs CAP_KILL,
//! which no command process has, and it is PID 1 of its namespace, so the
//! same container serves the next command. When commands run as root (a
//! loosening), the control exec has the sandbox's CAP_KILL, so we instead
//! kill every pid except PID 1 and the killer, repeating until none is
//! left.
//!
//! A kill counts only once verified: the script walks /proc until no live
//! process of the command is left and says so (`launch::KILL`). An exec
//! that could not start (a fork bomb holding every pid: runc's init cannot
//! make its threads, exit 126) or processes that outlive SIGKILL make the
//! attempt fail; it is retried with more pids, and when every attempt
//! fails the sandbox is given up with a named, fatal error.

use super::client::ENGINE;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;

use super::client::{QUICK_TIMEOUT, call, short, start_exec};
use super::config::user_is_root;
use super::launch::{CLEAN_MARK, KILL};
use crate::exec::ExecError;

/// Most output a control exec may return before it is cut.
const CONTROL_OUTPUT_MAX: usize = 64 << 10;

/// Output and exit code of a control exec.
pub struct ControlOutput {
    pub stdout: String,
    pub exit_code: Option<i64>,
}

/// Runs `sh -c script runner ARGS...` as `user` and waits for it, all
/// within `QUICK_TIMEOUT`. Its stdout and stderr are both returned (an
/// exec the runtime could not start says why there).
pub async fn control(
    docker: &Docker,
    id: &str,
    user: &str,
    script: &str,
    args: &[&str],
) -> Result<ControlOutput, ExecError> {
    let mut cmd = vec!["sh", "-c", script, "runner"];
    cmd.extend_from_slice(args);
    let fut = async {
        let (exec_id, started) = start_exec(
            docker,
            id,
            CreateExecOptions {
                cmd: Some(cmd),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: Some(user),
                ..Default::default()
            },
            ("create control exec", "start control exec"),
        )
        .await?;
        let mut out = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = started {
            while let Some(item) = output.next().await {
                let Ok(item) = item else { break };
                if out.len() < CONTROL_OUTPUT_MAX {
                    out.extend_from_slice(&item.into_bytes());
                }
            }
        }
        let exit_code = wait_exit(docker, &exec_id, id, Duration::from_secs(5)).await?;
        Ok(ControlOutput {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            exit_code,
        })
    };
    match tokio::time::timeout(QUICK_TIMEOUT, fut).await {
        Ok(r) => r,
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "control exec",
            secs: QUICK_TIMEOUT.as_secs(),
        }),
    }
}

/// Polls an exec until it is no longer running; its exit code, or `None`
/// if it is still running after `limit`.
pub async fn wait_exit(
    docker: &Docker,
    exec_id: &str,
    container: &str,
    limit: Duration,
) -> Result<Option<i64>, ExecError> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(5);
    loop {
        let info = call(
            "inspect exec",
            short(container),
            QUICK_TIMEOUT,
            docker.inspect_exec(exec_id),
        )
        .await?;
        if info.running != Some(true) {
            return Ok(info.exit_code);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Extra pids lent to the container per attempt when a fork bomb has used
/// them all and our control exec cannot start (runc's init needs a few).
const PIDS_HEADROOM: i64 = 64;
/// How many times the kill is tried before the sandbox is given up.
const KILL_ATTEMPTS: usize = 4;

/// Kills every process the command started (see the module comment) and
/// checks that none is left. A fork bomb at the pids limit can leave no
/// pid for the control exec (it then fails, often with exit 126), so each
/// retry first raises the limit by some headroom, and the limit is put
/// back after. When no attempt leaves the sandbox clean, the sandbox
/// cannot serve another command: `ExecError::Unrecoverable`.
pub async fn kill_command_processes(
    docker: &Docker,
    id: &str,
    user: &str,
    spare: &[u32],
    pids_limit: i64,
) -> Result<(), ExecError> {
    let mut last = String::new();
    for attempt in 0..KILL_ATTEMPTS {
        // Whether this attempt changed the limit, so it must be put back.
        // A runtime that cannot update a running container (gVisor's
        // runsc has no `update`) or a busy engine leaves it unchanged: the
        // attempt goes on without headroom and there is nothing to restore.
        let mut raised = false;
        if attempt > 0 {
            let attempt_n = i64::try_from(attempt).unwrap_or(i64::MAX);
            let more = pids_limit.saturating_add(PIDS_HEADROOM.saturating_mul(attempt_n));
            match set_pids_limit(docker, id, more).await {
                Ok(()) => raised = true,
                Err(e) => {
                    tracing::debug!(container = short(id), attempt, "cannot raise pids: {e}")
                }
            }
        }
        let r = kill_once(docker, id, user, spare).await;
        if raised && let Err(e) = restore_pids_limit(docker, id, pids_limit).await {
            return Err(ExecError::Unrecoverable {
                detail: format!(
                    "the pids limit of container {} could not be put back to {pids_limit} \
                     after the kill: {e}",
                    short(id)
                ),
            });
        }
        match r {
            Ok(None) => return Ok(()),
            Ok(Some(why)) => last = why,
            Err(e) => last = e.to_string(),
        }
        tracing::debug!(container = short(id), attempt, "kill failed: {last}");
    }
    Err(ExecError::Unrecoverable {
        detail: format!(
            "the command's processes could not all be killed in container {} \
             ({KILL_ATTEMPTS} attempts; last: {last})",
            short(id)
        ),
    })
}

/// Puts the configured pids limit back, trying twice: a sandbox left with
/// more pids than it was given must not serve another command.
async fn restore_pids_limit(docker: &Docker, id: &str, limit: i64) -> Result<(), ExecError> {
    match set_pids_limit(docker, id, limit).await {
        Ok(()) => Ok(()),
        Err(_) => set_pids_limit(docker, id, limit).await,
    }
}

async fn set_pids_limit(docker: &Docker, id: &str, limit: i64) -> Result<(), ExecError> {
    let body = bollard::models::ContainerUpdateBody {
        pids_limit: Some(limit),
        ..Default::default()
    };
    call(
        "update pids limit",
        short(id),
        QUICK_TIMEOUT,
        docker.update_container(id, body),
    )
    .await
}

/// One kill-and-verify control exec; `Ok(None)` when nothing of the
/// command is left, else what went wrong.
async fn kill_once(
    docker: &Docker,
    id: &str,
    user: &str,
    spare: &[u32],
) -> Result<Option<String>, ExecError> {
    let spare = spare_list(spare);
    let root = if user_is_root(user) { "1" } else { "" };
    let out = control(docker, id, user, KILL, &[&spare, root]).await?;
    if out.exit_code == Some(0) && out.stdout.lines().any(|l| l == CLEAN_MARK) {
        return Ok(None);
    }
    Ok(Some(match out.exit_code {
        Some(1) => "processes were still alive after the kill".to_string(),
        Some(c) => format!(
            "the kill exec exited {c}: {}",
            out.stdout.trim().chars().take(200).collect::<String>()
        ),
        None => "the kill exec did not finish".to_string(),
    }))
}

/// Pids as the scripts take them: space-separated.
pub fn spare_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many times the kernel's OOM killer has fired in the container's
/// memory cgroup (v1 `memory.oom_control`, v2 `memory.events`), and whether
/// the container could still run a process at all: once its init is dead
/// no new process starts there, even while the engine still reports it
/// as running.
pub async fn oom_kill_count(
    docker: &Docker,
    id: &str,
    user: &str,
) -> Result<(bool, Option<u64>), ExecError> {
    let script = "echo runner-alive; cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null; exit 0";
    let out = control(docker, id, user, script, &[]).await?;
    let alive = out.stdout.lines().next() == Some("runner-alive");
    Ok((alive, parse_oom_kill(&out.stdout)))
}

/// Finds the `oom_kill N` line of a cgroup memory file.
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("oom_kill")).then(|| it.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_oom_kill() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(super::parse_oom_kill(v1), Some(3));
        let v2 = "low 0\nhigh 0\nmax 5\noom 2\noom_kill 1\n";
        assert_eq!(super::parse_oom_kill(v2), Some(1));
        assert_eq!(super::parse_oom_kill(""), None);
    }
}
