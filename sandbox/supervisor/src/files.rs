//! Files, read and written as the sandbox user: each request runs on a
//! thread of its own whose filesystem uid and gid are the user's (Linux
//! keeps them per thread), so the kernel checks the user's permissions,
//! and a link at the path is refused, never followed.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use runner_supervisor::protocol::{CHUNK, Reply};

use crate::Shared;

/// Takes the sandbox user's filesystem identity for this thread.
fn become_user(shared: &Shared) -> Result<(), String> {
    if !shared.who.confined {
        return Ok(());
    }
    // SAFETY: setfsuid/setfsgid change only this thread's filesystem ids.
    unsafe {
        libc::setfsgid(shared.who.gid);
        libc::setfsuid(shared.who.uid);
        // Both return the previous id; asking again tells the current one.
        if u32::try_from(libc::setfsuid(u32::MAX)).ok() != Some(shared.who.uid)
            || u32::try_from(libc::setfsgid(u32::MAX)).ok() != Some(shared.who.gid)
        {
            return Err("cannot take the sandbox user's identity".into());
        }
    }
    Ok(())
}

fn kind_of(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => "not_found",
        Some(libc::ELOOP) => "refused",
        _ => "io",
    }
}

/// Sends `path` (a regular file, at most `max` bytes) as Data frames, then
/// Done; or an Error.
pub fn read(shared: &Shared, id: u64, path: &str, max: u64) {
    let r = (|| -> Result<u64, (&'static str, String)> {
        become_user(shared).map_err(|e| ("io", e))?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| (kind_of(&e), format!("{path}: {e}")))?;
        let meta = f.metadata().map_err(|e| ("io", format!("{path}: {e}")))?;
        if !meta.is_file() {
            return Err(("refused", format!("{path} is not a regular file")));
        }
        if meta.len() > max {
            return Err((
                "too_big",
                format!("{path} holds {} bytes (limit {max})", meta.len()),
            ));
        }
        let mut sent = 0u64;
        let mut buf = vec![0u8; CHUNK];
        let mut f = f.take(max.saturating_add(1));
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(("io", format!("{path}: {e}"))),
            };
            sent = sent.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
            if sent > max {
                return Err(("too_big", format!("{path} grew past {max} bytes")));
            }
            shared
                .out
                .send(&Reply::Data { id }, &buf[..n])
                .map_err(|e| ("io", e.to_string()))?;
        }
        Ok(sent)
    })();
    let _ = match r {
        Ok(bytes) => shared.out.send(&Reply::Done { id, bytes }, b""),
        Err((kind, msg)) => shared.out.error(id, kind, &msg),
    };
}

/// Writes `data` as `path` (parents made, a link at `path` refused).
pub fn write(shared: &Shared, id: u64, path: &str, data: &[u8]) {
    let r = (|| -> Result<(), (&'static str, String)> {
        become_user(shared).map_err(|e| ("io", e))?;
        if let Some(parent) = std::path::Path::new(path).parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| (kind_of(&e), format!("{}: {e}", parent.display())))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| (kind_of(&e), format!("{path}: {e}")))?;
        let meta = f.metadata().map_err(|e| ("io", format!("{path}: {e}")))?;
        if !meta.is_file() {
            return Err(("refused", format!("{path} is not a regular file")));
        }
        f.write_all(data)
            .map_err(|e| ("io", format!("{path}: {e}")))?;
        Ok(())
    })();
    let _ = match r {
        Ok(()) => shared.out.send(
            &Reply::Done {
                id,
                bytes: u64::try_from(data.len()).unwrap_or(u64::MAX),
            },
            b"",
        ),
        Err((kind, msg)) => shared.out.error(id, kind, &msg),
    };
}
