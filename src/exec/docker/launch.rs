//! The kill protocol's fallback script, which runner runs through the
//! engine (a control exec) only when the in-sandbox supervisor could not
//! finish a kill itself (see `kill` and `run`).
//!
//! The process walk uses only shell builtins, so it works when a fork bomb
//! has taken every pid: a process counts as left over when `kill -0` may
//! signal it (the same uid; the supervisor, of a uid of its own, is spared
//! by the kernel) and its `/proc/PID/stat` state is not zombie. When
//! commands run as root the walk spares PID 1 (the supervisor) and itself
//! by pid, and kills one pid at a time until none is left.

/// The shell functions of the kill script.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kill_script_walks_and_travels_anywhere() {
        assert!(KILL.starts_with("walk() {"), "{KILL}");
        assert!(!KILL.contains('\''), "no single quote: {KILL}");
        assert!(KILL.contains("sweep\n"), "{KILL}");
    }
}
