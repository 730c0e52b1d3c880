"""Identifiers shared by every context."""

import re
import uuid
from typing import Annotated

from pydantic import StringConstraints

RUN_ID_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
"""A run id is a resource id (RFC 1034 label): it is also a NATS subject token, so no dots."""

RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
"""A run's id, the last segment of its resource name."""

_RUN_ID_RE = re.compile(RUN_ID_PATTERN)

DEFAULT_PROJECT = "default"
"""The project used when a caller does not name one (local, single-tenant use)."""

DEFAULT_LOCATION = "local"
"""The location used when a caller does not name one."""


def is_run_id(value: str) -> bool:
    """Whether ``value`` is a valid run id."""
    return _RUN_ID_RE.match(value) is not None


def new_run_id() -> str:
    """A fresh random run id."""
    return str(uuid.uuid4())


def run_name(project: str, location: str, run_id: str) -> str:
    """The resource name of a run: ``projects/{p}/locations/{l}/machineLearningRuns/{r}``."""
    return f"projects/{project}/locations/{location}/machineLearningRuns/{run_id}"


def derived_id(namespace: uuid.UUID, *parts: str) -> uuid.UUID:
    """A deterministic id from ``parts``, so that replays produce the same id (and dedupe)."""
    return uuid.uuid5(namespace, "/".join(parts))
