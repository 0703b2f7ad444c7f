#!/bin/bash
# Reward 1 when the sidecar `kv` returns 42 for the key answer, else 0.
mkdir -p /logs/verifier
if timeout 40 python3 -I - <<'PY'
import sys, time, urllib.error, urllib.request
last = None
for _ in range(30):
    try:
        body = urllib.request.urlopen("http://kv:8000/answer", timeout=2).read()
        sys.exit(0 if body.strip() == b"42" else f"answer: {body[:100]!r}, want 42")
    except urllib.error.HTTPError as e:
        sys.exit(f"answer: HTTP {e.code}")
    except OSError as e:
        last = e
        time.sleep(0.5)
sys.exit(f"kv did not answer: {last}")
PY
then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
