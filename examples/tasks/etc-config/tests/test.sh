#!/bin/bash
# Reward 1 when /etc/myapp/config.ini has port 8081, log level debug and the
# untouched storage path, else 0.
mkdir -p /logs/verifier
if python3 -I - <<'PY'
import configparser, sys
c = configparser.ConfigParser()
if not c.read("/etc/myapp/config.ini"):
    sys.exit("no /etc/myapp/config.ini")
got = (c.get("server", "port", fallback=None), c.get("log", "level", fallback=None),
       c.get("server", "host", fallback=None), c.get("storage", "path", fallback=None))
want = ("8081", "debug", "0.0.0.0", "/var/lib/myapp")
if got != want:
    sys.exit(f"config.ini: {got}, want {want}")
PY
then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
