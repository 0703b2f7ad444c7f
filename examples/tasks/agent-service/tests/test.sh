#!/bin/bash
# Reward 1 when http://127.0.0.1:8080/health answers "ok" (a server the
# agent left running), else 0.
mkdir -p /logs/verifier
if timeout 20 python3 -I - <<'PY'
import sys, time, urllib.request
last = None
for _ in range(10):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8080/health", timeout=2).read()
        sys.exit(0 if body.strip() == b"ok" else f"health: {body[:100]!r}")
    except OSError as e:
        last = e
        time.sleep(0.3)
sys.exit(f"no server on 127.0.0.1:8080: {last}")
PY
then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
