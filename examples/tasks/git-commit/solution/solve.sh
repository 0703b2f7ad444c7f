#!/bin/bash
set -euo pipefail
git init -q -b main .
echo 'hello, world' > hello.txt
git add hello.txt
git -c user.name=oracle -c user.email=oracle@example.invalid commit -q -m 'Add hello'
