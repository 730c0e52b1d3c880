"""SDK settings: arguments first, then ``MLDIAG_*`` environment variables, then the stored
login of ``mldiag login`` and the local stack's admin token (:mod:`mldiag.credentials`), then
defaults.

Read when a run starts (never at import), so a launcher can set the environment late.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mldiag.credentials import DEFAULT_API_URL, resolve_connection
from mldiag.spool import default_root

__all__ = [
    "CONTENTION_INTERVAL_ENV",
    "DEFAULT_API_URL",
    "DEFAULT_CONTENTION_INTERVAL",
    "MODE_ENV",
    "Mode",
    "ModeError",
    "Settings",
    "contention_interval",
    "env_seconds",
    "resolve_mode",
]

MODE_ENV = "MLDIAG_MODE"
"""How the SDK records (:class:`Mode`) when ``init`` is not given ``mode=``."""


class Mode(enum.StrEnum):
    """How a run records: ``online`` sends, ``offline`` spools for ``mldiag sync``,
    ``disabled`` does nothing at all (CI, notebooks)."""

    ONLINE = "online"
    OFFLINE = "offline"
    DISABLED = "disabled"


class ModeError(ValueError):
    """A mode that is not one of :class:`Mode` (its stable code: ``invalid_mode``)."""

    code = "invalid_mode"


def resolve_mode(mode: str | None = None, env: Mapping[str, str] | None = None) -> Mode:
    """``mode``, else ``MLDIAG_MODE``, else online; :class:`ModeError` naming the allowed."""
    env = os.environ if env is None else env
    given = mode if mode is not None else env.get(MODE_ENV, "")
    text = str(given).strip().lower() or Mode.ONLINE.value
    try:
        return Mode(text)
    except ValueError:
        source = "mode" if mode is not None else MODE_ENV
        allowed = ", ".join(item.value for item in Mode)
        raise ModeError(f"invalid_mode: {source} must be one of {allowed}, not {given!r}") from None


@dataclass(frozen=True, slots=True)
class Settings:
    """How the SDK talks to the platform and how much it may hold back.

    Attributes:
        api_url: The platform's one base URL (runs are created and updated there; it
            routes every path to the service that serves it).
        ingestion_url: Where metric batches, heartbeats and signals are posted: the API
            URL unless an argument or ``MLDIAG_INGESTION_URL`` names ingestion itself
            (to skip the edge, or where writes have a door of their own).
        token: API token sent as ``Authorization: Bearer`` (default: ``$MLDIAG_TOKEN``, else
            the stored login's for its URL, else the admin token ``mldiag up`` keeps in
            ``$MLDIAG_HOME``).
        spool_dir: Root of the disk spool (one directory per run and writer).
        batch_points: A batch is sent once this many points are buffered.
        flush_interval: ... or once the oldest buffered point is this many seconds old.
        max_buffered_points: Bound of the in-memory buffer (see :mod:`mldiag.run`).
        shutdown_timeout: Most seconds ``finish`` and the exit hook spend sending.
        request_timeout: Timeout of one HTTP request, in seconds.
        max_backoff: Longest wait between retries while the platform is unreachable.
        heartbeat_interval: Seconds between two heartbeats of a process (0: none), from
            ``MLDIAG_HEARTBEAT_INTERVAL`` when not given.
    """

    api_url: str = DEFAULT_API_URL
    ingestion_url: str = DEFAULT_API_URL
    token: str = ""
    spool_dir: Path | None = None
    batch_points: int = 5_000
    flush_interval: float = 1.0
    max_buffered_points: int = 500_000
    shutdown_timeout: float = 10.0
    request_timeout: float = 5.0
    max_backoff: float = 30.0
    heartbeat_interval: float = 10.0

    @classmethod
    def resolve(
        cls,
        *,
        api_url: str | None = None,
        ingestion_url: str | None = None,
        token: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        tuning: Mapping[str, float] | None = None,
    ) -> Settings:
        """Settings from arguments, else the environment, else the defaults.

        ``tuning`` overrides the numeric fields by name (``batch_points``, ``flush_interval``,
        ``max_buffered_points``, ``shutdown_timeout``, ``request_timeout``, ``max_backoff``,
        ``heartbeat_interval``).
        """
        env = os.environ if env is None else env
        root = spool_dir if spool_dir is not None else env.get("MLDIAG_SPOOL_DIR")
        connection = resolve_connection(api_url, token, env)
        api = connection.api_url
        settings = cls(
            api_url=api,
            # One base URL: writes go where the API is unless ingestion is named.
            ingestion_url=(ingestion_url or env.get("MLDIAG_INGESTION_URL") or api).rstrip("/"),
            token=connection.token,
            spool_dir=Path(root) if root else default_root(),
            heartbeat_interval=env_seconds(env, "MLDIAG_HEARTBEAT_INTERVAL", 10.0),
        )
        if not tuning:
            return settings
        unknown = set(tuning) - _TUNABLE
        if unknown:
            raise TypeError(f"unknown settings: {sorted(unknown)}")
        return dataclasses.replace(settings, **tuning)  # type: ignore[arg-type]  # names checked


_TUNABLE = frozenset(
    {
        "batch_points",
        "flush_interval",
        "max_buffered_points",
        "shutdown_timeout",
        "request_timeout",
        "max_backoff",
        "heartbeat_interval",
    }
)


CONTENTION_INTERVAL_ENV = "MLDIAG_CONTENTION_INTERVAL"
"""Seconds between two contention samples (``mldiag.system.contention``); 0 switches them off."""
DEFAULT_CONTENTION_INTERVAL = 1.0
"""Every second, so a slowdown of a few seconds already holds samples of its cause."""


def contention_interval(env: Mapping[str, str] | None = None) -> float:
    """Seconds between contention samples from ``MLDIAG_CONTENTION_INTERVAL`` (0: off)."""
    env = os.environ if env is None else env
    return env_seconds(env, CONTENTION_INTERVAL_ENV, DEFAULT_CONTENTION_INTERVAL)


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A non-negative number of seconds from the environment (``ValueError`` naming it)."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not {text!r}") from None
    if value < 0 or math.isnan(value):
        raise ValueError(f"{name} must be 0 (off) or a positive number of seconds")
    return value
