#!/bin/bash
set -euo pipefail
# The sidecar may still be starting: retry for up to 30 s.
python3 - <<'PY'
import sys, time, urllib.request
last = None
for _ in range(60):
    try:
        req = urllib.request.Request("http://kv:8000/answer", data=b"42", method="PUT")
        urllib.request.urlopen(req, timeout=2)
        sys.exit(0)
    except OSError as e:
        last = e
        time.sleep(0.5)
sys.exit(f"kv did not answer: {last}")
PY
