"""All SQL about operations."""

import json
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Comparison, Expr, render_where
from mldiag_schemas.operations import Operation, OperationError, OperationMetadata, OperationVerb
from mldiag_schemas.profiling import ProfilerSession
from mldiag_schemas.runs import Run

_COLUMNS = (
    "operation_id, project, location, verb, target, done, create_time, end_time,"
    " cancel_requested, response, error"
)

# Filterable operation fields → columns (see operations.service.FIELDS).
_FILTER_COLUMNS = {"done": "done", "metadata.verb": "verb", "metadata.target": "target"}


def operation_name(project: str, location: str, operation_id: str) -> str:
    """``projects/{p}/locations/{l}/operations/{id}``."""
    return f"projects/{project}/locations/{location}/operations/{operation_id}"


def split_operation_name(name: str) -> tuple[str, str, str]:
    """(project, location, operation id) of ``projects/{p}/locations/{l}/operations/{id}``;
    ``ValueError`` for anything else."""
    parts = name.split("/")
    if len(parts) != 6 or parts[0::2] != ["projects", "locations", "operations"]:
        raise ValueError(f"not an operation name: {name!r}")
    return parts[1], parts[3], parts[5]


def _response_from(verb: OperationVerb, text: str | None) -> Run | ProfilerSession | None:
    if not text:
        return None
    # The verb says what the response is: a capture's is its session, every other a run.
    if verb is OperationVerb.CAPTURE:
        return ProfilerSession.model_validate_json(text)
    return Run.model_validate_json(text)


def _operation_from(row: asyncpg.Record) -> Operation:
    error = json.loads(row["error"]) if row["error"] else None
    verb = OperationVerb(row["verb"])
    return Operation(
        name=operation_name(row["project"], row["location"], row["operation_id"]),
        done=row["done"],
        metadata=OperationMetadata(
            verb=verb,
            target=row["target"],
            create_time=row["create_time"],
            end_time=row["end_time"],
            cancel_requested=row["cancel_requested"],
        ),
        response=_response_from(verb, row["response"]),
        error=OperationError.model_validate(error) if error else None,
    )


def _where(expr: Expr, params: list[object]) -> str:
    return render_where(expr, lambda comparison: _comparison(comparison, params))


def _comparison(expr: Comparison, params: list[object]) -> str:
    column = _FILTER_COLUMNS[expr.field]
    if expr.op == ":" and expr.value is None:
        return "true"
    params.append(expr.value)
    if expr.op == ":":
        return f"strpos({column}, ${len(params)}) > 0"
    return f"{column} {'<>' if expr.op == '!=' else expr.op} ${len(params)}"


class OperationsRepository:
    """Operations in the registry's own schema."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def add(
        self,
        conn: asyncpg.Connection,
        project: str,
        location: str,
        operation: Operation,
        *,
        if_absent: bool = False,
    ) -> bool:
        """Record ``operation`` on ``conn``, inside the caller's transaction (the write it
        reports), so a write and its operation commit or roll back together.

        With ``if_absent`` an operation id already stored (a replayed request whose id is
        derived from the message) is left alone and False returned; otherwise it is an error.
        """
        conflict = " ON CONFLICT (operation_id) DO NOTHING" if if_absent else ""
        inserted = await conn.fetchval(
            f"INSERT INTO operations ({_COLUMNS})"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb)"
            f"{conflict} RETURNING true",
            operation.name.rsplit("/", 1)[-1],
            project,
            location,
            operation.metadata.verb.value,
            operation.metadata.target,
            operation.done,
            operation.metadata.create_time,
            operation.metadata.end_time,
            operation.metadata.cancel_requested,
            operation.response.model_dump_json() if operation.response else None,
            operation.error.model_dump_json() if operation.error else None,
        )
        return bool(inserted)

    async def finish(
        self,
        conn: asyncpg.Connection,
        operation_id: str,
        end_time: datetime,
        response: Run | ProfilerSession | None,
        error: OperationError | None,
    ) -> bool:
        """Mark a pending operation done on ``conn`` (the caller's transaction) with its
        response or error; False when it is unknown or already done (finishing twice
        changes nothing).
        """
        finished = await conn.fetchval(
            "UPDATE operations SET done = true, end_time = $2, response = $3, error = $4::jsonb"
            " WHERE operation_id = $1 AND NOT done RETURNING true",
            operation_id,
            end_time,
            response.model_dump_json() if response else None,
            error.model_dump_json() if error else None,
        )
        return bool(finished)

    async def get(self, project: str, location: str, operation_id: str) -> Operation | None:
        """The operation, if it exists under that parent."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM operations"
            " WHERE operation_id = $1 AND project = $2 AND location = $3",
            operation_id,
            project,
            location,
        )
        return _operation_from(row) if row else None

    async def list_operations(
        self,
        project: str,
        location: str,
        where: Expr | None,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> list[Operation]:
        """Operations newest first, after the keyset position ``after``."""
        params: list[object] = [project, location]
        clauses = ["project = $1", "location = $2"]
        if where is not None:
            clauses.append(_where(where, params))
        if after is not None:
            params.extend(after)
            clauses.append(f"(create_time, operation_id) < (${len(params) - 1}, ${len(params)})")
        params.append(limit)
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM operations WHERE {' AND '.join(clauses)}"
            f" ORDER BY create_time DESC, operation_id DESC LIMIT ${len(params)}",
            *params,
        )
        return [_operation_from(row) for row in rows]

    async def request_cancel(self, project: str, location: str, operation_id: str) -> None:
        """Mark a running operation as asked to cancel."""
        await self._pool.execute(
            "UPDATE operations SET cancel_requested = true"
            " WHERE operation_id = $1 AND project = $2 AND location = $3 AND NOT done",
            operation_id,
            project,
            location,
        )

    async def delete(self, project: str, location: str, operation_id: str) -> bool:
        """Forget an operation; False if there was none."""
        deleted = await self._pool.fetchval(
            "DELETE FROM operations WHERE operation_id = $1 AND project = $2 AND location = $3"
            " RETURNING true",
            operation_id,
            project,
            location,
        )
        return bool(deleted)

    async def purge_target(self, project: str, location: str, target: str) -> int:
        """Forget every operation about ``target`` or a resource under it (a run's writes,
        its captures' sessions); how many."""
        status: str = await self._pool.execute(
            "DELETE FROM operations WHERE project = $1 AND location = $2"
            " AND (target = $3 OR left(target, length($3) + 1) = $3 || '/')",
            project,
            location,
            target,
        )
        return int(status.rsplit(" ", 1)[-1])
