"""The launcher of a training job's replica, run by its path (not ``-m``) so that the user's
program starts before anything heavy is imported.

``python <this file> --replica NAME [--exit-file PATH] -- COMMAND [ARG ...]`` is
``mldiag run --replica NAME …`` with the order of work turned round: the program is started
first (importing the SDK takes a good part of a second, which would otherwise sit between a
job's submission and its first step), then :func:`mldiag.cli.supervise.supervise_replica`
attaches the already running program to the job's run and supervises it exactly as
``mldiag run --replica`` does.

Running a file by its path imports none of its package: only the standard library is used
here until the program runs.
"""

import os
import subprocess
import sys
from pathlib import Path

USAGE = "usage: replica_launcher.py --replica NAME [--exit-file PATH] -- COMMAND [ARG ...]"


def _parse(argv: list[str]) -> tuple[str, Path | None, list[str]]:
    if "--" not in argv:
        raise SystemExit(USAGE)
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    values = dict(zip(options[::2], options[1::2], strict=False))
    if len(options) % 2 or set(values) - {"--replica", "--exit-file"} or not command:
        raise SystemExit(USAGE)
    replica = values.get("--replica", "")
    exit_file = values.get("--exit-file")
    return replica, Path(exit_file) if exit_file else None, command


def _interval(environ: dict[str, str], name: str, default: float) -> float:
    try:
        return float(environ.get(name) or default)
    except ValueError:
        return default


def main() -> int:
    """Start the program, then supervise it; the program's exit status."""
    replica, exit_file, command = _parse(sys.argv[1:])
    environment = dict(os.environ)
    # What `mldiag run --replica` gives the program (supervise.child_environment): the
    # replica is the host, the run is not the program's to create, output unbuffered, and
    # the host sampled by the launcher alone.
    environment["MLDIAG_HOST"] = replica
    environment["MLDIAG_CREATE_RUN"] = "0"
    environment.setdefault("PYTHONUNBUFFERED", "1")
    sampled = _interval(environment, "MLDIAG_SYSTEM_METRICS_INTERVAL", 10.0) > 0
    if sampled:
        environment["MLDIAG_SYSTEM_METRICS_INTERVAL"] = "0"
    try:
        process: subprocess.Popen[bytes] | OSError = subprocess.Popen(  # the program, no shell
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
        )
    except OSError as error:
        process = error  # reported by the supervisor, with the run told
    from mldiag.cli.supervise import supervise_replica  # noqa: PLC0415  # after the start

    return supervise_replica(replica, command, exit_file, process)


if __name__ == "__main__":
    sys.exit(main())
