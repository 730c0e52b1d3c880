"""Reading experiments, runs, params, tags and metric histories from an MLflow tracking
server through its REST API (https://mlflow.org/docs/latest/api_reference/rest-api.html),
with ``httpx``: the SDK does not depend on ``mlflow``.

Calls: ``POST /api/2.0/mlflow/experiments/search`` (all experiments, paged),
``GET /api/2.0/mlflow/experiments/get`` and ``get-by-name`` (the ones named),
``POST /api/2.0/mlflow/runs/search`` (the experiments' active runs, paged) and
``GET /api/2.0/mlflow/metrics/get-history`` (each metric's every point, paged).

Mapping (see ``docs/imports.md``): an experiment is a run set (its name); a run keeps its
name (``mlflow.runName``), status (FINISHED → COMPLETED, FAILED and KILLED → FAILED,
RUNNING and SCHEDULED → ACTIVE) and start and end times (in ``softwareConfigs.mlflow``, as
the registry stamps its own create time); params are the user configs (strings, as MLflow
keeps them); user tags are labels with sanitised keys; of MLflow's system tags
(``mlflow.*``) the user, source and parent run become ``mlflow-…`` labels and the others
are left out (notes, logged-model history: documents, not labels).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from mldiag.imports.errors import SourceUnreachable, SourceUnreadable
from mldiag.imports.source import (
    MAX_RUN_LABELS,
    Point,
    SourceRun,
    label_key,
    label_value,
    metric_name,
    readable_run_id,
)

PAGE_SIZE = 1_000
"""Experiments and runs asked for per page."""

HISTORY_PAGE_SIZE = 25_000
"""Points asked for per page of a metric's history (the server's own maximum)."""

KEPT_SYSTEM_TAGS = {
    "mlflow.user": "mlflow-user",
    "mlflow.source.name": "mlflow-source-name",
    "mlflow.source.type": "mlflow-source-type",
    "mlflow.source.git.commit": "mlflow-source-git-commit",
    "mlflow.parentRunId": "mlflow-parent-run-id",
}
"""The ``mlflow.*`` system tags kept as labels, and their label keys."""

_PHASES = {
    "FINISHED": "COMPLETED",
    "FAILED": "FAILED",
    "KILLED": "FAILED",
    "RUNNING": "ACTIVE",
    "SCHEDULED": "ACTIVE",
}

JsonObject = dict[str, Any]


class MlflowClient:
    """The few read calls of MLflow's REST API the importer needs; ``page_size`` and
    ``history_page_size`` bound what one call asks for (every page is followed)."""

    def __init__(
        self,
        tracking_uri: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        page_size: int = PAGE_SIZE,
        history_page_size: int = HISTORY_PAGE_SIZE,
    ) -> None:
        self.tracking_uri = tracking_uri.rstrip("/")
        """The tracking server's base URL."""
        self._page_size = page_size
        self._history_page_size = history_page_size
        headers = {"User-Agent": "mldiag-import"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.tracking_uri, headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        try:
            response = self._http.request(method, f"/api/2.0/mlflow/{path}", **kwargs)
        except httpx.TransportError as error:
            raise SourceUnreachable(
                f"cannot reach MLflow at {self.tracking_uri}: {error or type(error).__name__}"
            ) from error
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            message = body.get("message") if isinstance(body, dict) else None
            code = body.get("error_code") if isinstance(body, dict) else None
            raise SourceUnreadable(
                f"MLflow answered {response.status_code} to {path}:"
                f" {code or ''} {message or response.text[:300]}".rstrip()
            )
        if not isinstance(body, dict):
            raise SourceUnreadable(f"MLflow's answer to {path} is not a JSON object")
        return body

    def experiments(self, wanted: list[str]) -> list[JsonObject]:
        """The experiments ``wanted`` names (by id, else by name), or every one."""
        if wanted:
            return [self._experiment(name_or_id) for name_or_id in wanted]
        found: list[JsonObject] = []
        token = ""
        while True:
            body: JsonObject = {"max_results": self._page_size}
            if token:
                body["page_token"] = token
            page = self._call("POST", "experiments/search", json=body)
            found.extend(page.get("experiments", []))
            token = page.get("next_page_token", "")
            if not token:
                return found

    def _experiment(self, name_or_id: str) -> JsonObject:
        if name_or_id.isdigit():
            try:
                found = self._call("GET", "experiments/get", params={"experiment_id": name_or_id})
            except SourceUnreadable:
                pass  # a name made of digits
            else:
                experiment: JsonObject = found["experiment"]
                return experiment
        found = self._call("GET", "experiments/get-by-name", params={"experiment_name": name_or_id})
        by_name: JsonObject = found["experiment"]
        return by_name

    def runs(self, experiment_id: str) -> Iterator[JsonObject]:
        """The experiment's active runs (deleted runs are left out), page by page."""
        token = ""
        while True:
            body: JsonObject = {
                "experiment_ids": [experiment_id],
                "max_results": self._page_size,
            }
            if token:
                body["page_token"] = token
            page = self._call("POST", "runs/search", json=body)
            yield from page.get("runs", [])
            token = page.get("next_page_token", "")
            if not token:
                return

    def history(self, run_id: str, key: str) -> list[JsonObject]:
        """Every point of metric ``key`` of run ``run_id``: ``{key, value, timestamp, step}``."""
        points: list[JsonObject] = []
        token = ""
        while True:
            params: dict[str, str | int] = {
                "run_id": run_id,
                "metric_key": key,
                "max_results": self._history_page_size,
            }
            if token:
                params["page_token"] = token
            page = self._call("GET", "metrics/get-history", params=params)
            points.extend(page.get("metrics", []))
            token = page.get("next_page_token", "")
            if not token:
                return points


def read_tracking_server(client: MlflowClient, experiments: list[str]) -> Iterator[SourceRun]:
    """Every active run of the ``experiments`` named (all when empty), with its history."""
    for experiment in client.experiments(experiments):
        for run in client.runs(str(experiment["experiment_id"])):
            yield _source_run(client, experiment, run)


def _pairs(items: object) -> dict[str, str]:
    if not isinstance(items, list):
        return {}
    return {
        str(item["key"]): str(item.get("value", ""))
        for item in items
        if isinstance(item, dict) and "key" in item
    }


def _source_run(client: MlflowClient, experiment: JsonObject, run: JsonObject) -> SourceRun:
    info: JsonObject = run.get("info", {})
    data: JsonObject = run.get("data", {})
    mlflow_id = str(info.get("run_id") or info.get("run_uuid"))
    tags = _pairs(data.get("tags"))
    name = tags.get("mlflow.runName") or info.get("run_name") or mlflow_id
    source = SourceRun(
        run_id=readable_run_id("mlflow", mlflow_id),
        display_name=str(name)[:200] or mlflow_id,
        run_set=str(experiment.get("name") or experiment["experiment_id"])[:200],
        user_configs=_pairs(data.get("params")),
        software_configs={
            "importedFrom": "mlflow",
            "mlflow": {
                "trackingUri": client.tracking_uri,
                "experimentId": str(experiment["experiment_id"]),
                "runId": mlflow_id,
                "status": info.get("status", ""),
                "startTimeMs": info.get("start_time"),
                "endTimeMs": info.get("end_time"),
                "artifactUri": info.get("artifact_uri", ""),
            },
        },
        phase=_PHASES.get(str(info.get("status")), "COMPLETED"),
    )
    source.labels = _labels(tags, source)
    keys = sorted({str(metric["key"]) for metric in data.get("metrics", [])})
    for key in keys:
        history = client.history(mlflow_id, key)
        points = source.metrics.setdefault(metric_name(key), [])
        for point in history:
            step = int(point.get("step", 0))
            if step < 0:
                source.skip("negative steps")
                continue
            points.append(Point(step, float(point["value"]), int(point["timestamp"]) / 1000.0))
    return source


def _labels(tags: dict[str, str], run: SourceRun) -> dict[str, str]:
    labels = {"imported-from": "mlflow"}
    for key, value in sorted(tags.items()):
        if key.startswith("mlflow."):
            target = KEPT_SYSTEM_TAGS.get(key)
            if target is None:
                run.skip("mlflow system tags")
                continue
        else:
            target = label_key(key)
        if len(labels) >= MAX_RUN_LABELS:
            run.skip("tags over the label limit")
            continue
        labels[target] = label_value(value)
    return labels
