#!/bin/bash
# The tests live in /tests (pytest's rootdir), so nothing in /workspace
# configures pytest; the code under test runs in a subprocess.
mkdir -p /logs/verifier
if python3 -m pytest -q -p no:cacheprovider --rootdir=/tests /tests/test_stats.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
