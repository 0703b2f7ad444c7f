#!/bin/bash
# Reward 1 when /srv/work/note.txt is owned by the user `agent` and says
# `agent`, and this verifier runs as root ([verifier] user unset), else 0.
mkdir -p /logs/verifier
f=/srv/work/note.txt
owner="$(stat -c %U "$f" 2>/dev/null)"
if [ "$(id -u)" = 0 ] && [ "$owner" = agent ] && [ "$(cat "$f" 2>/dev/null)" = agent ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "verifier uid $(id -u); $f owned by '$owner', says '$(head -c 100 "$f" 2>/dev/null)'"
    echo 0 > /logs/verifier/reward.txt
fi
