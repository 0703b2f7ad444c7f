"""Scores /workspace/fib.py: prints {"correct": 0|1, "style": 0|1}."""

import ast
import json
import subprocess

PATH = "/workspace/fib.py"


def correct():
    # The agent's code runs in a child interpreter, unprivileged, with a limit.
    code = "import sys; sys.path.insert(0, '/workspace'); import fib; print(fib.fib(10), fib.fib(20), fib.fib(0))"
    cmd = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "python3", "-I", "-c", code]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return 0
    return int(out.stdout.split() == ["55", "6765", "0"])


def style():
    try:
        text = open(PATH, encoding="utf-8").read()
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return 0
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    ok = (
        ast.get_docstring(tree) is not None
        and bool(funcs)
        and all(ast.get_docstring(f) is not None for f in funcs)
        and all(len(line) <= 79 for line in text.splitlines())
    )
    return int(ok)


print(json.dumps({"correct": correct(), "style": style()}))
