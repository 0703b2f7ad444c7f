#!/usr/bin/env bash
# Builds runner-sandbox:bookworm: a minimal Debian bookworm (debootstrap
# minbase) with bash, coreutils, python3 + pytest, git, jq and procps.
# Downloaded .debs are kept in $CACHE_DIR so rebuilds do not fetch again.
# Usage: bash sandbox/build-full.sh   (FORCE=1 rebuilds an existing image)
set -euo pipefail

IMAGE="${IMAGE:-runner-sandbox:bookworm}"
PACKAGES="bash,coreutils,findutils,grep,sed,gawk,python3,python3-pytest,git,jq,procps,ca-certificates"

# shellcheck source=sandbox/debootstrap-lib.sh
. "$(dirname "$0")/debootstrap-lib.sh"
bootstrap_rootfs "$IMAGE" "$PACKAGES"

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
