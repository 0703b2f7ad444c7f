#!/bin/bash
# Reward 1 when /srv/shared is sandbox's, mode 2770, with a README of its own.
mkdir -p /logs/verifier
got="$(stat -c '%U:%G:%a' /srv/shared 2>/dev/null)"
readme="$(stat -c '%U' /srv/shared/README 2>/dev/null)"
if [ "$got" = "sandbox:sandbox:2770" ] && [ "$readme" = "sandbox" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "/srv/shared: '$got', README owner: '$readme'"
    echo 0 > /logs/verifier/reward.txt
fi
