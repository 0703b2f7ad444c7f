//! `--shell fresh|persistent`: what a command inherits from the calls
//! before it.
//!
//! Persistence is "fresh process, carried state". Every call still runs in
//! a new `bash` process of its own, so a timed-out or interactive command is
//! killed with everything it started and can never wedge the session (the
//! failure of long-lived shell sessions such as SWE-ReX's). What carries
//! over is the state a shell session would have kept: the working directory
//! and the exported environment. A wrapper ([`WRAPPER`]) restores them
//! before the command, runs the command with `eval` in that same shell (so
//! `cd`, `export` and `unset` take effect) and, as the shell exits (also
//! through `exit 3` or `set -e`, by a `trap ... EXIT`), writes the new state
//! to file descriptor [`STATE_FD`]. The host side ([`ShellSession`]) parses
//! that dump as hostile input and keeps it for the next call.
//!
//! What the semantics are, precisely:
//! - Carried: the working directory (`$PWD`) and exported variables, values
//!   and removals (`unset` of a variable of the sandbox's own environment
//!   stays unset). Not carried: unexported shell variables, functions,
//!   aliases, shell options, traps, background jobs.
//! - A command killed at its timeout, by Ctrl-C or by a signal writes no
//!   state: the session keeps the state from before it (its `cd` and
//!   `export` are lost; files it wrote stay). So do a command that `exec`s
//!   another program, replaces the EXIT trap and then calls `exit`, or
//!   closes the state descriptor, and a dump that is malformed or larger
//!   than [`MAX_STATE_BYTES`] (a value that is not UTF-8, an entry near the
//!   kernel's limit on one environment string).
//! - A saved directory that no longer exists: the command starts in the
//!   session's first directory, with a note on stderr.
//! - stdin is `/dev/null`, as in fresh mode: `cat`, `python` or `read`
//!   waiting for input get EOF; what waits anyway (`vim`) is killed at its
//!   timeout, and the session goes on.
//! - Calls running at the same time start from the same state; the last to
//!   finish wins (the loop runs tool calls one by one).
//! - The wrapper needs bash (`${!prefix@}`, `${var@a}`, `{fd}>&`): a backend
//!   refuses to start a persistent sandbox without it
//!   ([`super::ExecError::ShellUnavailable`]).

use std::collections::HashSet;
use std::sync::Mutex;

/// Whether a command sees the working directory and exported variables the
/// calls before it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShellMode {
    /// Every call starts in the workdir with the sandbox's environment.
    #[default]
    Fresh,
    /// `cd`, `export` and `unset` carry over to the next calls.
    Persistent,
}

impl ShellMode {
    pub const ALL: [ShellMode; 2] = [ShellMode::Fresh, ShellMode::Persistent];

    pub fn as_str(self) -> &'static str {
        match self {
            ShellMode::Fresh => "fresh",
            ShellMode::Persistent => "persistent",
        }
    }

    /// One sentence for the model: what carries over between calls.
    pub fn semantics(self, workdir: &str) -> String {
        match self {
            ShellMode::Fresh => format!(
                "Each call starts a fresh shell in {workdir}: `cd` and variables do not carry \
                 over between calls, files do."
            ),
            ShellMode::Persistent => format!(
                "The shell persists between calls: the working directory (`cd`) and exported \
                 variables (`export`, `unset`) carry over, as do files; the first call starts \
                 in {workdir}. Unexported variables, functions and aliases do not carry over. \
                 A command killed at its timeout leaves the directory and variables as they \
                 were before it."
            ),
        }
    }
}

/// The file descriptor the wrapper writes the state dump to.
pub const STATE_FD: i32 = 3;

/// Largest state dump accepted; a larger one is refused (the old state
/// stays). Well under the kernel's ARG_MAX, since the state goes back
/// into the environment of the next `execve`.
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// Largest single `NAME=VALUE` entry accepted: the kernel refuses an
/// environment string over 128 KiB (MAX_ARG_STRLEN) with E2BIG, which
/// would make every later call fail to start.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// The first item of a dump (a version: change it with the format).
pub const STATE_HEADER: &str = "runner-shell-state-1";

/// The last item of a dump: one without it was cut short.
pub const STATE_END: &str = "runner-shell-end";

/// `$0` of the wrapper (shows in `ps` and in bash's messages).
pub const WRAPPER_NAME: &str = "runner-shell";

/// Variables bash manages itself: never saved nor restored.
const BASH_MANAGED: [&str; 3] = ["PWD", "SHLVL", "_"];

/// The wrapper, run as `bash -c WRAPPER runner-shell COMMAND DIR MODE
/// [NAMES...]`: `DIR` is the saved working directory (empty: stay where the
/// process started); `MODE` is `restore` when `NAMES` lists every exported
/// variable the session keeps (any other exported variable is unset, which
/// is how an `unset` of a variable of the sandbox's own environment
/// carries over), `fresh` before the first dump.
///
/// The state descriptor is moved off 3 at once so the command sees the
/// same descriptors as in fresh mode (`exec 3>file` in a command cannot
/// redirect the dump). Every variable of the shell is listed without a
/// subshell: `"${!A@}"` ... `"${!_@}"` expand to the names starting with
/// each letter.
pub const WRAPPER: &str = r#"__runner_cmd=$1 __runner_dir=$2 __runner_mode=$3
shift 3
{ exec {__runner_fd}>&3 3>&-; } 2>/dev/null
__runner_names() {
  __runner_all=("${!A@}" "${!B@}" "${!C@}" "${!D@}" "${!E@}" "${!F@}" "${!G@}" "${!H@}" "${!I@}" "${!J@}" "${!K@}" "${!L@}" "${!M@}" "${!N@}" "${!O@}" "${!P@}" "${!Q@}" "${!R@}" "${!S@}" "${!T@}" "${!U@}" "${!V@}" "${!W@}" "${!X@}" "${!Y@}" "${!Z@}" "${!a@}" "${!b@}" "${!c@}" "${!d@}" "${!e@}" "${!f@}" "${!g@}" "${!h@}" "${!i@}" "${!j@}" "${!k@}" "${!l@}" "${!m@}" "${!n@}" "${!o@}" "${!p@}" "${!q@}" "${!r@}" "${!s@}" "${!t@}" "${!u@}" "${!v@}" "${!w@}" "${!x@}" "${!y@}" "${!z@}" "${!_@}")
}
__runner_dump() {
  [ -n "${__runner_fd-}" ] || return 0
  builtin set +x +e +u 2>/dev/null
  local __runner_n __runner_all __runner_kv=()
  __runner_names
  for __runner_n in "${__runner_all[@]}"; do
    case $__runner_n in PWD|SHLVL|_|__runner_*) continue ;; esac
    case ${!__runner_n@a} in *[aA]*) continue ;; *x*) ;; *) continue ;; esac
    [ -n "${!__runner_n+set}" ] || continue
    __runner_kv+=("$__runner_n=${!__runner_n}")
  done
  builtin printf '%s\0' runner-shell-state-1 "$PWD" "${__runner_kv[@]}" runner-shell-end >&"$__runner_fd" 2>/dev/null
  builtin exec {__runner_fd}>&- 2>/dev/null
  __runner_fd=
}
if [ "$__runner_mode" = restore ]; then
  declare -A __runner_keep=()
  for __runner_n in "$@"; do __runner_keep[$__runner_n]=1; done
  __runner_names
  for __runner_n in "${__runner_all[@]}"; do
    case $__runner_n in PWD|SHLVL|_|__runner_*) continue ;; esac
    case ${!__runner_n@a} in
      *x*) [ -n "${__runner_keep[$__runner_n]+set}" ] || unset -v "$__runner_n" 2>/dev/null ;;
    esac
  done
fi
if [ -n "$__runner_dir" ]; then
  __runner_old=${OLDPWD-}
  if cd -- "$__runner_dir" 2>/dev/null; then
    OLDPWD=$__runner_old
  else
    printf '[runner: the working directory %s is gone; this command starts in %s]\n' "$__runner_dir" "$PWD" >&2
  fi
fi
unset -v __runner_dir __runner_mode __runner_keep __runner_all __runner_n __runner_old
set --
trap __runner_dump EXIT
eval "$__runner_cmd"
__runner_rc=$?
__runner_dump
exit "$__runner_rc"
"#;

/// A command ready to start, for a backend to run with its own means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCommand {
    /// `bash`, its arguments: the backend runs `argv[0]` as it finds bash
    /// (the local one by absolute path).
    pub argv: Vec<String>,
    /// Where the process starts: always the session's first directory,
    /// which exists as long as the workspace does; the wrapper moves on to
    /// the saved one (so a deleted directory cannot make the start fail).
    pub cwd: String,
    /// Variables to set on top of the backend's own environment (they
    /// override it). Variables of that environment the session has unset
    /// are unset by the wrapper, which is told which names to keep.
    pub env: Vec<(String, String)>,
}

/// Why a state dump was refused (the old state stays).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the shell state is larger than {MAX_STATE_BYTES} bytes")]
    TooLarge,
    #[error("the shell state is cut short or not in runner's format")]
    Malformed,
    #[error("the shell state holds a working directory that is not an absolute path")]
    BadDirectory,
    #[error("the shell state holds an entry that is not NAME=VALUE in UTF-8")]
    BadEntry,
    #[error("the shell state holds a variable over {MAX_ENTRY_BYTES} bytes")]
    EntryTooLarge,
    #[error("the shell state names a variable twice")]
    Duplicate,
}

/// What carries over to the next call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// The working directory; `None`: the first one.
    cwd: Option<String>,
    /// Every exported variable after the last dump, bash's own left out;
    /// `None` before the first dump (nothing to restore or unset).
    exports: Option<Vec<(String, String)>>,
}

impl State {
    const INITIAL: State = State {
        cwd: None,
        exports: None,
    };
}

/// The host side of a persistent shell: the state between calls. Shared by
/// the calls of one sandbox (interior mutability, `Send + Sync`).
#[derive(Debug)]
pub struct ShellSession {
    workdir: String,
    state: Mutex<State>,
}

impl ShellSession {
    /// A session whose first command starts in `workdir`, with the
    /// backend's environment.
    pub fn new(workdir: impl Into<String>) -> ShellSession {
        ShellSession {
            workdir: workdir.into(),
            state: Mutex::new(State::INITIAL),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The command `command` wrapped to restore the session's state and
    /// save the new one on [`STATE_FD`].
    pub fn prepare(&self, command: &str) -> PreparedCommand {
        let state = self.state().clone();
        let mut argv = vec![
            "bash".to_string(),
            "-c".to_string(),
            WRAPPER.to_string(),
            WRAPPER_NAME.to_string(),
            command.to_string(),
            state.cwd.unwrap_or_default(),
        ];
        let env = match state.exports {
            Some(exports) => {
                argv.push("restore".to_string());
                argv.extend(exports.iter().map(|(k, _)| k.clone()));
                exports
            }
            None => {
                argv.push("fresh".to_string());
                Vec::new()
            }
        };
        PreparedCommand {
            argv,
            cwd: self.workdir.clone(),
            env,
        }
    }

    /// Takes the dump a command wrote on [`STATE_FD`] as the new state.
    /// `dump` is hostile: anything malformed or oversized is refused and the
    /// old state stays. Not called for a command that was killed.
    pub fn finish(&self, dump: &[u8]) -> Result<(), StateError> {
        let new = parse(dump)?;
        *self.state() = new;
        Ok(())
    }

    /// Takes what a command that exited wrote on [`STATE_FD`] (`None`:
    /// nothing came; `overflow`: more than [`MAX_STATE_BYTES`]); the note
    /// for the model when a state came but was refused. Nothing at all (the
    /// command `exec`ed another program or closed the descriptor) keeps
    /// the old state in silence.
    pub fn save(&self, dump: Option<&[u8]>, overflow: bool) -> Option<String> {
        let result = match dump {
            _ if overflow => Err(StateError::TooLarge),
            None | Some([]) => {
                tracing::debug!("no shell state arrived; the previous one stays");
                return None;
            }
            Some(d) => self.finish(d),
        };
        result.err().map(|e| {
            tracing::warn!(error = %e, "shell state refused");
            format!(
                "[runner: {e}, so it was not saved: the next command starts from the directory \
                 and variables before this one]"
            )
        })
    }

    /// Back to the initial state: the first directory, the backend's
    /// environment.
    pub fn restart(&self) {
        *self.state() = State::INITIAL;
    }

    /// The saved working directory (the first one until a dump arrives).
    pub fn cwd(&self) -> String {
        self.state()
            .cwd
            .clone()
            .unwrap_or_else(|| self.workdir.clone())
    }
}

/// Parses `header\0 cwd\0 (NAME=VALUE\0)* end\0`.
fn parse(dump: &[u8]) -> Result<State, StateError> {
    if dump.len() > MAX_STATE_BYTES {
        return Err(StateError::TooLarge);
    }
    let body = dump.strip_suffix(b"\0").ok_or(StateError::Malformed)?;
    let mut items = body.split(|&b| b == 0);
    if items.next() != Some(STATE_HEADER.as_bytes()) {
        return Err(StateError::Malformed);
    }
    let cwd = items.next().ok_or(StateError::Malformed)?;
    let cwd = std::str::from_utf8(cwd).map_err(|_| StateError::BadDirectory)?;
    if !cwd.starts_with('/') {
        return Err(StateError::BadDirectory);
    }
    let mut exports: Vec<(String, String)> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut ended = false;
    for item in items {
        if ended {
            // Anything after the end marker: not a dump of ours.
            return Err(StateError::Malformed);
        }
        if item == STATE_END.as_bytes() {
            ended = true;
            continue;
        }
        if item.len() > MAX_ENTRY_BYTES {
            return Err(StateError::EntryTooLarge);
        }
        let entry = std::str::from_utf8(item).map_err(|_| StateError::BadEntry)?;
        let (name, value) = entry.split_once('=').ok_or(StateError::BadEntry)?;
        if !is_name(name) {
            return Err(StateError::BadEntry);
        }
        if BASH_MANAGED.contains(&name) {
            continue;
        }
        if !seen.insert(name) {
            return Err(StateError::Duplicate);
        }
        exports.push((name.to_string(), value.to_string()));
    }
    if !ended {
        return Err(StateError::Malformed);
    }
    Ok(State {
        cwd: Some(cwd.to_string()),
        exports: Some(exports),
    })
}

/// A shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
