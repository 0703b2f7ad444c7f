#!/bin/bash
# Reward 1 when /srv/app/reversed.txt holds lines.txt reversed, else 0.
mkdir -p /logs/verifier
want=$'third\nsecond\nfirst'
if [ "$(cat /srv/app/reversed.txt 2>/dev/null)" = "$want" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "/srv/app/reversed.txt: '$(head -c 200 /srv/app/reversed.txt 2>/dev/null)'; /app has: $(ls /app 2>&1 | tr '\n' ' ')"
    echo 0 > /logs/verifier/reward.txt
fi
