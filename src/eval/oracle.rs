//! `--agent oracle`: the task's reference solution plays the agent.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::task::Task;
use crate::exec::{ExecRequest, Executor};
use crate::trajectory::RunDir;

/// Largest solution/ directory (as base64 of a tar) sent into the sandbox.
const MAX_SOLUTION_BYTES: usize = 64 << 10;

/// Sends solution/ into the sandbox (through the exec stream: the agent's
/// root is read-only and only /tmp is writable besides the workspace, which
/// must not get the solution's files) and runs solve.sh in the workspace.
pub async fn run(
    task: &Task,
    executor: Arc<dyn Executor>,
    run_dir: &RunDir,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(i32, String), String> {
    let dir = task.solution_dir();
    if !dir.join("solve.sh").is_file() {
        return Err(format!(
            "{}: solution/solve.sh is missing",
            task.dir.display()
        ));
    }
    let payload = tar_base64(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if payload.len() > MAX_SOLUTION_BYTES {
        return Err(format!(
            "solution/ is larger than {MAX_SOLUTION_BYTES} bytes"
        ));
    }
    let workdir = executor.workdir();
    let command = format!(
        "set -e; d=$(mktemp -d /tmp/solution.XXXXXX); printf '%s' '{payload}' | base64 -d | tar -x -C \"$d\"; \
         cd '{workdir}'; exec bash \"$d/solve.sh\""
    );
    let out = executor
        .execute(ExecRequest {
            command,
            timeout,
            max_output_bytes: 4000,
            full_output: Some(run_dir.outputs().file("oracle.log")),
            cancel: cancel.clone(),
        })
        .await
        .map_err(|e| e.to_string())?;
    if out.cancelled || out.timed_out {
        return Err("solution/solve.sh was stopped".into());
    }
    Ok((out.exit_code.unwrap_or(-1), out.output))
}

fn tar_base64(dir: &Path) -> std::io::Result<String> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", dir)?;
    let data = b.into_inner()?;
    Ok(base64_encode(&data))
}

/// Standard base64 (no dependency for 20 lines).
fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64() {
        assert_eq!(super::base64_encode(b""), "");
        assert_eq!(super::base64_encode(b"f"), "Zg==");
        assert_eq!(super::base64_encode(b"fo"), "Zm8=");
        assert_eq!(super::base64_encode(b"foobar"), "Zm9vYmFy");
    }
}
