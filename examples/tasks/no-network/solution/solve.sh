#!/bin/bash
set -euo pipefail
ls /sys/class/net | sort > interfaces.txt
