"""Drives one peer tool through its own public API for runner's benchmarks (issue 14).

    target/peers/venv/bin/python bench/peers/driver.py TOOL --image IMAGE --label KEY=VALUE

TOOL is `mini` (mini-swe-agent's DockerEnvironment: `docker run` once, `docker exec` per call),
`swerex-exec` (SWE-ReX's DockerDeployment, `runtime.execute(Command(...))`: a fresh process per
call) or `swerex-session` (the same deployment, one bash session: `run_in_session(BashAction(...))`).
The tool starts its own container, with the label added (mini: `run_args`; SWE-ReX: `docker_args`)
so the caller can find and count it. Settings are the tools' defaults except the image, no pull,
the label, and `check="silent"` for BashAction (extracts the exit code like the default "raise",
which costs the same second round trip in the session, but does not raise on a non-zero one).

Protocol, JSON lines: stdout carries only these; everything the tools print or log goes to stderr.
After the environment is up, one line:
    {"ready": true, "tool": ..., "version": ..., "container": ..., "start_ms": ...}
or  {"ready": false, "error": "..."} and exit 1. Then one reply per request line on stdin:
    {"op": "call", "command": "...", "timeout": 2.0}
        -> {"ms", "exit_code", "output" (first 2000 chars), "output_bytes", "error"}
    {"op": "rss"}   -> {"max_rss_kib", "children_max_rss_kib"}
    {"op": "close"} -> {"closed": true, "ms", "error"}, exit 0.
A failing call (a timeout included) is reported in "error" and the driver keeps serving; a request
it cannot parse gets {"error": "..."}. At end of input without "close" it tears down and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO

TOOLS = ("mini", "swerex-exec", "swerex-session")
SWEREX_IMAGE = "runner-bench-swerex:1.4.0"
OUTPUT_CHARS = 2000
ERROR_CHARS = 300
REPO = Path(__file__).resolve().parents[2]


def claim_stdout() -> TextIO:
    """Keeps fd 1 for protocol lines and points everything else that writes to stdout at stderr.

    SWE-ReX prints to stdout (`print(module, exc_name)` when it re-raises a server-side exception),
    mini-swe-agent prints a rich banner on import, and their subprocesses inherit fd 1: moving the
    descriptor, not only `sys.stdout`, keeps all of them out of the protocol.
    """
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "w", encoding="utf-8", buffering=1)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    stderr = getattr(exc, "stderr", None)  # subprocess.CalledProcessError: what docker said
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", errors="replace")
    if isinstance(stderr, str) and stderr.strip():
        text = f"{type(exc).__name__}: {stderr.strip()} (from: {exc})"
    return text[:ERROR_CHARS]


def utf8_len(text: str) -> int:
    # A flood is ASCII: its length is its byte count, without a second copy of it in memory.
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="replace"))


def call_reply(ms: float, exit_code: int | None, output: str, error: str | None) -> dict[str, Any]:
    return {
        "ms": ms,
        "exit_code": exit_code,
        "output": output[:OUTPUT_CHARS],
        "output_bytes": utf8_len(output),
        "error": error,
    }


class Mini:
    """mini-swe-agent's DockerEnvironment, as its agents use it."""

    package = "mini-swe-agent"

    def __init__(self, image: str, label: str) -> None:
        self.image = image
        self.label = label
        self.env: Any = None

    def start(self) -> str:
        from minisweagent.environments.docker import DockerEnvironment

        # run_args replaces the default ["--rm"]: keep it, add the label, and never pull (mini has
        # no pull setting; `docker run` would pull a missing image).
        run_args = ["--rm", "--pull", "never", "--label", self.label]
        self.env = DockerEnvironment(image=self.image, run_args=run_args)
        return str(self.env.container_id)

    def call(self, command: str, timeout: float | None) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            result = self.env.execute({"command": command}, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 -- Submitted, or anything the tool lets through: reported
            return call_reply((time.perf_counter() - started) * 1000, None, "", describe(exc))
        ms = (time.perf_counter() - started) * 1000
        output = result.get("output") or ""
        if result.get("exception_info"):
            # execute catches its own failures (a timeout among them) and returns returncode -1.
            extra = result.get("extra") or {}
            error = f"{extra.get('exception_type', 'Exception')}: {extra.get('exception', result['exception_info'])}"
            return call_reply(ms, None, output, error[:ERROR_CHARS])
        return call_reply(ms, result.get("returncode"), output, None)

    def close(self) -> None:
        # cleanup() returns at once: it runs `docker stop` (then `rm -f`) in a background shell.
        if self.env is not None:
            self.env.cleanup()


class Swerex:
    """SWE-ReX's DockerDeployment on one asyncio loop kept for the process's life."""

    package = "swe-rex"

    def __init__(self, image: str, label: str, session: bool) -> None:
        self.image = image
        self.label = label
        self.session = session
        self.loop = asyncio.new_event_loop()
        self.deployment: Any = None

    def start(self) -> str:
        return self.loop.run_until_complete(self._start())

    async def _start(self) -> str:
        from swerex.deployment.docker import DockerDeployment
        from swerex.runtime.abstract import CreateBashSessionRequest

        self.deployment = DockerDeployment(image=self.image, pull="never", docker_args=["--label", self.label])
        await self.deployment.start()
        if self.session:
            await self.deployment.runtime.create_session(CreateBashSessionRequest())
        return str(self.deployment.container_name)

    def call(self, command: str, timeout: float | None) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(command, timeout))

    async def _call(self, command: str, timeout: float | None) -> dict[str, Any]:
        from swerex.runtime.abstract import BashAction, Command

        started = time.perf_counter()
        try:
            runtime = self.deployment.runtime
            if self.session:
                obs = await runtime.run_in_session(BashAction(command=command, timeout=timeout, check="silent"))
                ms = (time.perf_counter() - started) * 1000
                return call_reply(ms, obs.exit_code, obs.output, None)
            resp = await runtime.execute(Command(command=command, shell=True, timeout=timeout))
            ms = (time.perf_counter() - started) * 1000
            # No concatenation unless needed: a flood's stdout is not copied again.
            output = resp.stdout + resp.stderr if resp.stderr else resp.stdout
            return call_reply(ms, resp.exit_code, output, None)
        except Exception as exc:  # noqa: BLE001 -- any failure of the tool is reported, not fatal
            return call_reply((time.perf_counter() - started) * 1000, None, "", describe(exc))

    def close(self) -> None:
        if self.deployment is not None:
            self.loop.run_until_complete(self.deployment.stop())


def rss_reply() -> dict[str, Any]:
    return {
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_max_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }


def timed_close(tool: Mini | Swerex) -> dict[str, Any]:
    started = time.perf_counter()
    error = None
    try:
        tool.close()
    except Exception as exc:  # noqa: BLE001 -- reported in the reply
        error = describe(exc)
    return {"closed": True, "ms": (time.perf_counter() - started) * 1000, "error": error}


def parse(line: str) -> tuple[str, str, float | None]:
    """A request line as (op, command, timeout); a ValueError or TypeError says what is wrong."""
    request = json.loads(line)  # json.JSONDecodeError is a ValueError
    if not isinstance(request, dict):
        raise TypeError("a request is a JSON object")
    op = request.get("op")
    if op in ("rss", "close"):
        return op, "", None
    if op != "call":
        raise ValueError(f"unknown op {op!r} (call, rss, close)")
    command = request.get("command")
    timeout = request.get("timeout")
    if not isinstance(command, str):
        raise TypeError('"call" needs a string "command"')
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise TypeError('"timeout" is a number of seconds')
    return op, command, None if timeout is None else float(timeout)


def handle(tool: Mini | Swerex, line: str) -> tuple[dict[str, Any], bool]:
    """One request: its reply, and whether the driver is done."""
    try:
        op, command, timeout = parse(line)
    except (ValueError, TypeError) as exc:
        return {"error": f"bad request: {exc}"[:ERROR_CHARS]}, False
    if op == "call":
        return tool.call(command, timeout), False
    if op == "rss":
        return rss_reply(), False
    return timed_close(tool), True


def serve(tool: Mini | Swerex, send: Callable[[dict[str, Any]], None]) -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply, done = handle(tool, line)
        send(reply)
        if done:
            return 0
    print("driver: end of input without a close request; tearing down", file=sys.stderr)
    timed_close(tool)
    return 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Drive a peer tool for runner's benchmarks (JSON lines).")
    parser.add_argument("tool", choices=TOOLS)
    parser.add_argument("--image", required=True, help="the image for mini (the SWE-ReX tools ignore it)")
    parser.add_argument(
        "--swerex-image", default=SWEREX_IMAGE, help=f"the image with SWE-ReX's server (default {SWEREX_IMAGE})"
    )
    parser.add_argument("--label", required=True, help="KEY=VALUE added to the container the tool starts")
    args = parser.parse_args(argv)
    if "=" not in args.label or args.label.startswith("="):
        parser.error("--label must be KEY=VALUE")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    protocol = claim_stdout()

    def send(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")

    # mini-swe-agent reads and creates a global config dir on import; keep it out of $HOME unless
    # the caller chose one, and its banner off (it would go to stderr anyway).
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(REPO / "target" / "peers" / "mini-config"))
    # SWE-ReX's loggers default to DEBUG on a rich handler; stderr gets warnings and errors only.
    os.environ.setdefault("SWE_REX_LOG_STREAM_LEVEL", "WARNING")

    tool: Mini | Swerex
    if args.tool == "mini":
        tool = Mini(args.image, args.label)
    else:
        tool = Swerex(args.swerex_image, args.label, session=args.tool == "swerex-session")
    started = time.perf_counter()
    try:
        container = tool.start()
    except Exception as exc:  # noqa: BLE001 -- reported in the reply
        send({"ready": False, "error": describe(exc)})
        timed_close(tool)  # whatever the tool did start
        return 1
    start_ms = (time.perf_counter() - started) * 1000
    send(
        {
            "ready": True,
            "tool": args.tool,
            "version": version(tool.package),
            "container": container,
            "start_ms": start_ms,
        }
    )
    return serve(tool, send)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
