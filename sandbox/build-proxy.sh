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
PACKAGES="tinyproxy"

# shellcheck source=sandbox/debootstrap-lib.sh
. "$(dirname "$0")/debootstrap-lib.sh"
bootstrap_rootfs "$IMAGE" "$PACKAGES"
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
