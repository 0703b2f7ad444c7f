#!/usr/bin/env bash
# What `make test` needs beyond the Rust toolchain, checked before anything
# builds, so that a fresh machine learns every missing piece in one message
# instead of one four-minute test run per missing tool. Each entry names the
# test or script that needs it. Exit 0 when all is there, 2 otherwise.
# Usage: bash tests/prereqs.sh [--runsc]   (--runsc: also gVisor, for make test-runsc)
set -uo pipefail

want_runsc=0
[ "${1:-}" = "--runsc" ] && want_runsc=1

missing=()   # what is missing, for the message
pkgs=()      # Debian packages that provide it
pip=()       # Python modules, when python3 is not Debian's own
other=()     # steps that are not a package install

has() { command -v "$1" >/dev/null 2>&1; }
need_pkg() { missing+=("$1"); pkgs+=("$2"); }

has cargo || other+=("no Rust toolchain (cargo) on PATH: install it from https://rustup.rs")

# The docker suites run `docker` (build, inspect, rm) and talk to the engine.
if ! has docker; then
    need_pkg "docker (CLI and engine)" docker.io
elif ! timeout 10 docker info >/dev/null 2>&1; then
    other+=("the Docker engine does not answer \`docker info\`: start it (\`systemctl start docker\`, or \`dockerd &\` without systemd)")
fi
# tests/docker/lifecycle.rs and tests/cli/docker.rs: a hanging engine socket.
has socat || need_pkg socat socat
# tests/docker/pull.rs: a registry on loopback to pull from.
has docker-registry || need_pkg docker-registry docker-registry
# tests/cli/repl.rs: a pseudo-terminal (script) and the processes it leaves (pgrep).
has script || need_pkg "script" bsdutils
has pgrep || need_pkg pgrep procps
# tests/view: the viewer's pages loaded in headless Chromium.
has chromium || need_pkg chromium chromium
# --disk: the workspace is an ext4 image, loop-mounted (src/exec/disk.rs).
has mkfs.ext4 || need_pkg mkfs.ext4 e2fsprogs
has mount || need_pkg mount mount
# tests/eval/junit.rs: JUnit reports checked by a real XSD validator.
if ! has python3; then
    need_pkg python3 python3
    need_pkg "the Python module xmlschema" python3-xmlschema
elif ! python3 -c 'import xmlschema' >/dev/null 2>&1; then
    missing+=("the Python module xmlschema (for $(command -v python3))")
    # Debian's package serves Debian's python3 only; another python3 (pyenv,
    # a venv) needs pip.
    if [ "$(command -v python3)" = /usr/bin/python3 ]; then
        pkgs+=(python3-xmlschema)
    else
        pip+=(xmlschema)
    fi
fi
# make sandbox-image, when the images are not built yet (sandbox/build-*.sh).
if has docker && timeout 10 docker info >/dev/null 2>&1; then
    if ! docker image inspect runner-sandbox:bookworm >/dev/null 2>&1; then
        has debootstrap || need_pkg debootstrap debootstrap
    fi
    if ! docker image inspect runner-sandbox:tiny >/dev/null 2>&1; then
        has dpkg-deb || other+=("building runner-sandbox:tiny needs a Debian-like host (dpkg-deb, apt-get)")
    fi
fi
# make test-runsc: the docker tests again on gVisor, registered with the engine.
if [ "$want_runsc" = 1 ]; then
    if ! has runsc; then
        need_pkg runsc runsc
        other+=("then register runsc with the engine: \`runsc install -- --platform=ptrace --network=none && kill -HUP \$(pidof dockerd)\`")
    elif has docker && timeout 10 docker info >/dev/null 2>&1 \
        && ! timeout 10 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
        other+=("runsc is installed but not registered with the engine: \`runsc install -- --platform=ptrace --network=none && kill -HUP \$(pidof dockerd)\`")
    fi
fi
# Loop mounts (--disk), debootstrap and the engine's socket need root.
[ "$(id -u)" = 0 ] || other+=("the tests mount loop filesystems and debootstrap builds the image: run as root (\`sudo make test\`)")

if [ ${#missing[@]} -eq 0 ] && [ ${#other[@]} -eq 0 ]; then
    exit 0
fi
if [ ${#missing[@]} -gt 0 ]; then
    list="$(printf '%s, ' "${missing[@]}")"
    printf 'error: make test needs what this machine lacks: %s\n' "${list%, }" >&2
    if [ ${#pkgs[@]} -gt 0 ] && [ ${#pip[@]} -gt 0 ]; then
        printf 'hint: install them with: apt-get install -y %s && python3 -m pip install %s\n' "${pkgs[*]}" "${pip[*]}" >&2
    elif [ ${#pkgs[@]} -gt 0 ]; then
        printf 'hint: install them with: apt-get install -y %s\n' "${pkgs[*]}" >&2
    else
        printf 'hint: install them with: python3 -m pip install %s\n' "${pip[*]}" >&2
    fi
else
    printf 'error: make test cannot run on this machine as it is\n' >&2
fi
for step in "${other[@]}"; do
    printf 'hint: %s\n' "$step" >&2
done
printf 'hint: as root, one command installs all of it: sudo bash sandbox/install-host.sh test\n' >&2
exit 2
