#!/bin/bash
set -euo pipefail
mkdir -p /srv/shared
echo "shared files" > /srv/shared/README
chown -R sandbox:sandbox /srv/shared
chmod 2770 /srv/shared
