#!/bin/bash
set -euo pipefail
cat > stats.py <<'PY'
def median(values):
    """Returns the median of a non-empty list of numbers."""
    s = sorted(values)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2
PY
