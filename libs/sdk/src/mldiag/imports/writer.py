"""Writing imported runs to the platform: the run (created, or brought up to date), then
its metrics in deterministic batches, skipping what the platform already holds.

Why a rerun sends nothing twice:

- the run id comes from the source (:mod:`mldiag.imports.source`), so a rerun finds the
  run it created (a 409 ``run_already_exists`` turns into an update of its name, run set,
  labels, configs and phase);
- each metric's points are sorted by step (then time) and cut into fixed chunks of
  :data:`CHUNK_POINTS`, never splitting one step across two chunks; each chunk is one
  ``metrics:write`` request with a batch id derived from (run, metric, chunk index, first
  step sent, points sent). The platform derives its bus message ids from the batch id and
  its registry keeps a ledger of them, so a chunk sent again, identical, stores nothing;
- before sending, the importer asks the registry for each metric's highest stored step and
  leaves out the points at or below it, so a rerun after a crash sends only what is
  missing, and says so (points sent, points skipped as present).
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from mldiag.api_client import ApiError, RegistryClient
from mldiag.imports.errors import BatchRefused, PlatformUnavailable
from mldiag.imports.source import Point, SourceRun

CHUNK_POINTS = 5_000
"""Points per request: one bus message (``MAX_POINTS_PER_MESSAGE``), stored atomically."""

BATCH_NAMESPACE = uuid.UUID("5b0c3a52-8f8e-4f0e-9d8e-6d3f2f1a7c11")
"""Namespace of the imports' batch ids (uuid5), fixed so every rerun derives the same ids."""

RETRIES = 5
"""Attempts at one batch while the platform is unavailable, with growing pauses between."""

_RETRYABLE = frozenset({404, 408, 425, 429})
"""4xx answers that are not the batch's fault (a route or run not visible yet, a rate limit)."""


@dataclass(slots=True)
class RunReport:
    """What happened to one run: counts of points, what the reader left out (``skipped``),
    damage found in the source (``problems``) and what else is worth saying (``notes``)."""

    run_id: str
    display_name: str
    run_set: str
    created: bool = False
    points_read: int = 0
    points_sent: int = 0
    points_present: int = 0
    points_rejected: int = 0
    batches_sent: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object (camelCase, as the platform's bodies)."""
        return {
            "runId": self.run_id,
            "displayName": self.display_name,
            "runSet": self.run_set,
            "created": self.created,
            "pointsRead": self.points_read,
            "pointsSent": self.points_sent,
            "pointsPresent": self.points_present,
            "pointsRejected": self.points_rejected,
            "batchesSent": self.batches_sent,
            "skipped": self.skipped,
            "problems": self.problems,
            "notes": self.notes,
        }


@dataclass(frozen=True, slots=True)
class Chunk:
    """One request's worth of a metric: its index among the metric's chunks and points."""

    index: int
    points: list[Point]


def chunks(points: list[Point], size: int = CHUNK_POINTS) -> Iterator[Chunk]:
    """``points`` sorted by step then time, cut every ``size`` points but never inside one
    step (a chunk then runs over until the step changes), so a chunk's steps all lie above
    the previous chunk's."""
    ordered = sorted(points, key=lambda point: (point.step, point.time))
    start = 0
    index = 0
    while start < len(ordered):
        end = min(start + size, len(ordered))
        while end < len(ordered) and ordered[end].step == ordered[end - 1].step:
            end += 1
        yield Chunk(index, ordered[start:end])
        start = end
        index += 1


def batch_id(run_id: str, metric: str, chunk: int, first_step: int, count: int) -> uuid.UUID:
    """The batch id of what is sent of one chunk: the same inputs, the same id."""
    return uuid.uuid5(
        BATCH_NAMESPACE, f"{run_id}\x00{metric}\x00{chunk}\x00{first_step}\x00{count}"
    )


def _body(batch: uuid.UUID, metric: str, points: list[Point]) -> bytes:
    series = {
        "name": metric,
        "steps": [point.step for point in points],
        "values": [point.value for point in points],
        "times": [datetime.fromtimestamp(point.time, UTC).isoformat() for point in points],
    }
    raw = json.dumps(
        {"batchId": str(batch), "series": [series]}, separators=(",", ":"), allow_nan=True
    )
    return gzip.compress(raw.encode(), compresslevel=5)


class Importer:
    """Writes :class:`SourceRun` objects through the registry ``client`` (runs, what is
    stored) and ingestion's ``metrics:write`` at ``ingestion_url`` (points), with ``http``;
    ``project`` and ``location`` choose the long route form, as the client's do.

    With ``dry_run`` nothing is created or sent; the report says what would be.
    ``sleep`` is how it waits between retries (tests pass a fast one).
    """

    def __init__(
        self,
        client: RegistryClient,
        http: httpx.Client,
        ingestion_url: str,
        *,
        project: str | None = None,
        location: str | None = None,
        dry_run: bool = False,
        chunk_points: int = CHUNK_POINTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._http = http
        scope = (
            f"/v1/projects/{project or 'default'}/locations/{location or 'local'}"
            if project or location
            else "/v1"
        )
        self._runs_url = f"{ingestion_url.rstrip('/')}{scope}/machineLearningRuns"
        self._dry_run = dry_run
        self._chunk_points = chunk_points
        self._sleep = sleep

    def write(self, run: SourceRun) -> RunReport:
        """Create or update ``run`` and send the points the platform does not hold yet."""
        report = RunReport(
            run.run_id,
            run.display_name,
            run.run_set,
            points_read=run.point_count,
            skipped=dict(run.skipped),
            problems=list(run.problems),
        )
        exists = self._ensure_run(run, report)
        present = self._present_steps(run.run_id) if exists else {}
        for metric, points in run.metrics.items():
            highest = present.get(metric)
            for chunk in chunks(points, self._chunk_points):
                kept = (
                    chunk.points
                    if highest is None
                    else [point for point in chunk.points if point.step > highest]
                )
                report.points_present += len(chunk.points) - len(kept)
                if kept:
                    self._send(run.run_id, metric, chunk.index, kept, report)
        return report

    def _ensure_run(self, run: SourceRun, report: RunReport) -> bool:
        """Create the run, or update it when it exists; whether it existed before."""
        body: dict[str, Any] = {
            "displayName": run.display_name,
            "runSet": run.run_set,
            "labels": run.labels,
            "configs": {"userConfigs": run.user_configs, "softwareConfigs": run.software_configs},
            "runPhase": run.phase,
        }
        if self._dry_run:
            try:
                self._client.get_run(run.run_id)
            except ApiError as error:
                if error.status == 404:
                    return False
                raise
            return True
        try:
            self._client.create_run({"runId": run.run_id, **body})
        except ApiError as error:
            if error.code != "run_already_exists":
                raise
        else:
            report.created = True
            return False
        current = self._client.get_run(run.run_id)
        wanted = {key: value for key, value in body.items() if current.get(key) != value}
        if "configs" in wanted and _same_configs(current.get("configs"), body["configs"]):
            del wanted["configs"]
        if wanted:
            try:
                self._client.update_run(
                    run.run_id,
                    {"etag": current.get("etag", ""), **wanted},
                    update_mask=",".join(_MASK_PATHS[key] for key in wanted),
                )
            except ApiError as error:
                # An ended run takes no edits but a resume; its points are still welcome.
                if error.code != "failed_precondition":
                    raise
                report.notes.append(
                    f"run {run.run_id} has ended ({current.get('runPhase')}) and takes no"
                    f" edits: {', '.join(sorted(wanted))} not updated (points still sent)"
                )
        return True

    def _present_steps(self, run_id: str) -> dict[str, int]:
        listed = self._client.list_metrics(run_id).get("metrics", [])
        return {
            entry["name"]: int(entry["lastStep"])
            for entry in listed
            if isinstance(entry, dict) and entry.get("pointCount")
        }

    def _send(
        self, run_id: str, metric: str, index: int, points: list[Point], report: RunReport
    ) -> None:
        if self._dry_run:
            report.points_sent += len(points)
            report.batches_sent += 1
            return
        batch = batch_id(run_id, metric, index, points[0].step, len(points))
        body = _body(batch, metric, points)
        url = f"{self._runs_url}/{run_id}/metrics:write"
        answer = self._post(url, body, f"{metric!r} chunk {index} of run {run_id}")
        report.batches_sent += 1
        report.points_sent += len(points)
        rejected = answer.get("rejectedPoints", 0)
        report.points_rejected += rejected if isinstance(rejected, int) else 0

    def _post(self, url: str, body: bytes, what: str) -> dict[str, Any]:
        """POST one batch: its 202 body, after retries while the platform is unavailable."""
        detail = ""
        for attempt in range(RETRIES):
            if attempt:
                self._sleep(min(2.0**attempt, 10.0))
            try:
                response = self._http.post(
                    url,
                    content=body,
                    headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
                )
            except httpx.TransportError as error:
                detail = f"{type(error).__name__}: {error}"
                continue
            if response.status_code < 300:
                try:
                    answer = response.json()
                except ValueError:
                    return {}
                return answer if isinstance(answer, dict) else {}
            detail = f"HTTP {response.status_code}: {response.text[:500]}"
            if 400 <= response.status_code < 500 and response.status_code not in _RETRYABLE:
                raise BatchRefused(f"metrics:write refused {what} ({detail})")
        raise PlatformUnavailable(f"metrics:write kept failing for {what} ({detail})")


_MASK_PATHS = {
    "displayName": "display_name",
    "runSet": "run_set",
    "labels": "labels",
    "configs": "configs",
    "runPhase": "run_phase",
}
"""The update mask path (snake_case, the registry's) of each field the importer sets."""


def _same_configs(current: object, wanted: dict[str, Any]) -> bool:
    if not isinstance(current, dict):
        return False
    return all(current.get(key, {}) == value for key, value in wanted.items())
