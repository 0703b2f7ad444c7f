#!/bin/bash
# Reward 1 when `wordfreq` resolves to /usr/local/bin/wordfreq and answers
# two inputs correctly, else 0.
mkdir -p /logs/verifier
where="$(command -v wordfreq)"
a="$(printf 'b a B c\nb A a\n' | timeout 10 wordfreq 2>&1)"
b="$(printf 'Zeta alpha zeta ALPHA\n' | timeout 10 wordfreq 2>&1)"
if [ "$where" = /usr/local/bin/wordfreq ] && [ "$a" = a ] && [ "$b" = alpha ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "wordfreq at '$where' printed '$a' and '$b', want 'a' and 'alpha'"
    echo 0 > /logs/verifier/reward.txt
fi
