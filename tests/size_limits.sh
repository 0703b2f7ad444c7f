#!/bin/sh
# Size limits of issue 23: no function in src/ or sandbox/ longer than
# MAX_FN_LINES and no file longer than MAX_FILE_LINES, tests aside.
#
# Lists every offender and exits 1 when there is any, 0 when there is none.
# Usage: tests/size_limits.sh [dir...]   (default: src sandbox)
#
# Tests aside means: files named tests.rs or *_tests.rs, files under a tests/
# folder, and `#[cfg(test)]` items (such as `mod tests { ... }`) are not
# counted, neither their functions nor their lines.
#
# It scans each character, so braces inside strings, raw strings, char
# literals and (nested) comments do not count. A function's length runs from
# its `fn` line to the line of its closing brace; a declaration without a
# body (`fn f();` in a trait) is no function here.
set -eu

MAX_FN_LINES=${MAX_FN_LINES:-100}
MAX_FILE_LINES=${MAX_FILE_LINES:-800}

cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- src sandbox

files=$(find "$@" -name '*.rs' -not -path '*/target/*' \
    -not -name tests.rs -not -name '*_tests.rs' -not -path '*/tests/*' | sort)
[ -n "$files" ] || { echo "size_limits: no .rs files under $*" >&2; exit 2; }

# shellcheck disable=SC2086
awk -v max_fn="$MAX_FN_LINES" -v max_file="$MAX_FILE_LINES" '
function reset_file() {
    depth = 0; state = "code"; hashes = 0; cdepth = 0
    nfn = 0; pending_fn = 0; pending_test = 0; skip_depth = -1
    test_lines = 0; skip_start = 0
}
function flush_file(   counted) {
    if (FILENAME_PREV == "") return
    counted = lines - test_lines
    if (counted > max_file) {
        printf "file %s: %d lines (over %d, tests aside)\n", FILENAME_PREV, counted, max_file
        bad++
    }
}
# Called for each `{` or `}` found in code.
function open_brace() {
    if (pending_test && skip_depth < 0) { skip_depth = depth; skip_start = FNR }
    pending_test = 0
    if (pending_fn) {
        nfn++; fn_name[nfn] = pending_name; fn_start[nfn] = pending_line
        fn_depth[nfn] = depth; fn_skip[nfn] = (skip_depth >= 0)
        pending_fn = 0
    }
    depth++
}
function close_brace(   len) {
    depth--
    if (nfn > 0 && fn_depth[nfn] == depth) {
        len = FNR - fn_start[nfn] + 1
        if (!fn_skip[nfn] && len > max_fn) {
            printf "fn %s:%d %s: %d lines (over %d)\n", FILENAME, fn_start[nfn], fn_name[nfn], len, max_fn
            bad++
        }
        nfn--
    }
    if (skip_depth >= 0 && depth == skip_depth) {
        test_lines += FNR - skip_start + 1
        skip_depth = -1
    }
}
FNR == 1 { flush_file(); reset_file(); FILENAME_PREV = FILENAME }
{
    lines = FNR
    line = $0
    # A `#[cfg(test)]` attribute marks the next item (up to its `{` or `;`).
    if (state == "code" && line ~ /^[ \t]*#\[cfg\(test\)\]/) pending_test = 1
    n = length(line)
    code = ""   # this line with strings and comments removed
    for (i = 1; i <= n; i++) {
        c = substr(line, i, 1)
        if (state == "block") {
            if (c == "*" && substr(line, i + 1, 1) == "/") { cdepth--; i++; if (cdepth == 0) state = "code" }
            else if (c == "/" && substr(line, i + 1, 1) == "*") { cdepth++; i++ }
            continue
        }
        if (state == "str") {
            if (c == "\\") { i++; continue }
            if (c == "\"") state = "code"
            continue
        }
        if (state == "raw") {
            if (c == "\"" && substr(line, i + 1, hashes) == substr("################", 1, hashes)) {
                i += hashes; state = "code"
            }
            continue
        }
        # state == "code"
        if (c == "/" && substr(line, i + 1, 1) == "/") break
        if (c == "/" && substr(line, i + 1, 1) == "*") { state = "block"; cdepth = 1; i++; continue }
        if (c == "\"") { state = "str"; code = code " "; continue }
        # raw strings: r"..", r#".."#, br#".."#
        if ((c == "r" || (c == "b" && substr(line, i + 1, 1) == "r")) && (i == 1 || substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/)) {
            j = i + (c == "b" ? 2 : 1); h = 0
            while (substr(line, j, 1) == "#") { h++; j++ }
            if (substr(line, j, 1) == "\"") { state = "raw"; hashes = h; i = j; code = code " "; continue }
        }
        # char literals: x, \n, \u{..}; a lifetime has no closing quote.
        if (c == "\x27") {
            if (substr(line, i + 1, 1) == "\\") {
                k = index(substr(line, i + 2), "\x27")
                if (k > 0) { i = i + 1 + k; code = code " "; continue }
            } else if (substr(line, i + 2, 1) == "\x27") { i += 2; code = code " "; continue }
        }
        code = code c
        if (c == "{") open_brace()
        else if (c == "}") close_brace()
        else if (c == ";") { pending_fn = 0; pending_test = 0 }
    }
    # A fn item starts a pending function; its body opens at the next `{`.
    # Checked on the code part only, so "fn" in strings or comments is ignored.
    if (match(code, /(^|[^A-Za-z0-9_])fn[ \t]+[A-Za-z_][A-Za-z0-9_]*/)) {
        rest = substr(code, RSTART, RLENGTH)
        sub(/^[^f]*fn[ \t]+/, "", rest)
        after = substr(code, RSTART + RLENGTH)
        # the body brace may be on this line (already seen) or a later one.
        if (index(after, "{") == 0 && index(after, ";") == 0) {
            pending_fn = 1; pending_name = rest; pending_line = FNR
        } else if (index(after, "{") > 0 && (index(after, ";") == 0 || index(after, "{") < index(after, ";"))) {
            # the body opened on this line: register it retroactively.
            register_inline(rest)
        }
    }
}
# A fn whose `{` is on its own line was opened above before we saw `fn`;
# find the frame opened at this line and name it.
function register_inline(name) {
    nfn++; fn_name[nfn] = name; fn_start[nfn] = FNR
    fn_depth[nfn] = depth_at_fn_brace(); fn_skip[nfn] = (skip_depth >= 0)
    # a one-line fn (`fn f() { 1 }`) has already closed; drop it.
    if (fn_depth[nfn] >= depth) nfn--
}
function depth_at_fn_brace(   k, d, cc, seen) {
    # depth before the first `{` after the fn name on this line
    d = depth; seen = 0
    for (k = length(code); k >= 1; k--) {
        cc = substr(code, k, 1)
        if (cc == "{") d--
        else if (cc == "}") d++
        if (k == RSTART) break
    }
    # d is the depth just before the fn keyword; the body opens at d
    return d
}
END {
    flush_file()
    if (bad > 0) { printf "size_limits: %d over the limits (fn > %d lines, file > %d lines)\n", bad, max_fn, max_file; exit 1 }
    print "size_limits: all functions <= " max_fn " lines, all files <= " max_file " lines"
}
' $files
