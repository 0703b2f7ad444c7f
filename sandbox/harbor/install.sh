#!/usr/bin/env bash
# `make harbor`: installs Harbor (PyPI `harbor`, pinned in requirements.txt)
# with Python >= 3.12 and Docker Compose v2 next to runner, for the side-by-side
# test (tests/harbor). Bookworm has neither, so this builds a Debian trixie root
# (python3.13, docker-cli, docker-compose v2) with debootstrap under
# target/harbor/root and installs Harbor into a venv there; harbor.sh runs it
# in that root with chroot, the Docker socket and the caller's paths
# bind-mounted at the same paths (compose build contexts and bind mounts are
# host paths). Needs root, Debian's archive and PyPI; nothing else.
# Idempotent: returns at once when the root matches this script and the pins.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${RUNNER_HARBOR_ROOT:-$repo/target/harbor/root}"
suite="trixie"
mirror="${RUNNER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages="python3,python3-venv,docker-cli,docker-compose,ca-certificates"

die() { printf 'error: %s\n' "$1" >&2; [ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "installing Harbor needs root (debootstrap, chroot)" "run \`sudo make harbor\`"

# What the root is made of: a change to any of these rebuilds it.
stamp_want="$(cat "$here/install.sh" "$here/requirements.txt" | sha256sum | cut -d' ' -f1)"
stamp="$dest/.runner-harbor-installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ]; then
  echo "Harbor is installed: $dest ($(grep -m1 '^harbor==' "$here/requirements.txt"))"
  exit 0
fi

command -v debootstrap >/dev/null 2>&1 || {
  echo "installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
}
[ -e /usr/share/debootstrap/scripts/$suite ] || die "this debootstrap does not know Debian $suite" \
  "install a newer debootstrap (bookworm-backports or trixie)"

work="$(dirname "$dest")"
mkdir -p "$work"
tmp="$dest.tmp"
# An install killed mid-way (debootstrap mounts /proc in the root it makes)
# leaves mounts under the half-made root: unmount them, deepest first, before
# removing it, and never let the removal cross into another filesystem.
unmount_under() {
  local root
  root="$(realpath -m "$1")"
  awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts \
    | sort -r | while read -r m; do umount -l "$m" || true; done
}
unmount_under "$tmp"
rm -rf --one-file-system "$tmp"
echo "debootstrap $suite into $tmp (a few minutes)"
debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap of Debian $suite failed (log: $work/debootstrap.log)" \
       "check that $mirror is reachable"; }
[ -x "$tmp/usr/libexec/docker/cli-plugins/docker-compose" ] || die "the $suite root has no Docker Compose v2 plugin"

# The wheels are fetched by the host's pip when it has one (it carries the
# host's index and certificate settings), for the root's Python; the root's
# own pip installs them offline. Without a host pip the root's pip fetches them.
pyver="$(chroot "$tmp" python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
[ "$pyver" -ge 312 ] || die "the $suite root has Python $pyver, Harbor needs >= 3.12"
chroot "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin python3 -m venv /opt/harbor
wheels="$tmp/tmp/harbor-wheels"
mkdir -p "$wheels"
if python3 -m pip --version >/dev/null 2>&1; then
  echo "downloading Harbor's wheels for Python $pyver"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --abi "cp$pyver" --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any \
    -r "$here/requirements.txt" -d "$wheels" \
    || die "cannot download Harbor's wheels from PyPI" "check that PyPI is reachable (pip download harbor)"
  cp "$here/requirements.txt" "$tmp/tmp/harbor-requirements.txt"
  chroot "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root /opt/harbor/bin/pip install -q \
    --disable-pip-version-check --no-index --find-links /tmp/harbor-wheels -r /tmp/harbor-requirements.txt \
    || die "installing Harbor's wheels in the $suite root failed"
else
  cp /etc/resolv.conf "$tmp/etc/resolv.conf"
  cp "$here/requirements.txt" "$tmp/tmp/harbor-requirements.txt"
  chroot "$tmp" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root /opt/harbor/bin/pip install -q \
    --disable-pip-version-check -r /tmp/harbor-requirements.txt \
    || die "installing Harbor from PyPI in the $suite root failed" "check that PyPI is reachable"
fi
rm -rf "$wheels" "$tmp/tmp/harbor-requirements.txt"
got="$(chroot "$tmp" /opt/harbor/bin/harbor --version)"
want="$(sed -n 's/^harbor==//p' "$here/requirements.txt")"
[ "$got" = "$want" ] || die "the installed Harbor says version '$got', want $want"
chroot "$tmp" docker compose version >/dev/null || die "docker compose does not run in the $suite root"

printf '%s\n' "$stamp_want" >"$tmp/.runner-harbor-installed"
unmount_under "$dest"
rm -rf --one-file-system "$dest"
mv "$tmp" "$dest"
echo "Harbor $got installed: $dest (run it with sandbox/harbor/harbor.sh)"
