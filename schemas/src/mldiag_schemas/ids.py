"""Identifiers shared by every context: the one grammar every id follows.

An id that can reach a NATS subject, a table or a storage path is checked against its
pattern at the edge (HTTP and bus) and refused with a 400 ``invalid_argument`` naming it:

- resource ids (projects, locations, runs, and the ids the registry mints) are RFC 1034
  labels: lowercase letters, digits and ``-``, 1 to 63 characters, starting and ending with
  a letter or a digit. No dots (a dot separates NATS subject tokens), no ``/`` (it separates
  resource name segments), nothing a path or a subject could misread. Google Cloud's region
  names (``us-central1``) are such labels.
- free text (display names, descriptions, label values) may hold any character except NUL
  (U+0000), which PostgreSQL's text type cannot store.
"""

import re
import uuid
from typing import Annotated

from pydantic import StringConstraints

RESOURCE_ID_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
"""A resource id (RFC 1034 label): also a NATS subject token and a path segment, so no dots."""

RUN_ID_PATTERN = RESOURCE_ID_PATTERN
"""A run id is a resource id."""

PROJECT_ID_PATTERN = RESOURCE_ID_PATTERN
"""A project id is a resource id (``default`` unless a caller names one)."""

LOCATION_ID_PATTERN = RESOURCE_ID_PATTERN
"""A location id is a resource id (``local``, or a region name such as ``us-central1``)."""

ProjectId = Annotated[str, StringConstraints(pattern=PROJECT_ID_PATTERN)]
"""A project's id, the segment after ``projects/``."""

LocationId = Annotated[str, StringConstraints(pattern=LOCATION_ID_PATTERN)]
"""A location's id, the segment after ``locations/``."""

RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
"""A run's id, the last segment of its resource name."""

_RUN_ID_RE = re.compile(RUN_ID_PATTERN)
_RESOURCE_ID_RE = re.compile(RESOURCE_ID_PATTERN)

DEFAULT_PROJECT = "default"
"""The project used when a caller does not name one (local, single-tenant use)."""

DEFAULT_LOCATION = "local"
"""The location used when a caller does not name one."""


def is_run_id(value: str) -> bool:
    """Whether ``value`` is a valid run id."""
    return _RUN_ID_RE.fullmatch(value) is not None  # fullmatch: `$` alone lets a "\n" end pass


def is_resource_id(value: str) -> bool:
    """Whether ``value`` follows the resource id grammar (projects, locations, runs...)."""
    return _RESOURCE_ID_RE.fullmatch(value) is not None


def has_nul(value: str) -> bool:
    """Whether ``value`` holds a NUL character, which no text column can store."""
    return "\x00" in value


def new_run_id() -> str:
    """A fresh random run id."""
    return str(uuid.uuid4())


def run_name(project: str, location: str, run_id: str) -> str:
    """The resource name of a run: ``projects/{p}/locations/{l}/machineLearningRuns/{r}``."""
    return f"projects/{project}/locations/{location}/machineLearningRuns/{run_id}"


def derived_id(namespace: uuid.UUID, *parts: str) -> uuid.UUID:
    """A deterministic id from ``parts``, so that replays produce the same id (and dedupe)."""
    return uuid.uuid5(namespace, "/".join(parts))
