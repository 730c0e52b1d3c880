"""Replicas' logs and uploaded packages: what to read, where it is stored, when to stop.

Logs are written by executors while replicas run, one object per attempt and stream:
``jobs/<job>/logs/workerpool{p}-{i}/attempt-{n}/{stdout,stderr}.log`` under the storage root
(plain files growing on ``file://``; objects rewritten every few seconds on ``gs://``). This
room only reads them: a byte range now, or new bytes as they land until the attempt ends.

Packages are stored by content, ``packages/<sha256>/<name>``, so uploading the same bytes
twice stores them once and executors cache installs by the same digest.
"""

import asyncio
import hashlib
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mldiag_platform.errors import NotFound
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.files import (
    PACKAGE_NAME_PATTERN,
    PACKAGE_SUFFIXES,
    REPLICA_NAME,
    JobLogFile,
    ListJobLogsResponse,
    LogStream,
    UploadedPackage,
)
from mldiag_schemas.jobs import TERMINAL_JOB_STATES
from mldiag_training.files.errors import (
    AttemptNotFound,
    EmptyPackage,
    InvalidLogRange,
    InvalidPackageName,
    InvalidReplica,
    JobNotFound,
    PackageTooLarge,
    ReplicaNotFound,
)
from mldiag_training.files.repository import FilesRepository, JobFacts, ReplicaFacts

DEFAULT_REPLICA = "workerpool0-0"
"""The chief: whose logs a caller gets unless it names another replica."""

ENDED_REPLICA_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
"""Replica states whose current attempt has exited. A RESTARTING replica's ``attempt`` is
already the next one, waiting out its backoff: it has not started, let alone ended."""

READ_CHUNK_BYTES = 256 * 1024
"""The most bytes read from storage (and sent) at once."""

_PACKAGE_NAME = re.compile(PACKAGE_NAME_PATTERN)
_LOG_KEY = re.compile(r"^jobs/[^/]+/logs/(workerpool\d+-\d+)/attempt-(\d+)/(stdout|stderr)\.log$")


def logs_prefix(job_id: str) -> str:
    """The storage key under which every log of a job lies."""
    return f"jobs/{job_id}/logs/"


def log_key(job_id: str, replica: str, attempt: int, stream: LogStream) -> str:
    """The storage key of one attempt's stdout or stderr (the executor writes it)."""
    return f"{logs_prefix(job_id)}{replica}/attempt-{attempt}/{stream.value}.log"


@dataclass(frozen=True)
class LogTarget:
    """One replica attempt of a job whose logs a caller asked for."""

    job_id: str
    project: str
    location: str
    replica: str
    attempt: int
    pinned: bool
    """The caller named the attempt: following stays on it (else it moves to newer ones)."""
    ended: bool
    """The attempt has exited (or the job has ended): what is stored is all there will be."""
    job_ended: bool
    """The job is in a terminal state: no attempt will follow."""


@dataclass(frozen=True)
class LogRead:
    """What a (non-following) read will send: each stream's byte range, decided up front."""

    target: LogTarget
    ranges: tuple[tuple[LogStream, int, int], ...]
    """(stream, start, end) per stream read, in the order they are sent."""

    @property
    def next_offset(self) -> int:
        """Where to continue the (last) stream from."""
        return self.ranges[-1][2] if self.ranges else 0


def _ended(job: JobFacts, replica: ReplicaFacts | None, attempt: int) -> bool:
    if job.state in TERMINAL_JOB_STATES:
        return True
    if replica is None:
        return False  # not placed yet: its first attempt has not even started
    if attempt < replica.attempt:
        return True
    return replica.state in ENDED_REPLICA_STATES


def parse_streams(value: str) -> tuple[LogStream, ...]:
    """``stdout``, ``stderr`` or ``both`` as the streams to read, in sending order."""
    if value == "both":
        return (LogStream.STDOUT, LogStream.STDERR)
    try:
        return (LogStream(value),)
    except ValueError:
        raise InvalidLogRange(
            f"stream {value[:40]!r} is not stdout, stderr or both",
            details=[{"field": "stream", "problem": "use stdout, stderr or both"}],
        ) from None


class LogsService:
    """Reads replicas' logs from object storage."""

    def __init__(
        self,
        repository: FilesRepository,
        store: ObjectStore,
        *,
        poll_seconds: float = 0.5,
        chunk_bytes: int = READ_CHUNK_BYTES,
    ) -> None:
        self._repository = repository
        self._store = store
        self._poll_seconds = poll_seconds
        self._chunk_bytes = chunk_bytes

    async def target(
        self,
        project: str,
        location: str,
        job_id: str,
        replica: str | None = None,
        attempt: int | None = None,
    ) -> LogTarget:
        """The attempt a request means: ``replica`` (default the chief), ``attempt`` (default
        its latest); ``job_not_found``, ``invalid_replica``, ``replica_not_found`` or
        ``attempt_not_found`` otherwise."""
        name = replica or DEFAULT_REPLICA
        match = REPLICA_NAME.fullmatch(name)
        if match is None:
            raise InvalidReplica(
                f"replica {name[:60]!r} is not a replica name such as workerpool0-0",
                details=[{"field": "replica", "problem": "use workerpool{pool}-{index}"}],
            )
        pool, index = int(match.group(1)), int(match.group(2))
        job = await self._job(project, location, job_id)
        if pool >= len(job.pool_sizes) or index >= job.pool_sizes[pool]:
            raise ReplicaNotFound(
                f"job {job_id} has no replica {name}",
                details=[{"field": "replica", "problem": "not a replica of this job's pools"}],
            )
        facts = (await self._repository.replicas(job_id)).get((pool, index))
        latest = facts.attempt if facts is not None else 0
        pinned = attempt is not None
        if attempt is None:
            attempt = await self._latest_with_output(job_id, name, latest)
        elif attempt > latest:
            raise AttemptNotFound(
                f"{name} of job {job_id} has not reached attempt {attempt} (latest: {latest})",
                details=[{"field": "attempt", "problem": f"the latest attempt is {latest}"}],
            )
        return LogTarget(
            job_id=job_id,
            project=project,
            location=location,
            replica=name,
            attempt=attempt,
            pinned=pinned,
            ended=_ended(job, facts, attempt),
            job_ended=job.state in TERMINAL_JOB_STATES,
        )

    async def _latest_with_output(self, job_id: str, replica: str, latest: int) -> int:
        """``latest``, or the attempt before it while ``latest`` has written nothing yet (a
        restart waiting out its backoff or starting): a reader wants the output that ended."""
        if latest == 0:
            return 0
        for stream in LogStream:
            if await self._size(log_key(job_id, replica, latest, stream)):
                return latest
        return latest - 1

    async def _job(self, project: str, location: str, job_id: str) -> JobFacts:
        job = await self._repository.job(project, location, job_id)
        if job is None:
            name = f"projects/{project}/locations/{location}/customJobs/{job_id}"
            raise JobNotFound(f"{name} not found", details=[{"resource": name}])
        return job

    async def _size(self, key: str) -> int:
        try:
            return await self._store.size(key)
        except NotFound:
            return 0  # not written yet: an empty log

    async def plan_read(
        self, target: LogTarget, streams: tuple[LogStream, ...], offset: int | None
    ) -> LogRead:
        """The byte ranges a read sends: from ``offset`` (one stream only; negative counts
        from the end, a tail) or from the start, up to each log's size now."""
        if offset is not None and offset > 0 and len(streams) > 1:
            raise InvalidLogRange(
                "a positive offset reads one stream: add stream=stdout or stream=stderr"
                " (a negative one, a tail, applies to each)",
                details=[{"field": "offset", "problem": "needs stream=stdout or stderr"}],
            )
        ranges = []
        for stream in streams:
            size = await self._size(log_key(target.job_id, target.replica, target.attempt, stream))
            start = 0 if offset is None else offset if offset >= 0 else max(0, size + offset)
            if start > size:
                raise InvalidLogRange(
                    f"offset {start} is past the end of the {stream.value} log ({size} bytes)",
                    details=[{"field": "offset", "problem": f"at most {size}"}],
                )
            ranges.append((stream, start, size))
        return LogRead(target, tuple(ranges))

    async def read(self, plan: LogRead) -> AsyncIterator[bytes]:
        """The planned ranges' bytes, chunk by chunk."""
        target = plan.target
        for stream, start, end in plan.ranges:
            key = log_key(target.job_id, target.replica, target.attempt, stream)
            position = start
            while position < end:
                data = await self._read(key, position, min(self._chunk_bytes, end - position))
                if not data:
                    break  # replaced by a shorter object meanwhile: send what there was
                position += len(data)
                yield data

    async def _read(self, key: str, offset: int, length: int) -> bytes:
        try:
            return await self._store.read_range(key, offset, length)
        except NotFound:
            return b""

    async def follow(
        self,
        plan: LogRead,
        stopping: Callable[[], Awaitable[bool]],
        attempt_banner: Callable[[str, int], bytes],
    ) -> AsyncIterator[bytes]:
        """The planned ranges, then new bytes as they land, until the attempt ends (or, for
        a target not pinned to its attempt, until the job ends: each newer attempt follows,
        announced by ``attempt_banner``), the job disappears or ``stopping()`` says so (the
        server stops, the reader left: checked every poll, since a silent stream would not
        notice a reader gone until it next sends).

        With two streams, only whole lines are interleaved (a partial line waits for its
        end, or for the attempt's end) so lines of stdout and stderr never mix.
        """
        target = plan.target
        offsets = {stream: start for stream, start, _ in plan.ranges}
        whole_lines = len(offsets) > 1
        while True:
            pending = dict.fromkeys(offsets, b"")
            while True:
                ended = target.ended  # read before the bytes: a final pass after the end
                for stream in offsets:
                    async for chunk in self._drain(target, stream, offsets):
                        if not whole_lines:
                            yield chunk
                            continue
                        buffered = pending[stream] + chunk
                        cut = buffered.rfind(b"\n") + 1
                        if cut == 0 and len(buffered) >= self._chunk_bytes:
                            cut = len(buffered)  # a huge line: send it in pieces anyway
                        if cut:
                            yield buffered[:cut]
                        pending[stream] = buffered[cut:]
                if ended or await stopping():
                    break
                await asyncio.sleep(self._poll_seconds)
                refreshed = await self._refresh(target)
                if refreshed is None:
                    return  # the job was deleted
                target = refreshed
            for rest in pending.values():
                if rest:
                    yield rest
            newer = await self._next_attempt(target, stopping)
            if newer is None:
                return
            target = newer
            offsets = dict.fromkeys(offsets, 0)
            yield attempt_banner(target.replica, target.attempt)

    async def _next_attempt(
        self, target: LogTarget, stopping: Callable[[], Awaitable[bool]]
    ) -> LogTarget | None:
        """The replica's next attempt once it exists, or ``None`` when none will be
        followed (pinned, stopping, the job ended or disappeared)."""
        while not (target.pinned or await stopping()):
            newer = await self._refresh(target, latest=True)
            if newer is None:
                return None
            if newer.attempt > target.attempt:
                return newer
            if newer.job_ended:
                return None
            await asyncio.sleep(self._poll_seconds)  # a restart waiting out its backoff
        return None

    async def _drain(
        self, target: LogTarget, stream: LogStream, offsets: dict[LogStream, int]
    ) -> AsyncIterator[bytes]:
        key = log_key(target.job_id, target.replica, target.attempt, stream)
        while True:
            data = await self._read(key, offsets[stream], self._chunk_bytes)
            if not data:
                return
            offsets[stream] += len(data)
            yield data
            if len(data) < self._chunk_bytes:
                return

    async def _refresh(self, target: LogTarget, *, latest: bool = False) -> LogTarget | None:
        """``target`` re-read from the tables (or its replica's latest attempt); ``None``
        once the job is gone."""
        try:
            fresh = await self.target(
                target.project,
                target.location,
                target.job_id,
                target.replica,
                None if latest else target.attempt,
            )
        except (JobNotFound, ReplicaNotFound, AttemptNotFound):
            return None
        return replace(fresh, pinned=target.pinned)

    async def list_logs(self, project: str, location: str, job_id: str) -> ListJobLogsResponse:
        """Every stored log of the job, with its size and URI."""
        await self._job(project, location, job_id)
        files = []
        for key in await self._store.list(logs_prefix(job_id)):
            match = _LOG_KEY.fullmatch(key)
            if match is None:
                continue  # not a log the executor writes
            replica, attempt, stream = match.group(1), int(match.group(2)), match.group(3)
            files.append(
                JobLogFile(
                    replica=replica,
                    attempt=attempt,
                    stream=LogStream(stream),
                    size_bytes=await self._size(key),
                    uri=f"{self._store.url}/{key}",
                )
            )
        files.sort(key=lambda log: (_replica_order(log.replica), log.attempt, log.stream.value))
        return ListJobLogsResponse(logs=files)


def _replica_order(name: str) -> tuple[int, int]:
    match = REPLICA_NAME.fullmatch(name)
    return (int(match.group(1)), int(match.group(2))) if match else (99, 0)


class PackagesService:
    """Stores uploaded Python packages by content."""

    def __init__(self, store: ObjectStore, max_bytes: int, spool_dir: Path | None = None) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._spool_dir = spool_dir

    def check_name(self, name: str) -> str:
        """``name`` if pip would install a file so named; ``invalid_package_name`` else."""
        if _PACKAGE_NAME.fullmatch(name) is None or not name.endswith(PACKAGE_SUFFIXES):
            problem = "a file name (letters, digits, ._+-) ending in " + ", ".join(PACKAGE_SUFFIXES)
            raise InvalidPackageName(
                f"package name {name[:80]!r} is not valid: use {problem}",
                details=[{"field": "name", "problem": f"use {problem}"}],
            )
        return name

    async def upload(self, name: str, chunks: AsyncIterator[bytes]) -> UploadedPackage:
        """Spool ``chunks`` to a local file while hashing them (never all in memory), then
        store the file at ``packages/<sha256>/<name>`` unless the same bytes are there."""
        self.check_name(name)
        digest = hashlib.sha256()
        size = 0
        with tempfile.TemporaryDirectory(prefix="mldiag-upload-", dir=self._spool_dir) as spool:
            path = Path(spool) / name
            with path.open("wb") as file:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise PackageTooLarge(
                            f"the package is over the {self._max_bytes}-byte limit",
                            details=[{"limit": self._max_bytes}],
                        )
                    digest.update(chunk)
                    await asyncio.to_thread(file.write, chunk)
            if size == 0:
                raise EmptyPackage(
                    "the upload has no bytes: send the package as the request body",
                    details=[{"field": "body", "problem": "empty"}],
                )
            sha256 = digest.hexdigest()
            key = f"packages/{sha256}/{name}"
            try:
                stored = await self._store.size(key)
            except NotFound:
                stored = -1
            if stored != size:  # same digest and size: already there
                await self._store.upload_from(path, key)
        return UploadedPackage(uri=f"{self._store.url}/{key}", sha256=sha256, size_bytes=size)
