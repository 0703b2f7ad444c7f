#!/bin/bash
# No reward file: the exit code decides (0 = pass). The agent's script runs
# as an unprivileged user, so it can write neither /tests nor /logs; any
# reward file is removed anyway. One function, parsed whole before it runs.
main() {
    local want got
    want="$(python3 /tests/expected.py "$N")"
    got="$(timeout 10 setpriv --reuid=1000 --regid=1000 --clear-groups bash /workspace/fizzbuzz.sh "$N" 2>&1)"
    rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
    [ -x /workspace/fizzbuzz.sh ] || { echo "fizzbuzz.sh is not executable"; return 1; }
    [ "$got" = "$want" ] || { echo "output differs"; return 1; }
}
main
exit $?
