#!/bin/bash
set -euo pipefail
cat > /usr/local/bin/wordfreq <<'PY'
#!/usr/bin/env python3
import collections, sys
counts = collections.Counter(w.lower() for w in sys.stdin.read().split())
if counts:
    print(min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0])
PY
chmod 755 /usr/local/bin/wordfreq
