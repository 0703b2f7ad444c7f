#!/bin/bash
# Reward 1 when the artifact came over and nothing else did.
mkdir -p /logs/verifier
if grep -qx ok /srv/out/result.txt 2>/dev/null && [ ! -e /etc/not-handed-over ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "result: '$(cat /srv/out/result.txt 2>/dev/null)', marker: $([ -e /etc/not-handed-over ] && echo present || echo absent)"
    echo 0 > /logs/verifier/reward.txt
fi
