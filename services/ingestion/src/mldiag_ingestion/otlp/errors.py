"""Errors of the OTLP receiver."""

from mldiag_platform.errors import InvalidArgument


class InvalidOtlp(InvalidArgument):
    """The body is not an OTLP ``ExportMetricsServiceRequest`` in protobuf."""

    code = "invalid_otlp"
