#!/bin/bash
mkdir -p /logs/verifier
want='["alice","bob","carol"]'
got="$(jq -c . /workspace/active.json 2>/dev/null)"
if [ "$got" = "$want" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "active.json: '$got', want '$want'"
    echo 0 > /logs/verifier/reward.txt
fi
