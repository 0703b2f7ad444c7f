#!/bin/bash
set -euo pipefail
# Relative paths: the working directory is task.toml's workdir.
tac lines.txt > reversed.txt
