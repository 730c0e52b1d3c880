"""Share links and the console's live updates.

A share link opens one resource (a run, a workload event or a profiler session) read-only,
without an account, until it expires or is revoked. Its token is signed by the run-registry,
so a forged or altered link is refused without a lookup; revocation is checked on every call.
"""

import enum
import uuid
from datetime import datetime

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.ids import RunId

SHARE_TOKEN_PREFIX = "mldiag_share_"  # noqa: S105  # a marker, not a secret
"""Every share token starts with this, so it is told apart from an API token at a glance."""

DEFAULT_SHARE_TTL_SECONDS = 7 * 24 * 3600
"""A link lasts a week unless asked otherwise."""

MAX_SHARE_TTL_SECONDS = 90 * 24 * 3600
"""No link outlives 90 days: a forgotten link stops working on its own."""


class ShareScopeKind(enum.StrEnum):
    """What a share link opens."""

    RUN = "RUN"
    EVENT = "EVENT"
    PROFILER_SESSION = "PROFILER_SESSION"


class ShareLinkState(enum.StrEnum):
    """Whether a link still opens its resource."""

    ACTIVE = "ACTIVE"
    EXPIRED = "EXPIRED"
    REVOKED = "REVOKED"


class ShareLink(Contract):
    """A share link as the API shows it (never its token)."""

    name: str = Field(description="`projects/{p}/locations/{l}/shareLinks/{linkId}`.")
    link_id: str = Field(description="The link's id.")
    resource: str = Field(
        description="Full name of what it opens, e.g."
        " `projects/p/locations/l/machineLearningRuns/r/monitoredEvents/e`."
    )
    kind: ShareScopeKind = Field(description="What kind of resource it opens.")
    run_id: RunId = Field(description="The run the resource belongs to.")
    event_id: uuid.UUID | None = Field(default=None, description="The event (EVENT links).")
    session_id: str | None = Field(
        default=None, description="The profiler session (PROFILER_SESSION links)."
    )
    display_name: str = Field(default="", description="What it is for, for people.")
    state: ShareLinkState = Field(description="Whether it still opens.")
    created_by: str = Field(description="The API token that created it.")
    create_time: datetime = Field(description="When it was created.")
    expire_time: datetime = Field(description="When it stops working.")
    revoke_time: datetime | None = Field(default=None, description="When it was revoked.")


class CreateShareLinkRequest(Contract):
    """Body of ``POST /v1/shareLinks``."""

    resource: str = Field(
        min_length=1,
        max_length=500,
        description="What to share, relative to the parent or as a full name:"
        " `machineLearningRuns/{run}`, `machineLearningRuns/{run}/monitoredEvents/{event}`"
        " or `machineLearningRuns/{run}/profilerSessions/{session}`.",
    )
    ttl_seconds: int = Field(
        default=DEFAULT_SHARE_TTL_SECONDS,
        gt=0,
        le=MAX_SHARE_TTL_SECONDS,
        description="How long it works (default a week, at most 90 days).",
    )
    display_name: str = Field(default="", max_length=200, description="What it is for.")


class CreatedShareLink(Contract):
    """The one answer that carries a link's token."""

    share_link: ShareLink = Field(description="The link.")
    token: str = Field(description="The signed token; whoever holds it can open the resource.")
    url: str = Field(description="The console address that opens it.")


class ListShareLinksResponse(Contract):
    """Answer of ``GET /v1/shareLinks`` (newest first, revoked and expired included)."""

    share_links: list[ShareLink] = Field(default_factory=list, description="The links.")


class RunUpdateKind(enum.StrEnum):
    """What changed about a run."""

    RUN = "run"
    METRICS = "metrics"
    EVENTS = "events"
    ANALYSES = "analyses"
    PROFILES = "profiles"


class RunUpdate(Contract):
    """A hint that something about a run changed and is stored: the console refetches it.

    Published by the run-registry on core NATS (``console.updated.<run id>``, in no stream),
    after the change is committed, so a refetch always sees it. Hints may be lost (a
    reconnecting browser refetches everything); they never carry the data itself.
    """

    run_id: RunId = Field(description="The run.")
    kind: RunUpdateKind = Field(description="What changed.")
    metrics: list[str] = Field(
        default_factory=list, description="For `metrics`: the metrics that got points."
    )
