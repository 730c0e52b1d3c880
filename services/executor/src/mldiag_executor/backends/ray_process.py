"""What runs inside an attempt's Ray actor, on the node it landed on: the launcher as a
process group, its logs, its deadline, its exit.

Ray workers import this module to rebuild the actor's class, so it imports only the
standard library (and ``processes``, which does too): a worker needs nothing of the
executor but these files.
"""

import asyncio
import importlib
import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mldiag_executor.backends.processes import exit_status, signal_group, tail


class ReplicaProcess:
    """One attempt's process on the node its actor landed on (the actor's class;
    ``ray.remote`` wraps it when the backend connects, so importing this needs no Ray)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        self._process: subprocess.Popen[bytes] | None = None
        self._stop_reason: str | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._started_at = ""
        self._host = ""

    async def launch(self, env: dict[str, str]) -> dict[str, Any]:
        """Spawn the launcher (once, and never after a stop); where and when it started."""
        if self._process is None and self._stop_reason is None:
            self._process = self._spawn(env)
        return self.where()

    def where(self) -> dict[str, Any]:
        """The node, the pid and when the process started."""
        return {
            "host": self._host,
            "pid": self._process.pid if self._process else None,
            "started_at": self._started_at,
        }

    async def state(self) -> dict[str, Any]:
        """Whether it was launched and whether it ended."""
        return {
            "launched": self._process is not None,
            "ended": self._process is not None and self._process.poll() is not None,
            **self.where(),
        }

    def _spawn(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        spec = self._spec
        ray: Any = importlib.import_module("ray")  # inside a Ray worker: it is there
        self._host = str(ray.util.get_node_ip_address())
        log_dir = Path(spec["log_dir"])
        working_dir = Path(spec["working_dir"])
        exit_file = Path(spec["exit_file"])
        log_dir.mkdir(parents=True, exist_ok=True)
        working_dir.mkdir(parents=True, exist_ok=True)
        exit_file.parent.mkdir(parents=True, exist_ok=True)
        # The worker's environment, less the executor's own settings; Ray has set
        # CUDA_VISIBLE_DEVICES to the GPUs it gave the actor.
        full = {k: v for k, v in os.environ.items() if not k.startswith("MLDIAG_")}
        full.update(env)
        full["MLDIAG_HOST"] = spec["replica_name"]
        full.setdefault("PYTHONUNBUFFERED", "1")
        with (
            (log_dir / "stdout.log").open("ab") as stdout,
            (log_dir / "stderr.log").open("ab") as stderr,
        ):
            for note in spec["notes"]:
                stderr.write(f"{note}\n".encode())
            stderr.flush()
            process = subprocess.Popen(  # the launcher, no shell
                [*spec["launcher"], "--", *spec["argv"]],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=working_dir,
                env=full,
                start_new_session=True,  # its own group: stopped whole
            )
        self._started_at = datetime.now(UTC).isoformat()
        return process

    async def wait(self) -> dict[str, Any]:
        """Returns once the process ended (killing it at its deadline): its exit."""
        process = self._process
        if process is None:
            return {"exit_code": None, "message": "never launched", "stop_reason": "stopped"}
        deadline = float(self._spec["deadline"])
        while process.poll() is None:
            if time.time() >= deadline and self._stop_reason is None:
                await self.terminate(float(self._spec["deadline_grace"]), "deadline")
            await asyncio.sleep(0.1)
        if self._stopping is not None:
            await self._stopping
        signal_group(process.pid, signal.SIGKILL)  # what it left behind in its group
        return self._exit(process)

    async def terminate(self, grace_seconds: float, reason: str = "stopped") -> None:
        """SIGTERM to the group, the grace, SIGKILL; returns once the process is gone."""
        if self._process is None:
            self._stop_reason = self._stop_reason or reason
            return
        if self._stopping is None:
            self._stop_reason = reason
            self._stopping = asyncio.create_task(self._terminate(self._process, grace_seconds))
        await asyncio.shield(self._stopping)

    async def _terminate(self, process: subprocess.Popen[bytes], grace_seconds: float) -> None:
        signal_group(process.pid, signal.SIGTERM)
        until = time.monotonic() + grace_seconds
        # A child process has no awaitable end here: poll it.
        while process.poll() is None and time.monotonic() < until:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        signal_group(process.pid, signal.SIGKILL)
        while process.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    def _exit(self, process: subprocess.Popen[bytes]) -> dict[str, Any]:
        record = _read_json(Path(self._spec["exit_file"]))
        returncode = process.returncode
        exit_code = exit_status(returncode)
        message = ""
        ended_at = datetime.now(UTC).isoformat()
        if record is not None:
            exit_code = record.get("exit_code", exit_code)
            message = str(record.get("message") or "")
            ended_at = str(record.get("ended_at") or ended_at)
        else:
            message = tail(Path(self._spec["log_dir"]) / "stderr.log")
        return {
            "exit_code": exit_code,
            "message": message,
            "ended_at": ended_at,
            "stop_reason": self._stop_reason,
        }


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
