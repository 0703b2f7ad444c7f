#!/bin/bash
# Reward 1 when the agent user's settings file (the agent is root, whose
# passwd home is /root) holds name "runner" and color false, else 0.
mkdir -p /logs/verifier
home="$(getent passwd root | cut -d: -f6)"
f="$home/.config/greeter/settings.json"
if [ "$home" = /root ] && [ "$(jq -c '[.name, .color]' "$f" 2>/dev/null)" = '["runner",false]' ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "$f: '$(head -c 200 "$f" 2>/dev/null)'"
    echo 0 > /logs/verifier/reward.txt
fi
