#!/bin/bash
set -euo pipefail
jq '[.[] | select(.active) | .name] | sort' users.json > active.json
