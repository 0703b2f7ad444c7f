#!/usr/bin/env bash
# Runs every test binary, each to its end even when another failed (plain
# `cargo test` stops at the first failing binary, so one run would show one
# problem), then prints one summary: each binary's verdict and counts.
# Exit 0 when all passed, 1 otherwise. Each binary's output is kept in
# target/test-logs/<name>.log as well as shown.
# Usage: bash tests/run-all.sh [all|runc|runsc]
#   runc:  the unit tests and every test binary (the engine's default runtime)
#   runsc: the docker security tests again with every sandbox on gVisor
#   all:   both (the default; what `make test` runs)
set -uo pipefail
cd "$(dirname "$0")/.."

CARGO="${CARGO:-cargo}"
which="${1:-all}"
case "$which" in all | runc | runsc) ;; *)
    echo "error: unknown pass '$which'" >&2
    echo "hint: bash tests/run-all.sh [all|runc|runsc]" >&2
    exit 2 ;;
esac
logs=target/test-logs
mkdir -p "$logs"
THREADS=(-- --test-threads=2)

names=() verdicts=() counts=()
failed=0

# run NAME RUNTIME CARGO-TEST-ARGS...: one binary (or one filtered part of one).
run() {
    local name="$1" runtime="$2"
    shift 2
    local log="$logs/$name.log"
    printf '\n== %s: %s test %s\n' "$name" "$CARGO" "$*" >&2
    if [ "$runtime" = runsc ]; then
        RUNNER_TEST_RUNTIME=runsc "$CARGO" test "$@" 2>&1 | tee "$log"
    else
        "$CARGO" test "$@" 2>&1 | tee "$log"
    fi
    local rc=${PIPESTATUS[0]}
    # libtest's last line per binary: "test result: ok. 12 passed; 0 failed; 1 ignored; ..."
    local sums
    sums="$(awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i+1) ~ /^passed/) p += $i
                if ($(i+1) ~ /^failed/) f += $i
                if ($(i+1) ~ /^ignored/) g += $i
            }
        } END { printf "%d passed, %d failed, %d ignored", p, f, g }' "$log")"
    names+=("$name")
    counts+=("$sums")
    if [ "$rc" -eq 0 ]; then
        verdicts+=(ok)
    else
        verdicts+=(FAILED)
        failed=$((failed + 1))
    fi
}

# Build everything first: a compile error is reported once, not per binary.
if ! "$CARGO" test --no-run --lib --bins --tests; then
    echo "error: the tests do not compile (see above)" >&2
    exit 1
fi

if [ "$which" != runsc ]; then
    run lib runc --lib "${THREADS[@]}"
    run bins runc --bins "${THREADS[@]}"
    # Every tests/<name>/main.rs binary but Harbor's side by side (make test-harbor) and
    # the real model servers (make test-real-model, after make test in .ci/run).
    for t in $(ls tests/*/main.rs | awk -F/ '$2 != "harbor" && $2 != "real_model" { print $2 }'); do
        run "$t" runc --test "$t" "${THREADS[@]}"
    done
fi
if [ "$which" != runc ]; then
    # The eval suites stay on runc (Debian's runsc 20221219 rejects the statx
    # flags of bookworm's coreutils, see README).
    run docker@runsc runsc --test docker "${THREADS[@]}"
    run security@runsc runsc --test security "${THREADS[@]}"
    run cli-docker@runsc runsc --test cli "${THREADS[@]}" docker::
fi

printf '\n== summary\n' >&2
for i in "${!names[@]}"; do
    printf '%-16s %-7s %s\n' "${names[$i]}" "${verdicts[$i]}" "${counts[$i]}" >&2
done
if [ "$failed" -gt 0 ]; then
    printf 'error: %d of %d test binaries failed; their output is in %s/<name>.log\n' \
        "$failed" "${#names[@]}" "$logs" >&2
    exit 1
fi
printf 'all %d test binaries passed\n' "${#names[@]}" >&2
