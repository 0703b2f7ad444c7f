#!/bin/bash
set -euo pipefail
cat > /workspace/fib.py <<'PY'
"""Fibonacci numbers."""


def fib(n):
    """Returns the n-th Fibonacci number, fib(0) == 0."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
PY
