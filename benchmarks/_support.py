"""What the benchmark scripts share: printing, free ports, and the services as processes.

Benchmarks run as scripts (``.venv/bin/python benchmarks/NAME.py``), so their own folder is
on ``sys.path`` and ``import _support`` finds this file.
"""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def emit(line: str = "") -> None:
    """Print a line of figures at once (a run can take minutes)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def free_port() -> int:
    """A port nothing listens on at the moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Return once ``url`` answers 200; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` with ``env`` added, output to ``log``; terminate it (then kill) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=out, stderr=out)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
