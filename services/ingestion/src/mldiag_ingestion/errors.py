"""Ingestion's errors: every one a client mistake with a stable code."""

from pydantic import ValidationError

from mldiag_platform.errors import InvalidArgument, PayloadTooLarge


class InvalidBatch(InvalidArgument):
    """The write request does not parse or violates the contract."""

    code = "invalid_batch"


class InvalidRunId(InvalidArgument):
    """The run id in the path is not a valid id."""

    code = "invalid_run_id"


class TooManyPoints(PayloadTooLarge):
    """More points in one request than the configured limit."""

    code = "too_many_points"


class BodyTooLarge(PayloadTooLarge):
    """The body (or its gunzipped form) is over the configured byte limit."""

    code = "body_too_large"


class UnsupportedEncoding(InvalidArgument):
    """A Content-Encoding other than identity or gzip."""

    code = "unsupported_encoding"


class InvalidMetricName(InvalidArgument):
    """A metric name is empty, too long or has characters outside the allowed set."""

    code = "invalid_metric_name"


class InvalidLabels(InvalidArgument):
    """A series has too many labels, or a label key or value out of bounds."""

    code = "invalid_labels"


class TooManyLabelValues(InvalidArgument):
    """One metric has more distinct label sets (host, process, labels) than allowed."""

    code = "too_many_label_values"


class TimestampInFuture(InvalidArgument):
    """A point's time lies further past the time of receipt than clock skew explains."""

    code = "timestamp_in_future"


class InvalidHeartbeat(InvalidArgument):
    """The heartbeat does not parse or violates the contract."""

    code = "invalid_heartbeat"


class InvalidSignal(InvalidArgument):
    """The lifecycle signal does not parse or violates the contract."""

    code = "invalid_signal"


class InvalidLogs(InvalidArgument):
    """A log write does not parse, or one of its lines breaks the contract (the message
    names the line)."""

    code = "invalid_logs"


class TooManyLogLines(PayloadTooLarge):
    """More lines, or more bytes of text, in one log write than allowed."""

    code = "too_many_log_lines"


def refused_write(exc: ValidationError) -> InvalidArgument:
    """The error of a metrics write the contract refuses whole, JSON or frame alike: its
    first failing rule picks the code (docs/metrics.md), the first 20 problems are listed."""
    problems = exc.errors()[:20]
    details = [
        {"field": ".".join(str(part) for part in problem["loc"]), "problem": problem["msg"]}
        for problem in problems
    ]
    first = problems[0]
    error: type[InvalidArgument] = InvalidBatch
    if first["loc"][-1:] == ("name",) and first["type"] == "string_pattern_mismatch":
        error = InvalidMetricName
    elif first["type"] in ("too_many_labels", "invalid_label") or "labels" in first["loc"]:
        error = InvalidLabels
    return error(f"the write request is not valid: {first['msg']}", details=details)
