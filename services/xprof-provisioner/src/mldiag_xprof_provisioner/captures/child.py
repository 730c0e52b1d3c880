"""The entry point of every capture child: it dies with the provisioner, then runs XProf's
capture client once and writes how that went to a small JSON file.

``python -P -m mldiag_xprof_provisioner.captures.child --result R --service-addr a:p,b:q
--logdir D --duration-ms N --attempts K --session-id S [--host-tracer-level ...]``.

The client (``xprof.convert._pywrap_profiler_plugin.trace``, what XProf's own capture
button calls) is native code that blocks for the whole trace and cannot be interrupted from
Python, so it runs here rather than in the provisioner's event loop: the parent can kill
this process on a timeout or a shutdown, and a crash in the client takes only this down.
The client prints its own progress on stdout and stderr (the parent keeps both: they name
each host that returned nothing, and why), so the outcome goes to the ``--result`` file.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mldiag_xprof_provisioner.orphans import die_with_parent


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="capture_child")
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--service-addr", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--duration-ms", type=int, required=True)
    parser.add_argument("--attempts", type=int, required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--host-tracer-level", type=int, default=2)
    parser.add_argument("--device-tracer-level", type=int, default=1)
    parser.add_argument("--python-tracer-level", type=int, default=0)
    parser.add_argument("--delay-ms", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Capture once; exit 0 when the client returned, 1 when it raised (see the result)."""
    # A provisioner killed with SIGKILL must not leave a capture running against a workload:
    # the workload's profiler would stay busy for the rest of the trace.
    die_with_parent()
    args = _arguments(sys.argv[1:] if argv is None else argv)
    # Heavy (a native library) and untyped: loaded only in the child, never at import.
    from xprof.convert import (  # type: ignore[import-untyped]  # noqa: PLC0415
        _pywrap_profiler_plugin,
    )

    options = {
        "session_id": args.session_id,
        "host_tracer_level": args.host_tracer_level,
        "device_tracer_level": args.device_tracer_level,
        "python_tracer_level": args.python_tracer_level,
        "delay_ms": args.delay_ms,
    }
    started = time.time()
    result: dict[str, Any] = {"ok": True, "error": "", "started_at": started}
    try:
        _pywrap_profiler_plugin.trace(
            args.service_addr,
            args.logdir,
            "",  # worker_list: only for TPU names, which we never pass
            True,  # include_dataset_ops
            args.duration_ms,
            args.attempts,
            options,
        )
    except Exception as exc:  # noqa: BLE001  # the client raises RuntimeError; report any
        result.update(ok=False, error=str(exc) or type(exc).__name__)
    result["finished_at"] = time.time()
    temporary = args.result.with_name(args.result.name + ".tmp")
    temporary.write_text(json.dumps(result))
    temporary.replace(args.result)  # the parent never reads half a result
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
