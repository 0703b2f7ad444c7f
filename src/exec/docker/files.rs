//! The directory half of a docker sandbox's files API (single files go
//! through the supervisor's own requests, see `mod.rs`). A directory
//! travels as a tar stream on the stdin of `tar -x`, or from the stdout
//! of `tar -c`, run inside the sandbox as the sandbox's user through the
//! supervisor: the engine's archive API cannot write into a read-only root
//! or a tmpfs, and this way what arrives is owned by the user whose
//! commands will read it. The tar is made on the host without following
//! links (see `copy::add_dir`), and what comes back is unpacked without
//! following anything (`copy::extract_under`).

use super::client::ENGINE;
use std::path::Path;
use std::time::Duration;

use super::copy;
use crate::exec::ExecError;
use crate::exec::supervisor::Supervisor;
use crate::exec::supervisor::run::{self as sup_run, RunError};

/// Longest an upload may take, whatever its size.
const UPLOAD_LIMIT: Duration = Duration::from_secs(300);
/// Most of the extracting command's output kept for an error message.
const ERROR_OUTPUT_MAX: usize = 4096;

/// Makes `dest` in the container and extracts the content of the host
/// directory `host` into it, as `user`.
pub async fn upload_dir(
    sup: &Supervisor,
    user: &str,
    host: &Path,
    dest: &str,
) -> Result<(), ExecError> {
    let owner = super::config::numeric_user(user).unwrap_or((0, 0));
    upload_dir_as(sup, owner, None, host, dest).await
}

/// [`upload_dir`] with the files owned by `owner`, extracted as `run_as`
/// (`None`: the sandbox user).
pub async fn upload_dir_as(
    sup: &Supervisor,
    owner: (u32, u32),
    run_as: Option<(u32, u32)>,
    host: &Path,
    dest: &str,
) -> Result<(), ExecError> {
    let (uid, gid) = owner;
    let host = host.to_path_buf();
    let data = tokio::task::spawn_blocking(move || {
        let mut b = tar::Builder::new(Vec::new());
        copy::add_dir(&mut b, &host, Path::new(""), uid, gid)?;
        b.into_inner().map_err(ExecError::Io)
    })
    .await
    .map_err(|e| ExecError::Spawn(format!("packing the upload: {e}")))??;
    upload_tar(sup, data, dest, run_as).await
}

/// Makes `dest` in the container and extracts the tar `data` into it, as
/// the sandbox user (`tar -x` reading its stdin, through the supervisor).
async fn upload_tar(
    sup: &Supervisor,
    data: Vec<u8>,
    dest: &str,
    run_as: Option<(u32, u32)>,
) -> Result<(), ExecError> {
    let mut text = Vec::new();
    let read = files_exec(
        sup,
        run_as,
        "mkdir -p -- \"$1\" && exec tar -x -f - -C \"$1\" 2>&1",
        &[dest],
        Some(data),
        ERROR_OUTPUT_MAX as u64,
        UPLOAD_LIMIT,
        &mut |b| {
            text.extend_from_slice(b);
            Ok(())
        },
    )
    .await?;
    if read.exit_code != Some(0) {
        return Err(ExecError::Engine {
            engine: ENGINE,
            op: "upload files",
            detail: format!(
                "extracting into {dest} exited {:?}: {}",
                read.exit_code,
                String::from_utf8_lossy(&text).trim()
            ),
        });
    }
    Ok(())
}

/// Longest a download or a file read may take, whatever its size.
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(300);

/// What a files command produced.
struct Read {
    exit_code: Option<i32>,
    /// More than the limit was sent (the rest was not kept).
    over: bool,
}

/// Runs `sh -c script runner-files ARGS...` as the sandbox user through
/// the supervisor, with `stdin` when given, handing its output to `sink`
/// up to `max_bytes`; past that it is killed and the read refused.
#[allow(clippy::too_many_arguments)]
async fn files_exec(
    sup: &Supervisor,
    run_as: Option<(u32, u32)>,
    script: &str,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    max_bytes: u64,
    limit: Duration,
    sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
) -> Result<Read, ExecError> {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "runner-files".to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut sink_err = None;
    let ended = sup_run::run_helper(sup, argv, stdin, run_as, limit, max_bytes, |b| {
        match sink(b) {
            Ok(()) => true,
            Err(e) => {
                sink_err = Some(e);
                false
            }
        }
    })
    .await;
    if let Some(e) = sink_err {
        return Err(ExecError::Io(e));
    }
    let (ended, over) = match ended {
        Ok(e) => e,
        Err(RunError::Spawn(m)) => return Err(ExecError::Spawn(m)),
        Err(e) => {
            return Err(ExecError::SandboxDied {
                detail: e.to_string(),
            });
        }
    };
    if ended.timed_out {
        return Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "copy files",
            secs: limit.as_secs(),
        });
    }
    Ok(Read {
        exit_code: if over { None } else { ended.code },
        over,
    })
}

/// Exit code of the read scripts when the path is not a regular file
/// (or not a directory, for a download).
const NOT_FOUND: i32 = 66;

/// Copies the container's directory `src` (read as `user`) into the empty
/// host directory `host`: the tar is made inside the sandbox and unpacked
/// on the host without following anything in it (see
/// `copy::extract_under`).
pub async fn download_dir(
    sup: &Supervisor,
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
        files_exec(
            sup,
            None,
            // stderr would corrupt the tar on the same stream: only the
            // exit code tells a failure.
            "[ -d \"$1\" ] || exit 66; cd -- \"$1\"/.. && exec tar -c -f - -- \"$2\" 2>/dev/null",
            &[src, &top],
            None,
            max_bytes,
            DOWNLOAD_LIMIT,
            &mut sink,
        )
        .await?
    };
    finish_read(&read, src, "download", max_bytes)?;
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

fn finish_read(read: &Read, path: &str, what: &str, max_bytes: u64) -> Result<(), ExecError> {
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
            detail: format!("reading {path} in the sandbox exited {:?}", read.exit_code),
        });
    }
    Ok(())
}
