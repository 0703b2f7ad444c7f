#!/usr/bin/env bash
# Builds runner-proxy:bookworm: a minimal Debian bookworm (debootstrap
# minbase) with tinyproxy, the filtering proxy that is an allowlisted
# sandbox's only way out (`--allow-host`, a task's `network_mode =
# "allowlist"`). runner writes tinyproxy's configuration and filter at each
# start (into a tmpfs: the proxy's root is read-only), so the image holds
# no policy of its own. Downloaded .debs are kept in $CACHE_DIR.
# Usage: bash sandbox/build-proxy.sh   (FORCE=1 rebuilds an existing image)
set -euo pipefail

IMAGE="${IMAGE:-runner-proxy:bookworm}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
CACHE_DIR="${CACHE_DIR:-/var/cache/runner-sandbox/debootstrap}"
PACKAGES="tinyproxy"

if [ "${FORCE:-0}" != "1" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE already exists (FORCE=1 to rebuild)"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "error: debootstrap needs root; run as root (sudo bash $0)" >&2
    exit 2
fi
if ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq debootstrap >/dev/null
fi

mkdir -p "$CACHE_DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"

# shellcheck source=sandbox/debootstrap-progress.sh
. "$(dirname "$0")/debootstrap-progress.sh"
run_debootstrap "$work/debootstrap.log" --variant=minbase --cache-dir="$CACHE_DIR" \
    --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" || {
    tail -n 30 "$work/debootstrap.log" >&2
    echo "error: debootstrap failed (see above)" >&2
    exit 1
}
chroot "$root" tinyproxy -v >/dev/null || {
    echo "error: tinyproxy did not install in the image" >&2
    exit 1
}

# The package's own configuration is never used: runner passes its own
# with -c at every start.
rm -rf "$root"/etc/tinyproxy "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
       "$root"/usr/share/locale/*

# Runs as nobody (runner sets the user too); /run/proxy is a tmpfs runner
# mounts, where the start command writes the configuration.
tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'USER 65534:65534' \
    --change 'CMD ["/usr/bin/tinyproxy", "-v"]' \
    - "$IMAGE" >/dev/null
echo "built $IMAGE"
