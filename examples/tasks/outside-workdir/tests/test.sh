#!/bin/bash
# Reward 1 when /data/out/totals.csv holds the per-sensor totals, else 0.
mkdir -p /logs/verifier
want=$'t1,7\nt2,12\nt3,1'
got="$(cat /data/out/totals.csv 2>/dev/null)"
if [ "$got" = "$want" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "totals.csv: '$(head -c 200 /data/out/totals.csv 2>/dev/null)'"
    echo 0 > /logs/verifier/reward.txt
fi
