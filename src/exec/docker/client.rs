//! Connecting to the engine, and the outer deadline every Docker call gets.
//!
//! bollard's own timeout bounds only the response head; an exec stream or a
//! hung daemon can outlive it, so every call here is wrapped in
//! `tokio::time::timeout` and mapped to an `ExecError` naming the operation.

use std::future::Future;
use std::time::Duration;

use bollard::Docker;

use crate::exec::ExecError;

/// The engine's name in errors.
pub const ENGINE: &str = "Docker";
/// What to do when the engine cannot be reached.
pub const UNAVAILABLE_HINT: &str =
    "start the Docker daemon (or set DOCKER_HOST); --executor local runs without a sandbox";

/// How long connecting and version negotiation may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Outer deadline of one ordinary API call (inspect, create, remove...).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Outer deadline of a quick control call (exec create/start/inspect).
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(10);

/// DOCKER_HOST as set in the runner's environment, if any.
pub fn docker_host() -> Option<String> {
    std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty())
}

/// Whether the engine runs on this host (a unix socket), so its
/// containers' cgroups and processes can be seen here.
pub fn engine_is_local() -> bool {
    docker_host().is_none_or(|h| h.starts_with("unix://"))
}

/// Connects using DOCKER_HOST (unix:// or tcp://) or the local socket, and
/// negotiates the API version; fails within `CONNECT_TIMEOUT`.
pub async fn connect() -> Result<Docker, ExecError> {
    let host = docker_host();
    let shown = host
        .clone()
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let docker = match &host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_local_defaults(),
    }
    .map_err(|e| ExecError::EngineUnavailable {
        engine: ENGINE,
        hint: UNAVAILABLE_HINT.into(),
        detail: format!("{shown}: {e}"),
    })?;
    match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(ExecError::EngineUnavailable {
            engine: ENGINE,
            hint: UNAVAILABLE_HINT.into(),
            detail: format!("{shown}: {e}; is the Docker daemon running?"),
        }),
        Err(_) => Err(ExecError::EngineUnavailable {
            engine: ENGINE,
            hint: UNAVAILABLE_HINT.into(),
            detail: format!(
                "{shown} did not answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            ),
        }),
    }
}

/// Runs one Docker call under an outer deadline; `what` adds context such
/// as the container id to the error.
pub async fn call<T, F>(
    op: &'static str,
    what: &str,
    limit: Duration,
    fut: F,
) -> Result<T, ExecError>
where
    F: Future<Output = Result<T, bollard::errors::Error>>,
{
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(docker_err(op, what, &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op,
            secs: limit.as_secs(),
        }),
    }
}

/// Maps a bollard error to `ExecError::Engine` with context, or to
/// `ExecError::EngineUnavailable` when the engine was not there at all.
pub fn docker_err(op: &'static str, what: &str, e: &bollard::errors::Error) -> ExecError {
    let detail = if what.is_empty() {
        e.to_string()
    } else {
        format!("{what}: {e}")
    };
    if unreachable(e) {
        return ExecError::EngineUnavailable {
            engine: ENGINE,
            detail: format!("the engine did not take the connection during {op}: {detail}"),
            hint: UNAVAILABLE_HINT.into(),
        };
    }
    ExecError::Engine {
        engine: ENGINE,
        op,
        detail,
    }
}

/// Whether `e` says the connection to the engine failed: its socket
/// gone, the connection refused, reset or closed before the answer (an
/// engine stopped, restarting or cut off), never a sandbox's doing. An
/// error the engine answered with is not this.
fn unreachable(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    match e {
        E::SocketNotFoundError(_) => true,
        E::HyperLegacyError { err } => err.is_connect() || connection_lost(err),
        E::HyperResponseError { err } => err.is_incomplete_message() || err.is_closed(),
        E::IOError { err } => io_lost(err),
        _ => false,
    }
}

/// A connection refused, reset or closed somewhere in `e`'s causes.
fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = e.source();
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed())
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && io_lost(io)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

fn io_lost(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::NotFound
            | K::NotConnected
            | K::UnexpectedEof
    )
}

/// The HTTP status of a Docker server error, if that is what `e` is.
pub fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Shortens a container id for messages.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Creates and starts an exec in container `id`, attached as `opts` says;
/// `ops` names the two steps for error messages. Returns the exec's id and
/// its streams.
pub async fn start_exec(
    docker: &Docker,
    id: &str,
    opts: bollard::exec::CreateExecOptions<&str>,
    ops: (&'static str, &'static str),
) -> Result<(String, bollard::exec::StartExecResults), ExecError> {
    let exec = call(
        ops.0,
        short(id),
        QUICK_TIMEOUT,
        docker.create_exec(id, opts),
    )
    .await?;
    let started = call(
        ops.1,
        short(id),
        QUICK_TIMEOUT,
        docker.start_exec(&exec.id, None),
    )
    .await?;
    Ok((exec.id, started))
}

/// Longest a dropping value's cleanup may block its thread.
const DROP_CLEANUP_LIMIT: Duration = Duration::from_secs(40);

/// Runs `cleanup` with a fresh engine connection on a thread with its own
/// runtime, waiting for it at most [`DROP_CLEANUP_LIMIT`]: for `Drop`, which
/// may run while the caller's runtime shuts down (a panic, a cancelled
/// attempt). `what` names what is left to `runner gc` when it fails.
pub fn cleanup_on_drop<F, Fut>(thread: &str, what: String, cleanup: F)
where
    F: FnOnce(Docker) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), ExecError>>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async {
                    let done = match connect().await {
                        Ok(d) => cleanup(d).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = done {
                        tracing::error!("leaving {what} to `runner gc`: {e}");
                    }
                });
            }
            let _ = tx.send(());
        });
    if spawned.is_ok() {
        let _ = rx.recv_timeout(DROP_CLEANUP_LIMIT);
    }
}

/// The last lines a container printed, made visible (empty when it is
/// gone): at most 20 lines and 16 KiB, within [`QUICK_TIMEOUT`].
pub async fn log_tail(docker: &Docker, id: &str) -> String {
    use futures::StreamExt as _;
    let opts = bollard::query_parameters::LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .tail("20")
        .build();
    let mut stream = docker.logs(id, Some(opts));
    let mut out = String::new();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            if out.len() > 16 << 10 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(QUICK_TIMEOUT, read).await;
    crate::terminal::visible(&out).into_owned()
}
