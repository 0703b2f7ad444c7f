#!/bin/bash
# Writes reward.json with two named metrics, correct and style (0 or 1 each);
# both 0 when the checker itself fails.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
if ! scores="$(cd / && timeout 40 python3 -I /tests/check.py)"; then
    scores='{"correct": 0, "style": 0}'
fi
echo "$scores"
printf '%s\n' "$scores" > /logs/verifier/reward.json
