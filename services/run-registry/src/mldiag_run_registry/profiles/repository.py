"""All SQL about profiler sessions, their hosts and profiler targets.

A session changes in one transaction that holds a lock on its (run, session) key: the domain
code's change function sees the stored session and says what to write (the session, a new or
finished operation, messages for the outbox), so concurrent reports from several hosts of
one session never lose each other's part.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from mldiag_platform.listing.filtering import Comparison, Expr, render_where
from mldiag_platform.outbox import Outbox
from mldiag_run_registry.operations.repository import (
    OperationsRepository,
    operation_name,
    split_operation_name,
)
from mldiag_run_registry.profiles.merge import SessionState
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.operations import Operation, OperationError
from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerTarget,
    TracerLevels,
    session_name,
)

_SESSION_COLUMNS = (
    "run_id, session_id, project, location, kind, phase, duration_seconds, tracer_levels,"
    " storage_folder_uri, auto_captured, monitored_events, operation, prewarmed, create_time,"
    " update_time, end_time"
)
_HOST_COLUMNS = (
    "run_id, session_id, host, phase, start_time, end_time, file_uri, size_bytes, error,"
    " update_time"
)
_TARGET_COLUMNS = "run_id, host, process_index, address, pid, register_time, update_time"

# Filter fields (see profiles.service.FIELDS) → columns of `profiler_sessions s`.
_FIELD_COLUMNS = {
    "kind": "s.kind",
    "phase": "s.phase",
    "autoCaptured": "s.auto_captured",
    "createTime": "s.create_time",
}

_UPSERT_SESSION = f"""
INSERT INTO profiler_sessions ({_SESSION_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (run_id, session_id) DO UPDATE SET
    kind = EXCLUDED.kind, phase = EXCLUDED.phase, duration_seconds = EXCLUDED.duration_seconds,
    tracer_levels = EXCLUDED.tracer_levels, storage_folder_uri = EXCLUDED.storage_folder_uri,
    auto_captured = EXCLUDED.auto_captured, monitored_events = EXCLUDED.monitored_events,
    operation = EXCLUDED.operation, prewarmed = EXCLUDED.prewarmed,
    create_time = EXCLUDED.create_time, update_time = EXCLUDED.update_time,
    end_time = EXCLUDED.end_time
"""

_UPSERT_HOSTS = f"""
INSERT INTO profiler_session_hosts ({_HOST_COLUMNS})
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],
                     $6::timestamptz[], $7::text[], $8::bigint[], $9::text[], $10::timestamptz[])
ON CONFLICT (run_id, session_id, host) DO UPDATE SET
    phase = EXCLUDED.phase, start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
    file_uri = EXCLUDED.file_uri, size_bytes = EXCLUDED.size_bytes, error = EXCLUDED.error,
    update_time = EXCLUDED.update_time
"""


@dataclass(frozen=True)
class OperationOutcome:
    """How a pending operation ended: its response, or its error."""

    operation_id: str
    end_time: datetime
    response: ProfilerSession | None = None
    error: OperationError | None = None


@dataclass(frozen=True)
class SessionWrite:
    """What one change of a session writes, in one transaction."""

    state: SessionState | None
    """The session to store (None: the session is left as it is)."""
    announce: Sequence[Envelope] = ()
    """Messages staged in the outbox, published after commit."""
    new_operation: Operation | None = None
    """An operation to record with the session (a capture's, pending)."""
    finished_operation: OperationOutcome | None = None
    """A pending operation the change finishes."""


@dataclass
class WriteResult:
    """What a change wrote."""

    state: SessionState | None
    written: bool = False
    operation_finished: bool = False
    messages: list[Envelope] = field(default_factory=list)


SessionChange = Callable[[SessionState | None], SessionWrite | None]
"""Given the stored session (None: there is none), what to write (None: nothing)."""


def _lock_key(run_id: str, session_id: str) -> str:
    return f"profiler-session:{run_id}/{session_id}"


def _host_from(row: asyncpg.Record) -> ProfilerSessionHost:
    return ProfilerSessionHost(
        host=row["host"],
        phase=ProfilerSessionPhase(row["phase"]),
        start_time=row["start_time"],
        end_time=row["end_time"],
        file_uri=row["file_uri"],
        size_bytes=row["size_bytes"],
        error=row["error"],
    )


def _state_from(row: asyncpg.Record, hosts: Sequence[asyncpg.Record]) -> SessionState:
    session = ProfilerSession(
        name=session_name(row["project"], row["location"], row["run_id"], row["session_id"]),
        session_id=row["session_id"],
        run_id=row["run_id"],
        kind=ProfilerSessionKind(row["kind"]),
        phase=ProfilerSessionPhase(row["phase"]),
        hosts=[_host_from(host) for host in hosts],
        duration_seconds=row["duration_seconds"],
        tracer_levels=TracerLevels.model_validate_json(row["tracer_levels"]),
        storage_folder_uri=row["storage_folder_uri"],
        auto_captured=row["auto_captured"],
        monitored_events=list(row["monitored_events"]),
        operation=row["operation"],
        prewarmed=row["prewarmed"],
        create_time=row["create_time"],
        update_time=row["update_time"],
        end_time=row["end_time"],
    )
    return SessionState(
        row["project"],
        row["location"],
        session,
        {host["host"]: host["update_time"] for host in hosts},
    )


def _target_from(project: str, location: str, row: asyncpg.Record) -> ProfilerTarget:
    target_id = f"{row['host']}-{row['process_index']}"
    return ProfilerTarget(
        name=(
            f"projects/{project}/locations/{location}/machineLearningRuns/{row['run_id']}"
            f"/profilerTargets/{target_id}"
        ),
        target_id=target_id,
        run_id=row["run_id"],
        host=row["host"],
        process_index=row["process_index"],
        address=row["address"],
        pid=row["pid"],
        register_time=row["register_time"],
        update_time=row["update_time"],
    )


def _comparison(expr: Comparison, params: list[object]) -> str:
    column = _FIELD_COLUMNS[expr.field]
    if expr.op == ":" and expr.value is None:
        return f"({column} IS NOT NULL)"
    params.append(expr.value)
    placeholder = f"${len(params)}"
    if expr.op == ":":
        return f"(strpos({column}::text, {placeholder}) > 0)"
    if expr.op == "!=":
        return f"({column} IS DISTINCT FROM {placeholder})"
    return f"({column} {expr.op} {placeholder})"


@dataclass(frozen=True)
class PendingCapture:
    """A capture operation not finished yet."""

    operation: str
    run_id: str
    session_id: str
    create_time: datetime


@dataclass(frozen=True)
class StoredFiles:
    """Where one session of a run keeps its files (URIs, as reported or planned)."""

    session_id: str
    folder_uri: str
    file_uris: tuple[str, ...]


class ProfilesRepository:
    """Sessions (with their hosts) and targets, keyed by run."""

    def __init__(
        self, pool: asyncpg.Pool, outbox: Outbox, operations: OperationsRepository
    ) -> None:
        self._pool = pool
        self._outbox = outbox
        self._operations = operations

    # --- sessions -------------------------------------------------------------------------

    async def change_session(
        self, run_id: str, session_id: str, change: SessionChange
    ) -> WriteResult:
        """Apply ``change`` to the stored session under its lock, in one transaction: store
        the session, record or finish an operation, stage the messages. An exception from
        ``change`` rolls everything back.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            # A transaction-scoped lock on the key, held whether or not the row exists yet:
            # the first reports of two hosts must not both create the session.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                _lock_key(run_id, session_id),
            )
            current = await self._load(conn, run_id, session_id)
            write = change(current)
            if write is None:
                return WriteResult(current)
            if write.state is not None:
                await self._store(conn, write.state)
            if write.new_operation is not None:
                project, location, _ = split_operation_name(write.new_operation.name)
                await self._operations.add(conn, project, location, write.new_operation)
            finished = False
            outcome = write.finished_operation
            if outcome is not None:
                finished = await self._operations.finish(
                    conn, outcome.operation_id, outcome.end_time, outcome.response, outcome.error
                )
            await self._outbox.add(conn, write.announce)
        return WriteResult(
            write.state or current,
            written=write.state is not None,
            operation_finished=finished,
            messages=list(write.announce),
        )

    async def add_done_operation(
        self, operation: Operation, announce: Sequence[Envelope] = ()
    ) -> bool:
        """Record a finished operation unless its id is stored already; False if it was."""
        project, location, _ = split_operation_name(operation.name)
        async with self._pool.acquire() as conn, conn.transaction():
            added = await self._operations.add(conn, project, location, operation, if_absent=True)
            if added:
                await self._outbox.add(conn, announce)
        return added

    async def has_operation(self, project: str, location: str, operation_id: str) -> bool:
        """Whether that operation is stored."""
        return await self._operations.get(project, location, operation_id) is not None

    async def _load(
        self, conn: asyncpg.Connection, run_id: str, session_id: str
    ) -> SessionState | None:
        row = await conn.fetchrow(
            f"SELECT {_SESSION_COLUMNS} FROM profiler_sessions"
            " WHERE run_id = $1 AND session_id = $2",
            run_id,
            session_id,
        )
        if row is None:
            return None
        hosts = await conn.fetch(
            f"SELECT {_HOST_COLUMNS} FROM profiler_session_hosts"
            " WHERE run_id = $1 AND session_id = $2 ORDER BY host",
            run_id,
            session_id,
        )
        return _state_from(row, hosts)

    async def _store(self, conn: asyncpg.Connection, state: SessionState) -> None:
        session = state.session
        await conn.execute(
            _UPSERT_SESSION,
            session.run_id,
            session.session_id,
            state.project,
            state.location,
            session.kind.value,
            session.phase.value,
            session.duration_seconds,
            session.tracer_levels.model_dump_json(),
            session.storage_folder_uri,
            session.auto_captured,
            session.monitored_events,
            session.operation,
            session.prewarmed,
            session.create_time,
            session.update_time,
            session.end_time,
        )
        hosts = session.hosts
        if not hosts:
            return
        # Hosts are only ever added or replaced: a session never loses a host.
        await conn.execute(
            _UPSERT_HOSTS,
            [session.run_id] * len(hosts),
            [session.session_id] * len(hosts),
            [host.host for host in hosts],
            [host.phase.value for host in hosts],
            [host.start_time for host in hosts],
            [host.end_time for host in hosts],
            [host.file_uri for host in hosts],
            [host.size_bytes for host in hosts],
            [host.error for host in hosts],
            [state.host_times.get(host.host, session.update_time) for host in hosts],
        )

    async def pending_captures(self, created_before: datetime) -> list[PendingCapture]:
        """Capture operations created before a time and still not done, oldest first."""
        rows = await self._pool.fetch(
            "SELECT project, location, operation_id, target, create_time FROM operations"
            " WHERE verb = 'capture' AND NOT done AND create_time < $1"
            " ORDER BY create_time LIMIT 1000",
            created_before,
        )
        pending = []
        for row in rows:
            # The target is the session's name: .../machineLearningRuns/{run}/profilerSessions/{s}
            parts = row["target"].split("/")
            pending.append(
                PendingCapture(
                    operation=operation_name(row["project"], row["location"], row["operation_id"]),
                    run_id=parts[-3],
                    session_id=parts[-1],
                    create_time=row["create_time"],
                )
            )
        return pending

    async def get_session(self, run_id: str, session_id: str) -> SessionState | None:
        """One session of a run."""
        async with self._pool.acquire() as conn:
            return await self._load(conn, run_id, session_id)

    async def list_sessions(
        self,
        run_id: str,
        where: Expr | None,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> list[SessionState]:
        """Sessions of a run matching ``where``, newest first (create time, then session id,
        descending), after a keyset position."""
        params: list[object] = [run_id]
        clauses = ["s.run_id = $1"]
        if where is not None:
            clauses.append(render_where(where, lambda leaf: _comparison(leaf, params)))
        if after is not None:
            params.extend(after)
            clauses.append(f"(s.create_time, s.session_id) < (${len(params) - 1}, ${len(params)})")
        params.append(limit)
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(
                f"SELECT {_SESSION_COLUMNS} FROM profiler_sessions s"
                f" WHERE {' AND '.join(clauses)}"
                f" ORDER BY s.create_time DESC, s.session_id DESC LIMIT ${len(params)}",
                *params,
            )
            if not rows:
                return []
            hosts = await conn.fetch(
                f"SELECT {_HOST_COLUMNS} FROM profiler_session_hosts"
                " WHERE run_id = $1 AND session_id = ANY($2::text[]) ORDER BY session_id, host",
                run_id,
                [row["session_id"] for row in rows],
            )
        by_session: dict[str, list[asyncpg.Record]] = {}
        for host in hosts:
            by_session.setdefault(host["session_id"], []).append(host)
        return [_state_from(row, by_session.get(row["session_id"], [])) for row in rows]

    async def active_programmatic(
        self, run_id: str, hosts: Sequence[str], since: datetime
    ) -> list[tuple[str, str]]:
        """(session id, host) of the run's PROGRAMMATIC sessions with one of ``hosts``
        ACTIVE and heard of since ``since``."""
        rows = await self._pool.fetch(
            "SELECT h.session_id, h.host FROM profiler_session_hosts h"
            " JOIN profiler_sessions s USING (run_id, session_id)"
            " WHERE h.run_id = $1 AND s.kind = $2 AND h.phase = $3"
            " AND h.host = ANY($4::text[]) AND h.update_time >= $5"
            " ORDER BY h.update_time DESC, h.session_id, h.host",
            run_id,
            ProfilerSessionKind.PROGRAMMATIC.value,
            ProfilerSessionPhase.ACTIVE.value,
            list(hosts),
            since,
        )
        return [(row["session_id"], row["host"]) for row in rows]

    # --- targets --------------------------------------------------------------------------

    async def upsert_target(
        self,
        project: str,
        location: str,
        run_id: str,
        host: str,
        process_index: int,
        address: str,
        pid: int,
        now: datetime,
    ) -> ProfilerTarget:
        """Register a process's profiler server; a re-registration replaces its address and
        pid and keeps its first registration time."""
        row = await self._pool.fetchrow(
            f"INSERT INTO profiler_targets ({_TARGET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6)"
            " ON CONFLICT (run_id, host, process_index) DO UPDATE SET"
            " address = EXCLUDED.address, pid = EXCLUDED.pid, update_time = EXCLUDED.update_time"
            f" RETURNING {_TARGET_COLUMNS}",
            run_id,
            host,
            process_index,
            address,
            pid,
            now,
        )
        return _target_from(project, location, row)

    async def list_targets(self, project: str, location: str, run_id: str) -> list[ProfilerTarget]:
        """The run's targets by host, then process index."""
        rows = await self._pool.fetch(
            f"SELECT {_TARGET_COLUMNS} FROM profiler_targets WHERE run_id = $1"
            " ORDER BY host, process_index",
            run_id,
        )
        return [_target_from(project, location, row) for row in rows]

    # --- purge (retention/ drives it) -----------------------------------------------------

    async def stored_files(self, run_id: str) -> list[StoredFiles]:
        """Where each session of the run keeps its files: its folder and its hosts' files."""
        rows = await self._pool.fetch(
            "SELECT s.session_id, s.storage_folder_uri,"
            " coalesce(array_agg(h.file_uri) FILTER (WHERE h.file_uri <> ''), '{}') AS files"
            " FROM profiler_sessions s LEFT JOIN profiler_session_hosts h"
            " ON h.run_id = s.run_id AND h.session_id = s.session_id"
            " WHERE s.run_id = $1 GROUP BY s.session_id, s.storage_folder_uri"
            " ORDER BY s.session_id",
            run_id,
        )
        return [
            StoredFiles(row["session_id"], row["storage_folder_uri"], tuple(row["files"]))
            for row in rows
        ]

    async def purge_run(self, run_id: str) -> tuple[int, int]:
        """Remove every session (its hosts cascade) and profiler target of a run, in one
        transaction; (sessions, targets) removed. Their files are the caller's to remove
        first (:meth:`stored_files`): once the rows are gone nothing says where they are."""
        async with self._pool.acquire() as conn, conn.transaction():
            sessions = await conn.execute("DELETE FROM profiler_sessions WHERE run_id = $1", run_id)
            targets = await conn.execute("DELETE FROM profiler_targets WHERE run_id = $1", run_id)
        return int(sessions.rsplit(" ", 1)[-1]), int(targets.rsplit(" ", 1)[-1])
