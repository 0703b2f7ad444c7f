#!/bin/bash
set -euo pipefail
# The agent may not own the working directory (Harbor runs it as the
# image's user, root, in a directory the image gave to another): git then
# wants it named safe.
git config --global --add safe.directory "$PWD"
git init -q -b main .
echo 'hello, world' > hello.txt
git add hello.txt
git -c user.name=oracle -c user.email=oracle@example.invalid commit -q -m 'Add hello'
