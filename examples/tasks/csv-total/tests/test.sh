#!/bin/bash
# Reward 1 when total.txt holds the north total (20.55), else 0.
mkdir -p /logs/verifier
if [ "$(cat /workspace/total.txt 2>/dev/null)" = "20.55" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "total.txt: '$(head -c 100 /workspace/total.txt 2>/dev/null)', want 20.55"
    echo 0 > /logs/verifier/reward.txt
fi
