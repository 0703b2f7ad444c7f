//! Ctrl-C and SIGTERM: installed first thing in `main`, before any work,
//! so a signal at any moment after start cancels the run (which still
//! writes its trajectory and exits 130) instead of killing runner.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// The shutdown token every layer takes as a parameter.
#[derive(Debug, Clone)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// Registers the handlers now (`tokio::signal::unix::signal` replaces
    /// the default action at once and buffers what arrives until it is
    /// polled), then watches them on a task. Must be called within the
    /// runtime.
    pub fn install() -> Shutdown {
        let token = CancellationToken::new();
        let watch = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| tracing::warn!("cannot watch {name}: {e}"))
                .ok()
        };
        let mut int = watch(SignalKind::interrupt(), "Ctrl-C");
        let mut term = watch(SignalKind::terminate(), "SIGTERM");
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = next(&mut int) => {}
                _ = next(&mut term) => {}
            }
            cancel.cancel();
        });
        Shutdown { token }
    }

    /// A token that is never cancelled by a signal (tests, embedding).
    pub fn manual() -> Shutdown {
        Shutdown {
            token: CancellationToken::new(),
        }
    }

    /// The token Ctrl-C and SIGTERM cancel.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

/// The next delivery of `s`; never, when it could not be registered.
async fn next(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}
