#!/bin/bash
set -euo pipefail
mkdir -p /srv/out
echo ok > /srv/out/result.txt
# Not an artifact: the separate verifier must not see it.
echo x > /etc/not-handed-over
