"""The files of one attempt under the executor's state dir, written atomically.

``<state_dir>/attempts/<job>-p<pool>-i<index>-a<attempt>/``:

- ``replica.json``  the backend's record (local: pid, its start time, pgid, log paths, GPUs);
  written before the ``StartReplica`` is acked
- ``started.json``  the service's record that the start was reported (``started_at``, host)
- ``exit.json``     written by the launcher when the program ended (``exit_code``,
  ``ended_at``, ``message``), or by the service when setup failed (``reason``)
- ``stop.json``     a stop was asked for (``reason``); an attempt stopped before it started
  never starts
- ``reported.json`` the exit was published: never report it again
- ``work/``         the program's working directory; ``outputs/`` and ``logs/`` when storage
  is GCS (synced at exit)
"""

import json
from pathlib import Path
from typing import Any

from mldiag_platform.storage import write_atomically

REPLICA = "replica.json"
STARTED = "started.json"
EXIT = "exit.json"
STOP = "stop.json"
REPORTED = "reported.json"


def write_record(directory: Path, name: str, record: dict[str, Any]) -> None:
    """Write ``record`` as ``directory/name`` atomically (blocking)."""
    write_atomically(directory / name, json.dumps(record, sort_keys=True).encode())


def read_record(directory: Path, name: str) -> dict[str, Any] | None:
    """The record ``directory/name``, or None when it is missing or unreadable."""
    try:
        data = json.loads((directory / name).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
