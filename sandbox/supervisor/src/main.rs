//! runner's supervisor: the main process of a sandbox (PID 1 of its
//! container). It speaks the framed protocol (`protocol.rs`) on stdin and
//! stdout with runner, runs commands as the sandbox user, streams their
//! output, and kills everything they started at their exit, timeout or on
//! request, verifying that nothing is left.
//!
//! Privileges: started as root with only CAP_KILL, CAP_SETUID, CAP_SETGID
//! and CAP_SETPCAP, it moves to its own uid (`SUPERVISOR_UID`) keeping
//! those four, its `/proc` entries its own. Commands get an empty
//! capability bounding set, no_new_privs and the sandbox user's uid, so
//! whatever uid they run as (root included) they cannot signal, trace or
//! open the supervisor, whose uid differs and which, as PID 1, takes no
//! signal it has no handler for.
//!
//! A request may name another user for one command (`Request::Exec`'s
//! `user`, root included): it runs the same way, with no capability, and
//! its end kills the same way (every process but the supervisor).
//!
//! Started by someone other than root, or with `--host` (the local
//! backend runs it on the host, as the user runner runs as, root
//! included), it is unconfined: it keeps the caller's identity, refuses
//! other users, and kills only the sessions of its commands (and, at
//! `KillAll` and its end, those it was asked to keep).

mod cmd;
mod files;
mod procs;
mod ps;
mod wire;

use std::collections::HashMap;
use std::io::Read;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runner_supervisor::protocol::{Decoder, HELPER_UID, Reply, Request, SUPERVISOR_UID, VERSION};

/// Who commands run as, and whether the supervisor dropped to its own uid
/// (so it may kill every process but itself).
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Capabilities (a bit per number) commands keep in their bounding
    /// set, which a root command then holds (`--caps`); none by default.
    pub caps: u64,
    /// Running as [`SUPERVISOR_UID`] with CAP_KILL: `kill(-1)` reaches every
    /// command process, and only those.
    pub confined: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("runner-supervisor: {msg}");
    eprintln!(
        "usage: runner-supervisor --user UID:GID [--expiry SECS] [--caps N,N...] [--out FIFO] \
         [--host]"
    );
    std::process::exit(2)
}

/// The command line: who commands run as, the expiry, the capabilities
/// commands keep, where frames go (`--out FIFO`; stdout without), and
/// whether it runs on the host (`--host`: never confined).
struct Args {
    host: bool,
    uid: u32,
    gid: u32,
    expiry: Option<u64>,
    caps: u64,
    out: Option<String>,
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let mut out = None;
    let mut user = None;
    let mut expiry = None;
    let mut caps = 0u64;
    let mut host = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next(),
            "--host" => host = true,
            "--caps" => {
                for n in args.next().unwrap_or_default().split(',') {
                    match n.parse::<u32>() {
                        Ok(n) if n < 64 => caps |= 1 << n,
                        _ => usage("--caps takes capability numbers, comma-separated"),
                    }
                }
            }
            "--user" => user = args.next(),
            "--expiry" => {
                expiry = args
                    .next()
                    .and_then(|s| s.parse::<u64>().ok())
                    .or_else(|| usage("--expiry takes a number of seconds"))
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let Some(user) = user else {
        usage("--user is required")
    };
    let parse = |s: &str| s.parse::<u32>().ok();
    let (uid, gid) = match user.split_once(':') {
        Some((u, g)) => (parse(u), parse(g)),
        None => (parse(&user), parse(&user)),
    };
    match (uid, gid) {
        (Some(u), Some(g)) => Args {
            host,
            uid: u,
            gid: g,
            expiry,
            caps,
            out,
        },
        _ => usage("--user takes numeric UID:GID"),
    }
}

/// What the request loop shares with the threads it starts.
pub struct Shared {
    pub out: wire::Out,
    pub who: Identity,
    /// Kill switches of the running commands, by request id.
    pub running: Mutex<HashMap<u64, Sender<cmd::Event>>>,
    /// The stdin feeds of the running commands that asked for one.
    pub stdin: Mutex<HashMap<u64, std::sync::mpsc::SyncSender<Vec<u8>>>>,
    pub reaper: &'static procs::Reaper,
    pub bash: Option<String>,
    /// Unconfined: the sessions of commands whose background was kept.
    pub kept: Mutex<Vec<i32>>,
}

/// Checks the identity, drops privileges (unless `--host`) and sets up
/// what the request loop shares; exits on failure.
fn start(args: Args) -> Arc<Shared> {
    let Args {
        host,
        uid,
        gid,
        caps,
        out,
        ..
    } = args;
    if [uid, gid]
        .iter()
        .any(|id| [SUPERVISOR_UID, HELPER_UID].contains(id))
    {
        usage("the sandbox user must not have the uid or gid of the supervisor or its helper");
    }
    procs::ignore_signals();
    let confined = if host {
        Ok(false)
    } else {
        procs::confine(caps)
    };
    let confined = match confined {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runner-supervisor: cannot drop privileges: {e}");
            std::process::exit(3);
        }
    };
    Arc::new(Shared {
        // Opened as the supervisor's own uid, the only one that may.
        out: match out.as_deref().map(wire::Out::fifo) {
            Some(Ok(o)) => o,
            Some(Err(e)) => {
                eprintln!("runner-supervisor: cannot open the --out FIFO: {e}");
                std::process::exit(3);
            }
            None => wire::Out::stdout(),
        },
        who: Identity {
            uid,
            gid,
            caps,
            confined,
        },
        running: Mutex::new(HashMap::new()),
        stdin: Mutex::new(HashMap::new()),
        reaper: procs::Reaper::start(),
        bash: cmd::find_in_path("bash", &std::env::var("PATH").unwrap_or_default()),
        kept: Mutex::new(Vec::new()),
    })
}

fn main() {
    // The helpers, run by runner as commands (see `files` and `ps`).
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1).map(String::as_str), args.get(2), args.get(3)) {
        (Some("--read-file"), Some(path), Some(max)) => files::read(path, max.parse().unwrap_or(0)),
        (Some("--write-file"), Some(path), None) => files::write(path),
        (Some(runner_supervisor::protocol::PROCS_FLAG), None, None) => ps::list(),
        _ => {}
    }
    let args = parse_args();
    let expiry = args.expiry;
    let shared = start(args);
    let keep = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(secs) = expiry {
        let s = shared.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            end(&s, "expired");
        });
    }
    let ready = Reply::Ready {
        version: VERSION,
        pid: std::process::id(),
        bash: shared.bash.clone(),
    };
    if shared.out.send(&ready, b"").is_err() {
        end(&shared, "runner is gone");
    }
    let mut stdin = std::io::stdin().lock();
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        decoder.feed(&buf[..n]);
        loop {
            match decoder.next_frame::<Request>() {
                Ok(Some((req, payload))) => handle(&shared, &keep, req, payload),
                Ok(None) => break,
                Err(e) => {
                    let _ = shared.out.send(
                        &Reply::Malformed {
                            message: e.to_string(),
                        },
                        b"",
                    );
                    end(&shared, "malformed request");
                }
            }
        }
    }
    // runner is gone (its stream closed).
    if keep.load(std::sync::atomic::Ordering::SeqCst) {
        match expiry {
            Some(_) => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            None => end(&shared, "kept without expiry"),
        }
    }
    end(&shared, "runner is gone");
}

/// Kills everything the sandbox runs and exits: the container ends.
fn end(shared: &Shared, why: &str) -> ! {
    if shared.who.confined {
        procs::kill_all();
    } else {
        kill_unconfined(shared);
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("runner-supervisor: exiting: {why}");
    std::process::exit(0)
}

/// The unconfined supervisor's end of everything: its running commands
/// are told to die (each reports its end), the kept sessions are killed.
/// How many kept processes there were, and how many survived.
fn kill_unconfined(shared: &Shared) -> (u32, u32) {
    for tx in shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
    {
        let _ = tx.send(cmd::Event::Kill);
    }
    let kept = std::mem::take(&mut *shared.kept.lock().unwrap_or_else(|e| e.into_inner()));
    kept.into_iter()
        .map(|sid| procs::kill_session(sid, Duration::from_secs(2)))
        .fold((0, 0), |(f, s), (f2, s2)| {
            (f.saturating_add(f2), s.saturating_add(s2))
        })
}

fn handle(
    shared: &Arc<Shared>,
    keep: &Arc<std::sync::atomic::AtomicBool>,
    req: Request,
    payload: Vec<u8>,
) {
    match req {
        Request::Exec { id, stdin, .. } => {
            // The kill switch and the feed exist before this returns: a
            // kill or stdin frame right behind the request is never lost
            // to a thread not yet ready.
            let feed = stdin.then(|| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(
                    runner_supervisor::protocol::STDIN_WINDOW,
                );
                shared
                    .stdin
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, tx);
                rx
            });
            let (tx, rx) = std::sync::mpsc::channel();
            shared
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, tx.clone());
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("exec-{id}"))
                .spawn(move || cmd::run(&s, req, feed, (tx, rx)));
            if spawned.is_err() {
                shared
                    .running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                shared
                    .stdin
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                let _ = shared.out.error(id, "spawn", "cannot start a thread");
            }
        }
        Request::Stdin { id } => {
            let mut feeds = shared.stdin.lock().unwrap_or_else(|e| e.into_inner());
            if payload.is_empty() {
                // Dropping the feed closes the pipe once it is written.
                feeds.remove(&id);
            } else if let Some(tx) = feeds.get(&id) {
                // Never blocks this loop: runner keeps at most the
                // channel's room in flight, so a full channel (or a
                // feed that ended) is a stdin given up.
                if tx.try_send(payload).is_err() {
                    feeds.remove(&id);
                }
            }
        }
        Request::Kill { id } => {
            if let Some(tx) = shared
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
            {
                let _ = tx.send(cmd::Event::Kill);
            }
        }
        Request::KillAll { id } => {
            let (found, stuck) = if shared.who.confined {
                procs::kill_all()
            } else {
                kill_unconfined(shared)
            };
            let _ = if stuck > 0 {
                shared
                    .out
                    .error(id, "stuck", &format!("{stuck} processes survived SIGKILL"))
            } else {
                shared.out.send(
                    &Reply::Done {
                        id,
                        bytes: u64::from(found),
                    },
                    b"",
                )
            };
        }
        Request::Ping { id } => {
            let _ = shared.out.send(&Reply::Pong { id }, b"");
        }
        Request::Keep => keep.store(true, std::sync::atomic::Ordering::SeqCst),
    }
}
