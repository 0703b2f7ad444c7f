#!/bin/bash
set -euo pipefail
mkdir -p /data/out
awk -F, 'NR > 1 { s[$1] += $2 } END { for (k in s) printf "%s,%d\n", k, s[k] }' /workspace/readings.csv \
    | sort > /data/out/totals.csv
