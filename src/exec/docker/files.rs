//! The files API of a docker sandbox. A directory travels as a tar stream
//! on the stdin of an exec running `tar -x` inside the sandbox, as the
//! sandbox's user: the engine's archive API cannot write into a read-only
//! root or a tmpfs, and this way what arrives is owned by the user whose
//! commands will read it. The tar is made on the host without following
//! links (see `copy::add_dir`).

use super::client::ENGINE;
use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::client::{short, start_exec};
use super::copy;
use super::kill::wait_exit;
use crate::exec::ExecError;

/// Longest an upload may take, whatever its size.
const UPLOAD_LIMIT: Duration = Duration::from_secs(300);
/// Most of the extracting command's output kept for an error message.
const ERROR_OUTPUT_MAX: usize = 4096;

/// Makes `dest` in the container and extracts the content of the host
/// directory `host` into it, as `user`.
pub async fn upload_dir(
    docker: &Docker,
    id: &str,
    user: &str,
    host: &Path,
    dest: &str,
) -> Result<(), ExecError> {
    let (uid, gid) = super::config::numeric_user(user).unwrap_or((0, 0));
    let host = host.to_path_buf();
    let data = tokio::task::spawn_blocking(move || {
        let mut b = tar::Builder::new(Vec::new());
        copy::add_dir(&mut b, &host, Path::new(""), uid, gid)?;
        b.into_inner().map_err(ExecError::Io)
    })
    .await
    .map_err(|e| ExecError::Spawn(format!("packing the upload: {e}")))??;
    let fut = async {
        let (exec_id, started) = start_exec(
            docker,
            id,
            CreateExecOptions {
                cmd: Some(vec![
                    "sh",
                    "-c",
                    "mkdir -p -- \"$1\" && exec tar -x -f - -C \"$1\"",
                    "runner-upload",
                    dest,
                ]),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: Some(user),
                ..Default::default()
            },
            ("create upload exec", "start upload exec"),
        )
        .await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(ExecError::Engine {
                engine: ENGINE,
                op: "start upload exec",
                detail: format!("{}: exec started detached", short(id)),
            });
        };
        // Read while writing: tar's output must never back up the stream.
        let reader = async {
            let mut text = Vec::new();
            while let Some(Ok(item)) = output.next().await {
                let bytes = item.into_bytes();
                let room = ERROR_OUTPUT_MAX.saturating_sub(text.len());
                text.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            text
        };
        let writer = async {
            input.write_all(&data).await?;
            input.shutdown().await
        };
        let (text, written) = tokio::join!(reader, writer);
        let code = wait_exit(docker, &exec_id, id, Duration::from_secs(10)).await?;
        if written.is_err() || code != Some(0) {
            return Err(ExecError::Engine {
                engine: ENGINE,
                op: "upload files",
                detail: format!(
                    "{}: extracting into {dest} exited {code:?}: {}",
                    short(id),
                    String::from_utf8_lossy(&text).trim()
                ),
            });
        }
        Ok(())
    };
    match tokio::time::timeout(UPLOAD_LIMIT, fut).await {
        Ok(r) => r,
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "upload files",
            secs: UPLOAD_LIMIT.as_secs(),
        }),
    }
}
