"""Ingestion's errors: every one a client mistake with a stable code."""

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
