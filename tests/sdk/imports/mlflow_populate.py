"""Run with the MLflow venv's Python (not the project's): fills a tracking server through
MLflow's own client with experiments, runs, params, tags and metrics with steps, and
prints ``{run name: MLflow run id}`` as JSON. The values follow :func:`value` so the test
can check every point without reading them back from MLflow.

Usage: python mlflow_populate.py TRACKING_URI BASE_TIMESTAMP_MS
"""

import json
import sys

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient


def value(run: str, metric: str, step: int) -> float:
    """The value ``metric`` of ``run`` has at ``step`` (the test computes the same)."""
    return round(1.0 / (step + 1) + len(run) / 100 + len(metric) / 1000, 9)


def log(client: MlflowClient, run_id: str, run: str, metric: str, steps: range, base: int) -> None:
    metrics = [Metric(metric, value(run, metric, step), base + step * 1000, step) for step in steps]
    for start in range(0, len(metrics), 1000):  # MLflow's limit per log_batch
        client.log_batch(run_id, metrics=metrics[start : start + 1000])


def main() -> None:
    uri, base = sys.argv[1], int(sys.argv[2])
    client = MlflowClient(uri)
    created = {}
    vision = client.create_experiment("vision-sweep")
    nlp = client.create_experiment("nlp")

    run = client.create_run(
        vision, run_name="lr-0.1", tags={"team": "vision", "Owner Email": "a@b.c"}
    )
    run_id = run.info.run_id
    client.log_batch(run_id, params=[Param("lr", "0.1"), Param("batch_size", "32")])
    client.log_batch(
        run_id, tags=[RunTag("mlflow.note.content", "a long note"), RunTag("mlflow.user", "alice")]
    )
    log(client, run_id, "lr-0.1", "loss", range(1500), base)
    log(client, run_id, "lr-0.1", "val accuracy", range(0, 1500, 100), base)
    client.set_terminated(run_id, "FINISHED")
    created["lr-0.1"] = run_id

    run = client.create_run(vision, run_name="lr-0.01", tags={"team": "vision"})
    run_id = run.info.run_id
    client.log_param(run_id, "lr", "0.01")
    log(client, run_id, "lr-0.01", "loss", range(200), base)
    client.set_terminated(run_id, "FAILED")
    created["lr-0.01"] = run_id

    run = client.create_run(nlp, run_name="baseline")
    run_id = run.info.run_id
    log(client, run_id, "baseline", "loss", range(10), base)
    created["baseline"] = run_id  # left RUNNING

    sys.stdout.write(json.dumps(created) + "\n")


if __name__ == "__main__":
    main()
