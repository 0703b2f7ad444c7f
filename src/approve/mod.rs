//! A person approves commands before they run (`--approve`): `risky` asks
//! about those [`policy`] names, `always` about every command. The
//! question is asked on the terminal (stderr, answered on stdin), so a run
//! with `--approve` needs both to be one. Not a security boundary: the
//! sandbox is what contains a command; this lets a person watch and stop.

pub mod policy;
pub mod prompt;
mod shell;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::redact::Redactor;
use policy::RiskyPolicy;
use prompt::Reply;

/// Which commands a person is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApproveMode {
    /// None: every command runs (the deny list still applies).
    #[default]
    Never,
    /// Those matching the deny list's patterns or the risky list.
    Risky,
    /// Every command.
    Always,
}

impl ApproveMode {
    pub const ALL: [ApproveMode; 3] = [ApproveMode::Never, ApproveMode::Risky, ApproveMode::Always];

    pub fn as_str(self) -> &'static str {
        match self {
            ApproveMode::Never => "never",
            ApproveMode::Risky => "risky",
            ApproveMode::Always => "always",
        }
    }
}

/// The rule recorded when `--approve always` asked.
pub const ALWAYS_RULE: &str = "always";

/// What the model is told when the person answers `n`.
pub const DECLINED: &str = "the user declined to run this command";

/// What the model is told of the call the person stopped the run at.
pub const STOPPED: &str = "error: not run: the user stopped the run.";

/// A person's answer, as the trajectory records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Yes,
    No,
    Edit,
    All,
    Quit,
}

/// One decision on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// [`ALWAYS_RULE`], or the name of the risky rule that matched.
    pub rule: &'static str,
    pub answer: Answer,
    /// `false`: an earlier `a` approved it, nobody was asked.
    pub asked: bool,
    /// The command line typed after `e`.
    pub edited: Option<String>,
}

/// The outcome of [`Approver::review`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// No rule asks about this command: it runs.
    NotAsked,
    Decided(Decision),
    /// Ctrl-C came while the question waited.
    Interrupted,
}

/// `--approve risky` or `always` without a terminal to ask on.
#[derive(Debug, thiserror::Error)]
#[error("--approve {mode} asks on the terminal, but {stream} is not a terminal")]
pub struct NoTerminal {
    pub mode: &'static str,
    pub stream: &'static str,
}

impl NoTerminal {
    pub fn hint(&self) -> &'static str {
        "run runner in a terminal (stdin and stderr both on it), or drop --approve"
    }
}

/// Whether `mode` can ask: it needs stdin and stderr on a terminal.
pub fn check_terminal(mode: ApproveMode) -> Result<(), NoTerminal> {
    if mode == ApproveMode::Never {
        return Ok(());
    }
    let missing = if !std::io::stdin().is_terminal() {
        Some("stdin")
    } else if !std::io::stderr().is_terminal() {
        Some("stderr")
    } else {
        None
    };
    match missing {
        Some(stream) => Err(NoTerminal {
            mode: mode.as_str(),
            stream,
        }),
        None => Ok(()),
    }
}

/// Asks, for one run, about the commands its mode names.
pub struct Approver {
    mode: ApproveMode,
    risky: RiskyPolicy,
    /// Set by `a`: the rest of the run is approved.
    all: AtomicBool,
    /// Secrets kept off the terminal, as everywhere else.
    redactor: Option<Redactor>,
}

impl Approver {
    /// The approver of `mode` for commands whose workspace is `workdir`
    /// (as they name it); `None` for [`ApproveMode::Never`].
    pub fn new(mode: ApproveMode, workdir: &str, redactor: Option<Redactor>) -> Option<Approver> {
        (mode != ApproveMode::Never).then(|| Approver {
            mode,
            risky: RiskyPolicy::new(workdir),
            all: AtomicBool::new(false),
            redactor,
        })
    }

    /// Why `command` is asked about, if it is.
    pub fn rule(&self, command: &str) -> Option<&'static str> {
        match self.mode {
            ApproveMode::Never => None,
            ApproveMode::Always => Some(ALWAYS_RULE),
            ApproveMode::Risky => self.risky.matched(command),
        }
    }

    /// Asks about `command` on the terminal when its rule says so; Ctrl-C
    /// (`cancel`) stops waiting for the answer.
    pub async fn review(&self, command: &str, cancel: &CancellationToken) -> Review {
        let Some(rule) = self.rule(command) else {
            return Review::NotAsked;
        };
        if self.all.load(Ordering::SeqCst) {
            return Review::Decided(Decision {
                rule,
                answer: Answer::All,
                asked: false,
                edited: None,
            });
        }
        let shown = match &self.redactor {
            Some(r) => r.redact(command).into_owned(),
            None => command.to_string(),
        };
        // A blocking read nobody can cancel: on Ctrl-C it is left behind
        // (the run ends, and the runtime does not wait for it). stderr is
        // not locked while it waits, so the run can still print its end.
        let asking = tokio::task::spawn_blocking(move || {
            let mut input = std::io::stdin().lock();
            prompt::ask(&mut input, &mut std::io::stderr(), &shown, rule)
        });
        let reply = tokio::select! {
            _ = cancel.cancelled() => return Review::Interrupted,
            r = asking => r.unwrap_or(Reply::Quit),
        };
        let (answer, edited) = match reply {
            Reply::Yes => (Answer::Yes, None),
            Reply::No => (Answer::No, None),
            Reply::Edit(c) => (Answer::Edit, Some(c)),
            Reply::All => {
                self.all.store(true, Ordering::SeqCst);
                (Answer::All, None)
            }
            Reply::Quit => (Answer::Quit, None),
        };
        Review::Decided(Decision {
            rule,
            answer,
            asked: true,
            edited,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_asks_nothing_and_always_everything() {
        assert!(Approver::new(ApproveMode::Never, "/workspace", None).is_none());
        assert!(check_terminal(ApproveMode::Never).is_ok());
        let always = Approver::new(ApproveMode::Always, "/workspace", None).unwrap();
        assert_eq!(always.rule("echo hi"), Some(ALWAYS_RULE));
        let risky = Approver::new(ApproveMode::Risky, "/workspace", None).unwrap();
        assert_eq!(risky.rule("echo hi"), None);
        assert_eq!(risky.rule("rm -rf x"), Some("recursive-delete"));
    }

    #[tokio::test]
    async fn after_all_nothing_is_asked_but_each_is_still_recorded() {
        let a = Approver::new(ApproveMode::Always, "/workspace", None).unwrap();
        a.all.store(true, Ordering::SeqCst);
        let cancel = CancellationToken::new();
        assert_eq!(
            a.review("ls", &cancel).await,
            Review::Decided(Decision {
                rule: ALWAYS_RULE,
                answer: Answer::All,
                asked: false,
                edited: None
            })
        );
        let r = Approver::new(ApproveMode::Risky, "/workspace", None).unwrap();
        r.all.store(true, Ordering::SeqCst);
        assert_eq!(r.review("ls", &cancel).await, Review::NotAsked);
    }
}
