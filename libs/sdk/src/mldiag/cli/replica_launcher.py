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

``cloudml-hypertune`` in the program writes to ``$CLOUD_ML_HP_METRIC_FILE``: unless the user
chose a file, this points it at ``<exit file's directory>/hypertune/output.metrics``, one per
replica and attempt (the library's default, ``/tmp/hypertune/output.metrics``, would be
shared by parallel trials on one machine); the supervisor forwards what is written there
(:mod:`mldiag.hypertune`, whose ``attempt_metric_file`` this mirrors).
"""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

USAGE = "usage: replica_launcher.py --replica NAME [--exit-file PATH] -- COMMAND [ARG ...]"
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"


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


def _metric_file(exit_file: Path | None) -> str:
    """The attempt's file for cloudml-hypertune's reports, its directory made (the library
    makes it too, but racing ranks of one replica can trip over each other doing so)."""
    if exit_file is not None:
        path = exit_file.absolute().parent / "hypertune" / "output.metrics"
    else:
        path = Path(f"/tmp/mldiag-hypertune-{os.getpid()}/output.metrics")  # noqa: S108
    # Failing, the library tries again; the supervisor then finds no file, forwards nothing.
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def main() -> int:
    """Start the program, then supervise it; the program's exit status."""
    replica, exit_file, command = _parse(sys.argv[1:])
    launched_at = time.time()
    os.environ[METRIC_FILE_ENV] = os.environ.get(METRIC_FILE_ENV) or _metric_file(exit_file)
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

    return supervise_replica(replica, command, exit_file, process, launched_at=launched_at)


if __name__ == "__main__":
    sys.exit(main())
