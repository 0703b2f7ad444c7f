#!/bin/bash
# Reward 1 when greeting.txt is "$EXPECTED_GREETING, world" ([verifier] env:
# the same host variable with the same default as the task's GREETING;
# Harbor resolves a value only when it is a whole `${VAR:-default}`).
mkdir -p /logs/verifier
got="$(cat /workspace/greeting.txt 2>/dev/null)"
EXPECTED="${EXPECTED_GREETING:-}, world"
case "$EXPECTED" in
    *'${'* | ", world" | "") ok=no ;;
    *) [ "$got" = "$EXPECTED" ] && ok=yes || ok=no ;;
esac
if [ "$ok" = yes ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "greeting.txt: '$got', EXPECTED: '$EXPECTED'"
    echo 0 > /logs/verifier/reward.txt
fi
