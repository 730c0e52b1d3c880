"""The envelope every bus message carries, and the upcasting of old versions."""

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import Field

from mldiag_schemas.base import Contract


def _now() -> datetime:
    return datetime.now(UTC)


class Envelope(Contract):
    """A message on the bus.

    ``event_id`` doubles as the ``Nats-Msg-Id`` header, so JetStream drops a republished
    duplicate, and consumers use it as their idempotency key. Subclasses pin ``type`` with a
    ``Literal`` so that a subject's messages form a discriminated union.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    event_id: uuid.UUID = Field(
        default_factory=uuid.uuid4,
        description="Unique id of this message; also its Nats-Msg-Id for JetStream dedupe.",
    )
    type: str = Field(description="The message type, `<context>.<entity>.<event>`.")
    schema_version: int = Field(
        default=1, ge=1, description="Version of this message type's schema."
    )
    occurred_at: datetime = Field(
        default_factory=_now, description="When the fact this message states happened (UTC)."
    )

    def partition(self) -> str:
        """The last subject token (the run id), so consumers can partition by run."""
        raise NotImplementedError


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the JSON of version N of a message type into the JSON of version N + 1."""

_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(message_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``func`` to lift ``message_type`` from ``from_version`` to the next version."""

    def register(func: Upcaster) -> Upcaster:
        _UPCASTERS[(message_type, from_version)] = func
        return func

    return register


def upcast(data: dict[str, Any], current_versions: dict[str, int]) -> dict[str, Any]:
    """Apply registered upcasters until ``data`` is at its type's current version.

    Old messages replayed from a stream still parse after a breaking change: each step is a
    small pure function registered with :func:`upcaster`.
    """
    message_type = data.get("type")
    if not isinstance(message_type, str):
        return data
    target = current_versions.get(message_type)
    version = data.get("schemaVersion", data.get("schema_version", 1))
    if target is None or not isinstance(version, int):
        return data
    while version < target:
        step = _UPCASTERS.get((message_type, version))
        if step is None:
            raise ValueError(f"no upcaster for {message_type} v{version}")
        data = step(data)
        version += 1
        data["schemaVersion"] = version
        data.pop("schema_version", None)
    return data
