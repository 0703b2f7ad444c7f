#!/bin/bash
set -euo pipefail
sed -i 's/^port = 8080$/port = 8081/' /etc/myapp/config.ini
printf '\n[log]\nlevel = debug\n' >> /etc/myapp/config.ini
