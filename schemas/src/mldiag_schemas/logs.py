"""Workload logs: the lines a run's processes wrote, kept as evidence beside its events.

Lines come from ``mldiag run`` (and so from every job replica, which runs under it), from
the SDK, and from OTLP log records. Ingestion accepts them in batches
(``POST /v1/machineLearningRuns/{run}/logs:write``) and publishes one
:class:`LogLinesReceived` per batch; run-registry stores them (compressed chunks) and serves
them; the event-detector keeps the telling lines of each run (tracebacks, out-of-memory
messages, timeouts, kills) for the analyzer.
"""

import enum
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId

MAX_LOG_LINES_PER_REQUEST = 10_000
"""Lines in one write request (and so in one bus message)."""

MAX_LOG_LINE_CHARS = 16_384
"""Characters of one line; a longer line is cut by the writer (the SDK cuts it and marks it
with a trailing ``…``), refused by ingestion."""

MAX_LOG_BYTES_PER_REQUEST = 4 * 1024 * 1024
"""UTF-8 bytes of all lines of one request."""


class LogStream(enum.StrEnum):
    """Where a line was written."""

    STDOUT = "STDOUT"
    STDERR = "STDERR"
    OTLP = "OTLP"
    """An OpenTelemetry log record."""
    SYSTEM = "SYSTEM"
    """A line mldiag itself wrote about the process (started, exited with status 137, …)."""


class LogSeverity(enum.StrEnum):
    """Cloud Logging's severities (OTLP severity numbers map onto them)."""

    DEFAULT = "DEFAULT"
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


SEVERITY_ORDER: dict[LogSeverity, int] = {
    severity: rank for rank, severity in enumerate(LogSeverity)
}
"""Severities from least to most severe (``severity >= WARNING`` filters use it)."""


class LogLine(Contract):
    """One line a process of a run wrote."""

    time: datetime = Field(description="When it was written (the writer's clock, UTC).")
    host: str = Field(default="", max_length=253, description="Host of the process.")
    stream: LogStream = Field(default=LogStream.STDOUT, description="Where it was written.")
    severity: LogSeverity = Field(
        default=LogSeverity.DEFAULT,
        description="Its severity as the writer knew it (OTLP records carry one); DEFAULT"
        " when unknown, stderr included (much that is harmless goes there).",
    )
    text: str = Field(
        max_length=MAX_LOG_LINE_CHARS, description="The line, without its line break."
    )
    process_index: int | None = Field(
        default=None, ge=0, description="Process (rank) on the host, when several write."
    )
    pid: int | None = Field(default=None, ge=0, description="Operating-system process id.")


class WriteLogsRequest(Contract):
    """A batch of a run's log lines. ``batchId`` makes a retried request harmless: the same
    batch is stored once."""

    batch_id: uuid.UUID | None = Field(
        default=None,
        description="The writer's id for this batch (a uuid4); a retry sends the same one."
        " Ingestion makes one when absent.",
    )
    lines: list[LogLine] = Field(
        max_length=MAX_LOG_LINES_PER_REQUEST, description="The lines, in the order written."
    )


class WriteLogsResponse(Contract):
    """What ingestion accepted."""

    accepted: int = Field(description="Lines accepted (all of them, or the request is refused).")


class LogLinesReceived(Envelope):
    """A batch of log lines accepted by ingestion. Subject:
    ``telemetry.logs.received.<run id>``; the envelope's ``event_id`` is the batch id."""

    type: Literal["telemetry.logs.received"] = "telemetry.logs.received"
    run_id: RunId = Field(description="The run the lines belong to.")
    lines: list[LogLine] = Field(description="The lines, in the order written.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class LogEntry(Contract):
    """A stored line as the API returns it."""

    time: datetime = Field(description="When it was written.")
    host: str = Field(default="", description="Host of the process.")
    stream: LogStream = Field(description="Where it was written.")
    severity: LogSeverity = Field(description="Its severity.")
    text: str = Field(description="The line.")
    process_index: int | None = Field(default=None, description="Process (rank) on the host.")
    pid: int | None = Field(default=None, description="Operating-system process id.")


class ListLogsResponse(Contract):
    """A run's log lines, oldest first, one page.

    ``nextPageToken`` is a cursor: at the end of what is stored it is still set (empty only
    when the run has ended and nothing more can come), so ``--follow`` asks again with it.
    """

    entries: list[LogEntry] = Field(description="The lines, by time.")
    next_page_token: str = Field(default="", description="Cursor of the next page.")


class LogExcerpt(Contract):
    """Lines of a run around an event that name a cause, for the analyzer."""

    kind: str = Field(
        description="What the lines show: `traceback`, `accelerator-oom`, `host-oom-kill`,"
        " `collective-timeout`, `error`."
    )
    host: str = Field(default="", description="Host that wrote them.")
    time: datetime = Field(description="When the first of them was written.")
    lines: list[str] = Field(description="The lines quoted (at most 40, the telling ones).")
