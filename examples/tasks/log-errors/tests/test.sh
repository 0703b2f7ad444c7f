#!/bin/bash
mkdir -p /logs/verifier
if [ "$(pwd)" = /app ] && diff -u /tests/expected.txt /app/errors.txt; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
