"""HTTP routes of the run resource and its configs, of the official SDK's self-hosted
contract, and the consumer of configs reported on the bus.

Query parameters are accepted in camelCase (``updateMask``, ``allowMissing``) and in the
snake_case the official SDK sends (``update_mask``, ``allow_missing``).
"""

from typing import Annotated, TypeVar

import pydantic_core
from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import ContractResponse, parse_body, query_param
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.monitoring.errors import InvalidMonitoringRules
from mldiag_run_registry.resources import RunIdPath
from mldiag_run_registry.runs.service import RunService
from mldiag_schemas import bus
from mldiag_schemas.auth import Permission
from mldiag_schemas.operations import Operation
from mldiag_schemas.runs import (
    ConfigsDiffResponse,
    CreateRunRequest,
    FlatConfigsResponse,
    ListRunsResponse,
    Run,
    RunConfigsReported,
    SelfHostedRun,
    SelfHostedRunRequest,
    UpdateRunRequest,
)

router = APIRouter()


def _service(request: Request) -> RunService:
    service: RunService = request.app.state.runs
    return service


ServiceDep = Annotated[RunService, Depends(_service)]


def _flag(request: Request, camel: str, snake: str) -> bool:
    value = query_param(request, camel, snake)
    if value is None or value.lower() in ("", "false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise InvalidArgument(f"{camel} must be true or false, got {value!r}")


ModelT = TypeVar("ModelT", CreateRunRequest, UpdateRunRequest)


def _run_body(model: type[ModelT], raw: bytes) -> ModelT:
    """Parse a run body; a mistake inside ``monitoring`` (an unknown rule, a threshold that
    is not a number) is ``invalid_monitoring_rules``, like the checks after parsing."""
    try:
        return parse_body(model, raw)
    except InvalidArgument as error:
        if any(str(d.get("field", "")).startswith("monitoring") for d in error.details):
            raise InvalidMonitoringRules(error.message, details=error.details) from None
        raise


def _is_self_hosted(raw: bytes) -> bool:
    """The official SDK's bodies carry a ``workload`` object (ours: ``workloadDetails``)."""
    try:
        # jiter bounds nesting (json.loads would hit RecursionError on a deep body)
        data = pydantic_core.from_json(raw or b"{}")
    except ValueError:
        return False
    return isinstance(data, dict) and "workload" in data


@route(
    router,
    "POST",
    "/machineLearningRuns",
    Permission.RUNS_CREATE,
    body=CreateRunRequest,
    response=Operation,
)
async def create_run(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Create a run; answers the done create operation (its ``response`` is the run)."""
    body = _run_body(CreateRunRequest, await request.body())
    return ContractResponse(await service.create_run(parent.project, parent.location, body))


@route(router, "GET", "/machineLearningRuns", Permission.RUNS_LIST, response=ListRunsResponse)
async def list_runs(
    parent: ParentDep,
    service: ServiceDep,
    page_size: Annotated[int | None, Query(alias="pageSize")] = None,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
    filter_text: Annotated[str, Query(alias="filter")] = "",
    order_by: Annotated[str, Query(alias="orderBy")] = "",
) -> Response:
    """List runs (newest first unless ``orderBy``), filtered by ``filter``."""
    page = await service.list_runs(
        parent.project, parent.location, page_size, page_token, filter_text, order_by
    )
    return ContractResponse(page)


@route(router, "GET", "/machineLearningRuns/{run_id}", Permission.RUNS_GET, response=Run)
async def get_run(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """Get one run."""
    return ContractResponse(await service.get_run(parent.project, parent.location, run_id))


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}/configs",
    Permission.RUNS_GET,
    response=FlatConfigsResponse,
)
async def flat_configs(run_id: RunIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """The run's configs flattened to dotted keys (``userConfigs`` / ``optimizer.lr``)."""
    flat = await service.flat_configs(parent.project, parent.location, run_id)
    return ContractResponse(flat)


@route(
    router,
    "GET",
    "/machineLearningRuns:diffConfigs",
    Permission.RUNS_GET,
    response=ConfigsDiffResponse,
)
async def diff_configs(
    parent: ParentDep,
    service: ServiceDep,
    base: str,
    other: str,
    include_unchanged: Annotated[bool, Query(alias="includeUnchanged")] = False,
) -> Response:
    """How run ``other``'s configs differ from run ``base``'s, key by flattened key."""
    result = await service.diff_configs(
        parent.project, parent.location, base, other, include_unchanged=include_unchanged
    )
    return ContractResponse(result)


@route(
    router,
    "PATCH",
    "/machineLearningRuns",
    Permission.RUNS_CREATE,
    body=SelfHostedRunRequest,
    response=SelfHostedRun,
)
async def upsert_self_hosted(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """The official SDK's create: upsert on ``logicalId``; answers the run as it reads it."""
    body = parse_body(SelfHostedRunRequest, await request.body())
    allow_missing = _flag(request, "allowMissing", "allow_missing")
    run = await service.self_hosted_upsert(
        parent.project, parent.location, body, allow_missing=allow_missing
    )
    return ContractResponse(run)


@route(
    router,
    "PATCH",
    "/machineLearningRuns/{run_id}",
    Permission.RUNS_UPDATE,
    body=(UpdateRunRequest, SelfHostedRunRequest),
    response=(Operation, SelfHostedRun),
)
async def update_run(
    run_id: RunIdPath, request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """Update a run (``updateMask``, etag required; ``allowMissing=true`` creates it).

    A body with a ``workload`` object is the official SDK's phase change.
    """
    raw = await request.body()
    if _is_self_hosted(raw):
        sdk_body = parse_body(SelfHostedRunRequest, raw)
        view = await service.self_hosted_set_state(
            parent.project, parent.location, run_id, sdk_body
        )
        return ContractResponse(view)
    body = _run_body(UpdateRunRequest, raw)
    operation = await service.update_run(
        parent.project,
        parent.location,
        run_id,
        body,
        query_param(request, "updateMask", "update_mask"),
        allow_missing=_flag(request, "allowMissing", "allow_missing"),
    )
    return ContractResponse(operation)


@route(
    router, "DELETE", "/machineLearningRuns/{run_id}", Permission.RUNS_DELETE, response=Operation
)
async def delete_run(
    run_id: RunIdPath,
    parent: ParentDep,
    service: ServiceDep,
    etag: Annotated[str, Query()] = "",
) -> Response:
    """Soft-delete a run; answers the done delete operation."""
    operation = await service.delete_run(parent.project, parent.location, run_id, etag)
    return ContractResponse(operation)


CONFIGS_CONSUMER = ConsumerSpec(
    stream=bus.TELEMETRY,
    subject=bus.CONFIGS_RECEIVED + ".*",
    durable=bus.REGISTRY_CONFIGS_DURABLE,
    message_type=RunConfigsReported,
    batch_size=20,
)
"""Configs workloads reported (ingestion's OTLP logs receiver)."""


class RunsBusHandler:
    """Merges each reported configs message into its run, in order."""

    def __init__(self, service: RunService) -> None:
        self._service = service

    async def on_configs(self, deliveries: list[Delivery[RunConfigsReported]]) -> None:
        """Merge a batch, one message at a time (each merge is its own transaction)."""
        for delivery in deliveries:
            await self._service.report_configs(delivery.message)
