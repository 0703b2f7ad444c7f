#!/usr/bin/env bash
# The peers of issue 14, pinned: mini-swe-agent and SWE-ReX (bench/peers/requirements.txt) in a
# venv at target/peers/venv, and the image SWE-ReX's DockerDeployment runs its server in,
# runner-bench-swerex:1.4.0, built offline (`docker build --network none`) FROM
# runner-sandbox:bookworm with wheels the host downloads from PyPI for the image's own Python.
# bench/peers/driver.py drives the tools; the Rust bench (benches/suite) drives the driver.
# Idempotent: returns at once when target/peers/.installed matches these files and the images.
# Exit codes: 0 installed, 2 something is missing or failed (an `error:` and a `hint:` line).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="$repo/target/peers"
venv="$dest/venv"
context="$dest/swerex-image"
marker="$dest/.installed"
base="runner-sandbox:bookworm"
image="runner-bench-swerex:1.4.0"
label="runner.bench.peers=swerex-image"
python="${PYTHON:-python3}"

die() { printf 'error: %s\n' "$1" >&2; [ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2; exit 2; }
pin() { sed -n "s/^$1==//p" "$here/requirements.txt"; }

mini_version="$(pin mini-swe-agent)"
swerex_version="$(pin swe-rex)"
[ -n "$mini_version" ] && [ -n "$swerex_version" ] || die "bench/peers/requirements.txt pins no mini-swe-agent or swe-rex" \
  "restore the file from git (git checkout bench/peers/requirements.txt)"
[ "$image" = "runner-bench-swerex:$swerex_version" ] || die "the image tag $image does not match swe-rex==$swerex_version" \
  "change \`image\` in bench/peers/install.sh and driver.py together with the pin"

command -v docker >/dev/null 2>&1 || die "docker is not on PATH" "install the Docker engine and CLI"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed)" \
  "start dockerd, or check that you may use /var/run/docker.sock"
base_id="$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null)" || die "the base image $base is missing" \
  "build it first: make sandbox-full"

# What the installation is made of: a change to any of these reinstalls.
stamp_want="$(cat "$here/install.sh" "$here/requirements.txt" "$here/swerex.Dockerfile" | sha256sum | cut -d' ' -f1) $base_id"
if [ -f "$marker" ] && [ -x "$venv/bin/python" ] && grep -qxF "stamp=$stamp_want" "$marker"; then
  image_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
  if [ -n "$image_id" ] && grep -qxF "image=$image $image_id" "$marker"; then
    echo "peers are installed: mini-swe-agent $mini_version, swe-rex $swerex_version in $venv; image $image"
    exit 0
  fi
fi
rm -f "$marker"

# The venv on the host: the tools' client side.
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || die "$python is missing or older than 3.10 (mini-swe-agent and swe-rex need >= 3.10)" \
         "install Python >= 3.10, or point PYTHON= at one"
mkdir -p "$dest"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the venv $venv"
  "$python" -m venv "$venv" || die "cannot create a venv with $python" \
    "install the venv module for $python (Debian: apt-get install python3-venv)"
fi
echo "installing mini-swe-agent $mini_version and swe-rex $swerex_version (pinned, bench/peers/requirements.txt)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt" \
  || die "pip could not install bench/peers/requirements.txt into $venv" "check that PyPI is reachable (pip download swe-rex==$swerex_version)"
# Versions from the metadata; the imports check that the two APIs the driver uses load (quietly:
# minisweagent prints a banner and makes its global config dir on import, here kept under target/).
got="$(MSWEA_SILENT_STARTUP=1 MSWEA_GLOBAL_CONFIG_DIR="$dest/mini-config" "$venv/bin/python" -c 'from importlib.metadata import version as v; import minisweagent.environments.docker, swerex.deployment.docker; print(v("mini-swe-agent"), v("swe-rex"))' 2>/dev/null)" \
  || die "the venv cannot import minisweagent and swerex" "remove $venv and run this script again"
[ "$got" = "$mini_version $swerex_version" ] || die "the venv has versions '$got', want '$mini_version $swerex_version'" \
  "remove $venv and run this script again"

# The image's Python decides which wheels fit: its exact version and its glibc.
probe="$(docker run --rm --network none --label "$label" "$base" \
  python3 -c 'import platform; print(platform.python_version(), platform.libc_ver()[1])')" \
  || die "cannot run python3 in $base" "rebuild it: FORCE=1 make sandbox-full"
read -r py_version glibc <<<"$probe"
case "$py_version" in 3.1[0-9].*) ;; *) die "$base has Python '$py_version', swe-rex needs >= 3.10" "rebuild it: FORCE=1 make sandbox-full" ;; esac
py_tag="cp$(echo "$py_version" | cut -d. -f1,2 | tr -d .)"
glibc_minor="${glibc#2.}"
[[ "$glibc_minor" =~ ^[0-9]+$ ]] && [ "$glibc_minor" -ge 17 ] || die "$base reports glibc '$glibc', want >= 2.17" \
  "rebuild it: FORCE=1 make sandbox-full"
platforms=(--platform linux_x86_64 --platform manylinux2014_x86_64 --platform any)
for minor in $(seq 17 "$glibc_minor"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done

echo "downloading swe-rex $swerex_version's wheels for Python $py_version ($py_tag, glibc $glibc) into $context/wheels"
rm -rf "$context"
mkdir -p "$context/wheels"
grep -v '^#' "$here/requirements.txt" >"$context/constraints.txt"
"$venv/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  --python-version "$py_version" --implementation cp --abi "$py_tag" --abi abi3 --abi none "${platforms[@]}" \
  -c "$context/constraints.txt" -d "$context/wheels" "swe-rex==$swerex_version" pip \
  || die "cannot download swe-rex's wheels from PyPI for Python $py_version" \
         "check that PyPI is reachable (pip download swe-rex==$swerex_version)"
cp "$here/swerex.Dockerfile" "$context/Dockerfile"

old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
echo "building $image FROM $base (docker build --network none)"
docker build -q --network none --force-rm --label "$label" --build-arg "BASE=$base" -t "$image" "$context" >"$dest/build.log" 2>&1 \
  || { tail -n 20 "$dest/build.log" >&2; die "docker build of $image failed (log: $dest/build.log)" \
       "read the log; a missing wheel means the pins or the image's Python changed"; }
image_id="$(docker image inspect --format '{{.Id}}' "$image")"
# The previous build of this tag (ours, by its label) would linger untagged.
if [ -n "$old_id" ] && [ "$old_id" != "$image_id" ] \
   && [ "$(docker image inspect --format '{{index .Config.Labels "runner.bench.peers"}}' "$old_id" 2>/dev/null)" = swerex-image ]; then
  docker image rm "$old_id" >/dev/null 2>&1 || true
fi
served="$(docker run --rm --network none --label "$label" "$image" swerex-remote --version)" \
  || die "swerex-remote does not run in $image" "read $dest/build.log"
[ "$served" = "$swerex_version" ] || die "swerex-remote in $image says version '$served', want $swerex_version" \
  "remove the image (docker image rm $image) and run this script again"

{
  echo "mini-swe-agent==$mini_version"
  echo "swe-rex==$swerex_version"
  echo "python=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')"
  echo "image-python=$py_version"
  echo "image=$image $image_id"
  echo "stamp=$stamp_want"
} >"$marker"
echo "peers installed: mini-swe-agent $mini_version, swe-rex $swerex_version in $venv; image $image (server Python $py_version)"
