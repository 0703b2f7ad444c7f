# Sourced by the image scripts: debootstrap with its whole log kept in a
# file and a short account of what it is doing on stderr (the phases as
# they start, and a count every 20 packages retrieved, unpacked...), so a
# first build of a few minutes is never silent.
# Usage: run_debootstrap LOG [debootstrap arguments...]
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
