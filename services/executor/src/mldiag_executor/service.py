"""The executor's domain: accept start and stop commands idempotently by attempt, prepare
and start through the backend, and report every attempt's start and end once.

Facts carry event ids derived from the executor, the attempt and the kind of fact, so a
fact published again (a redelivered command, a restart before the fact was marked
reported) is dropped by JetStream's dedupe instead of reaching the scheduler twice.
"""

import asyncio
import socket
import uuid
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

import structlog

from mldiag_executor import attempts
from mldiag_executor.backends.base import Backend, ReplicaExit
from mldiag_executor.errors import Rejected, SetupFailed
from mldiag_executor.launch import LaunchConfig, attempt_name, prepare
from mldiag_platform.bus import MessagePublisher
from mldiag_platform.errors import MldiagError
from mldiag_schemas.replicas import (
    ExecutorAnnounced,
    ExitReason,
    ReplicaExited,
    ReplicaKey,
    ReplicaStarted,
    StartReplica,
    StopReplica,
)

log = structlog.get_logger(__name__)

FACT_NAMESPACE = uuid.UUID("0b6c1f5e-4f1a-4a53-9d0e-6a2f8f7c2d11")
"""Namespace of the executor's deterministic event ids."""

PUBLISH_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0)


def fact_id(executor_id: str, key: ReplicaKey, kind: str) -> uuid.UUID:
    """The event id of fact ``kind`` (``started``, ``exited``) about attempt ``key``."""
    return uuid.uuid5(FACT_NAMESPACE, f"{executor_id}/{attempt_name(key)}/{kind}")


class ExecutorService:
    """Runs replica attempts on one backend and reports them."""

    def __init__(
        self,
        executor_id: str,
        backend: Backend,
        config: LaunchConfig,
        publisher: MessagePublisher,
    ) -> None:
        self.executor_id = executor_id
        self.backend = backend
        self._config = config
        self._publisher = publisher
        self._host = socket.gethostname()[:255]
        self._locks: defaultdict[ReplicaKey, asyncio.Lock] = defaultdict(asyncio.Lock)

    # -- commands --------------------------------------------------------------------------

    async def start_replica(self, command: StartReplica) -> None:
        """Start the attempt unless it is known; (re)publish its start. Returns once the
        backend has recorded it (then the command may be acked)."""
        key = command.replica
        if command.executor_id != self.executor_id:
            raise Rejected(f"the command is for executor {command.executor_id!r}")
        async with self._locks[key]:
            directory = self._config.attempt_dir(key)
            started = await asyncio.to_thread(attempts.read_record, directory, attempts.STARTED)
            if started is not None:
                await self._publish_started(key, started)
                return
            ended = await asyncio.to_thread(attempts.read_record, directory, attempts.EXIT)
            if ended is not None and ended.get("reason") in ("setup_failed", "rejected", "killed"):
                await self._publish_exited(_exit_from_record(key, ended))
                return
            stop = await asyncio.to_thread(attempts.read_record, directory, attempts.STOP)
            if stop is not None:
                message = f"stopped ({stop.get('reason')}) before it started"
                await self._end_early(key, "killed", message)
                return
            try:
                launch = await prepare(command, self._config)
                await self.backend.start(command, launch)
            except (SetupFailed, Rejected) as exc:
                reason: ExitReason = "rejected" if isinstance(exc, Rejected) else "setup_failed"
                log.warning("executor.replica.setup_failed", job=key.job_id, error=exc.message)
                await self._end_early(key, reason, exc.message)
                return
            record = {"started_at": datetime.now(UTC).isoformat(), "host": self._host}
            await asyncio.to_thread(attempts.write_record, directory, attempts.STARTED, record)
            await self._publish_started(key, record)

    async def stop_replica(self, command: StopReplica) -> None:
        """Stop the attempt (SIGTERM, grace, SIGKILL); one not started yet never starts.
        Its end is reported by :meth:`report_exits`."""
        key = command.replica
        directory = self._config.attempt_dir(key)
        if key not in self.backend.running():
            async with self._locks[key]:
                known = await asyncio.to_thread(
                    lambda: (
                        (directory / attempts.STARTED).exists()
                        or (directory / attempts.EXIT).exists()
                    )
                )
                if not known:
                    record = {"reason": command.reason, "at": datetime.now(UTC).isoformat()}
                    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
                    await asyncio.to_thread(attempts.write_record, directory, attempts.STOP, record)
                    return
        await self.backend.stop(key, command.grace_seconds)

    async def _end_early(self, key: ReplicaKey, reason: ExitReason, message: str) -> None:
        """An attempt that never ran: record its end (so it never starts), report it."""
        directory = self._config.attempt_dir(key)
        record = {
            "reason": reason,
            "exit_code": None,
            "message": message[-8000:],
            "ended_at": datetime.now(UTC).isoformat(),
        }
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(attempts.write_record, directory, attempts.EXIT, record)
        await self._publish_exited(_exit_from_record(key, record))
        await asyncio.to_thread(attempts.write_record, directory, attempts.REPORTED, record)

    # -- facts -----------------------------------------------------------------------------

    async def recover(self) -> list[ReplicaKey]:
        """Re-adopt what still runs (publishing starts not yet reported); ends that
        happened meanwhile come out of the backend's exits."""
        adopted = await self.backend.recover()
        for key in adopted:
            directory = self._config.attempt_dir(key)
            started = await asyncio.to_thread(attempts.read_record, directory, attempts.STARTED)
            if started is None:  # killed between the backend's record and ours
                started = {"started_at": datetime.now(UTC).isoformat(), "host": self._host}
                await asyncio.to_thread(attempts.write_record, directory, attempts.STARTED, started)
            await self._publish_started(key, started)
        log.info("executor.recovered", adopted=len(adopted))
        return adopted

    async def report_exits(self) -> None:
        """Publish every ended attempt, retrying until the bus takes it; runs for ever."""
        async for ended in self.backend.exits():
            for attempt in range(1_000_000):
                try:
                    await self._publish_exited(ended)
                    break
                except MldiagError as exc:
                    delay = PUBLISH_BACKOFF_SECONDS[min(attempt, len(PUBLISH_BACKOFF_SECONDS) - 1)]
                    log.warning("executor.exit.publish_retry", error=exc.message, delay_s=delay)
                    await asyncio.sleep(delay)
            await self.backend.reported(ended.key)
            self._locks.pop(ended.key, None)

    async def _publish_started(self, key: ReplicaKey, record: Mapping[str, object]) -> None:
        started_at = datetime.fromisoformat(str(record["started_at"]))
        # Every field from the record: a fact published again is the same fact.
        fact = ReplicaStarted(
            event_id=fact_id(self.executor_id, key, "started"),
            occurred_at=started_at,
            replica=key,
            executor_id=self.executor_id,
            host=str(record.get("host") or self._host)[:255],
            started_at=started_at,
        )
        await self._publisher.publish_many([fact])
        log.info("executor.replica.started", job=key.job_id, replica=key.replica_name)

    async def _publish_exited(self, ended: ReplicaExit) -> None:
        fact = ReplicaExited(
            event_id=fact_id(self.executor_id, ended.key, "exited"),
            occurred_at=ended.ended_at,
            replica=ended.key,
            executor_id=self.executor_id,
            reason=ended.reason,
            exit_code=ended.exit_code,
            message=ended.message[-8000:],
            ended_at=ended.ended_at,
        )
        await self._publisher.publish_many([fact])
        log.info(
            "executor.replica.exited",
            job=ended.key.job_id,
            replica=ended.key.replica_name,
            attempt=ended.key.attempt,
            reason=ended.reason,
            exit_code=ended.exit_code,
        )

    def announcement(
        self, *, first_port: int, port_count: int, interval_seconds: float
    ) -> ExecutorAnnounced:
        """What this executor is and runs, now."""
        return ExecutorAnnounced(
            executor_id=self.executor_id,
            backend=self.backend.name,
            address=self.backend.address(),
            capacity=self.backend.capacity(),
            first_port=first_port,
            port_count=port_count,
            running=self.backend.running(),
            interval_seconds=interval_seconds,
        )


def _exit_from_record(key: ReplicaKey, record: Mapping[str, object]) -> ReplicaExit:
    code = record.get("exit_code")
    return ReplicaExit(
        key=key,
        reason=record["reason"],  # type: ignore[arg-type]  # written by _end_early
        exit_code=code if isinstance(code, int) else None,
        message=str(record.get("message") or ""),
        ended_at=datetime.fromisoformat(str(record["ended_at"])),
    )
