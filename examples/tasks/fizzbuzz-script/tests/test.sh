#!/bin/bash
# Reward 1 when fizzbuzz.sh prints what expected.py prints, else 0; the
# reward file is written here (Harbor requires one: test.sh's exit code is
# ignored). The agent's script runs as an unprivileged user, so it can write
# neither /tests nor /logs; any reward file it planted is removed first
# (reward.json would win over reward.txt). One function, parsed whole
# before it runs.
main() {
    local want got
    mkdir -p /logs/verifier
    rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
    want="$(python3 /tests/expected.py "$N")"
    got="$(timeout 10 setpriv --reuid=1000 --regid=1000 --clear-groups bash /workspace/fizzbuzz.sh "$N" 2>&1)"
    rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
    if [ ! -x /workspace/fizzbuzz.sh ]; then
        echo "fizzbuzz.sh is not executable"
        echo 0 > /logs/verifier/reward.txt
    elif [ "$got" != "$want" ]; then
        echo "output differs"
        echo 0 > /logs/verifier/reward.txt
    else
        echo 1 > /logs/verifier/reward.txt
    fi
}
main
exit 0
