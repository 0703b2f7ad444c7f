#!/usr/bin/env bash
# Builds runner-sandbox:bookworm: a minimal Debian bookworm (debootstrap
# minbase) with bash, coreutils, python3 + pytest, git, jq and procps.
# Downloaded .debs are kept in $CACHE_DIR so rebuilds do not fetch again.
# Usage: bash sandbox/build-full.sh   (FORCE=1 rebuilds an existing image)
set -euo pipefail

IMAGE="${IMAGE:-runner-sandbox:bookworm}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
CACHE_DIR="${CACHE_DIR:-/var/cache/runner-sandbox/debootstrap}"
PACKAGES="bash,coreutils,findutils,grep,sed,gawk,python3,python3-pytest,git,jq,procps,ca-certificates"

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

# The sandbox user: uid/gid 1000, owning /workspace.
chroot "$root" groupadd --gid 1000 sandbox
chroot "$root" useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash sandbox
mkdir -p "$root/workspace"
chown 1000:1000 "$root/workspace"
chmod 1777 "$root/tmp"

# Nothing inside needs apt's caches or lists; the image has no network.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
       "$root"/usr/share/locale/*

tar -C "$root" --numeric-owner -c . | docker import \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    --change 'ENV HOME=/home/sandbox' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$IMAGE" >/dev/null
echo "built $IMAGE"
