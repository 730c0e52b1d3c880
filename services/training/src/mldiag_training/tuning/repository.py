"""The tuning_jobs and tuning_trials tables, as the tuning room reads and writes them.

The API inserts studies, reads them, asks for cancels and deletes ended ones; the
controller changes a study only inside :meth:`TuningRepository.study`, a transaction that
holds the study's row (``FOR UPDATE``) and bumps its ``revision`` when anything changed.
"""

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.outbox import Outbox
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import JobState, RpcStatus
from mldiag_schemas.tuning import (
    HyperparameterTuningJob,
    Measurement,
    Trial,
    TrialParameter,
    TrialState,
)
from mldiag_training.jobs.repository import job_name
from mldiag_training.listing_sql import page_sql

_JOB_COLUMNS = (
    "job_id, project, location, display_name, labels, body, state, error, seed, revision,"
    " cancel_requested, stop_reason, best_trial, progress_time, progress_trials,"
    " create_time, start_time, end_time, update_time"
)
_TRIAL_COLUMNS = (
    "tuning_job_id, number, custom_job_id, job_created, state, parameters, measurements,"
    " final_measurement, infeasible_reason, stopped_early, cancel_sent, job_state, job_error,"
    " job_end_time, metrics_sequence, start_time, end_time"
)

_FIELD_COLUMNS = {
    "display_name": "display_name",
    "state": "state",
    "create_time": "create_time",
    "start_time": "start_time",
    "end_time": "end_time",
    "update_time": "update_time",
    "job_id": "job_id",
    "labels": "labels",
}


def tuning_job_name(project: str, location: str, job_id: str) -> str:
    """A tuning job's resource name."""
    return f"projects/{project}/locations/{location}/hyperparameterTuningJobs/{job_id}"


@dataclass
class TrialRow:
    """A trial as the controller keeps it (more than the API shows)."""

    number: int
    custom_job_id: str
    state: TrialState
    parameters: list[TrialParameter]
    start_time: datetime
    job_created: bool = False
    measurements: list[Measurement] = field(default_factory=list)
    final_measurement: Measurement | None = None
    infeasible_reason: str = ""
    stopped_early: bool = False
    cancel_sent: bool = False
    job_state: JobState | None = None
    """The custom job's end, once heard (the trial may not be finalised yet)."""
    job_error: str | None = None
    job_end_time: datetime | None = None
    metrics_sequence: int | None = None
    end_time: datetime | None = None

    @property
    def trial_id(self) -> str:
        """The trial's id in its study (1, 2, ...)."""
        return str(self.number + 1)

    @property
    def parameter_values(self) -> dict[str, float | str]:
        """Its parameters by id."""
        return {p.parameter_id: p.value for p in self.parameters}


@dataclass
class StudyRow:
    """A tuning job's row: the resource (no trials) and the controller's bookkeeping."""

    job_id: str
    project: str
    location: str
    job: HyperparameterTuningJob
    seed: int
    revision: int = 0
    cancel_requested: bool = False
    stop_reason: str | None = None
    best_trial: int | None = None
    progress_time: datetime | None = None
    progress_trials: int = 0


def to_trial(project: str, location: str, job_id: str, row: TrialRow) -> Trial:
    """A trial as the API shows it."""
    return Trial(
        name=f"{tuning_job_name(project, location, job_id)}/trials/{row.trial_id}",
        id=row.trial_id,
        state=row.state,
        parameters=row.parameters,
        final_measurement=row.final_measurement,
        measurements=row.measurements,
        start_time=row.start_time,
        end_time=row.end_time,
        infeasible_reason=row.infeasible_reason,
        custom_job=job_name(project, location, row.custom_job_id),
        stopped_early=row.stopped_early,
    )


def _study_from(row: asyncpg.Record) -> StudyRow:
    error = row["error"]
    body = HyperparameterTuningJob.model_validate_json(row["body"])
    job = body.model_copy(
        update={
            "name": tuning_job_name(row["project"], row["location"], row["job_id"]),
            "state": JobState(row["state"]),
            "create_time": row["create_time"],
            "start_time": row["start_time"],
            "end_time": row["end_time"],
            "update_time": row["update_time"],
            "error": RpcStatus.model_validate_json(error) if error else None,
            "labels": json.loads(row["labels"]),
        }
    )
    return StudyRow(
        job_id=row["job_id"],
        project=row["project"],
        location=row["location"],
        job=job,
        seed=row["seed"],
        revision=row["revision"],
        cancel_requested=row["cancel_requested"],
        stop_reason=row["stop_reason"],
        best_trial=row["best_trial"],
        progress_time=row["progress_time"],
        progress_trials=row["progress_trials"],
    )


def _trial_from(row: asyncpg.Record) -> TrialRow:
    final = row["final_measurement"]
    return TrialRow(
        number=row["number"],
        custom_job_id=row["custom_job_id"],
        job_created=row["job_created"],
        state=TrialState(row["state"]),
        parameters=[TrialParameter.model_validate(p) for p in json.loads(row["parameters"])],
        measurements=[Measurement.model_validate(m) for m in json.loads(row["measurements"])],
        final_measurement=Measurement.model_validate_json(final) if final else None,
        infeasible_reason=row["infeasible_reason"],
        stopped_early=row["stopped_early"],
        cancel_sent=row["cancel_sent"],
        job_state=JobState(row["job_state"]) if row["job_state"] else None,
        job_error=row["job_error"],
        job_end_time=row["job_end_time"],
        metrics_sequence=row["metrics_sequence"],
        start_time=row["start_time"],
        end_time=row["end_time"],
    )


def _json_list(models: Sequence[TrialParameter | Measurement]) -> str:
    return "[" + ",".join(m.model_dump_json() for m in models) + "]"


class StudyUnit:
    """One study's row held for update, its trials, and the writes of this unit of work."""

    def __init__(
        self, conn: asyncpg.Connection, outbox: Outbox, study: StudyRow, trials: list[TrialRow]
    ) -> None:
        self._conn = conn
        self._outbox = outbox
        self.study = study
        self.trials = trials
        self.dirty = False

    async def save_trial(self, trial: TrialRow, *, new: bool = False) -> None:
        """Insert (``new``) or update a trial, keeping :attr:`trials` in step."""
        values = (
            self.study.job_id,
            trial.number,
            trial.custom_job_id,
            trial.job_created,
            trial.state.value,
            _json_list(trial.parameters),
            _json_list(trial.measurements),
            trial.final_measurement.model_dump_json() if trial.final_measurement else None,
            trial.infeasible_reason,
            trial.stopped_early,
            trial.cancel_sent,
            trial.job_state.value if trial.job_state else None,
            trial.job_error,
            trial.job_end_time,
            trial.metrics_sequence,
            trial.start_time,
            trial.end_time,
        )
        if new:
            await self._conn.execute(
                f"INSERT INTO tuning_trials ({_TRIAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5,"
                " $6::jsonb, $7::jsonb, $8::jsonb, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
                *values,
            )
            self.trials.append(trial)
        else:
            await self._conn.execute(
                "UPDATE tuning_trials SET custom_job_id = $3, job_created = $4, state = $5,"
                " parameters = $6::jsonb, measurements = $7::jsonb,"
                " final_measurement = $8::jsonb, infeasible_reason = $9, stopped_early = $10,"
                " cancel_sent = $11, job_state = $12, job_error = $13, job_end_time = $14,"
                " metrics_sequence = $15, start_time = $16, end_time = $17"
                " WHERE tuning_job_id = $1 AND number = $2",
                *values,
            )
            self.trials = [trial if t.number == trial.number else t for t in self.trials]
        self.dirty = True

    async def save_study(self, study: StudyRow) -> None:
        """Write the study's state, times, error and bookkeeping."""
        job = study.job
        await self._conn.execute(
            "UPDATE tuning_jobs SET state = $2, error = $3::jsonb, cancel_requested = $4,"
            " stop_reason = $5, best_trial = $6, progress_time = $7, progress_trials = $8,"
            " start_time = $9, end_time = $10, update_time = $11 WHERE job_id = $1",
            study.job_id,
            job.state.value,
            job.error.model_dump_json() if job.error else None,
            study.cancel_requested,
            study.stop_reason,
            study.best_trial,
            study.progress_time,
            study.progress_trials,
            job.start_time,
            job.end_time,
            job.update_time,
        )
        self.study = study
        self.dirty = True

    async def stage(self, messages: Sequence[Envelope]) -> None:
        """Stage facts, published after commit."""
        if messages:
            await self._outbox.add(self._conn, messages)


class TuningRepository:
    """Tuning jobs and their trials in the training schema."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox) -> None:
        self._pool = pool
        self._outbox = outbox

    async def insert(
        self,
        study: StudyRow,
        created: Envelope,
    ) -> bool:
        """Store a new QUEUED study and stage ``created`` with it; False (nothing stored)
        when its id is taken."""
        job = study.job
        body = job.model_copy(
            update={
                "name": "",
                "trials": [],
                "state": JobState.UNSPECIFIED,
                "create_time": None,
                "start_time": None,
                "end_time": None,
                "update_time": None,
                "error": None,
            }
        )
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                "INSERT INTO tuning_jobs (job_id, project, location, display_name, labels, body,"
                " state, seed, create_time, update_time)"
                " VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9, $9)"
                " ON CONFLICT (job_id) DO NOTHING RETURNING true",
                study.job_id,
                study.project,
                study.location,
                job.display_name,
                json.dumps(job.labels),
                body.model_dump_json(exclude_none=True),
                job.state.value,
                study.seed,
                job.create_time,
            )
            if not inserted:
                return False
            await self._outbox.add(conn, [created])
        return True

    async def get(self, project: str, location: str, job_id: str) -> HyperparameterTuningJob | None:
        """One tuning job of the parent with its trials, or None."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            row = await conn.fetchrow(
                f"SELECT {_JOB_COLUMNS} FROM tuning_jobs"
                " WHERE project = $1 AND location = $2 AND job_id = $3",
                project,
                location,
                job_id,
            )
            if row is None:
                return None
            trials = await self._trials(conn, [job_id])
        return _with_trials(_study_from(row), trials.get(job_id, []))

    async def list_jobs(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[HyperparameterTuningJob]:
        """Tuning jobs of the parent matching ``where`` in ``order`` (ending on the unique
        ``job_id``) after the keyset position ``after``, with their trials."""
        params: list[object] = [project, location]
        sql = page_sql(
            f"SELECT {_JOB_COLUMNS} FROM tuning_jobs",
            ["project = $1", "location = $2"],
            params,
            _FIELD_COLUMNS,
            where,
            order,
            limit,
            after,
        )
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            rows = await conn.fetch(sql, *params)
            trials = await self._trials(conn, [row["job_id"] for row in rows])
        return [_with_trials(_study_from(row), trials.get(row["job_id"], [])) for row in rows]

    @staticmethod
    async def _trials(conn: asyncpg.Connection, job_ids: list[str]) -> dict[str, list[TrialRow]]:
        if not job_ids:
            return {}
        rows = await conn.fetch(
            f"SELECT {_TRIAL_COLUMNS} FROM tuning_trials WHERE tuning_job_id = ANY($1::text[])"
            " ORDER BY tuning_job_id, number",
            job_ids,
        )
        found: dict[str, list[TrialRow]] = {}
        for row in rows:
            found.setdefault(row["tuning_job_id"], []).append(_trial_from(row))
        return found

    async def request_cancel(
        self,
        project: str,
        location: str,
        job_id: str,
        cancellable: frozenset[JobState],
        now: datetime,
        changed: Callable[[JobState], Envelope],
    ) -> JobState | None:
        """Mark a study in ``cancellable`` CANCELLING, staging ``changed(previous)``.
        Answers the state it had, None if there is no such study."""
        async with self._pool.acquire() as conn, conn.transaction():
            state = await conn.fetchval(
                "SELECT state FROM tuning_jobs"
                " WHERE project = $1 AND location = $2 AND job_id = $3 FOR UPDATE",
                project,
                location,
                job_id,
            )
            if state is None:
                return None
            previous = JobState(state)
            if previous not in cancellable:
                return previous
            await conn.execute(
                "UPDATE tuning_jobs SET state = $2, cancel_requested = true, update_time = $3,"
                " revision = revision + 1 WHERE job_id = $1",
                job_id,
                JobState.CANCELLING.value,
                now,
            )
            await self._outbox.add(conn, [changed(previous)])
        return previous

    async def delete(
        self, project: str, location: str, job_id: str, deletable: frozenset[JobState]
    ) -> JobState | None:
        """Delete a study in ``deletable`` and its trials' rows (not their custom jobs).
        Answers the state it had, None if there is no such study."""
        async with self._pool.acquire() as conn, conn.transaction():
            state = await conn.fetchval(
                "SELECT state FROM tuning_jobs"
                " WHERE project = $1 AND location = $2 AND job_id = $3 FOR UPDATE",
                project,
                location,
                job_id,
            )
            if state is None:
                return None
            if JobState(state) in deletable:
                await conn.execute("DELETE FROM tuning_jobs WHERE job_id = $1", job_id)
        return JobState(state)

    async def active(self) -> list[str]:
        """The studies that have not ended, oldest first."""
        rows = await self._pool.fetch(
            "SELECT job_id FROM tuning_jobs WHERE state IN ('JOB_STATE_QUEUED',"
            " 'JOB_STATE_PENDING', 'JOB_STATE_RUNNING', 'JOB_STATE_CANCELLING')"
            " ORDER BY create_time, job_id"
        )
        return [row["job_id"] for row in rows]

    async def trial_of(self, custom_job_id: str) -> tuple[str, int, datetime] | None:
        """The study, trial number and start of the trial run by a custom job, or None."""
        row = await self._pool.fetchrow(
            "SELECT tuning_job_id, number, start_time FROM tuning_trials WHERE custom_job_id = $1",
            custom_job_id,
        )
        return (row["tuning_job_id"], row["number"], row["start_time"]) if row else None

    async def revision(self, job_id: str) -> int | None:
        """A study's revision, None if it is gone."""
        value: int | None = await self._pool.fetchval(
            "SELECT revision FROM tuning_jobs WHERE job_id = $1", job_id
        )
        return value

    async def mark_trial(self, job_id: str, number: int, **flags: bool) -> None:
        """Note that a trial's custom job was created or its cancel sent (``job_created``,
        ``cancel_sent``): bookkeeping of side effects, no revision change."""
        for name, value in flags.items():
            if name not in ("job_created", "cancel_sent"):
                raise ValueError(name)
            await self._pool.execute(
                f"UPDATE tuning_trials SET {name} = $3 WHERE tuning_job_id = $1 AND number = $2",
                job_id,
                number,
                value,
            )

    @asynccontextmanager
    async def study(self, job_id: str) -> AsyncIterator[StudyUnit | None]:
        """Hold a study's row for the block (None if it is gone); commits on a clean exit,
        bumping the revision if the unit wrote anything."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT {_JOB_COLUMNS} FROM tuning_jobs WHERE job_id = $1 FOR UPDATE", job_id
            )
            if row is None:
                yield None
                return
            trials = (await self._trials(conn, [job_id])).get(job_id, [])
            unit = StudyUnit(conn, self._outbox, _study_from(row), trials)
            yield unit
            if unit.dirty:
                revision = await conn.fetchval(
                    "UPDATE tuning_jobs SET revision = revision + 1 WHERE job_id = $1"
                    " RETURNING revision",
                    job_id,
                )
                unit.study = replace(unit.study, revision=revision)


def _with_trials(study: StudyRow, trials: list[TrialRow]) -> HyperparameterTuningJob:
    return study.job.model_copy(
        update={
            "trials": [to_trial(study.project, study.location, study.job_id, t) for t in trials]
        }
    )
