//! Control execs: short `sh -c` scripts the runner itself runs inside the
//! container, for the kill protocol and the OOM check.
//!
//! The kill protocol. Commands run as `user`; the idle process (the
//! container's main process, under Docker's init) runs as root without
//! capabilities. A control exec as `user` running `kill -9 -1` signals every
//! process of that uid in the container except itself; the kernel walks the
//! process list under a lock, so a fork bomb cannot slip new children past
//! it, and `setsid`, `nohup` and `trap '' TERM` do not help against SIGKILL.
//! Init (PID 1) and the root-owned idle process survive because signalling
//! another uid needs CAP_KILL, which nothing in the container has, so the
//! same container serves the next command. When commands run as root (a
//! loosening), that shield is gone, so we instead kill every pid except
//! init, the idle process and the killer, repeating until none is left.

use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;

use super::client::{QUICK_TIMEOUT, call, short};
use super::config::user_is_root;
use crate::exec::ExecError;

/// Most output a control exec may return before it is cut.
const CONTROL_OUTPUT_MAX: usize = 64 << 10;

/// Output and exit code of a control exec.
pub struct ControlOutput {
    pub stdout: String,
    pub exit_code: Option<i64>,
}

/// Runs `sh -c script` as `user` and waits for it, all within
/// `QUICK_TIMEOUT`.
pub async fn control(
    docker: &Docker,
    id: &str,
    user: &str,
    script: &str,
) -> Result<ControlOutput, ExecError> {
    let fut = async {
        let exec = call(
            "create control exec",
            short(id),
            QUICK_TIMEOUT,
            docker.create_exec(
                id,
                CreateExecOptions {
                    cmd: Some(vec!["sh", "-c", script]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    user: Some(user),
                    ..Default::default()
                },
            ),
        )
        .await?;
        let started = call(
            "start control exec",
            short(id),
            QUICK_TIMEOUT,
            docker.start_exec(&exec.id, None),
        )
        .await?;
        let mut out = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = started {
            while let Some(item) = output.next().await {
                let Ok(item) = item else { break };
                if let bollard::container::LogOutput::StdOut { message } = item
                    && out.len() < CONTROL_OUTPUT_MAX
                {
                    out.extend_from_slice(&message);
                }
            }
        }
        let exit_code = wait_exit(docker, &exec.id, id, Duration::from_secs(5)).await?;
        Ok(ControlOutput {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            exit_code,
        })
    };
    match tokio::time::timeout(QUICK_TIMEOUT, fut).await {
        Ok(r) => r,
        Err(_) => Err(ExecError::DockerTimeout {
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

/// Pid of the idle process, found at start when it is the only process
/// besides init (needed only when commands run as root).
pub async fn find_idle_pid(docker: &Docker, id: &str) -> Result<Option<u32>, ExecError> {
    let script = r#"for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] || echo "$p"; done"#;
    let out = control(docker, id, "0:0", script).await?;
    let pids: Vec<u32> = out
        .stdout
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    Ok(if pids.len() == 1 { Some(pids[0]) } else { None })
}

/// Extra pids lent to the container when a fork bomb has used them all
/// and our control exec cannot start.
const PIDS_HEADROOM: i64 = 32;
/// How many times the kill is tried before giving up.
const KILL_ATTEMPTS: usize = 4;

/// Kills every process the command started (see the module comment). A
/// fork bomb at the pids limit leaves no pid for the control exec, so on
/// failure the limit is raised briefly, the kill retried, and the limit
/// restored.
pub async fn kill_command_processes(
    docker: &Docker,
    id: &str,
    user: &str,
    idle_pid: Option<u32>,
    pids_limit: i64,
) -> Result<(), ExecError> {
    let mut last = None;
    for attempt in 0..KILL_ATTEMPTS {
        if attempt > 0 {
            set_pids_limit(docker, id, pids_limit + PIDS_HEADROOM * attempt as i64).await?;
        }
        let r = kill_once(docker, id, user, idle_pid).await;
        if attempt > 0 {
            set_pids_limit(docker, id, pids_limit).await?;
        }
        match r {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!(container = short(id), attempt, "kill failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| ExecError::Spawn("kill never ran".into())))
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

async fn kill_once(
    docker: &Docker,
    id: &str,
    user: &str,
    idle_pid: Option<u32>,
) -> Result<(), ExecError> {
    if !user_is_root(user) {
        control(docker, id, user, "kill -9 -1 2>/dev/null; exit 0").await?;
        return Ok(());
    }
    let idle = idle_pid
        .map(|p| p.to_string())
        .unwrap_or_else(|| "0".into());
    let script = format!(
        r#"i=0
while [ $i -lt 40 ]; do
  n=0
  for d in /proc/[0-9]*; do
    p=${{d#/proc/}}
    case "$p" in 1|{idle}|$$) continue ;; esac
    kill -9 "$p" 2>/dev/null && n=$((n+1))
  done
  [ $n -eq 0 ] && exit 0
  i=$((i+1))
  sleep 0.05 2>/dev/null || sleep 1
done
exit 1"#
    );
    let out = control(docker, id, user, &script).await?;
    if out.exit_code != Some(0) {
        tracing::warn!(container = short(id), "kill loop did not converge");
    }
    Ok(())
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
    let out = control(docker, id, user, script).await?;
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
