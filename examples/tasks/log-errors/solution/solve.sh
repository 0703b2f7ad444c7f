#!/bin/bash
set -euo pipefail
awk '$2 == "ERROR" { print $3 }' server.log | sort | uniq -c | sort -k1,1nr -k2,2 | awk '{ print $1, $2 }' > errors.txt
