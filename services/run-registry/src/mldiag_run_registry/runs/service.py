"""Runs: creating, reading, listing, updating and deleting them, and their lifecycle
(no SQL, no bus client here).

Lifecycle: a run is ACTIVE until it is set COMPLETED or FAILED (``endTime`` is set then).
An ended run refuses updates except a resume: ``runPhase`` ACTIVE with the run's own
``workloadId`` (the same workload restarting). Deleting is soft: ``deleteTime`` is set, and
the run and everything recorded against it stop being served (404), but its id stays taken
until the run is purged for good (retention/: after its project's ``deletedRunsDays``, or at
once with ``:purge``).

Every write returns a done :class:`Operation`, stored in the write's transaction, and its
facts (RunCreated, RunUpdated, RunPhaseChanged, RunDeleted) go out through the outbox after
commit.
"""

import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError
from pydantic.alias_generators import to_camel, to_snake

from mldiag_platform.errors import InvalidArgument, Unavailable
from mldiag_platform.listing.filtering import (
    FieldSpec,
    Kind,
    OrderKey,
    field_table,
    parse_filter,
    parse_order_by,
)
from mldiag_platform.listing.paging import (
    keyset_position,
    keyset_token,
    page_size,
    query_digest,
)
from mldiag_platform.outbox import Flusher
from mldiag_run_registry.errors import InvalidRunId
from mldiag_run_registry.monitoring.service import check_rules
from mldiag_run_registry.operations.service import new_operation_id
from mldiag_run_registry.runs import configs
from mldiag_run_registry.runs.errors import (
    EtagMismatch,
    EtagRequired,
    InvalidUpdateMask,
    LogicalIdRequired,
    RunAlreadyExists,
    RunEnded,
    RunNotFound,
    RunNotYetCreated,
    RunWasDeleted,
)
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import derived_id, is_run_id, new_run_id, run_name
from mldiag_schemas.monitoring import MonitoringRules
from mldiag_schemas.operations import Operation, OperationMetadata, OperationVerb
from mldiag_schemas.runs import (
    Artifacts,
    Configs,
    ConfigsDiffResponse,
    CreateRunRequest,
    CustomWorkload,
    ErrorDetails,
    FlatConfigsResponse,
    ListRunsResponse,
    Orchestrator,
    Run,
    RunConfigsReported,
    RunCreated,
    RunDeleted,
    RunPhase,
    RunPhaseChanged,
    RunState,
    RunUpdated,
    SelfHostedRun,
    SelfHostedRunRequest,
    SelfHostedWorkload,
    UpdateRunRequest,
    WorkloadDetails,
)

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 1000
DEFAULT_ORDER = (OrderKey("createTime", descending=True),)
_CONFIGS_ATTEMPTS = 5

# Run ids the official SDK's logical ids map to when they are not valid run ids themselves.
_LOGICAL_ID_NAMESPACE = uuid.UUID("6b1d3c52-4a8e-4f0e-9a57-3f2f3f6d8e11")


def _run_state(value: str) -> str | None:
    candidate = value if value.startswith("STATE_") else f"STATE_{value}"
    return candidate if candidate in set(RunState) else None


def _run_phase(value: str) -> str | None:
    return value if value in set(RunPhase) else None


def _orchestrator(value: str) -> str | None:
    return value if value in set(Orchestrator) else None


FIELDS = field_table(
    (
        FieldSpec("runId", Kind.STRING, aliases=("run_id",)),
        FieldSpec("displayName", Kind.STRING, aliases=("display_name",)),
        FieldSpec("runSet", Kind.STRING, aliases=("run_set",)),
        FieldSpec("state", Kind.ENUM, normalise=_run_state),
        FieldSpec("runPhase", Kind.ENUM, aliases=("run_phase",), normalise=_run_phase),
        FieldSpec("orchestrator", Kind.ENUM, normalise=_orchestrator),
        FieldSpec("workloadId", Kind.STRING, aliases=("workload_id",)),
        FieldSpec("labels", Kind.MAP, orderable=False),
        FieldSpec("createTime", Kind.TIMESTAMP, aliases=("create_time",)),
        FieldSpec("updateTime", Kind.TIMESTAMP, aliases=("update_time",)),
    )
)
"""What a runs filter and orderBy may name (camelCase, or the snake_case of the v1alpha API)."""

_TIMESTAMP_FIELDS = {"createTime", "updateTime"}

# Update mask paths (snake_case) a PATCH may name.
_SETTABLE = (
    "display_name",
    "run_set",
    "labels",
    "configs",
    "artifacts",
    "orchestrator",
    "workload_details",
    "run_phase",
    "error_details",
    "monitoring",
    "workload_id",
    "logical_id",
)
_SUB_PATHS = {
    "configs.software_configs",
    "configs.hardware_configs",
    "configs.user_configs",
    "artifacts.gcs_path",
}


def check_run_id(run_id: str) -> None:
    """Refuse a run id that cannot exist, before any query."""
    if not is_run_id(run_id):
        raise InvalidRunId(
            f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
        )


def _new_etag() -> str:
    return secrets.token_hex(8)


def _order_value(run: Run, field: str) -> str | datetime:
    values: dict[str, str | datetime] = {
        "runId": run.run_id,
        "displayName": run.display_name,
        "runSet": run.run_set,
        "state": run.state.value,
        "runPhase": run.run_phase.value,
        "orchestrator": run.orchestrator.value,
        "workloadId": run.workload_id,
        "createTime": run.create_time,
        "updateTime": run.update_time,
    }
    return values[field]


def _operation(
    verb: OperationVerb, run: Run, now: datetime, project: str, location: str
) -> Operation:
    return Operation(
        name=f"projects/{project}/locations/{location}/operations/{new_operation_id()}",
        done=True,
        metadata=OperationMetadata(verb=verb, target=run.name, create_time=now, end_time=now),
        response=run,
    )


def parse_update_mask(text: str | None, body: UpdateRunRequest) -> list[str]:
    """The snake_case paths an update changes: the mask's, or the settable fields sent."""
    if text is None or not text.strip():
        return [name for name in _SETTABLE if name in body.model_fields_set]
    paths: list[str] = []
    for raw in text.split(","):
        path = raw.strip()
        if path == "*":
            paths.extend(name for name in _SETTABLE if name not in paths)
            continue
        snake = ".".join(to_snake(part) for part in path.split("."))
        if snake not in _SETTABLE and snake not in _SUB_PATHS:
            allowed = ", ".join(to_camel(name) for name in _SETTABLE)
            raise InvalidUpdateMask(
                f"updateMask names {path!r}, which cannot be set (settable: {allowed})"
            )
        if snake not in paths:
            paths.append(snake)
    return paths


def _masked_changes(run: Run, body: UpdateRunRequest, paths: list[str]) -> dict[str, Any]:
    """The new values of the masked fields (absent from the body: cleared to the default)."""
    changes: dict[str, Any] = {}
    for path in paths:
        if path in {"display_name", "run_set", "run_phase"}:
            value = getattr(body, path)
            if value is None:
                raise InvalidArgument(
                    f"{to_camel(path)} cannot be cleared", details=[{"field": to_camel(path)}]
                )
            changes[path] = value
        elif path == "labels":
            changes[path] = body.labels or {}
        elif path == "configs":
            changes[path] = body.configs or Configs()
        elif path.startswith("configs."):
            part = path.split(".", 1)[1]
            current = changes.get("configs", run.configs)
            value = getattr(body.configs, part) if body.configs else {}
            changes["configs"] = current.model_copy(update={part: value})
        elif path in {"artifacts", "artifacts.gcs_path"}:
            changes["artifacts"] = body.artifacts or Artifacts()
        elif path == "orchestrator":
            changes[path] = body.orchestrator or Orchestrator.UNSPECIFIED
        elif path == "workload_details":
            changes[path] = body.workload_details or WorkloadDetails()
        elif path == "error_details":
            changes[path] = body.error_details
        elif path == "monitoring":
            changes[path] = body.monitoring or MonitoringRules()
            check_rules(changes[path])
        elif path in ("workload_id", "logical_id"):
            changes[path] = getattr(body, path) or ""
    return changes


class RunService:
    """The run resource."""

    def __init__(
        self, repository: RunRepository, outbox: Flusher, *, artifacts_root: str = ""
    ) -> None:
        self._repository = repository
        self._outbox = outbox
        # Runs created without artifacts.gcsPath get this one, so that SDKs know where to
        # upload profiles (`<root>/<run>/plugins/profile/<session>/<host>.xplane.pb`).
        self._artifacts_root = artifacts_root

    def _artifacts(self, artifacts: Artifacts) -> Artifacts:
        if artifacts.gcs_path or not self._artifacts_root:
            return artifacts
        return artifacts.model_copy(update={"gcs_path": self._artifacts_root})

    # --- create ---------------------------------------------------------------------------

    async def create_run(self, project: str, location: str, request: CreateRunRequest) -> Operation:
        """Create a run and announce it once committed; a done create operation."""
        check_rules(request.monitoring)
        now = datetime.now(UTC)
        run_id = request.run_id or new_run_id()
        phase = request.run_phase
        run = Run(
            name=run_name(project, location, run_id),
            run_id=run_id,
            display_name=request.display_name,
            run_set=request.run_set,
            labels=request.labels,
            configs=request.configs,
            artifacts=self._artifacts(request.artifacts),
            orchestrator=request.orchestrator,
            workload_details=request.workload_details,
            run_phase=phase,
            state=phase.state,
            etag=_new_etag(),
            create_time=now,
            update_time=now,
            end_time=now if phase.terminal else None,
            error_details=request.error_details,
            monitoring=request.monitoring,
            workload_id=request.workload_id,
            logical_id=request.logical_id,
        )
        return await self._insert(project, location, run, now)

    async def _insert(self, project: str, location: str, run: Run, now: datetime) -> Operation:
        operation = _operation(OperationVerb.CREATE, run, now, project, location)
        created = await self._repository.insert_run(
            project, location, run, operation, [RunCreated(occurred_at=now, run=run)]
        )
        if not created:
            raise RunAlreadyExists(
                f"run {run.run_id!r} (or a run with logicalId {run.logical_id!r}) already"
                " exists; a deleted run keeps its id"
                if run.logical_id
                else f"run {run.run_id!r} already exists; a deleted run keeps its id"
            )
        await self._outbox.flush()
        log.info("run.created", run_id=run.run_id, project=project, location=location)
        return operation

    # --- read -----------------------------------------------------------------------------

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        """The live run, or :class:`RunNotFound` (deleted runs are not found)."""
        check_run_id(run_id)
        run = await self._repository.get_run(project, location, run_id)
        if run is None:
            raise RunNotFound(f"run {run_name(project, location, run_id)!r} not found")
        return run

    async def list_runs(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str = "",
        order_by: str = "",
    ) -> ListRunsResponse:
        """A page of live runs matching ``filter_text``, in ``order_by`` (newest first)."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = parse_filter(filter_text, FIELDS)
        order = parse_order_by(order_by, FIELDS) if order_by.strip() else list(DEFAULT_ORDER)
        if not any(key.field == "runId" for key in order):
            order.append(OrderKey("runId", descending=order[-1].descending))
        query = query_digest(filter_text, order_by)
        after = keyset_position(page_token, order, query, _TIMESTAMP_FIELDS) if page_token else None
        runs = await self._repository.list_runs(project, location, where, order, size + 1, after)
        token = ""
        if len(runs) > size:
            runs = runs[:size]
            token = keyset_token([_order_value(runs[-1], key.field) for key in order], query)
        return ListRunsResponse(machine_learning_runs=runs, next_page_token=token)

    # --- update ---------------------------------------------------------------------------

    async def update_run(
        self,
        project: str,
        location: str,
        run_id: str,
        body: UpdateRunRequest,
        update_mask: str | None,
        *,
        allow_missing: bool = False,
    ) -> Operation:
        """Apply the masked fields, checking the etag and the lifecycle; a done operation.

        With ``allow_missing`` a missing run is created from the body (AIP-134 upsert), and
        the etag becomes optional (checked when sent).
        """
        check_run_id(run_id)
        paths = parse_update_mask(update_mask, body)
        run = await self._repository.get_run(project, location, run_id)
        if run is None:
            if not allow_missing:
                raise RunNotFound(f"run {run_name(project, location, run_id)!r} not found")
            return await self.create_run(project, location, self._create_request(run_id, body))
        changes = _masked_changes(run, body, paths)  # a bad body is a 400 before any 409
        if not body.etag and not allow_missing:
            raise EtagRequired("an update must carry the run's etag (read it with a GET)")
        if body.etag and body.etag != run.etag:
            raise EtagMismatch(
                f"etag {body.etag!r} is stale: the run changed since it was read"
                f" (current etag {run.etag!r}); get the run again and retry"
            )
        resume = (
            run.run_phase.terminal
            and changes.get("run_phase") is RunPhase.ACTIVE
            and "workload_id" in body.model_fields_set
            and body.workload_id == run.workload_id
        )
        if run.run_phase.terminal and not resume:
            raise RunEnded(
                f"run {run.name!r} is {run.run_phase.value}: it only accepts a resume"
                " (runPhase ACTIVE with its own workloadId)"
            )
        return await self._replace(project, location, run, changes, paths)

    @staticmethod
    def _create_request(run_id: str, body: UpdateRunRequest) -> CreateRunRequest:
        fields = {
            name: getattr(body, name) for name in _SETTABLE if getattr(body, name) is not None
        }
        if "display_name" not in fields:
            raise InvalidArgument(
                "creating a run (allowMissing) needs a displayName",
                details=[{"field": "displayName", "problem": "required"}],
            )
        return CreateRunRequest.model_validate({"run_id": run_id, **fields})

    async def _replace(
        self,
        project: str,
        location: str,
        run: Run,
        changes: dict[str, Any],
        paths: list[str],
    ) -> Operation:
        now = datetime.now(UTC)
        phase: RunPhase = changes.get("run_phase", run.run_phase)
        if phase is not run.run_phase:
            changes["state"] = phase.state
            if phase.terminal:
                changes["end_time"] = now
            else:  # a resume: the run is running again
                changes["end_time"] = None
                changes["error_details"] = None
        changes.update(etag=_new_etag(), update_time=now)
        updated = _valid(run.model_copy(update=changes))
        operation = _operation(OperationVerb.UPDATE, updated, now, project, location)
        mask = [".".join(to_camel(part) for part in path.split(".")) for path in paths]
        announce: list[Envelope] = [RunUpdated(occurred_at=now, run=updated, update_mask=mask)]
        if phase is not run.run_phase:
            announce.append(
                RunPhaseChanged(occurred_at=now, run=updated, previous_phase=run.run_phase)
            )
        outcome = await self._repository.replace_run(
            project, location, updated, run.etag, operation, announce
        )
        if outcome == "conflict":
            raise RunAlreadyExists(f"another run has logicalId {updated.logical_id!r}")
        if outcome == "stale":
            if await self._repository.get_run(project, location, run.run_id) is None:
                raise RunNotFound(f"run {run.name!r} not found")
            raise EtagMismatch(
                f"run {run.name!r} changed while it was being updated; get it again and retry"
            )
        await self._outbox.flush()
        log.info(
            "run.updated",
            run_id=run.run_id,
            mask=",".join(mask),
            phase=phase.value,
            previous_phase=run.run_phase.value,
        )
        return operation

    # --- delete ---------------------------------------------------------------------------

    async def delete_run(
        self, project: str, location: str, run_id: str, etag: str = ""
    ) -> Operation:
        """Soft-delete a run (checking ``etag`` when sent); a done delete operation."""
        run = await self.get_run(project, location, run_id)
        if etag and etag != run.etag:
            raise EtagMismatch(
                f"etag {etag!r} is stale (current etag {run.etag!r}); get the run again"
            )
        now = datetime.now(UTC)
        deleted = run.model_copy(update={"delete_time": now, "etag": _new_etag()})
        operation = _operation(OperationVerb.DELETE, deleted, now, project, location)
        outcome = await self._repository.replace_run(
            project,
            location,
            deleted,
            run.etag,
            operation,
            [RunDeleted(occurred_at=now, run=deleted)],
        )
        if outcome != "replaced":
            raise EtagMismatch(f"run {run.name!r} changed while it was being deleted; retry")
        await self._outbox.flush()
        log.info("run.deleted", run_id=run_id, project=project, location=location)
        return operation

    # --- configs --------------------------------------------------------------------------

    async def flat_configs(self, project: str, location: str, run_id: str) -> FlatConfigsResponse:
        """The run's configs flattened to dotted keys, for display."""
        run = await self.get_run(project, location, run_id)
        return FlatConfigsResponse(run=run.name, entries=configs.flat_entries(run.configs))

    async def diff_configs(
        self,
        project: str,
        location: str,
        base_id: str,
        other_id: str,
        *,
        include_unchanged: bool = False,
    ) -> ConfigsDiffResponse:
        """How the other run's configs differ from the base run's."""
        base = await self.get_run(project, location, base_id)
        other = await self.get_run(project, location, other_id)
        return ConfigsDiffResponse(
            base=base.name,
            other=other.name,
            differences=configs.diff(
                base.configs, other.configs, include_unchanged=include_unchanged
            ),
        )

    async def report_configs(self, report: RunConfigsReported) -> None:
        """Merge reported configs into the run, whatever its phase: configs describe the run
        and may arrive after it ended. Applying a report twice changes nothing.

        :class:`RunNotYetCreated` (retried by the consumer) while the run is unknown.
        """
        for _attempt in range(_CONFIGS_ATTEMPTS):  # lose no race with a concurrent update
            found = await self._repository.find_run(report.run_id)
            if found is None:
                raise RunNotYetCreated(f"run {report.run_id!r} is not (yet) registered")
            project, location, run = found
            if run.delete_time is not None:
                log.info("run.configs_dropped", run_id=run.run_id, reason="run deleted")
                return
            merged = configs.merged(run.configs, report.configs)
            paths = configs.changed_sections(run.configs, merged)
            if not paths:
                return
            try:
                await self._replace(project, location, run, {"configs": merged}, paths)
            except EtagMismatch:
                continue
            return
        raise Unavailable(f"run {report.run_id!r} kept changing while configs were merged")

    # --- the official SDK's self-hosted contract ------------------------------------------

    async def self_hosted_upsert(
        self,
        project: str,
        location: str,
        body: SelfHostedRunRequest,
        *,
        allow_missing: bool,
    ) -> SelfHostedRun:
        """``PATCH /v1/machineLearningRuns`` (no id) from the official SDK: one run per
        logicalId, created on first sight, refreshed (and resumed if it had ended) after.
        """
        if not body.logical_id:
            raise LogicalIdRequired("the upsert needs a logicalId")
        for _attempt in range(2):  # a concurrent first upsert from another host wins once
            run = await self._repository.find_by_logical_id(project, location, body.logical_id)
            if run is not None and run.delete_time is not None:
                raise RunWasDeleted(
                    f"the run of logicalId {body.logical_id!r} ({run.name}) was deleted"
                )
            if run is not None:
                return self_hosted_view(
                    await self._self_hosted_refresh(project, location, run, body)
                )
            if not allow_missing:
                raise RunNotFound(f"no run has logicalId {body.logical_id!r}")
            try:
                operation = await self._insert(
                    project,
                    location,
                    self._self_hosted_run(project, location, body),
                    datetime.now(UTC),
                )
            except RunAlreadyExists:
                continue
            return self_hosted_view(_run_of(operation))
        raise RunAlreadyExists(f"run of logicalId {body.logical_id!r} is being created; retry")

    def _self_hosted_run(self, project: str, location: str, body: SelfHostedRunRequest) -> Run:
        logical_id = body.logical_id or ""
        run_id = (
            logical_id
            if is_run_id(logical_id)
            else str(derived_id(_LOGICAL_ID_NAMESPACE, logical_id))
        )
        workload = body.workload or SelfHostedWorkload()
        now = datetime.now(UTC)
        return Run(
            name=run_name(project, location, run_id),
            run_id=run_id,
            display_name=(body.display_name or logical_id)[:200],
            run_set="default",
            labels={},
            artifacts=self._artifacts(Artifacts(gcs_path=body.base_blob_path or "")),
            workload_details=WorkloadDetails(
                custom=CustomWorkload(
                    id=workload.workload_id or "", display_name=workload.display_name or ""
                )
            ),
            run_phase=RunPhase.ACTIVE,
            state=RunState.ACTIVE,
            etag=_new_etag(),
            create_time=now,
            update_time=now,
            workload_id=workload.workload_id or "",
            logical_id=logical_id,
            cluster_id=body.cluster_id or "",
            creator=body.creator or "",
        )

    async def _self_hosted_refresh(
        self, project: str, location: str, run: Run, body: SelfHostedRunRequest
    ) -> Run:
        workload = body.workload or SelfHostedWorkload()
        changes: dict[str, Any] = {}
        if body.display_name:
            changes["display_name"] = body.display_name[:200]
        if body.creator is not None:
            changes["creator"] = body.creator
        if body.cluster_id is not None:
            changes["cluster_id"] = body.cluster_id
        if body.base_blob_path is not None:
            # an empty path keeps the default root the run was given
            changes["artifacts"] = self._artifacts(Artifacts(gcs_path=body.base_blob_path))
        if workload.workload_id is not None:
            changes["workload_id"] = workload.workload_id
        details = run.workload_details
        # A GKE or Slurm run keeps its kind (a run has at most one): the SDK's workload id
        # still lands in `workload_id` above.
        renamed = workload.workload_id is not None or workload.display_name is not None
        if renamed and details.gke is None and details.slurm is None:
            custom = run.workload_details.custom or CustomWorkload()
            changes["workload_details"] = run.workload_details.model_copy(
                update={
                    "custom": custom.model_copy(
                        update={
                            "id": workload.workload_id or custom.id,
                            "display_name": workload.display_name or custom.display_name,
                        }
                    )
                }
            )
        if run.run_phase.terminal:
            # The same logical id is the same workload: registering again is a restart.
            changes["run_phase"] = RunPhase.ACTIVE
        changed = {key: value for key, value in changes.items() if getattr(run, key) != value}
        if not changed:
            return run  # idempotent: every host and every restart upserts the same thing
        operation = await self._replace(project, location, run, changed, list(changed))
        return _run_of(operation)

    async def self_hosted_set_state(
        self, project: str, location: str, run_id: str, body: SelfHostedRunRequest
    ) -> SelfHostedRun:
        """``PATCH /v1/machineLearningRuns/{id}`` with ``workload.state`` from the official
        SDK: STATE_RUNNING → ACTIVE (a resume if it had ended), STATE_SUCCEEDED →
        COMPLETED, STATE_FAILED → FAILED. Repeating the current state writes nothing (the
        SDK re-sends RUNNING periodically).
        """
        run = await self.get_run(project, location, run_id)
        state = body.workload.state if body.workload else None
        if state is None:
            return self_hosted_view(run)
        phase = {
            "STATE_RUNNING": RunPhase.ACTIVE,
            "STATE_SUCCEEDED": RunPhase.COMPLETED,
            "STATE_FAILED": RunPhase.FAILED,
        }[state]
        if phase is run.run_phase:
            return self_hosted_view(run)
        if run.run_phase.terminal and phase.terminal:
            raise RunEnded(f"run {run.name!r} is {run.run_phase.value} already")
        changes: dict[str, Any] = {"run_phase": phase}
        if phase is RunPhase.FAILED:
            changes["error_details"] = ErrorDetails(
                message="the workload reported STATE_FAILED", reason="WORKLOAD_FAILED"
            )
        paths = list(changes)
        operation = await self._replace(project, location, run, changes, paths)
        return self_hosted_view(_run_of(operation))


def _valid(run: Run) -> Run:
    """``run`` checked as a whole: ``model_copy`` checks nothing, and a run stored invalid
    would fail every later read. A combination of changes no run can hold is the caller's
    mistake (a 400), never a row that cannot be read back."""
    try:
        return Run.model_validate(run.model_dump())
    except ValidationError as error:
        details = [
            {"field": ".".join(str(part) for part in problem["loc"]), "problem": problem["msg"]}
            for problem in error.errors()[:20]
        ]
        raise InvalidArgument("the update would leave the run invalid", details=details) from None


def _run_of(operation: Operation) -> Run:
    """The run a run write's operation answers (captures answer sessions, never these)."""
    run = operation.response
    assert isinstance(run, Run)  # noqa: S101  # every run write's response is the run
    return run


def self_hosted_view(run: Run) -> SelfHostedRun:
    """A run as the official SDK reads it: ``name`` = ``machineLearningRuns/{id}``."""
    custom = run.workload_details.custom or CustomWorkload()
    state = {
        RunPhase.ACTIVE: "STATE_RUNNING",
        RunPhase.COMPLETED: "STATE_SUCCEEDED",
        RunPhase.FAILED: "STATE_FAILED",
    }[run.run_phase]
    return SelfHostedRun(
        name=f"machineLearningRuns/{run.run_id}",
        logical_id=run.logical_id,
        display_name=run.display_name,
        creator=run.creator,
        cluster_id=run.cluster_id,
        base_blob_path=run.artifacts.gcs_path,
        workload=SelfHostedWorkload.model_validate(
            {
                "workload_id": run.workload_id or custom.id,
                "display_name": custom.display_name or run.display_name,
                "state": state,
            }
        ),
        create_time=run.create_time,
        update_time=run.update_time,
    )
