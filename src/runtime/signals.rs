//! Ctrl-C and SIGTERM: installed first thing in `main`, before any work,
//! so a signal at any moment after start cancels the run (which still
//! writes its trajectory and exits 130) instead of killing runner.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal as Sig, sigaction};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Set by [`on_early_signal`]: Ctrl-C or SIGTERM came before
/// [`Shutdown::install`] could listen.
static EARLY: AtomicBool = AtomicBool::new(false);

extern "C" fn on_early_signal(_: nix::libc::c_int) {
    // Only an atomic store: async-signal-safe.
    EARLY.store(true, Ordering::SeqCst);
}

/// Replaces the default action of SIGINT and SIGTERM (which kills the
/// process) with one that only notes the signal. The binary calls this
/// from `.init_array`, before `main` and the async runtime exist, so that
/// even a signal in runner's first milliseconds cancels the run instead of
/// killing it without a trajectory; [`Shutdown::install`] takes over.
/// Nothing is blocked, so the children runner spawns get the default
/// actions back at exec.
pub extern "C" fn catch_early_signals() {
    let action = SigAction::new(
        SigHandler::Handler(on_early_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Sig::SIGINT, Sig::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; nothing else is registered yet.
        if unsafe { sigaction(sig, &action) }.is_err() {
            // Nothing to report to this early; the default action stays.
        }
    }
}

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
        // A signal that came before the handlers above.
        if EARLY.load(Ordering::SeqCst) {
            token.cancel();
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = next(&mut int) => {}
                _ = next(&mut term) => {}
            }
            cancel.cancel();
        });
        Shutdown { token }
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
