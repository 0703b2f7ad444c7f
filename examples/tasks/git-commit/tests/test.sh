#!/bin/bash
# A JSON reward with the checks that passed, as a fraction.
mkdir -p /logs/verifier
cd /workspace || exit 1
git config --global --add safe.directory /workspace
ok=0
[ "$(git rev-parse --abbrev-ref HEAD 2>/dev/null)" = "main" ] && ok=$((ok + 1))
[ "$(git rev-list --count HEAD 2>/dev/null)" = "1" ] && ok=$((ok + 1))
[ "$(git log -1 --format=%s 2>/dev/null)" = "Add hello" ] && ok=$((ok + 1))
[ "$(git show HEAD:hello.txt 2>/dev/null)" = "hello, world" ] && ok=$((ok + 1))
[ -z "$(git status --porcelain 2>/dev/null)" ] && git rev-parse HEAD >/dev/null 2>&1 && ok=$((ok + 1))
echo "$ok of 5 checks passed"
printf '{"reward": %s}\n' "$(echo "$ok" | awk '{ printf "%.2f", $1 / 5 }')" > /logs/verifier/reward.json
