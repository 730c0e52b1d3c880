"""``mldiag import mlflow`` against a real MLflow server (filled by MLflow's own client) and
the real run-registry and ingestion: experiments become run sets, runs keep their names,
statuses, params and tags, and every metric point arrives with its step and timestamp,
once, however often the import runs."""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mldiag.api_client import RegistryClient
from mldiag.cli import main
from mldiag.imports.mlflow import MlflowClient, read_tracking_server
from sdk.cli.conftest import Platform
from sdk.imports.mlflow_server import mlflow_python, mlflow_server
from sdk.imports.platform_reads import read_points, wait_for_counts

pytestmark = [pytest.mark.connected, pytest.mark.timeout(600)]

HERE = Path(__file__).parent
BASE_MS = int((time.time() - 86_400) * 1000) // 1000 * 1000
EXPECTED_STEPS = {
    ("lr-0.1", "loss"): list(range(1500)),
    ("lr-0.1", "val_accuracy"): list(range(0, 1500, 100)),
    ("lr-0.01", "loss"): list(range(200)),
    ("baseline", "loss"): list(range(10)),
}


def value(run: str, metric: str, step: int) -> float:
    """What ``mlflow_populate.py`` logged (``metric`` as MLflow named it)."""
    return round(1.0 / (step + 1) + len(run) / 100 + len(metric) / 1000, 9)


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A filled MLflow server: its URL and ``{run name: MLflow run id}``."""
    python = mlflow_python()
    workdir = tmp_path_factory.mktemp("mlflow")
    with mlflow_server(python, workdir) as url:
        filled = subprocess.run(
            [str(python), str(HERE / "mlflow_populate.py"), url, str(BASE_MS)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        yield url, json.loads(filled.stdout.strip().splitlines()[-1])


def test_the_reader_pages_through_runs_and_histories(mlflow: tuple[str, dict[str, str]]) -> None:
    url, ids = mlflow
    client = MlflowClient(url, page_size=1, history_page_size=400)
    try:
        runs = {run.display_name: run for run in read_tracking_server(client, [])}
    finally:
        client.close()
    assert set(runs) == {"lr-0.1", "lr-0.01", "baseline"}
    assert runs["lr-0.1"].run_id == f"mlflow-{ids['lr-0.1']}"
    assert [point.step for point in runs["lr-0.1"].metrics["loss"]] == list(range(1500))


def test_experiments_runs_params_tags_and_metrics_arrive_once(
    mlflow: tuple[str, dict[str, str]],
    platform_apps: Platform,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, ids = mlflow
    argv = [
        "import", "mlflow", "--tracking-uri", url,
        "--experiment", "vision-sweep", "--experiment", "nlp",
        "--api-url", platform_apps.api_url, "--ingestion-url", platform_apps.ingestion_url,
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("(created)") == 3
    assert (
        f"mlflow-{ids['lr-0.1']}  'lr-0.1' in 'vision-sweep' (created): read 1515, sent 1515" in out
    )

    with RegistryClient(platform_apps.api_url, token=platform_apps.tokens.admin) as registry:
        in_set = registry.list_runs(filter='runSet = "vision-sweep"')["machineLearningRuns"]
        assert sorted(run["displayName"] for run in in_set) == ["lr-0.01", "lr-0.1"]

        first = registry.get_run(f"mlflow-{ids['lr-0.1']}")
        assert first["runPhase"] == "COMPLETED"
        assert first["configs"]["userConfigs"] == {"lr": "0.1", "batch_size": "32"}
        assert first["labels"] == {
            "imported-from": "mlflow",
            "team": "vision",
            "owner_email": "a@b.c",
            "mlflow-user": "alice",
        }
        mlflow_facts = first["configs"]["softwareConfigs"]["mlflow"]
        assert (mlflow_facts["runId"], mlflow_facts["status"]) == (ids["lr-0.1"], "FINISHED")
        assert mlflow_facts["startTimeMs"] <= mlflow_facts["endTimeMs"]
        assert registry.get_run(f"mlflow-{ids['lr-0.01']}")["runPhase"] == "FAILED"
        baseline = registry.get_run(f"mlflow-{ids['baseline']}")
        assert (baseline["runPhase"], baseline["runSet"]) == ("ACTIVE", "nlp")

        for (run, metric), steps in EXPECTED_STEPS.items():
            run_id = f"mlflow-{ids[run]}"
            expected = {name: len(s) for (r, name), s in EXPECTED_STEPS.items() if r == run}
            wait_for_counts(registry, run_id, expected)
            stored = read_points(registry, run_id, metric)
            source_metric = "val accuracy" if metric == "val_accuracy" else metric
            assert stored == [
                (step, value(run, source_metric, step), (BASE_MS + step * 1000) / 1000)
                for step in steps
            ]

    # Again: nothing is sent, everything is found present.
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert again.count("(existing)") == 3
    assert again.count("sent 0,") == 3
    assert "skipped as present 1515" in again


def test_an_unknown_experiment_is_refused_with_mlflows_reason(
    mlflow: tuple[str, dict[str, str]],
    platform_apps: Platform,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = mlflow
    argv = [
        "import", "mlflow", "--tracking-uri", url, "--experiment", "no-such-experiment",
        "--api-url", platform_apps.api_url,
    ]  # fmt: skip
    code = main(argv)
    assert code == 1
    assert "error: source_unreadable: MLflow answered 404" in capsys.readouterr().err
