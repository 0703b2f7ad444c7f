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
        // A connection lost mid-call is the engine's going only when it
        // does not answer now: a stream the engine broke off while it
        // stays up (a container's content it could not send) is not
        // surely the engine's fault, and after the agent phase counts
        // against the agent as any other engine error.
        Ok(Err(e)) if lost_mid_call(&e) && connect().await.is_err() => {
            Err(unavailable(op, what, &e, "lost the connection"))
        }
        Ok(Err(e)) => Err(docker_err(op, what, &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op,
            secs: limit.as_secs(),
        }),
    }
}

/// `e` with its context: `what` (a container id...) first.
fn detail_of(what: &str, e: &bollard::errors::Error) -> String {
    if what.is_empty() {
        e.to_string()
    } else {
        format!("{what}: {e}")
    }
}

fn unavailable(op: &str, what: &str, e: &bollard::errors::Error, how: &str) -> ExecError {
    ExecError::EngineUnavailable {
        engine: ENGINE,
        detail: format!("the engine {how} during {op}: {}", detail_of(what, e)),
        hint: UNAVAILABLE_HINT.into(),
    }
}

/// Maps a bollard error to `ExecError::Engine` with context, or to
/// `ExecError::EngineUnavailable` when no engine took the connection.
pub fn docker_err(op: &'static str, what: &str, e: &bollard::errors::Error) -> ExecError {
    if never_connected(e) {
        return unavailable(op, what, e, "did not take the connection");
    }
    ExecError::Engine {
        engine: ENGINE,
        op,
        detail: detail_of(what, e),
    }
}

/// Whether no engine took the connection at all (its socket gone, the
/// connection refused): an engine stopped, restarting or cut off, never a
/// sandbox's doing.
fn never_connected(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    use std::io::ErrorKind as K;
    match e {
        E::SocketNotFoundError(_) => true,
        E::HyperLegacyError { err } => err.is_connect(),
        E::IOError { err } => matches!(err.kind(), K::ConnectionRefused | K::NotFound),
        _ => false,
    }
}

/// Whether a connection the engine had taken was reset or closed before
/// its answer was whole.
fn lost_mid_call(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    match e {
        E::HyperLegacyError { err } => connection_lost(err),
        E::HyperResponseError { err } => err.is_incomplete_message() || err.is_closed(),
        E::IOError { err } => io_lost(err),
        _ => false,
    }
}

/// A connection reset or closed somewhere in `e`'s causes.
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
        K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
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

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> bollard::errors::Error {
        bollard::errors::Error::IOError {
            err: std::io::Error::new(kind, "x"),
        }
    }

    /// Only a connection no engine took is surely not a sandbox's doing;
    /// one lost mid-call is the engine's only when it then does not
    /// answer (decided in `call`), else an engine error as before.
    #[test]
    fn a_refused_connection_is_the_engine_gone_and_a_lost_one_is_not_by_itself() {
        use std::io::ErrorKind as K;
        for k in [K::ConnectionRefused, K::NotFound] {
            assert!(matches!(
                docker_err("op", "c", &io(k)),
                ExecError::EngineUnavailable { .. }
            ));
            assert!(!lost_mid_call(&io(k)));
        }
        for k in [K::ConnectionReset, K::BrokenPipe, K::UnexpectedEof] {
            assert!(matches!(
                docker_err("op", "c", &io(k)),
                ExecError::Engine { .. }
            ));
            assert!(lost_mid_call(&io(k)));
        }
        let answered = bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "no".into(),
        };
        assert!(!lost_mid_call(&answered) && !never_connected(&answered));
    }
}
