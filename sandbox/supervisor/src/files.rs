//! The supervisor's file helpers. runner reads and writes single files by
//! running the supervisor's own binary as a command (`--read-file`,
//! `--write-file`), so each request runs as the sandbox user with the
//! command's confinement, whatever the runtime: the kernel checks that
//! user's permissions, and a link at the path is refused, never followed.
//! The content goes on stdout (read) or comes on stdin (write); a failure
//! is an exit code of `protocol::file_codes` and one line on stderr.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use runner_supervisor::protocol::file_codes as codes;

fn fail(code: i32, msg: String) -> ! {
    eprintln!("{msg}");
    std::process::exit(code)
}

fn code_of(e: &std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => codes::NOT_FOUND,
        Some(libc::ELOOP) => codes::REFUSED,
        _ => codes::IO,
    }
}

/// Opens `path` as `opts` says, never through a link at it, and checks it
/// is a regular file (a FIFO or a device is refused, not waited on).
fn open_regular(opts: &mut std::fs::OpenOptions, path: &str) -> (std::fs::File, std::fs::Metadata) {
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .unwrap_or_else(|e| fail(code_of(&e), format!("{path}: {e}")));
    let meta = f
        .metadata()
        .unwrap_or_else(|e| fail(codes::IO, format!("{path}: {e}")));
    if !meta.is_file() {
        fail(codes::REFUSED, format!("{path} is not a regular file"));
    }
    (f, meta)
}

/// `--read-file PATH MAX`: the regular file `PATH` on stdout, refused when
/// it holds more than `MAX` bytes.
pub fn read(path: &str, max: u64) -> ! {
    let (f, meta) = open_regular(std::fs::OpenOptions::new().read(true), path);
    if meta.len() > max {
        fail(codes::TOO_BIG, format!("{path} holds {} bytes", meta.len()));
    }
    let mut out = std::io::stdout().lock();
    let mut sent = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    let mut f = f.take(max.saturating_add(1));
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => fail(codes::IO, format!("{path}: {e}")),
        };
        sent = sent.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        if sent > max {
            fail(codes::TOO_BIG, format!("{path} grew past {max} bytes"));
        }
        if let Err(e) = out.write_all(&buf[..n]) {
            fail(codes::IO, format!("{path}: {e}"));
        }
    }
    if let Err(e) = out.flush() {
        fail(codes::IO, format!("{path}: {e}"));
    }
    std::process::exit(0)
}

/// `--write-file PATH`: stdin as the file `PATH` (parents made; an
/// existing file keeps its mode; a link at `PATH` refused).
pub fn write(path: &str) -> ! {
    if let Some(parent) = std::path::Path::new(path).parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        fail(code_of(&e), format!("{}: {e}", parent.display()));
    }
    let (mut f, _) = open_regular(
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644),
        path,
    );
    if let Err(e) = f.set_len(0) {
        fail(codes::IO, format!("{path}: {e}"));
    }
    // A plain loop: io::copy's splice fast path misbehaves under gVisor.
    let mut input = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => fail(codes::IO, format!("{path}: {e}")),
        };
        if let Err(e) = f.write_all(&buf[..n]) {
            fail(codes::IO, format!("{path}: {e}"));
        }
    }
    std::process::exit(0)
}
