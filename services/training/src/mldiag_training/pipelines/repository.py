"""The training_pipelines table, as the pipelines room reads and writes it.

Every change of state is one conditional UPDATE (``WHERE state = ANY(<allowed>)``), so a
redelivered fact, a cancel and a restart's reconcile can race without a terminal state ever
changing again.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_schemas.jobs import RpcStatus
from mldiag_schemas.models import Model
from mldiag_schemas.pipelines import (
    BACKING_CUSTOM_JOB,
    BACKING_TUNING_JOB,
    PipelineState,
    TrainingPipeline,
)
from mldiag_training.listing_sql import page_sql

_SELECT = (
    "pipeline_id, project, location, display_name, labels, task_definition, task_inputs,"
    " job_kind, job_id, job_body, model_to_upload, model_id, parent_model, state, error,"
    " job_created, cancel_requested, create_time, start_time, end_time, update_time"
)

# Filter and orderBy fields (see service.FIELDS) → columns.
_FIELD_COLUMNS = {
    "display_name": "display_name",
    "state": "state",
    "create_time": "create_time",
    "start_time": "start_time",
    "end_time": "end_time",
    "update_time": "update_time",
    "training_task_definition": "task_definition",
    "pipeline_id": "pipeline_id",
    "labels": "labels",  # JSONB: filtered by key, never ordered
}


def pipeline_name(project: str, location: str, pipeline_id: str) -> str:
    """A training pipeline's resource name."""
    return f"projects/{project}/locations/{location}/trainingPipelines/{pipeline_id}"


def job_resource(project: str, location: str, kind: str, job_id: str) -> str:
    """The resource name of a pipeline's job."""
    collection = "customJobs" if kind == "custom" else "hyperparameterTuningJobs"
    return f"projects/{project}/locations/{location}/{collection}/{job_id}"


@dataclass(frozen=True)
class StoredPipeline:
    """A pipeline with what only the service sees: its job and where it is with it."""

    pipeline: TrainingPipeline
    pipeline_id: str
    project: str
    location: str
    kind: str
    """``custom`` or ``tuning``."""
    job_id: str
    job_body: str
    """The job as validated (CustomJob or HyperparameterTuningJob JSON)."""
    job_created: bool
    cancel_requested: bool


def _from(row: asyncpg.Record) -> StoredPipeline:
    error = row["error"]
    model = row["model_to_upload"]
    key = BACKING_CUSTOM_JOB if row["job_kind"] == "custom" else BACKING_TUNING_JOB
    pipeline = TrainingPipeline(
        name=pipeline_name(row["project"], row["location"], row["pipeline_id"]),
        display_name=row["display_name"],
        training_task_definition=row["task_definition"],
        training_task_inputs=json.loads(row["task_inputs"]),
        training_task_metadata={
            key: job_resource(row["project"], row["location"], row["job_kind"], row["job_id"])
        },
        model_to_upload=Model.model_validate_json(model) if model else None,
        model_id=row["model_id"],
        parent_model=row["parent_model"],
        state=PipelineState(row["state"]),
        error=RpcStatus.model_validate_json(error) if error else None,
        create_time=row["create_time"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        update_time=row["update_time"],
        labels=json.loads(row["labels"]),
    )
    return StoredPipeline(
        pipeline=pipeline,
        pipeline_id=row["pipeline_id"],
        project=row["project"],
        location=row["location"],
        kind=row["job_kind"],
        job_id=row["job_id"],
        job_body=row["job_body"],
        job_created=row["job_created"],
        cancel_requested=row["cancel_requested"],
    )


class PipelinesRepository:
    """Training pipelines in the training schema."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def insert(
        self,
        pipeline_id: str,
        project: str,
        location: str,
        pipeline: TrainingPipeline,
        kind: str,
        job_id: str,
        job_body: str,
    ) -> bool:
        """Store a new pipeline with its job's id (chosen up front); False (nothing stored)
        when ``pipeline_id`` is taken."""
        model = pipeline.model_to_upload
        inserted = await self._pool.fetchval(
            "INSERT INTO training_pipelines (pipeline_id, project, location, display_name,"
            " labels, task_definition, task_inputs, job_kind, job_id, job_body,"
            " model_to_upload, model_id, parent_model, state, create_time, update_time)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7::jsonb, $8, $9, $10::jsonb,"
            " $11::jsonb, $12, $13, $14, $15, $15)"
            " ON CONFLICT (pipeline_id) DO NOTHING RETURNING true",
            pipeline_id,
            project,
            location,
            pipeline.display_name,
            json.dumps(pipeline.labels),
            pipeline.training_task_definition,
            json.dumps(pipeline.training_task_inputs),
            kind,
            job_id,
            job_body,
            model.model_dump_json(exclude_none=True) if model is not None else None,
            pipeline.model_id,
            pipeline.parent_model,
            pipeline.state.value,
            pipeline.create_time,
        )
        return bool(inserted)

    async def get(self, project: str, location: str, pipeline_id: str) -> StoredPipeline | None:
        """One pipeline of the parent, or None."""
        row = await self._pool.fetchrow(
            f"SELECT {_SELECT} FROM training_pipelines"
            " WHERE project = $1 AND location = $2 AND pipeline_id = $3",
            project,
            location,
            pipeline_id,
        )
        return _from(row) if row else None

    async def by_job(self, job_id: str) -> StoredPipeline | None:
        """The pipeline running job ``job_id``, or None (most jobs are no pipeline's)."""
        row = await self._pool.fetchrow(
            f"SELECT {_SELECT} FROM training_pipelines WHERE job_id = $1", job_id
        )
        return _from(row) if row else None

    async def unfinished(self) -> list[StoredPipeline]:
        """Every pipeline that has not ended, oldest first (the reconcile's working set)."""
        rows = await self._pool.fetch(
            f"SELECT {_SELECT} FROM training_pipelines WHERE state = ANY($1::text[])"
            " ORDER BY create_time, pipeline_id",
            [s.value for s in PipelineState if not s.terminal],
        )
        return [_from(row) for row in rows]

    async def list_pipelines(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[TrainingPipeline]:
        """Pipelines of the parent matching ``where`` in ``order`` (which ends on the unique
        ``pipeline_id``), after the keyset position ``after``."""
        params: list[object] = [project, location]
        sql = page_sql(
            f"SELECT {_SELECT} FROM training_pipelines",
            ["project = $1", "location = $2"],
            params,
            _FIELD_COLUMNS,
            where,
            order,
            limit,
            after,
        )
        rows = await self._pool.fetch(sql, *params)
        return [_from(row).pipeline for row in rows]

    async def mark_job_created(self, pipeline_id: str) -> None:
        """The pipeline's job exists."""
        await self._pool.execute(
            "UPDATE training_pipelines SET job_created = true WHERE pipeline_id = $1",
            pipeline_id,
        )

    async def forget(self, pipeline_id: str) -> None:
        """Remove a pipeline whose job was refused (nothing of it is left half-created)."""
        await self._pool.execute(
            "DELETE FROM training_pipelines WHERE pipeline_id = $1 AND NOT job_created",
            pipeline_id,
        )

    async def move(
        self,
        pipeline_id: str,
        allowed: frozenset[PipelineState],
        state: PipelineState,
        now: datetime,
        *,
        error: RpcStatus | None = None,
        model: Model | None = None,
        model_id: str | None = None,
    ) -> bool:
        """Move a pipeline in one of ``allowed`` to ``state`` (its start time set the first
        time it runs, its end time when ``state`` is terminal; ``error``, ``model`` and
        ``model_id`` replace what is stored when given); False if it was elsewhere."""
        changed = await self._pool.fetchval(
            "UPDATE training_pipelines SET state = $3, update_time = $4,"
            " start_time = CASE WHEN $3 = $7 THEN coalesce(start_time, $4) ELSE start_time END,"
            " end_time = CASE WHEN $8 THEN $4 ELSE end_time END,"
            " error = coalesce($5::jsonb, error),"
            " model_to_upload = coalesce($6::jsonb, model_to_upload),"
            " model_id = coalesce($9, model_id)"
            " WHERE pipeline_id = $1 AND state = ANY($2::text[]) RETURNING true",
            pipeline_id,
            [s.value for s in allowed],
            state.value,
            now,
            error.model_dump_json() if error is not None else None,
            model.model_dump_json(exclude_none=True) if model is not None else None,
            PipelineState.RUNNING.value,
            state.terminal,
            model_id,
        )
        return bool(changed)

    async def request_cancel(
        self,
        project: str,
        location: str,
        pipeline_id: str,
        cancellable: frozenset[PipelineState],
        now: datetime,
    ) -> StoredPipeline | None:
        """Mark a pipeline in ``cancellable`` CANCELLING; answers the pipeline as it was
        before (changed or not), None if there is no such pipeline."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT {_SELECT} FROM training_pipelines"
                " WHERE project = $1 AND location = $2 AND pipeline_id = $3 FOR UPDATE",
                project,
                location,
                pipeline_id,
            )
            if row is None:
                return None
            if PipelineState(row["state"]) in cancellable:
                await conn.execute(
                    "UPDATE training_pipelines SET state = $2, cancel_requested = true,"
                    " update_time = $3 WHERE pipeline_id = $1",
                    pipeline_id,
                    PipelineState.CANCELLING.value,
                    now,
                )
        return _from(row)

    async def delete(
        self, project: str, location: str, pipeline_id: str, deletable: frozenset[PipelineState]
    ) -> PipelineState | None:
        """Delete a pipeline in ``deletable``. Answers the state it had (deleted or not), None
        if there is no such pipeline."""
        async with self._pool.acquire() as conn, conn.transaction():
            state = await conn.fetchval(
                "SELECT state FROM training_pipelines"
                " WHERE project = $1 AND location = $2 AND pipeline_id = $3 FOR UPDATE",
                project,
                location,
                pipeline_id,
            )
            if state is None:
                return None
            if PipelineState(state) in deletable:
                await conn.execute(
                    "DELETE FROM training_pipelines WHERE pipeline_id = $1", pipeline_id
                )
        return PipelineState(state)
