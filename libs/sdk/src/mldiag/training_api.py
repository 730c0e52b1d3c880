"""Small clients of the training API's resources beyond custom jobs: hyperparameter tuning
jobs (Vertex v1 ``hyperparameterTuningJobs``), training pipelines (``trainingPipelines``) and
the model registry (``models``, their versions and aliases).

As in :mod:`mldiag.jobs` (whose error dialect and resource forms these share), answers are the
API's JSON bodies as plain dicts and errors are :class:`~mldiag.api_client.ApiError` carrying
the google.rpc reason (``not_found``, ``invalid_argument``, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from mldiag._training import TrainingClient, parse_resource_name
from mldiag.api_client import DEFAULT_LOCATION, DEFAULT_PROJECT, JsonObject
from mldiag.jobs import TERMINAL_STATES

TERMINAL_PIPELINE_STATES = frozenset(
    {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED"}
)
"""States a training pipeline never leaves."""

TUNING_JOBS = "hyperparameterTuningJobs"
"""The collection of tuning jobs (and the key of their list page)."""
PIPELINES = "trainingPipelines"
"""The collection of training pipelines (and the key of their list page)."""
MODELS = "models"
"""The collection of models (and the key of their list and versions pages)."""

CUSTOM_TASK = "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
"""The ``trainingTaskDefinition`` of a pipeline that runs a custom job (the Vertex SDK's)."""
TUNING_TASK = (
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/"
    "hyperparameter_tuning_task_1.0.0.yaml"
)
"""The ``trainingTaskDefinition`` of a pipeline that runs a tuning job."""

__all__ = [
    "CUSTOM_TASK",
    "MODELS",
    "PIPELINES",
    "TERMINAL_PIPELINE_STATES",
    "TUNING_JOBS",
    "TUNING_TASK",
    "ModelsClient",
    "PipelinesClient",
    "TuningJobsClient",
    "parse_resource_name",
]


class TuningJobsClient(TrainingClient):
    """Hyperparameter tuning jobs: create, get, list, cancel, delete."""

    _collection = TUNING_JOBS

    def create_tuning_job(self, body: JsonObject) -> JsonObject:
        """Create a tuning job (``displayName``, ``studySpec``, ``trialJobSpec``, counts)."""
        return self._create(body)

    def get_tuning_job(self, reference: str) -> JsonObject:
        """One tuning job (with its trials), by id or full name."""
        return self._get(reference)

    def list_tuning_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page: ``{"hyperparameterTuningJobs": [...], "nextPageToken": ...}``."""
        return self._list(
            filter=filter, order_by=order_by, page_size=page_size, page_token=page_token
        )

    def iter_tuning_jobs(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every tuning job, following pages."""
        return self._iter(filter=filter, order_by=order_by, page_size=page_size)

    def cancel_tuning_job(self, reference: str) -> JsonObject:
        """Ask a tuning job to stop (its active trials are cancelled first)."""
        return self._cancel(reference)

    def delete_tuning_job(self, reference: str) -> JsonObject:
        """Delete an ended tuning job."""
        return self._delete(reference)

    def wait_tuning_job(
        self, reference: str, *, poll_seconds: float = 1.0, timeout: float | None = None
    ) -> JsonObject:
        """Poll until the job is in a terminal state (or ``timeout`` passes); the last read."""
        return self._wait(reference, TERMINAL_STATES, poll_seconds=poll_seconds, timeout=timeout)


class PipelinesClient(TrainingClient):
    """Training pipelines: create, get, list, cancel, delete."""

    _collection = PIPELINES

    def create_pipeline(self, body: JsonObject) -> JsonObject:
        """Create a training pipeline (``displayName``, ``trainingTaskDefinition``,
        ``trainingTaskInputs``, ``modelToUpload``)."""
        return self._create(body)

    def get_pipeline(self, reference: str) -> JsonObject:
        """One pipeline, by id or full name."""
        return self._get(reference)

    def list_pipelines(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page: ``{"trainingPipelines": [...], "nextPageToken": ...}``."""
        return self._list(
            filter=filter, order_by=order_by, page_size=page_size, page_token=page_token
        )

    def iter_pipelines(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every pipeline, following pages."""
        return self._iter(filter=filter, order_by=order_by, page_size=page_size)

    def cancel_pipeline(self, reference: str) -> JsonObject:
        """Ask a pipeline to stop (and the job it runs)."""
        return self._cancel(reference)

    def delete_pipeline(self, reference: str) -> JsonObject:
        """Delete an ended pipeline."""
        return self._delete(reference)

    def wait_pipeline(
        self, reference: str, *, poll_seconds: float = 1.0, timeout: float | None = None
    ) -> JsonObject:
        """Poll until the pipeline is in a terminal state (or ``timeout`` passes); the last
        read."""
        return self._wait(
            reference, TERMINAL_PIPELINE_STATES, poll_seconds=poll_seconds, timeout=timeout
        )


class ModelsClient(TrainingClient):
    """The model registry: upload (a new model or a new version), get a version by number or
    alias, list models and a model's versions, delete a model or one version."""

    _collection = MODELS

    def upload_model(
        self, model: JsonObject, *, parent_model: str = "", model_id: str = ""
    ) -> JsonObject:
        """``models:upload``: a long-running operation whose ``response`` names the model and
        its new ``modelVersionId`` once ``done``."""
        body: JsonObject = {"model": model}
        if parent_model:
            body["parentModel"] = self._name(parent_model)
        if model_id:
            body["modelId"] = model_id
        return self._json("POST", f"{self._prefix()}/{MODELS}:upload", json=body)

    def _name(self, reference: str) -> str:
        """A model's full name (the API's ``parentModel`` is a resource name)."""
        project, location, model_id = parse_resource_name(reference, MODELS)
        project, location = project or self.project, location or self.location
        return (
            f"projects/{project or DEFAULT_PROJECT}/locations/{location or DEFAULT_LOCATION}"
            f"/{MODELS}/{model_id}"
        )

    def get_model(self, reference: str) -> JsonObject:
        """A model's version: ``MODEL`` (its default version), ``MODEL@VERSION`` or
        ``MODEL@ALIAS``, or a full name with either."""
        return self._get(reference)

    def list_models(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> JsonObject:
        """One page of models (each as its default version): ``{"models": [...], ...}``."""
        return self._list(
            filter=filter, order_by=order_by, page_size=page_size, page_token=page_token
        )

    def iter_models(
        self,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every model, following pages."""
        return self._iter(filter=filter, order_by=order_by, page_size=page_size)

    def iter_versions(
        self,
        reference: str,
        *,
        filter: str = "",  # the API's parameter name
        order_by: str = "",
        page_size: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every version of a model (``:listVersions``), following pages."""
        return self._every(
            self._path(reference.split("@", 1)[0], ":listVersions"),
            MODELS,
            filter=filter,
            order_by=order_by,
            page_size=page_size,
        )

    def delete_model(self, reference: str) -> JsonObject:
        """Delete a model and every version of it (a long-running operation)."""
        return self._delete(reference)

    def delete_version(self, reference: str) -> JsonObject:
        """Delete one version, ``MODEL@VERSION`` (``:deleteVersion``; a long-running
        operation). The default version cannot be deleted while others remain."""
        return self._delete(reference, ":deleteVersion")

    def get_operation(self, name: str) -> JsonObject:
        """A long-running operation, by its full name."""
        return self._json("GET", f"/v1/{name.strip('/')}")

    def wait_operation(
        self, operation: JsonObject, *, poll_seconds: float = 0.5, timeout: float = 300.0
    ) -> JsonObject:
        """``operation`` once ``done`` (polled by name), or as last read after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not operation.get("done") and operation.get("name"):
            if time.monotonic() >= deadline:
                return operation
            time.sleep(poll_seconds)
            operation = self.get_operation(str(operation["name"]))
        return operation
