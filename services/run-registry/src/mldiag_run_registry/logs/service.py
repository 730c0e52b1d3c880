"""A run's log lines: storing batches from the bus as chunks, and serving them in time order,
filtered, paged by a cursor a follower keeps asking with (no SQL here).

Every line has a place in one order: (time, batch id, part, index in its chunk). A page token
is the place of the last line served; the next page is the lines after it. Chunks overlap in
time (hosts write at once, batches arrive late), so a page walks the chunks that may hold
lines past its place in the order of their first line and merges them: a line is served
only once no chunk still unread can hold an earlier one.
"""

import heapq
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from mldiag_platform.errors import InvalidPageToken
from mldiag_platform.listing.paging import decode_token, encode_token, page_size, token_int
from mldiag_run_registry.logs.chunks import (
    SEVERITIES,
    Lines,
    chunks_of,
    decode,
    from_micros,
    to_micros,
)
from mldiag_run_registry.logs.errors import (
    InvalidGrep,
    InvalidLogHost,
    InvalidLogSeverity,
    InvalidLogStream,
    InvalidLogTime,
)
from mldiag_run_registry.logs.repository import (
    ChunkFilter,
    ChunkReader,
    LogsRepository,
    StoredChunk,
)
from mldiag_run_registry.lookup import RunLookup
from mldiag_schemas.logs import (
    SEVERITY_ORDER,
    ListLogsResponse,
    LogLinesReceived,
    LogSeverity,
    LogStream,
)

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 10_000
MAX_GREP_CHARS = 1000
"""Longest ``grep`` accepted: a bound on what one pattern can cost per line."""
WALK_CHUNKS = 64
"""Chunks read per query at most while a page fills (the first query reads 4, each next one
twice as many)."""
SCAN_BUDGET_LINES = 2_000_000
"""Lines a page reads at most; past it the page ends early, its cursor past what was read,
so a search through a long run answers in parts instead of holding a request for long."""
LATE_CHUNKS = 1000
"""Chunks stored late (with lines before a follower's place) served in one page at most."""
ENDED_GRACE = timedelta(seconds=30)
"""How long after a run ended its cursor stays set: lines still on their way get stored."""

_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_EARLIEST = to_micros(datetime(1, 1, 2, tzinfo=UTC))
_WALK_START = (from_micros(_EARLIEST), uuid.UUID(int=0), -1)
_BEFORE_ALL: "Place" = (_EARLIEST - 1, "", -1, -1)

Place = tuple[int, str, int, int]
"""A line's place in a run's order: time (µs since the epoch), batch id (hex), part, index."""


@dataclass(frozen=True)
class LogQuery:
    """Which lines a read wants (None: any)."""

    grep: re.Pattern[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    host: str | None = None
    stream: LogStream | None = None
    min_severity: LogSeverity | None = None


def parse_time(text: str, now: datetime, field: str) -> datetime | None:
    """``text`` as a time: RFC 3339, or a duration before ``now`` (``90s``, ``10m``, ``2h``,
    ``7d``); None when empty."""
    text = text.strip()
    if not text:
        return None
    try:
        if match := _DURATION.fullmatch(text):
            parsed = now - timedelta(**{_UNITS[match[2]]: int(match[1])})
        else:
            parsed = datetime.fromisoformat(text)
        # a time without zone is UTC, as every time this API answers with
        parsed = parsed.astimezone(UTC) if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
        to_micros(parsed)  # within what a chunk's times can be compared with
    except (ValueError, OverflowError):
        raise InvalidLogTime(
            f"{field} {text!r} is neither an RFC 3339 time nor a duration like 10m (within"
            " years 1 to 9999)",
            details=[{"field": field, "problem": "not a time"}],
        ) from None
    return parsed


def parse_query(
    *,
    grep: str = "",
    since: str = "",
    until: str = "",
    host: str | None = None,
    stream: str = "",
    min_severity: str = "",
    now: datetime | None = None,
) -> LogQuery:
    """The query parameters of a logs read, checked."""
    now = now or datetime.now(UTC)
    pattern = None
    if grep:
        if len(grep) > MAX_GREP_CHARS:
            raise InvalidGrep(f"grep is longer than {MAX_GREP_CHARS} characters")
        try:
            pattern = re.compile(grep)
        except (re.error, RecursionError, OverflowError) as error:
            raise InvalidGrep(
                f"grep {grep!r} is not a regular expression: {error}",
                details=[{"field": "grep", "problem": str(error)}],
            ) from None
    if host is not None and "\x00" in host:
        raise InvalidLogHost("host must not contain NUL")
    start, end = parse_time(since, now, "since"), parse_time(until, now, "until")
    if start is not None and end is not None and start > end:
        raise InvalidLogTime(f"since ({start.isoformat()}) lies past until ({end.isoformat()})")
    parsed_stream = None
    if stream:
        try:
            parsed_stream = LogStream(stream.upper())
        except ValueError:
            names = ", ".join(s.value.lower() for s in LogStream)
            raise InvalidLogStream(f"stream {stream!r} is none of {names}") from None
    severity = None
    if min_severity:
        try:
            severity = LogSeverity(min_severity.upper())
        except ValueError:
            names = ", ".join(s.value for s in LogSeverity)
            raise InvalidLogSeverity(f"minSeverity {min_severity!r} is none of {names}") from None
    return LogQuery(pattern, start, end, host, parsed_stream, severity)


def _token(place: Place, seen: int) -> str:
    return encode_token({"t": place[0], "b": place[1], "p": place[2], "i": place[3], "s": seen})


def _cursor(token: str) -> tuple[Place, int]:
    """The place and the highest store sequence seen that a token carries."""
    fields = decode_token(token)
    batch = fields.get("b")
    if not isinstance(batch, str) or (batch and not re.fullmatch(r"[0-9a-f]{32}", batch)):
        raise InvalidPageToken("the page token is not valid")
    time, part, index = (token_int(fields.get(key)) for key in "tpi")
    place = (time, batch, part, index)
    seen = token_int(fields.get("s", 0))
    if place[0] < _EARLIEST or seen < 0:
        raise InvalidPageToken("the page token is not valid")
    return place, seen


# A pattern without anchors or lookarounds matches a line exactly when it matches that line
# inside the chunk's lines joined by newlines (a newline is a non-word character, as the
# ends of a string are to `\b`), so one search of the joined texts skips most chunks.
_LINE_BOUND = re.compile(r"[$^]|\\[AZz]|\(\?")


@dataclass(frozen=True)
class _Line:
    place: Place
    chunk: StoredChunk
    lines: Lines

    def fields(self) -> dict[str, Any]:
        index, lines = self.place[3], self.lines
        return {
            "time": from_micros(self.place[0]),
            "host": self.chunk.host,
            "stream": self.chunk.stream,
            "severity": SEVERITIES[lines.severities[index]],
            "text": lines.texts[index],
            "process_index": lines.processes[index],
            "pid": lines.pids[index],
        }


def _matching(
    chunk: StoredChunk, after: Place, query: LogQuery, upto: Place | None = None
) -> Iterator[_Line]:
    """The lines of ``chunk`` past ``after`` (and at or before ``upto``) that ``query``
    wants, in order, found as they are asked for (a page often needs only a chunk's first)."""
    lines = decode(chunk.body, chunk.first_time)
    grep = query.grep
    if (
        grep is not None
        and _LINE_BOUND.search(grep.pattern) is None
        and grep.search("\n".join(lines.texts)) is None
    ):
        return
    batch = chunk.batch_id.hex
    since = _EARLIEST if query.since is None else to_micros(query.since)
    until = None if query.until is None else to_micros(query.until)
    floor = 0 if query.min_severity is None else SEVERITY_ORDER[query.min_severity]
    for index, time in enumerate(lines.times):
        if time < since or (until is not None and time > until):
            continue
        place = (time, batch, chunk.part, index)
        if place <= after or (upto is not None and place > upto):
            continue
        if lines.severities[index] < floor:
            continue
        if grep is not None and grep.search(lines.texts[index]) is None:
            continue
        yield _Line(place, chunk, lines)


class _Merge:
    """The lines of the chunks read so far, merged in order (each chunk's are in order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[Place, _Line, Iterator[_Line]]] = []

    def add(self, lines: Iterator[_Line]) -> None:
        first = next(lines, None)
        if first is not None:
            heapq.heappush(self._heap, (first.place, first, lines))

    def take(self, count: int, before: int | None) -> list[_Line]:
        """Up to ``count`` lines, the earliest first, all before time ``before`` (if set)."""
        taken: list[_Line] = []
        heap = self._heap
        while heap and len(taken) < count and (before is None or heap[0][0][0] < before):
            _, line, rest = heapq.heappop(heap)  # places are unique: lines never compare
            taken.append(line)
            self.add(rest)
        return taken


class LogsService:
    """Stores log batches and serves a run's lines."""

    def __init__(self, repository: LogsRepository, runs: RunLookup) -> None:
        self._repository = repository
        self._runs = runs

    async def store(self, messages: Sequence[LogLinesReceived]) -> int:
        """Store batches (a batch stored before adds nothing); how many chunks were new."""
        chunks = [
            chunk
            for message in messages
            if message.lines
            for chunk in chunks_of(message.run_id, message.event_id, message.lines)
        ]
        stored = await self._repository.store(chunks)
        log.info(
            "logs.stored",
            batches=len(messages),
            lines=sum(len(m.lines) for m in messages),
            chunks=len(chunks),
            new_chunks=stored,
        )
        return stored

    async def list_logs(
        self,
        project: str,
        location: str,
        run_id: str,
        query: LogQuery,
        requested_size: int | None = None,
        page_token: str = "",
    ) -> ListLogsResponse:
        """A page of the run's lines past the token's place, oldest first."""
        run = await self._runs.get_run(project, location, run_id)
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        start, seen = ((_EARLIEST, "", -1, -1), 0) if not page_token else _cursor(page_token)
        page, place, seen, at_end = await self._page(run_id, query, start, seen, size)
        ended = run.end_time is not None and datetime.now(UTC) - run.end_time > ENDED_GRACE
        token = "" if at_end and ended else _token(place, seen)
        return ListLogsResponse.model_validate(
            {"entries": [line.fields() for line in page], "next_page_token": token}
        )

    async def _page(
        self, run_id: str, query: LogQuery, after: Place, seen: int, size: int
    ) -> tuple[list[_Line], Place, int, bool]:
        """The lines stored since the cursor's read at or before its place (late ones), then
        up to ``size`` lines past it; the place to go on from; the highest store sequence
        this read saw; whether every stored line was read."""
        since = after[0] if query.since is None else max(after[0], to_micros(query.since))
        where = ChunkFilter(
            run_id,
            after=from_micros(since),
            host=query.host,
            stream=None if query.stream is None else query.stream.value,
            min_severity=0 if query.min_severity is None else SEVERITY_ORDER[query.min_severity],
            until=query.until,
        )
        async with self._repository.reading(where) as reader:
            last_seq = await reader.last_seq()
            late: list[_Line] = []
            if seen and last_seq > seen:
                late = await self._late(reader, query, after, seen)
            page, place, at_end = await self._walk(reader, query, after, size)
        return late + page, place, last_seq, at_end

    async def _late(
        self, reader: ChunkReader, query: LogQuery, after: Place, seen: int
    ) -> list[_Line]:
        """Lines at or before ``after`` in chunks stored after ``seen``: a follower already
        read past their time when they were stored. They come first in the page: earlier
        than every line past ``after``, so the page stays in time order."""
        chunks = await reader.late(seen, from_micros(after[0]), LATE_CHUNKS)
        merge = _Merge()
        for chunk in chunks:
            merge.add(_matching(chunk, _BEFORE_ALL, query, upto=after))
        return merge.take(sum(chunk.line_count for chunk in chunks), None)

    async def _walk(
        self, reader: ChunkReader, query: LogQuery, after: Place, size: int
    ) -> tuple[list[_Line], Place, bool]:
        """Up to ``size`` lines past ``after``; the place to go on from; whether every stored
        line was read."""
        page: list[_Line] = []
        merge = _Merge()
        walked = _WALK_START
        scanned = 0
        # a follower's page needs a few chunks; a search doubles that up to WALK_CHUNKS
        walk = min(4, WALK_CHUNKS)
        while True:
            chunks = await reader.walk(walked, walk)
            exhausted = len(chunks) < walk
            walk = min(walk * 2, WALK_CHUNKS)
            for chunk in chunks:
                merge.add(_matching(chunk, after, query))
                scanned += chunk.line_count
            if chunks:
                last = chunks[-1]
                walked = (last.first_time, last.batch_id, last.part)
            # No chunk still unread holds a line before the last one read starts.
            boundary = None if exhausted else to_micros(walked[0])
            page += merge.take(size - len(page), boundary)
            if len(page) == size:
                return page, page[-1].place, False
            if boundary is None:
                return page, page[-1].place if page else after, True
            if scanned >= SCAN_BUDGET_LINES and boundary > after[0]:
                # every line before the boundary was read: go on from there next time
                return page, (boundary, "", -1, -1), False
