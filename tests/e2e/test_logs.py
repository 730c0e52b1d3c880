"""A program's output through the whole stack, as a user sees it: `mldiag up --detach`,
`mldiag run -- python -c …` printing to stdout and stderr and dying with a traceback, then
`mldiag logs RUN --grep boom` finding the stderr line (shipped by `mldiag run` to ingestion,
over the bus to the run-registry, stored as chunks, served through the edge)."""

import json
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

PROGRAM = (
    "print('hello from the workload', flush=True)\n"
    "import sys\n"
    "print('boom', file=sys.stderr, flush=True)\n"
    "raise RuntimeError('the workload failed')\n"
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-logs-e2e-") as running:
        yield running


def test_a_runs_output_is_found_by_mldiag_logs(stack: Stack) -> None:
    run_id = f"logs-{uuid.uuid4().hex[:8]}"
    ran = stack.cli(
        "run", "--run-id", run_id, "--interval", "0", "--", sys.executable, "-c", PROGRAM
    )
    assert ran.returncode == 1, f"{ran.stdout}\n{ran.stderr}"  # the program's own status

    deadline = time.monotonic() + 60
    while True:
        found = stack.cli("logs", run_id, "--grep", "boom", "--stream", "stderr")
        assert found.returncode == 0, found.stderr
        if found.stdout.strip():
            break
        assert time.monotonic() < deadline, "the stderr line never became readable"
        time.sleep(1)
    (line,) = found.stdout.splitlines()
    assert line.endswith(" stderr  boom"), line
    # `mldiag run`'s own line quotes the command, so it matches too
    every_stream = stack.cli("logs", run_id, "--grep", "boom").stdout
    assert " system  started pid " in every_stream, every_stream

    every = stack.cli("logs", run_id, "--format", "json")
    entries = [json.loads(text) for text in every.stdout.splitlines()]
    texts = [entry["text"] for entry in entries]
    assert "hello from the workload" in texts
    assert "RuntimeError: the workload failed" in texts  # the traceback's last line
    # Within a stream lines keep their order; across stdout and stderr (two pipes, read by
    # two threads) the order of lines written a moment apart is not promised.
    assert texts.index("boom") < texts.index("RuntimeError: the workload failed")

    traceback = stack.cli("logs", run_id, "--stream", "stderr", "--grep", "^Traceback")
    assert traceback.stdout.count("\n") == 1, traceback.stdout
