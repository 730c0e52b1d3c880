"""Errors of the metric query API."""

from mldiag_platform.errors import InvalidArgument


class InvalidBucketCount(InvalidArgument):
    """``buckets`` is out of range."""

    code = "invalid_bucket_count"


class InvalidGroupBy(InvalidArgument):
    """``groupBy`` names no known grouping."""

    code = "invalid_group_by"


class InvalidRunList(InvalidArgument):
    """``runs`` of a comparison is empty, too long or has an invalid id."""

    code = "invalid_run_list"


class InvalidStepRange(InvalidArgument):
    """``startStep`` / ``endStep`` is negative, or the start lies past the end."""

    code = "invalid_step_range"
