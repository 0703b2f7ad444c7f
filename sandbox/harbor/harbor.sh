#!/usr/bin/env bash
# Runs the Harbor CLI installed by `make harbor` (sandbox/harbor/install.sh):
# `sandbox/harbor/harbor.sh run -p examples/tasks --agent oracle ...`.
# Harbor runs in the trixie root with chroot, in a mount namespace of its own
# (every mount below goes away with it), with the Docker socket and, at their
# own paths, this repository, the current directory and each directory of
# RUNNER_HARBOR_BIND (colon-separated): Harbor hands host paths to the engine
# (build contexts, the trial's log directories), so they must be the same
# inside. Only PATH, HOME, LANG and TERM reach it from the environment.
# `harbor.sh --python SCRIPT ARGS...` runs a Python script of this repository
# with Harbor's Python instead (tests/harbor's checks with Harbor's models).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
root="${RUNNER_HARBOR_ROOT:-$repo/target/harbor/root}"

die() { printf 'error: %s\n' "$1" >&2; [ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2; exit 2; }

entry=("$here/offline.py")
if [ "${1:-}" = "--python" ]; then
  [ -n "${2:-}" ] || die "--python needs a script" "harbor.sh --python tests/harbor/check_job.py ARGS"
  entry=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")")
  shift 2
fi

[ -f "$root/.runner-harbor-installed" ] || die "Harbor is not installed (no $root)" "run \`make harbor\`"
[ "$(id -u)" = 0 ] || die "running Harbor in its root needs root (chroot, mounts)" "run it with sudo"
socket="/var/run/docker.sock"
case "${DOCKER_HOST:-}" in
  "") ;;
  unix://*) socket="${DOCKER_HOST#unix://}" ;;
  *) die "DOCKER_HOST=$DOCKER_HOST is not a unix socket" "unset DOCKER_HOST or point it at unix:///path" ;;
esac
[ -S "$socket" ] || die "no Docker socket at $socket" "start dockerd"

binds=("$repo" "$PWD")
if [ -n "${RUNNER_HARBOR_BIND:-}" ]; then
  IFS=: read -r -a extra <<<"$RUNNER_HARBOR_BIND"
  for dir in "${extra[@]}"; do
    [ -n "$dir" ] || continue
    [ -d "$dir" ] || die "RUNNER_HARBOR_BIND names $dir, which is not a directory"
    binds+=("$(cd "$dir" && pwd -P)")
  done
fi

exec unshare --mount --propagation private -- /bin/bash -euc '
root="$1"; socket="$2"; cwd="$3"; shift 3
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mkdir -p "$root/run"; touch "$root/run/docker.sock"
mount --bind "$socket" "$root/run/docker.sock"
while [ "$1" != "--" ]; do
  case "$1" in "$root"|"$root"/*) shift; continue ;; esac
  mkdir -p "$root$1"
  mountpoint -q "$root$1" || mount --bind "$1" "$root$1"
  shift
done
shift
cd "$root$cwd"
exec chroot "$root" /usr/bin/env -i PATH=/opt/harbor/bin:/usr/local/bin:/usr/bin:/bin HOME=/root \
  LANG=C.UTF-8 LITELLM_LOCAL_MODEL_COST_MAP=True TERM="${TERM:-dumb}" /bin/sh -c '\''cd "$1" && shift && exec /opt/harbor/bin/python3 "$@"'\'' \
  sh "$cwd" "$@"
' bash "$root" "$socket" "$PWD" "${binds[@]}" -- "${entry[@]}" "$@"
