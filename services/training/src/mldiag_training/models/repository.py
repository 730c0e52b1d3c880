"""The models, model_versions, model_aliases and model_operations tables.

Every change to a model (a new version, an alias moved, a version deleted) locks the
model's row (``FOR UPDATE``) first, so two changes of one model never interleave: version
ids are handed out from ``last_version`` and the alias rules are checked on what is there.
"""

import enum
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_schemas.models import DEFAULT_ALIAS, Model, ModelOperation
from mldiag_training.listing_sql import page_sql

_ALIASES = (
    "ARRAY(SELECT a.alias FROM model_aliases a WHERE a.project = v.project"
    " AND a.location = v.location AND a.model_id = v.model_id AND a.version_id = v.version_id"
    " ORDER BY a.alias <> 'default', a.alias) AS aliases"
)
_SELECT = (
    "m.project, m.location, m.model_id, m.display_name, m.description, m.create_time,"
    " m.update_time AS model_update_time, v.version_id, v.version_description, v.labels,"
    " v.artifact_uri, v.body, v.lineage, v.revision, v.create_time AS version_create_time,"
    f" v.update_time AS version_update_time, {_ALIASES}"
)
_FROM = "models m JOIN model_versions v USING (project, location, model_id)"

# Filter and orderBy fields (see service.MODEL_FIELDS and VERSION_FIELDS) → columns.
MODEL_COLUMNS = {
    "display_name": "m.display_name",
    "labels": "v.labels",  # the default version's; JSONB: filtered by key, never ordered
    "create_time": "m.create_time",
    "update_time": "m.update_time",
    "model_id": "m.model_id",
}
VERSION_COLUMNS = {
    "labels": "v.labels",
    "create_time": "v.create_time",
    "update_time": "v.update_time",
    "version_id": "v.version_id",
}

_BODY_FIELDS = {"container_spec", "metadata_schema_uri", "metadata"}
"""Model attributes kept in a version's ``body`` JSON (the others have columns)."""


def model_name(project: str, location: str, model_id: str) -> str:
    """A model's resource name (no version)."""
    return f"projects/{project}/locations/{location}/models/{model_id}"


def _as_version_id(field: str, value: object) -> object:
    # Keyset tokens carry text; the version column is an integer.
    return int(str(value)) if field == "version_id" else value


def _etag(row: asyncpg.Record) -> str:
    stamp = f"{row['revision']}:{row['model_update_time'].isoformat()}"
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


def _model_from(row: asyncpg.Record) -> Model:
    body: dict[str, Any] = json.loads(row["body"])
    lineage = json.loads(row["lineage"]) if row["lineage"] else None
    document = {
        **body,
        "name": model_name(row["project"], row["location"], row["model_id"]),
        "versionId": str(row["version_id"]),
        "versionAliases": list(row["aliases"]),
        "versionCreateTime": row["version_create_time"],
        "versionUpdateTime": row["version_update_time"],
        "displayName": row["display_name"],
        "description": row["description"],
        "versionDescription": row["version_description"],
        "artifactUri": row["artifact_uri"],
        "labels": json.loads(row["labels"]),
        "createTime": row["create_time"],
        "updateTime": max(row["model_update_time"], row["version_update_time"]),
        "trainingPipeline": (lineage or {}).get("trainingPipeline", ""),
        "modelSourceInfo": {"sourceType": "CUSTOM"},
        "etag": _etag(row),
        "lineage": lineage,
    }
    return Model.model_validate(document)


@dataclass(frozen=True)
class NewVersion:
    """A version to store: the model as uploaded, its user aliases, its lineage."""

    model: Model
    aliases: list[str]
    make_default: bool
    lineage_json: str | None
    idempotency_key: str
    now: datetime

    def body_json(self) -> str:
        """The attributes kept in ``body``."""
        return self.model.model_dump_json(include=_BODY_FIELDS, exclude_none=True)


class Outcome(enum.Enum):
    """What a change found, when it did not simply happen."""

    DONE = "done"
    NO_MODEL = "no_model"
    NO_VERSION = "no_version"
    MODEL_EXISTS = "model_exists"
    DEFAULT_IN_USE = "default_in_use"
    DUPLICATE_KEY = "duplicate_key"


def _version_ref_sql(ref: str | None, params: list[object]) -> str:
    """The condition picking a version of the model ``$1..$3`` name: its default (None), a
    version id (digits) or an alias."""
    if ref is None:
        ref = DEFAULT_ALIAS
    if ref.isdigit():
        params.append(int(ref))
        return f"v.version_id = ${len(params)}"
    params.append(ref)
    return (
        "v.version_id = (SELECT a.version_id FROM model_aliases a WHERE a.project = $1"
        f" AND a.location = $2 AND a.model_id = $3 AND a.alias = ${len(params)})"
    )


class ModelsRepository:
    """The model registry's rows in the training schema."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _read(
        self, conn: asyncpg.Connection, project: str, location: str, model_id: str, ref: str | None
    ) -> Model | None:
        params: list[object] = [project, location, model_id]
        condition = _version_ref_sql(ref, params)
        row = await conn.fetchrow(
            f"SELECT {_SELECT} FROM {_FROM} WHERE m.project = $1 AND m.location = $2"
            f" AND m.model_id = $3 AND {condition}",
            *params,
        )
        return _model_from(row) if row else None

    async def get(
        self, project: str, location: str, model_id: str, ref: str | None = None
    ) -> Model | None:
        """A version of a model (``ref``: None for the default, a version id, an alias)."""
        async with self._pool.acquire() as conn:
            return await self._read(conn, project, location, model_id, ref)

    async def model_exists(self, project: str, location: str, model_id: str) -> bool:
        """Whether the model exists (whatever its versions)."""
        found = await self._pool.fetchval(
            "SELECT true FROM models WHERE project = $1 AND location = $2 AND model_id = $3",
            project,
            location,
            model_id,
        )
        return bool(found)

    async def by_idempotency_key(self, key: str) -> Model | None:
        """The version an import with ``key`` stored, if any."""
        row = await self._pool.fetchrow(
            "SELECT project, location, model_id, version_id FROM model_versions"
            " WHERE idempotency_key = $1",
            key,
        )
        if row is None:
            return None
        return await self.get(
            row["project"], row["location"], row["model_id"], str(row["version_id"])
        )

    async def _insert_version(
        self,
        conn: asyncpg.Connection,
        project: str,
        location: str,
        model_id: str,
        version_id: int,
        new: NewVersion,
    ) -> None:
        await conn.execute(
            "INSERT INTO model_versions (project, location, model_id, version_id,"
            " version_description, labels, artifact_uri, body, lineage, idempotency_key,"
            " create_time, update_time)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::jsonb, $9::jsonb, $10, $11, $11)",
            project,
            location,
            model_id,
            version_id,
            new.model.version_description,
            json.dumps(new.model.labels),
            new.model.artifact_uri,
            new.body_json(),
            new.lineage_json,
            new.idempotency_key,
            new.now,
        )
        aliases = [*new.aliases, *([DEFAULT_ALIAS] if new.make_default else [])]
        # An alias names one version of a model: adding it here takes it from another.
        await conn.execute(
            "INSERT INTO model_aliases (project, location, model_id, alias, version_id)"
            " SELECT $1, $2, $3, alias, $4 FROM unnest($5::text[]) AS alias"
            " ON CONFLICT (project, location, model_id, alias)"
            " DO UPDATE SET version_id = excluded.version_id",
            project,
            location,
            model_id,
            version_id,
            aliases,
        )

    async def _save_operation(
        self,
        conn: asyncpg.Connection,
        project: str,
        location: str,
        model_id: str,
        operation: ModelOperation,
        now: datetime,
    ) -> None:
        await conn.execute(
            "INSERT INTO model_operations (project, location, model_id, operation_id, body,"
            " create_time) VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
            project,
            location,
            model_id,
            operation.name.rsplit("/", 1)[-1],
            operation.model_dump_json(),
            now,
        )

    async def create_model(
        self,
        project: str,
        location: str,
        model_id: str,
        new: NewVersion,
        operation: ModelOperation | None,
    ) -> Outcome:
        """A new model with version 1 (default) and, when given, its upload operation.
        MODEL_EXISTS (nothing stored) when the id is taken; DUPLICATE_KEY when another
        import with the same idempotency key won."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                inserted = await conn.fetchval(
                    "INSERT INTO models (project, location, model_id, display_name, description,"
                    " last_version, create_time, update_time) VALUES ($1, $2, $3, $4, $5, 1, $6,"
                    " $6) ON CONFLICT DO NOTHING RETURNING true",
                    project,
                    location,
                    model_id,
                    new.model.display_name,
                    new.model.description,
                    new.now,
                )
                if not inserted:
                    return Outcome.MODEL_EXISTS
                await self._insert_version(conn, project, location, model_id, 1, new)
                if operation is not None:
                    await self._save_operation(
                        conn, project, location, model_id, operation, new.now
                    )
        except asyncpg.UniqueViolationError:
            return Outcome.DUPLICATE_KEY
        return Outcome.DONE

    async def add_version(
        self,
        project: str,
        location: str,
        model_id: str,
        new: NewVersion,
        operation_for: Any,
    ) -> tuple[Outcome, int]:
        """The model's next version (its id: the highest ever given + 1) and, when
        ``operation_for(version_id)`` answers one, its upload operation. NO_MODEL when the
        model does not exist; DUPLICATE_KEY when another import with the same key won."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                last = await conn.fetchval(
                    "SELECT last_version FROM models WHERE project = $1 AND location = $2"
                    " AND model_id = $3 FOR UPDATE",
                    project,
                    location,
                    model_id,
                )
                if last is None:
                    return Outcome.NO_MODEL, 0
                version_id = int(last) + 1
                await conn.execute(
                    "UPDATE models SET last_version = $4, update_time = $5 WHERE project = $1"
                    " AND location = $2 AND model_id = $3",
                    project,
                    location,
                    model_id,
                    version_id,
                    new.now,
                )
                await self._insert_version(conn, project, location, model_id, version_id, new)
                operation = operation_for(version_id)
                if operation is not None:
                    await self._save_operation(
                        conn, project, location, model_id, operation, new.now
                    )
        except asyncpg.UniqueViolationError:
            return Outcome.DUPLICATE_KEY, 0
        return Outcome.DONE, version_id

    async def operation(
        self, project: str, location: str, model_id: str, operation_id: str
    ) -> ModelOperation | None:
        """A stored operation of the model, or None."""
        body = await self._pool.fetchval(
            "SELECT body FROM model_operations WHERE project = $1 AND location = $2"
            " AND model_id = $3 AND operation_id = $4",
            project,
            location,
            model_id,
            operation_id,
        )
        return ModelOperation.model_validate_json(body) if body else None

    async def list_models(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[Model]:
        """The default version of each model of the parent matching ``where``, in
        ``order`` (ending on the unique ``model_id``), after the keyset ``after``."""
        params: list[object] = [project, location, DEFAULT_ALIAS]
        clauses = [
            "m.project = $1",
            "m.location = $2",
            "v.version_id = (SELECT a.version_id FROM model_aliases a WHERE a.project = m.project"
            " AND a.location = m.location AND a.model_id = m.model_id AND a.alias = $3)",
        ]
        sql = page_sql(
            f"SELECT {_SELECT} FROM {_FROM}",
            clauses,
            params,
            MODEL_COLUMNS,
            where,
            order,
            limit,
            after,
        )
        rows = await self._pool.fetch(sql, *params)
        return [_model_from(row) for row in rows]

    async def list_versions(
        self,
        project: str,
        location: str,
        model_id: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[Model] | None:
        """The model's versions matching ``where`` in ``order`` (ending on ``version_id``),
        after ``after``; None when there is no such model."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            exists = await conn.fetchval(
                "SELECT true FROM models WHERE project = $1 AND location = $2 AND model_id = $3",
                project,
                location,
                model_id,
            )
            if not exists:
                return None
            params: list[object] = [project, location, model_id]
            sql = page_sql(
                f"SELECT {_SELECT} FROM {_FROM}",
                ["m.project = $1", "m.location = $2", "m.model_id = $3"],
                params,
                VERSION_COLUMNS,
                where,
                order,
                limit,
                after,
                value=_as_version_id,
            )
            rows = await conn.fetch(sql, *params)
        return [_model_from(row) for row in rows]

    async def _lock_version(
        self, conn: asyncpg.Connection, project: str, location: str, model_id: str, ref: str | None
    ) -> tuple[Outcome, int]:
        """Lock the model's row and find the version ``ref`` names."""
        locked = await conn.fetchval(
            "SELECT true FROM models WHERE project = $1 AND location = $2 AND model_id = $3"
            " FOR UPDATE",
            project,
            location,
            model_id,
        )
        if not locked:
            return Outcome.NO_MODEL, 0
        params: list[object] = [project, location, model_id]
        condition = _version_ref_sql(ref, params)
        version_id = await conn.fetchval(
            f"SELECT v.version_id FROM model_versions v WHERE v.project = $1"
            f" AND v.location = $2 AND v.model_id = $3 AND {condition}",
            *params,
        )
        if version_id is None:
            return Outcome.NO_VERSION, 0
        return Outcome.DONE, int(version_id)

    async def merge_aliases(
        self,
        project: str,
        location: str,
        model_id: str,
        ref: str,
        add: Sequence[str],
        remove: Sequence[str],
        now: datetime,
    ) -> tuple[Outcome, Model | None]:
        """Give the version ``ref`` names the aliases ``add`` (taking each from another
        version) and take ``remove`` from it (an alias it does not carry is left alone)."""
        async with self._pool.acquire() as conn, conn.transaction():
            outcome, version_id = await self._lock_version(conn, project, location, model_id, ref)
            if outcome is not Outcome.DONE:
                return outcome, None
            await conn.execute(
                "DELETE FROM model_aliases WHERE project = $1 AND location = $2"
                " AND model_id = $3 AND version_id = $4 AND alias = ANY($5::text[])",
                project,
                location,
                model_id,
                version_id,
                list(remove),
            )
            moved = await conn.fetch(
                "SELECT DISTINCT version_id FROM model_aliases WHERE project = $1"
                " AND location = $2 AND model_id = $3 AND alias = ANY($4::text[])"
                " AND version_id <> $5",
                project,
                location,
                model_id,
                list(add),
                version_id,
            )
            await conn.execute(
                "INSERT INTO model_aliases (project, location, model_id, alias, version_id)"
                " SELECT $1, $2, $3, alias, $4 FROM unnest($5::text[]) AS alias"
                " ON CONFLICT (project, location, model_id, alias)"
                " DO UPDATE SET version_id = excluded.version_id",
                project,
                location,
                model_id,
                version_id,
                list(add),
            )
            touched = [version_id, *(row["version_id"] for row in moved)]
            await conn.execute(
                "UPDATE model_versions SET update_time = $5, revision = revision + 1"
                " WHERE project = $1 AND location = $2 AND model_id = $3"
                " AND version_id = ANY($4::integer[])",
                project,
                location,
                model_id,
                touched,
                now,
            )
            return Outcome.DONE, await self._read(
                conn, project, location, model_id, str(version_id)
            )

    async def update(
        self,
        project: str,
        location: str,
        model_id: str,
        ref: str | None,
        model_fields: dict[str, str],
        version_fields: dict[str, object],
        now: datetime,
    ) -> tuple[Outcome, Model | None]:
        """Set the model's ``display_name``/``description`` (``model_fields``) and the
        version's ``version_description``/``labels`` (``version_fields``)."""
        async with self._pool.acquire() as conn, conn.transaction():
            outcome, version_id = await self._lock_version(conn, project, location, model_id, ref)
            if outcome is not Outcome.DONE:
                return outcome, None
            if model_fields:
                await conn.execute(
                    "UPDATE models SET display_name = COALESCE($4, display_name),"
                    " description = COALESCE($5, description), update_time = $6"
                    " WHERE project = $1 AND location = $2 AND model_id = $3",
                    project,
                    location,
                    model_id,
                    model_fields.get("display_name"),
                    model_fields.get("description"),
                    now,
                )
            if version_fields:
                labels = version_fields.get("labels")
                await conn.execute(
                    "UPDATE model_versions SET"
                    " version_description = COALESCE($5, version_description),"
                    " labels = COALESCE($6::jsonb, labels), update_time = $7,"
                    " revision = revision + 1"
                    " WHERE project = $1 AND location = $2 AND model_id = $3 AND version_id = $4",
                    project,
                    location,
                    model_id,
                    version_id,
                    version_fields.get("version_description"),
                    json.dumps(labels) if labels is not None else None,
                    now,
                )
            return Outcome.DONE, await self._read(
                conn, project, location, model_id, str(version_id)
            )

    async def delete_version(
        self,
        project: str,
        location: str,
        model_id: str,
        ref: str,
        operation: ModelOperation,
        now: datetime,
    ) -> tuple[Outcome, bool]:
        """Delete the version ``ref`` names; the model too when it was the last. Answers
        whether the model went with it. DEFAULT_IN_USE (nothing deleted) for the default
        version while others exist."""
        async with self._pool.acquire() as conn, conn.transaction():
            outcome, version_id = await self._lock_version(conn, project, location, model_id, ref)
            if outcome is not Outcome.DONE:
                return outcome, False
            row = await conn.fetchrow(
                "SELECT count(*) AS versions, (SELECT version_id FROM model_aliases"
                " WHERE project = $1 AND location = $2 AND model_id = $3 AND alias = $4)"
                " AS default_version FROM model_versions"
                " WHERE project = $1 AND location = $2 AND model_id = $3",
                project,
                location,
                model_id,
                DEFAULT_ALIAS,
            )
            last = row["versions"] == 1
            if row["default_version"] == version_id and not last:
                return Outcome.DEFAULT_IN_USE, False
            if last:
                await conn.execute(
                    "DELETE FROM models WHERE project = $1 AND location = $2 AND model_id = $3",
                    project,
                    location,
                    model_id,
                )
            else:
                await conn.execute(
                    "DELETE FROM model_versions WHERE project = $1 AND location = $2"
                    " AND model_id = $3 AND version_id = $4",
                    project,
                    location,
                    model_id,
                    version_id,
                )
                await conn.execute(
                    "UPDATE models SET update_time = $4 WHERE project = $1 AND location = $2"
                    " AND model_id = $3",
                    project,
                    location,
                    model_id,
                    now,
                )
            await self._save_operation(conn, project, location, model_id, operation, now)
        return Outcome.DONE, last

    async def delete_model(
        self,
        project: str,
        location: str,
        model_id: str,
        operation: ModelOperation,
        now: datetime,
    ) -> Outcome:
        """Delete the model and every version of it."""
        async with self._pool.acquire() as conn, conn.transaction():
            deleted = await conn.fetchval(
                "DELETE FROM models WHERE project = $1 AND location = $2 AND model_id = $3"
                " RETURNING true",
                project,
                location,
                model_id,
            )
            if not deleted:
                return Outcome.NO_MODEL
            await self._save_operation(conn, project, location, model_id, operation, now)
        return Outcome.DONE
