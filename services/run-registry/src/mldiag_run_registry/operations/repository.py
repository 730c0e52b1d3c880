"""All SQL about operations."""

import json
from datetime import datetime

import asyncpg

from mldiag_run_registry.filtering import Comparison, Expr, render_where
from mldiag_schemas.operations import Operation, OperationError, OperationMetadata, OperationVerb
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


def _operation_from(row: asyncpg.Record) -> Operation:
    error = json.loads(row["error"]) if row["error"] else None
    return Operation(
        name=operation_name(row["project"], row["location"], row["operation_id"]),
        done=row["done"],
        metadata=OperationMetadata(
            verb=OperationVerb(row["verb"]),
            target=row["target"],
            create_time=row["create_time"],
            end_time=row["end_time"],
            cancel_requested=row["cancel_requested"],
        ),
        response=Run.model_validate_json(row["response"]) if row["response"] else None,
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
        self, conn: asyncpg.Connection, project: str, location: str, operation: Operation
    ) -> None:
        """Record ``operation`` on ``conn``, inside the caller's transaction (the write it
        reports), so a write and its operation commit or roll back together.
        """
        await conn.execute(
            f"INSERT INTO operations ({_COLUMNS})"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb)",
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
