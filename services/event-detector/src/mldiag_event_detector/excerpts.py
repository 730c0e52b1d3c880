"""Telling log lines: a run's log lines folded into the few excerpts that name a cause.

Most lines say nothing about why a run slowed or died; these do: a Python traceback (from
``Traceback (most recent call last):`` through the exception line, per process), an
accelerator running out of memory, the kernel killing a process for host memory, a
collective or RPC timing out, and lines the writer marked ERROR or CRITICAL. They are kept
per run (the newest :data:`~mldiag_event_detector.state.MAX_EXCERPTS`) and go into the
context of events around them. Lines often arrive after the event they explain (a crash's
traceback races the run's FAILED phase), so a new excerpt re-announces the run's open and
recently resolved events with the context now.
"""

import re
from datetime import timedelta

from mldiag_event_detector.book import EventBook
from mldiag_event_detector.context import EXCERPTS_BEFORE
from mldiag_event_detector.state import (
    MAX_EXCERPT_LINE_CHARS,
    MAX_EXCERPT_LINES,
    MAX_EXCERPTS,
    Excerpt,
    RunState,
)
from mldiag_schemas.events import EventType
from mldiag_schemas.logs import SEVERITY_ORDER, LogLine, LogLinesReceived, LogSeverity

TRACEBACK = "traceback"
ACCELERATOR_OOM = "accelerator-oom"
HOST_OOM_KILL = "host-oom-kill"
COLLECTIVE_TIMEOUT = "collective-timeout"
ERROR = "error"

_KINDS = (
    (
        ACCELERATOR_OOM,
        re.compile(
            r"RESOURCE_EXHAUSTED|CUDA out of memory|Out of memory while trying to allocate"
            r"|Ran out of memory in memory space"
        ),
    ),
    (HOST_OOM_KILL, re.compile(r"^\s*Killed\s*$|Out of memory: Kill(?:ed)? process|oom-kill")),
    (
        COLLECTIVE_TIMEOUT,
        re.compile(
            r"Watchdog caught collective operation timeout|NCCL error|DEADLINE_EXCEEDED"
            r"|Deadline Exceeded|\bUNAVAILABLE\b"
        ),
    ),
)
"""Kinds of a single line, most telling first."""

_TRACEBACK_START = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
MERGE_SECONDS = 5.0
"""Lines of one kind from one process this close together are one excerpt (a burst)."""


def kind_of(line: LogLine) -> str | None:
    """What a single line shows, if anything."""
    for kind, pattern in _KINDS:
        if pattern.search(line.text):
            return kind
    if SEVERITY_ORDER[line.severity] >= SEVERITY_ORDER[LogSeverity.ERROR]:
        return ERROR
    return None


def observe_logs(book: EventBook, message: LogLinesReceived) -> None:
    """Keep the batch's telling lines; re-announce events they are new evidence about."""
    state = book.state
    now = message.occurred_at
    if state.first_seen_at is None:
        state.first_seen_at = now
    found: list[Excerpt] = []
    for line in message.lines:
        excerpt = _fold_line(state, line)
        if excerpt is not None and all(known is not excerpt for known in found):
            found.append(excerpt)
    # Plain error lines are context, not news: a run that logs errors all along would
    # otherwise re-announce its events with every batch.
    done = [excerpt for excerpt in found if not excerpt.open and excerpt.kind != ERROR]
    if not done:
        return
    for event in book.recent(now):
        horizon = event.start_time - EXCERPTS_BEFORE
        telling = [
            excerpt
            for excerpt in done
            if excerpt.last_time >= horizon
            and (event.type is EventType.TERMINATION or event.end_time is None)
        ]
        if telling:
            book.add_evidence(event, now)


def _fold_line(state: RunState, line: LogLine) -> Excerpt | None:
    """Fold one line; return the excerpt it started, extended or completed."""
    text = line.text.strip()
    reading = _reading(state, line)
    if text.startswith(_TRACEBACK_START):
        if reading is not None and not reading.open and _chained(reading):
            reading.open = True  # the chained exception's traceback: same excerpt
            return _append(reading, line)
        return _keep(state, _new(TRACEBACK, line, open_=True))
    if reading is not None and (reading.open or text in _CHAINED):
        return _continue(reading, line)
    return _single(state, line)


def _continue(reading: Excerpt, line: LogLine) -> Excerpt | None:
    """A line of a traceback being read, or the marker of a chained one."""
    _append(reading, line)
    if not reading.open:
        return None  # a chain marker: no news until the chained traceback has ended too
    text = line.text.rstrip()
    if text and not text[0].isspace() and text.strip() not in _CHAINED:
        # The exception line: the traceback is complete. It is as telling as the exception
        # it ends in (an out-of-memory error, a timeout).
        reading.open = False
        reading.kind = next((kind for kind, pattern in _KINDS if pattern.search(text)), TRACEBACK)
    return reading


def _single(state: RunState, line: LogLine) -> Excerpt | None:
    """A line telling on its own; a burst of one kind from one process is one excerpt."""
    kind = kind_of(line)
    if kind is None:
        return None
    last = state.excerpts[-1] if state.excerpts else None
    if (
        last is not None
        and not last.open
        and last.kind == kind
        and last.host == line.host
        and last.pid == line.pid
        and line.time - last.last_time <= timedelta(seconds=MERGE_SECONDS)
    ):
        return _append(last, line)
    return _keep(state, _new(kind, line))


def _reading(state: RunState, line: LogLine) -> Excerpt | None:
    """The process's latest excerpt when it is a traceback: still being read, or just
    ended (a chained exception's traceback may follow)."""
    for excerpt in reversed(state.excerpts):
        if excerpt.host == line.host and excerpt.pid == line.pid:
            is_traceback = excerpt.lines[0].lstrip().startswith(_TRACEBACK_START)
            return excerpt if is_traceback else None
    return None


def _chained(excerpt: Excerpt) -> bool:
    return any(line.strip() in _CHAINED for line in excerpt.lines[-2:])


def _new(kind: str, line: LogLine, *, open_: bool = False) -> Excerpt:
    return Excerpt(
        kind=kind,
        host=line.host,
        pid=line.pid,
        time=line.time,
        last_time=line.time,
        lines=[_quoted(line)],
        open=open_,
    )


def _append(excerpt: Excerpt, line: LogLine) -> Excerpt:
    excerpt.last_time = max(excerpt.last_time, line.time)
    if len(excerpt.lines) < MAX_EXCERPT_LINES:
        excerpt.lines.append(_quoted(line))
    elif excerpt.open:
        # A deep stack: keep its head and the frames nearest the exception.
        excerpt.lines[MAX_EXCERPT_LINES // 2 : -1] = excerpt.lines[MAX_EXCERPT_LINES // 2 + 1 :]
        excerpt.lines[-1] = _quoted(line)
    return excerpt


def _quoted(line: LogLine) -> str:
    text = line.text.rstrip()
    if len(text) > MAX_EXCERPT_LINE_CHARS:
        return text[: MAX_EXCERPT_LINE_CHARS - 1] + "…"
    return text


def _keep(state: RunState, excerpt: Excerpt) -> Excerpt:
    """Add an excerpt, dropping the oldest plain error line (else the oldest) past the cap."""
    state.excerpts.append(excerpt)
    if len(state.excerpts) > MAX_EXCERPTS:
        drop = next((index for index, kept in enumerate(state.excerpts) if kept.kind == ERROR), 0)
        del state.excerpts[drop]
    return excerpt
