"""``mldiag hp-tuning-jobs``, ``training-pipelines`` and ``models`` through the whole platform
(`mldiag up`, the real executor): a tuning job whose trials report through the
cloudml-hypertune file runs to SUCCEEDED and its trials table shows their final values; a
pipeline (the short ``jobSpec`` form) trains, its model is uploaded, and a second version of
that model is uploaded from the command line."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e

# A trial: reads its parameters (--lr=..., --units=...) and reports accuracy at two steps by
# rewriting the hypertune file, as cloudml-hypertune does.
TRAINER = """\
import json, os, sys, time
args = dict(a.lstrip('-').split('=', 1) for a in sys.argv[1:])
lr, units = float(args['lr']), int(args['units'])
lines = []
for step in (1, 2):
    value = 1 - abs(lr - 0.01) - 0.001 * step
    lines.append(json.dumps({'accuracy': str(value), 'global_step': str(step),
        'timestamp': time.time(), 'trial': os.environ.get('CLOUD_ML_TRIAL_ID', '0'),
        'checkpoint_path': ''}, sort_keys=True))
    with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'w') as f:
        f.write('\\n'.join(lines) + '\\n')
    time.sleep(0.3)
print('trained', lr, units, flush=True)
"""

# A pipeline's job: writes its model where AIP_MODEL_DIR says.
EXPORTER = """\
import os
directory = os.environ['AIP_MODEL_DIR']
os.makedirs(directory, exist_ok=True)
with open(os.path.join(directory, 'model.txt'), 'w') as f:
    f.write('weights')
print('exported to', directory, flush=True)
"""


def _pool(code: str) -> str:
    return (
        "  worker_pool_specs:\n"
        "  - machine_spec: {machine_type: local-small}\n"
        "    replica_count: 1\n"
        f"    container_spec: {{image_uri: python, command: [python, -c, {json.dumps(code)}]}}\n"
    )


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-training-cli-e2e-") as running:
        yield running


def test_a_tuning_job_runs_its_trials_to_the_end(stack: Stack, tmp_path: Path) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(
        "study_spec:\n"
        "  metrics: [{metric_id: accuracy, goal: MAXIMIZE}]\n"
        "  parameters:\n"
        "  - parameter_id: lr\n"
        "    double_value_spec: {min_value: 0.001, max_value: 0.1}\n"
        "    scale_type: UNIT_LOG_SCALE\n"
        "  - parameter_id: units\n"
        "    integer_value_spec: {min_value: 16, max_value: 64}\n"
        "trial_job_spec:\n" + _pool(TRAINER)
    )
    created = stack.cli(
        "hp-tuning-jobs",
        "create",
        "--region",
        "us-central1",
        "--display-name",
        f"lr-{uuid.uuid4().hex[:6]}",
        "--config",
        str(config),
        "--max-trial-count",
        "2",
        "--parallel-trial-count",
        "2",
        "--algorithm",
        "random",
        "--wait",
        timeout=300,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    assert "ended: JOB_STATE_SUCCEEDED" in created.stderr
    name = created.stdout.split("created hyperparameter tuning job ")[1].split()[0]

    described = stack.cli("hp-tuning-jobs", "describe", name)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TRIAL "))
    rows = [line.split() for line in lines[header + 1 :] if line.strip()]
    assert [row[:2] for row in rows] == [["1", "SUCCEEDED"], ["2", "SUCCEEDED"]]
    job = json.loads(stack.cli("hp-tuning-jobs", "describe", name, "--format=json").stdout)
    for row, trial in zip(rows, job["trials"], strict=True):
        lr = next(p["value"] for p in trial["parameters"] if p["parameterId"] == "lr")
        assert row[2].startswith("lr=")
        # the last measurement (UNSPECIFIED: LAST) is the final one: step 2's value
        assert float(row[3]) == pytest.approx(1 - abs(lr - 0.01) - 0.002, rel=1e-5)
        assert row[4] == "no"  # no stopping rule
    listed = stack.cli("hp-tuning-jobs", "list", "--region", "us-central1")
    assert name.rsplit("/", 1)[1] in listed.stdout
    assert "2/2" in listed.stdout


def test_a_pipeline_uploads_its_model_and_a_version_follows(stack: Stack, tmp_path: Path) -> None:
    prefix = f"gs://mldiag-e2e/pipeline-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "display_name: export\n"
        "job_spec:\n"
        + _pool(EXPORTER)
        + f"  base_output_directory: {{output_uri_prefix: '{prefix}'}}\n"
        + "model_to_upload:\n"
        "  display_name: exported\n"
        "  container_spec: {image_uri: 'serving:1'}\n"
    )
    created = stack.cli("training-pipelines", "create", "--config", str(config), "--wait")
    assert created.returncode == 0, created.stdout + created.stderr
    assert "ended: PIPELINE_STATE_SUCCEEDED" in created.stderr
    model_line = next(line for line in created.stderr.splitlines() if "uploaded model" in line)
    model = model_line.split("uploaded model ")[1].split()[0]
    assert model_line.endswith(" version 1")
    model_id = model.rsplit("/", 1)[1]

    described = json.loads(stack.cli("models", "describe", model_id, "--format=json").stdout)
    assert described["displayName"] == "exported"
    assert described["artifactUri"].rstrip("/") == f"{prefix}/model"

    again = stack.cli(
        "models",
        "upload",
        "--display-name",
        "exported",
        "--artifact-uri",
        described["artifactUri"],
        "--container-image-uri",
        "serving:2",
        "--parent-model",
        model_id,
        "--version-aliases",
        "candidate",
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"uploaded model {model} version 2")
    versions = stack.cli("models", "list-version", model_id)
    rows = [line.split() for line in versions.stdout.splitlines()[1:]]
    assert sorted((row[0], row[1]) for row in rows) == [("1", "default"), ("2", "candidate")]
    pipelines = stack.cli("training-pipelines", "list")
    assert f"{model_id}@1" in pipelines.stdout
