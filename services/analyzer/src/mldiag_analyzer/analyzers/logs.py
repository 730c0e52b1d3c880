"""Causes read from the run's own log lines: the excerpts the event-detector keeps
(:class:`~mldiag_schemas.logs.LogExcerpt`) quoted as evidence, tracebacks taken apart, and the
collective-timeout analyzer, whose only signal is what the processes wrote."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mldiag_analyzer.analyzers.common import (
    Finding,
    Inputs,
    analyzer,
    found,
    names,
    not_found,
    when,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType
from mldiag_schemas.logs import LogExcerpt

QUOTED_LINES = 6
"""At most this many log lines quoted per report (the telling ones, in order)."""
QUOTED_CHARS = 300
"""A quoted line is cut to this many characters."""


def excerpts(inputs: Inputs, kind: str = "") -> list[LogExcerpt]:
    """The run's log excerpts around the event (of ``kind`` when given), oldest first."""
    if inputs.context is None:
        return []
    return [e for e in inputs.context.log_excerpts if not kind or e.kind == kind]


def quote(excerpt: LogExcerpt, line: str) -> str:
    """One log line as evidence: ``log host-1 12:00:03 UTC: <the line>``."""
    where = f"{excerpt.host} " if excerpt.host else ""
    return f"log {where}{when(excerpt.time)}: {line.rstrip()[:QUOTED_CHARS]}"


def matching_lines(
    quoted: Iterable[LogExcerpt], pattern: re.Pattern[str]
) -> list[tuple[LogExcerpt, str]]:
    """Lines of the excerpts that match ``pattern``, in order."""
    return [(e, line) for e in quoted for line in e.lines if pattern.search(line)]


def kept_as(inputs: Inputs, kind: str) -> list[tuple[LogExcerpt, str]]:
    """The last line of each excerpt the event-detector kept as ``kind`` (a burst's latest
    line, a traceback's exception): for lines whose words the analyzers' own patterns miss."""
    return [(e, e.lines[-1]) for e in excerpts(inputs, kind) if e.lines]


def quotes(lines: Iterable[tuple[LogExcerpt, str]]) -> list[str]:
    """The first :data:`QUOTED_LINES` of ``lines`` as evidence."""
    return [quote(e, line) for e, line in list(lines)[:QUOTED_LINES]]


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s*(.*))?$")
"""``Type: message`` (or a bare ``Type``), the line a traceback ends with."""
_NOT_EXCEPTION = (
    "Traceback (most recent call last):",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass(frozen=True)
class Traceback:
    """A Python traceback taken apart: what was raised and where."""

    error_type: str
    message: str
    frames: list[str]
    """The last frames, innermost last: ``train.py:88 in train_step``."""
    excerpt: LogExcerpt
    lines: list[str]
    """The lines worth quoting: the last frames' lines and the exception's."""


def read_traceback(excerpt: LogExcerpt, last_frames: int = 3) -> Traceback | None:
    """The exception a traceback excerpt ends with (the last one when exceptions chain),
    with its last frames; None when no exception line is found."""
    for index in range(len(excerpt.lines) - 1, -1, -1):
        line = excerpt.lines[index]
        # Frames and source lines are indented; the exception line is not.
        if not line.strip() or line[0].isspace() or line.strip() in _NOT_EXCEPTION:
            continue
        match = _EXCEPTION.match(line.strip())
        if match is None:
            continue
        frame_lines = [i for i, line in enumerate(excerpt.lines[:index]) if _FRAME.search(line)][
            -last_frames:
        ]
        frames = []
        for i in frame_lines:
            if (frame := _FRAME.search(excerpt.lines[i])) is not None:
                path, line_number, function = frame.groups()
                frames.append(f"{path.rsplit('/', 1)[-1]}:{line_number} in {function}")
        # Each frame's line and the source line under it, then the exception itself.
        shown = []
        for i in frame_lines:
            shown.append(excerpt.lines[i])
            if i + 1 < index and not _FRAME.search(excerpt.lines[i + 1]):
                shown.append(excerpt.lines[i + 1])
        return Traceback(
            match.group(1),
            (match.group(2) or "").strip(),
            frames,
            excerpt,
            [*shown, excerpt.lines[index]],
        )
    return None


def tracebacks(inputs: Inputs) -> list[Traceback]:
    """Every traceback in the run's excerpts that names its exception, oldest first."""
    read = (read_traceback(e) for e in excerpts(inputs, "traceback"))
    return [t for t in read if t is not None]


COLLECTIVE_TIMEOUT = re.compile(
    r"watchdog caught collective operation timeout|collective operation timeout|"
    r"nccl.{0,80}(timeout|timed out)|ProcessGroupNCCL.{0,80}Timeout|gloo.{0,80}timed out|"
    r"deadline.exceeded|barrier timed out|coordination service.{0,80}(timeout|heartbeat)|"
    r"nccl error|(?-i:\bUNAVAILABLE\b)|"
    r"(all-?reduce|all-?gather|reduce-?scatter|collective).{0,80}timed out",
    re.IGNORECASE,
)
"""Words of a collective (NCCL, Gloo, gRPC, the JAX coordination service) that gave up."""


@analyzer("collective-timeout", Layer.FRAMEWORK, "hang.md")
def collective_timeout(inputs: Inputs) -> Finding:
    """A collective timed out or failed (NCCL's watchdog or errors, a gRPC deadline, the
    coordination service): its peers waited for a process that never joined."""
    if inputs.context is None:
        return not_found("No run context came with the event, so the run's logs were not read.")
    quoted = excerpts(inputs)
    lines = matching_lines(quoted, COLLECTIVE_TIMEOUT) or kept_as(inputs, "collective-timeout")
    if not lines:
        return not_found(
            "No collective timed out or failed in the run's logs"
            f" ({len(quoted)} excerpt(s) read around the event)."
        )
    hosts = {e.host for e, _ in lines if e.host}
    first = min(lines, key=lambda pair: pair[0].time)[0]
    details = (
        f"A collective timed out or failed on {names(hosts) if hosts else 'the run'}"
        f" (first at {when(first.time)}): the processes waited in a collective (all-reduce,"
        " barrier) for a peer that never joined — a dead or stuck process, mismatched programs"
        " across hosts, or the network between them"
    )
    score = {
        EventType.HANG: 0.85,
        EventType.TERMINATION: 0.8,  # the watchdog aborts the process after the timeout
        EventType.ORCHESTRATOR_INTERRUPTION: 0.6,
        EventType.PERFORMANCE_DEGRADATION: 0.55,
    }.get(inputs.event.type, 0.5)
    effect = {
        EventType.TERMINATION: "; the process was aborted when the timeout expired",
        EventType.HANG: "; the others are stuck in the same collective",
        EventType.PERFORMANCE_DEGRADATION: "; slow or retried collectives stretch each step",
    }.get(inputs.event.type, "")
    actions = [
        "Find the process that did not join: the host that stopped first (hang-localization,"
        " dead-process) and its last output; with NCCL set `NCCL_DEBUG=INFO` and"
        " `TORCH_NCCL_DUMP_ON_TIMEOUT=1` to see which rank was missing.",
        "Check the interconnect (NIC and NVLink error counters, `ibstat`) between those hosts;"
        " raise the timeout only once nothing is stuck.",
    ]
    return found(details + effect + ".", score, hosts, quotes(lines), actions)
