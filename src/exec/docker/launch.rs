//! The shell scripts runner runs inside the container, and the report the
//! launcher sends back.
//!
//! Every command runs under a launcher: `sh -c LAUNCH` stays the parent of
//! the command's `bash -c` (or `sh -c`), so when the command exits the
//! launcher can look for processes it left behind (`sleep 1000 &`,
//! `nohup`, `setsid`...) and kill them before the exec ends, at no extra
//! exec. The command's stderr is sent to the exec's stdout (so the model
//! sees both in write order); the exec's own stderr carries only the
//! launcher's one-line report: `runner-status RC FOUND STUCK`.
//!
//! The process walk uses only shell builtins, so it works when a fork bomb
//! has taken every pid: a process counts as left over when `kill -0` may
//! signal it (the same uid; root processes such as init and the idle main
//! process are spared by the kernel since nothing has CAP_KILL) and its
//! `/proc/PID/stat` state is not zombie. `kill -0 -1` cannot serve: it
//! succeeds whenever any process other than init is visible, even one we
//! may not signal. When commands run as root the kernel's shield is gone,
//! so the walk spares PID 1, the idle processes and itself by pid, and
//! kills one pid at a time until none is left.

/// The shell functions shared by the launcher and the kill script.
/// `walk [kill]` sets `n` to the live processes we may signal, other than
/// ourselves and those in `$spare` (killing each with `kill`); `sweep`
/// kills until none is left (about 2 s at most), setting `found` (how many
/// there were) and `stuck` (how many survived). `$root` is non-empty when
/// commands run as root.
macro_rules! walk_functions {
    () => {
        r#"walk() {
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case " $$ $spare " in *" $p "*) continue ;; esac
    kill -0 "$p" 2>/dev/null || continue
    s=
    { read -r s < "$d/stat"; } 2>/dev/null
    s=${s##*) }
    case "$s" in Z*|X*|"") continue ;; esac
    [ "$1" = kill ] && kill -9 "$p" 2>/dev/null
    n=$((n+1))
  done
}
sweep() {
  walk
  found=$n
  i=0
  while [ "$n" -gt 0 ] && [ "$i" -lt 40 ]; do
    if [ -n "$root" ]; then walk kill; else kill -9 -1 2>/dev/null; fi
    walk
    [ "$n" -gt 0 ] || break
    i=$((i+1))
    sleep 0.05 2>/dev/null || { sleep 1 2>/dev/null; i=$((i+19)); }
  done
  stuck=$n
}
"#
    };
}

/// How an exec runs [`LAUNCH`]: the script travels in the exec's
/// environment as `RUNNER_LAUNCH` (and is unset before the command runs),
/// so the command's `ps` shows `sh -c eval "$RUNNER_LAUNCH" runner COMMAND
/// ...`, not the whole script.
pub const LAUNCH_CMD: &str = r#"eval "$RUNNER_LAUNCH""#;

/// Runs the command `$1` with bash when the image has it, else with sh;
/// then, unless `$2` is `keep`, kills what it left running. `$3` lists the
/// pids to spare and `$4` is non-empty when commands run as root. The exit
/// code is the command's own (128+N when a signal ended it). The
/// launcher's own messages (a shell's "Killed") go nowhere: its stderr is
/// kept on fd 3 for the report, which the command does not inherit, and
/// the command's redirections are made in the subshell that becomes it,
/// so the launcher's own stderr stays /dev/null.
pub const LAUNCH: &str = concat!(
    walk_functions!(),
    r#"unset RUNNER_LAUNCH
spare="1 $3"
root=$4
exec 3>&2 2>/dev/null
sh=sh
command -v bash >/dev/null && sh=bash
(exec "$sh" -c "$1" 2>&1 3>&-)
rc=$?
found=0
stuck=0
[ "$2" = keep ] || sweep
echo "runner-status $rc $found $stuck" >&3
exit $rc
"#
);

/// The kill protocol's control exec: kills everything of the command
/// (`$1`: pids to spare, `$2`: non-empty for root), then prints
/// [`CLEAN_MARK`] only once nothing of it is left.
pub const KILL: &str = concat!(
    walk_functions!(),
    r#"spare="1 $1"
root=$2
if [ -n "$root" ]; then walk kill; else kill -9 -1 2>/dev/null; fi
sweep
[ "$stuck" -eq 0 ] || exit 1
echo runner-clean
"#
);

/// What [`KILL`] prints when the command is gone.
pub const CLEAN_MARK: &str = "runner-clean";

/// How the launcher saw its command end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The command's exit code, as the launcher's `$?`.
    pub rc: i64,
    /// Processes the command left running (killed unless kept).
    pub found: u32,
    /// Processes still alive after the launcher's kill.
    pub stuck: u32,
}

/// Longest stderr line kept while waiting for its newline; the launcher's
/// report is far shorter, so anything longer is output.
const LINE_MAX: usize = 4096;

/// Reads the exec's stderr channel: picks out the launcher's report and
/// passes everything else on as output. Lines are whole (up to
/// [`LINE_MAX`]), so a report split across chunks is still recognised.
#[derive(Debug, Default)]
pub struct Report {
    line: Vec<u8>,
    status: Option<Status>,
}

impl Report {
    /// Feeds a stderr chunk; returns the bytes that are output, not report.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in chunk {
            self.line.push(b);
            if b == b'\n' || self.line.len() >= LINE_MAX {
                let line = std::mem::take(&mut self.line);
                match parse_status(&line) {
                    Some(s) => self.status = Some(s),
                    None => out.extend_from_slice(&line),
                }
            }
        }
        out
    }

    /// At the end of the stream: the unterminated rest, as output.
    pub fn flush(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.line);
        match parse_status(&rest) {
            Some(s) => {
                self.status = Some(s);
                Vec::new()
            }
            None => rest,
        }
    }

    /// The last report seen, if any.
    pub fn status(&self) -> Option<Status> {
        self.status
    }
}

/// Parses exactly `runner-status RC FOUND STUCK` (with or without newline).
fn parse_status(line: &[u8]) -> Option<Status> {
    let text = std::str::from_utf8(line).ok()?;
    let mut it = text.trim_end_matches('\n').split(' ');
    if it.next()? != "runner-status" {
        return None;
    }
    let s = Status {
        rc: it.next()?.parse().ok()?,
        found: it.next()?.parse().ok()?,
        stuck: it.next()?.parse().ok()?,
    };
    it.next().is_none().then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_is_found_across_chunks_and_other_text_passes() {
        let mut r = Report::default();
        assert_eq!(r.feed(b"oops\nrunner-sta"), b"oops\n");
        assert_eq!(r.feed(b"tus 3 2 0\n"), b"");
        assert_eq!(
            r.status(),
            Some(Status {
                rc: 3,
                found: 2,
                stuck: 0
            })
        );
        // Not exactly the format: output.
        assert_eq!(r.feed(b"runner-status 1 2\n"), b"runner-status 1 2\n");
        assert_eq!(r.feed(b"tail"), b"");
        assert_eq!(r.flush(), b"tail");
        let mut long = Report::default();
        assert_eq!(long.feed(&[b'x'; LINE_MAX]).len(), LINE_MAX);
    }

    #[test]
    fn scripts_share_the_walk() {
        for s in [LAUNCH, KILL] {
            assert!(s.starts_with("walk() {"), "{s}");
            assert!(
                !s.contains('\''),
                "no single quote, so it can travel anywhere: {s}"
            );
            assert!(s.contains("sweep\n"), "{s}");
        }
    }
}
