#!/bin/bash
set -euo pipefail
awk -F, 'NR > 1 && $1 == "north" { s += $3 } END { printf "%.2f\n", s }' sales.csv > total.txt
