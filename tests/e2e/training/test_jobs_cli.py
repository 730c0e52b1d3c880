"""``mldiag jobs`` through the whole platform (`mldiag up`, the real executor): a local
package is packed, uploaded, installed and run, its output followed to the end; a failing
job's output is followed too and the command exits 1."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-jobs-cli-e2e-") as running:
        yield running


def test_a_local_package_runs_and_its_output_is_followed(stack: Stack, tmp_path: Path) -> None:
    package = tmp_path / "code" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(
        "import sys\nprint('hello from the package', sys.argv[1:], flush=True)\n"
        "print('a warning', file=sys.stderr)\n"
    )
    created = stack.cli(
        "jobs",
        "create",
        "--region",
        "us-central1",
        "--display-name",
        f"pkg-{uuid.uuid4().hex[:6]}",
        "--worker-pool-spec=machine-type=local-small,executor-image-uri=python,"
        f"python-module=trainer.task,local-package-path={tmp_path / 'code'}",
        "--args=--epochs,2",
        "--follow",
    )
    assert created.returncode == 0, created.stdout + created.stderr
    assert "created custom job projects/default/locations/us-central1/customJobs/" in created.stdout
    assert "hello from the package ['--epochs', '2']" in created.stdout
    assert "a warning" in created.stdout  # both streams, interleaved by line
    assert "ended: JOB_STATE_SUCCEEDED" in created.stderr
    name = created.stdout.split("created custom job ")[1].split()[0]

    stderr = stack.cli("jobs", "logs", name, "--stream", "stderr")
    assert (stderr.returncode, stderr.stdout.strip().splitlines()[-1]) == (0, "a warning")
    listed = stack.cli("jobs", "list", "--region", "us-central1")
    assert name.rsplit("/", 1)[1] in listed.stdout


def test_a_failing_job_is_followed_to_its_end_and_exits_1(stack: Stack, tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "workerPoolSpecs:\n"
        "  - machineSpec: {machineType: local-small}\n"
        "    replicaCount: 1\n"
        "    containerSpec:\n"
        "      imageUri: python\n"
        "      command: [python, -c, \"import sys; print('going down'); sys.exit(3)\"]\n"
        "scheduling:\n"
        "  disableRetries: true\n"
    )
    failed = stack.cli(
        "jobs", "create", "--display-name", "fails", "--config", str(config), "--follow"
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "going down" in failed.stdout
    assert "ended: JOB_STATE_FAILED" in failed.stderr
