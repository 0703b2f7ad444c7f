#!/bin/bash
set -euo pipefail
mkdir -p /srv/www
echo ok > /srv/www/health
# Detached: its own session, no terminal, every stream away from this shell.
nohup setsid python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv/www \
    > /tmp/www.log 2>&1 < /dev/null &
for _ in $(seq 50); do
    if python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8080/health", timeout=1)' 2>/dev/null; then
        exit 0
    fi
    sleep 0.2
done
echo "the server did not come up" >&2
exit 1
