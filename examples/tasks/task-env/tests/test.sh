#!/bin/bash
# Reward 1 when greeting.txt is EXPECTED ([verifier] env: the same host
# variable with the same default as the task's GREETING, then ", world").
mkdir -p /logs/verifier
got="$(cat /workspace/greeting.txt 2>/dev/null)"
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
