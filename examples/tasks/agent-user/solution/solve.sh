#!/bin/bash
set -euo pipefail
id -un > note.txt
