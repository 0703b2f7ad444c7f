#!/usr/bin/env bash
# Builds runner-sandbox:tiny: busybox-static + bash-static, no package
# manager, nothing else. Seconds to build; good for tests and simple tasks.
# Usage: bash sandbox/build-tiny.sh   (FORCE=1 rebuilds an existing image)
set -euo pipefail

IMAGE="${IMAGE:-runner-sandbox:tiny}"

if [ "${FORCE:-0}" != "1" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE already exists (FORCE=1 to rebuild)"
    exit 0
fi

command -v dpkg-deb >/dev/null || { echo "error: needs a Debian-like host (dpkg-deb)" >&2; exit 2; }
# apt-get download needs the package lists; update once if they are empty.
if ! apt-cache show busybox-static bash-static >/dev/null 2>&1; then
    apt-get update -qq
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"

# Fetched as root into our own temp dir (apt's _apt user cannot write it).
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root busybox-static bash-static)
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$root"
done

# bash-static installs /bin/bash-static; the executor looks for `bash`.
ln -sf bash-static "$root/bin/bash"

# One symlink per busybox applet, never overwriting bash.
mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin"
"$root/bin/busybox" --list-full | while read -r applet; do
    [ -e "$root/$applet" ] || [ -L "$root/$applet" ] && continue
    ln -s /bin/busybox "$root/$applet"
done

mkdir -p "$root/workspace" "$root/tmp" "$root/run" "$root/etc" "$root/root" \
         "$root/home/sandbox" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
chmod 700 "$root/root"
cat > "$root/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PW
cat > "$root/etc/group" <<'GR'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
GR
chown 1000:1000 "$root/workspace" "$root/home/sandbox"

tar -C "$root" --numeric-owner -c . | docker import \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    --change 'ENV HOME=/home/sandbox' \
    --change 'CMD ["/bin/sh"]' \
    - "$IMAGE" >/dev/null
echo "built $IMAGE"
