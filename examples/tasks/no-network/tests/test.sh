#!/bin/bash
# Passes only when the agent saw no interface but lo, and the verifier's own
# sandbox has none either.
mkdir -p /logs/verifier
mine="$(ls /sys/class/net | sort | tr '\n' ' ')"
seen="$(sort /workspace/interfaces.txt 2>/dev/null | tr '\n' ' ')"
if [ "$mine" = "lo " ] && [ "$seen" = "lo " ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "verifier sees '$mine', agent reported '$seen'"
    echo 0 > /logs/verifier/reward.txt
fi
