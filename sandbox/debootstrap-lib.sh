# Sourced by the Debian image scripts (build-full.sh, build-proxy.sh).
#
# bootstrap_rootfs IMAGE PACKAGES: exits 0 at once when IMAGE exists (unless
# FORCE=1); otherwise checks for root and debootstrap, then builds a minbase
# root of $SUITE (default bookworm) from $MIRROR with PACKAGES (comma list),
# .debs cached in $CACHE_DIR. Sets `work` (a temp dir removed on exit) and
# `root` (the new root filesystem in it). debootstrap's whole log stays in
# $work/debootstrap.log; stderr gets a short account of what it is doing (the
# phases as they start, a count every 20 packages), so a first build of a
# few minutes is never silent.

SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
CACHE_DIR="${CACHE_DIR:-/var/cache/runner-sandbox/debootstrap}"

bootstrap_rootfs() {
    local image="$1" packages="$2"
    if [ "${FORCE:-0}" != "1" ] && docker image inspect "$image" >/dev/null 2>&1; then
        echo "$image already exists (FORCE=1 to rebuild)"
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
    # shellcheck disable=SC2064 # the path is fixed now, on purpose
    trap "rm -rf '$work'" EXIT
    root="$work/rootfs"
    run_debootstrap "$work/debootstrap.log" --variant=minbase --cache-dir="$CACHE_DIR" \
        --include="$packages" "$SUITE" "$root" "$MIRROR" || {
        tail -n 30 "$work/debootstrap.log" >&2
        echo "error: debootstrap failed (see above)" >&2
        exit 1
    }
}

# run_debootstrap LOG [debootstrap arguments...]
run_debootstrap() {
    local log="$1"
    shift
    echo "debootstrap $* (the whole log: $log)" >&2
    # Called as `run_debootstrap ... || handle`, so set -e is off here and
    # the pipeline's statuses can be read: debootstrap's is the first.
    debootstrap "$@" 2>&1 | tee "$log" | awk '
        /^I: (Retrieving|Validating) [^ ]+ [^ ]+$/ || /^I: (Extracting|Unpacking|Configuring) [^ ]+\.\.\.$/ {
            n[$2]++
            if (n[$2] % 20 == 0) { printf "  %s: %d packages\n", tolower($2), n[$2]; fflush() }
            next
        }
        /^[IWE]: / { print "  " $0; fflush() }
    ' >&2
    local status=("${PIPESTATUS[@]}")
    return "${status[0]}"
}
