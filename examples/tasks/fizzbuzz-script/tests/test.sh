#!/bin/bash
# No reward file: the exit code decides (0 = pass).
set -u
want="$(python3 /tests/expected.py "$N")"
got="$(timeout 10 bash /workspace/fizzbuzz.sh "$N" 2>&1)" || exit 1
[ "$got" = "$want" ] || { echo "output differs"; exit 1; }
[ -x /workspace/fizzbuzz.sh ] || { echo "not executable"; exit 1; }
