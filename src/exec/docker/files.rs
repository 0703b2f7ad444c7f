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
    upload_tar(docker, id, user, data, dest).await
}

/// Makes `dest` in the container and extracts the tar `data` into it, as
/// `user`.
async fn upload_tar(
    docker: &Docker,
    id: &str,
    user: &str,
    data: Vec<u8>,
    dest: &str,
) -> Result<(), ExecError> {
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

/// Longest a download or a file read may take, whatever its size.
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(300);

/// What a reading exec produced.
struct Read {
    exit_code: Option<i64>,
    /// More than the limit was sent (the rest was not kept).
    over: bool,
    /// Its stderr, cut at [`ERROR_OUTPUT_MAX`].
    stderr: Vec<u8>,
}

/// Runs `sh -c script runner ARGS...` as `user`, handing its stdout to
/// `sink` up to `max_bytes` (the rest is drained, not kept).
async fn read_exec(
    docker: &Docker,
    id: &str,
    user: &str,
    script: &str,
    args: &[&str],
    max_bytes: u64,
    sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
) -> Result<Read, ExecError> {
    let mut cmd = vec!["sh", "-c", script, "runner-read"];
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
            ("create read exec", "start read exec"),
        )
        .await?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(ExecError::Engine {
                engine: ENGINE,
                op: "start read exec",
                detail: format!("{}: exec started detached", short(id)),
            });
        };
        let (mut seen, mut stderr) = (0u64, Vec::new());
        while let Some(item) = output.next().await {
            match item {
                Ok(bollard::container::LogOutput::StdOut { message }) => {
                    let room = max_bytes.saturating_sub(seen);
                    let len = u64::try_from(message.len()).unwrap_or(u64::MAX);
                    let keep = usize::try_from(room.min(len)).unwrap_or(usize::MAX);
                    sink(&message[..keep.min(message.len())])?;
                    seen = seen.saturating_add(len);
                    if seen > max_bytes {
                        // Refused: the rest is not worth reading.
                        return Ok(Read {
                            exit_code: None,
                            over: true,
                            stderr,
                        });
                    }
                }
                Ok(other) => {
                    let bytes = other.into_bytes();
                    let room = ERROR_OUTPUT_MAX.saturating_sub(stderr.len());
                    stderr.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                Err(e) => return Err(super::client::docker_err("read files", short(id), &e)),
            }
        }
        let exit_code = wait_exit(docker, &exec_id, id, Duration::from_secs(10)).await?;
        Ok(Read {
            exit_code,
            over: false,
            stderr,
        })
    };
    match tokio::time::timeout(DOWNLOAD_LIMIT, fut).await {
        Ok(r) => r,
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "read files",
            secs: DOWNLOAD_LIMIT.as_secs(),
        }),
    }
}

/// Exit code of the read scripts when the path is not a regular file
/// (or not a directory, for a download).
const NOT_FOUND: i64 = 66;

/// Copies the container's directory `src` (read as `user`) into the empty
/// host directory `host`: the tar is made inside the sandbox and unpacked
/// on the host without following anything in it (see
/// `copy::extract_under`).
pub async fn download_dir(
    docker: &Docker,
    id: &str,
    user: &str,
    src: &str,
    host: &Path,
    max_bytes: u64,
) -> Result<(), ExecError> {
    let src = src.trim_end_matches('/');
    let top = Path::new(src)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| ExecError::Refused(format!("cannot download '{src}': not a directory")))?;
    let mut file = tempfile::tempfile()?;
    let read = {
        let mut sink = |b: &[u8]| std::io::Write::write_all(&mut file, b);
        read_exec(
            docker,
            id,
            user,
            "[ -d \"$1\" ] || exit 66; cd -- \"$1\"/.. && exec tar -c -f - -- \"$2\"",
            &[src, &top],
            max_bytes,
            &mut sink,
        )
        .await?
    };
    finish_read(&read, id, src, "download", max_bytes)?;
    std::io::Seek::rewind(&mut file)?;
    let host = host.to_path_buf();
    let report = tokio::task::spawn_blocking(move || copy::extract_under(file, &host, &top))
        .await
        .map_err(|e| ExecError::Spawn(format!("unpacking the download: {e}")))??;
    if !report.skipped.is_empty() {
        // Escaping paths, entries through links, devices: refused, and said.
        tracing::warn!(skipped = ?report.skipped, "download entries refused");
    }
    Ok(())
}

fn finish_read(
    read: &Read,
    id: &str,
    path: &str,
    what: &str,
    max_bytes: u64,
) -> Result<(), ExecError> {
    if read.exit_code == Some(NOT_FOUND) {
        return Err(ExecError::Refused(format!(
            "cannot {what} '{path}' in the sandbox: no such {}",
            if what == "read" { "file" } else { "directory" }
        )));
    }
    if read.over {
        return Err(ExecError::Refused(format!(
            "cannot {what} '{path}' in the sandbox: larger than {max_bytes} bytes"
        )));
    }
    if read.exit_code != Some(0) {
        return Err(ExecError::Engine {
            engine: ENGINE,
            op: "read files",
            detail: format!(
                "{}: reading {path} exited {:?}: {}",
                short(id),
                read.exit_code,
                String::from_utf8_lossy(&read.stderr).trim()
            ),
        });
    }
    Ok(())
}

/// Writes `data` as the file `path` in the container (its directory made
/// when missing), owned by `user`.
pub async fn write_file(
    docker: &Docker,
    id: &str,
    user: &str,
    path: &str,
    data: &[u8],
) -> Result<(), ExecError> {
    let p = Path::new(path);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(ExecError::Refused(format!(
            "cannot write '{path}': not a file path"
        )));
    };
    let (uid, gid) = super::config::numeric_user(user).unwrap_or((0, 0));
    let mut b = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(u64::try_from(data.len()).unwrap_or(u64::MAX));
    header.set_mode(0o644);
    header.set_uid(u64::from(uid));
    header.set_gid(u64::from(gid));
    header.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut header, name, data)?;
    let tar = b.into_inner()?;
    upload_tar(docker, id, user, tar, &dir.display().to_string()).await
}
