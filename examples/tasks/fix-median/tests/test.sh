#!/bin/bash
# The tests live in /tests (pytest's rootdir), so nothing in /workspace
# configures pytest; the agent's code runs in a subprocess as an
# unprivileged user (see test_stats.py), and the reward is written last.
# One function, parsed whole before anything runs.
main() {
    mkdir -p /logs/verifier
    if python3 -m pytest -q -p no:cacheprovider --rootdir=/tests /tests/test_stats.py; then
        echo 1 > /logs/verifier/reward.txt
    else
        echo 0 > /logs/verifier/reward.txt
    fi
}
main
exit 0
