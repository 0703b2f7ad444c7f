#!/bin/bash
# GREETING comes from [environment] env, TARGET from [solution] env: with
# either missing, set -u stops the script and nothing is written.
set -euo pipefail
printf '%s, %s\n' "$GREETING" "$TARGET" > /workspace/greeting.txt
