"""API tokens, roles and the permission strings every endpoint checks.

Permissions are modelled on Google ML Diagnostics' IAM permissions
(``machineLearningRuns.get``, ``operations.cancel``, …); a role is a fixed set of them.
"""

import enum
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.ids import RunId
from mldiag_schemas.sharing import ShareLink


class Permission(enum.StrEnum):
    """What a caller may do; each route names exactly one."""

    RUNS_CREATE = "machineLearningRuns.create"
    RUNS_GET = "machineLearningRuns.get"
    RUNS_LIST = "machineLearningRuns.list"
    RUNS_UPDATE = "machineLearningRuns.update"
    RUNS_DELETE = "machineLearningRuns.delete"
    RUNS_PURGE = "machineLearningRuns.purge"
    METRICS_WRITE = "machineLearningRuns.writeMetrics"
    CONFIGS_WRITE = "machineLearningRuns.writeConfigs"
    OPERATIONS_GET = "operations.get"
    OPERATIONS_LIST = "operations.list"
    OPERATIONS_CANCEL = "operations.cancel"
    OPERATIONS_DELETE = "operations.delete"
    PROFILER_SESSIONS_CREATE = "profilerSessions.create"
    PROFILER_SESSIONS_GET = "profilerSessions.get"
    PROFILER_SESSIONS_LIST = "profilerSessions.list"
    PROFILER_TARGETS_CREATE = "profilerTargets.create"
    PROFILER_TARGETS_LIST = "profilerTargets.list"
    XPROF_CREATE = "xprofInstances.create"
    XPROF_GET = "xprofInstances.get"
    XPROF_LIST = "xprofInstances.list"
    XPROF_DELETE = "xprofInstances.delete"
    TOKENS_CREATE = "apiTokens.create"
    TOKENS_LIST = "apiTokens.list"
    TOKENS_DELETE = "apiTokens.delete"
    SHARE_LINKS_CREATE = "shareLinks.create"
    SHARE_LINKS_LIST = "shareLinks.list"
    SHARE_LINKS_DELETE = "shareLinks.delete"
    CUSTOM_JOBS_CREATE = "customJobs.create"
    CUSTOM_JOBS_GET = "customJobs.get"
    CUSTOM_JOBS_LIST = "customJobs.list"
    CUSTOM_JOBS_CANCEL = "customJobs.cancel"
    CUSTOM_JOBS_DELETE = "customJobs.delete"
    TUNING_JOBS_CREATE = "hyperparameterTuningJobs.create"
    TUNING_JOBS_GET = "hyperparameterTuningJobs.get"
    TUNING_JOBS_LIST = "hyperparameterTuningJobs.list"
    TUNING_JOBS_CANCEL = "hyperparameterTuningJobs.cancel"
    TUNING_JOBS_DELETE = "hyperparameterTuningJobs.delete"
    PIPELINES_CREATE = "trainingPipelines.create"
    PIPELINES_GET = "trainingPipelines.get"
    PIPELINES_LIST = "trainingPipelines.list"
    PIPELINES_CANCEL = "trainingPipelines.cancel"
    PIPELINES_DELETE = "trainingPipelines.delete"
    MODELS_UPLOAD = "models.upload"
    MODELS_GET = "models.get"
    MODELS_LIST = "models.list"
    MODELS_UPDATE = "models.update"
    MODELS_DELETE = "models.delete"
    CHANNELS_CREATE = "notificationChannels.create"
    CHANNELS_GET = "notificationChannels.get"
    CHANNELS_LIST = "notificationChannels.list"
    CHANNELS_UPDATE = "notificationChannels.update"
    CHANNELS_DELETE = "notificationChannels.delete"
    CHANNELS_TEST = "notificationChannels.test"
    ALERT_RULES_CREATE = "alertRules.create"
    ALERT_RULES_GET = "alertRules.get"
    ALERT_RULES_LIST = "alertRules.list"
    ALERT_RULES_UPDATE = "alertRules.update"
    ALERT_RULES_DELETE = "alertRules.delete"
    DELIVERIES_LIST = "notificationDeliveries.list"
    RETENTION_GET = "retentionPolicies.get"
    RETENTION_UPDATE = "retentionPolicies.update"


class Role(enum.StrEnum):
    """A token's role: viewers read, editors also write, admins also manage tokens."""

    VIEWER = "viewer"
    EDITOR = "editor"
    ADMIN = "admin"

    @property
    def permissions(self) -> frozenset[Permission]:
        """Every permission this role grants."""
        return ROLE_PERMISSIONS[self]


_VIEWER = frozenset(
    {
        Permission.RUNS_GET,
        Permission.RUNS_LIST,
        Permission.OPERATIONS_GET,
        Permission.OPERATIONS_LIST,
        Permission.PROFILER_SESSIONS_GET,
        Permission.PROFILER_SESSIONS_LIST,
        Permission.PROFILER_TARGETS_LIST,
        Permission.XPROF_GET,
        Permission.XPROF_LIST,
        # Opening a run's profiles starts an XProf instance: reading, not changing the run.
        Permission.XPROF_CREATE,
        Permission.CUSTOM_JOBS_GET,
        Permission.CUSTOM_JOBS_LIST,
        Permission.TUNING_JOBS_GET,
        Permission.TUNING_JOBS_LIST,
        Permission.PIPELINES_GET,
        Permission.PIPELINES_LIST,
        Permission.MODELS_GET,
        Permission.MODELS_LIST,
        # A channel's secrets are never returned, so reading channels reveals no secret.
        Permission.CHANNELS_GET,
        Permission.CHANNELS_LIST,
        Permission.ALERT_RULES_GET,
        Permission.ALERT_RULES_LIST,
        Permission.DELIVERIES_LIST,
        Permission.RETENTION_GET,
    }
)
_EDITOR = _VIEWER | {
    Permission.RUNS_CREATE,
    Permission.RUNS_UPDATE,
    Permission.RUNS_DELETE,
    Permission.METRICS_WRITE,
    Permission.CONFIGS_WRITE,
    # Reporting a programmatic trace, registering targets, asking for a capture.
    Permission.PROFILER_SESSIONS_CREATE,
    Permission.PROFILER_TARGETS_CREATE,
    Permission.OPERATIONS_CANCEL,
    Permission.OPERATIONS_DELETE,
    Permission.XPROF_DELETE,
    # Sharing hands out read access to one resource, so it takes more than reading.
    Permission.SHARE_LINKS_CREATE,
    Permission.SHARE_LINKS_LIST,
    Permission.SHARE_LINKS_DELETE,
    # Running training jobs (each job is also a run the editor could create).
    Permission.CUSTOM_JOBS_CREATE,
    Permission.CUSTOM_JOBS_CANCEL,
    Permission.CUSTOM_JOBS_DELETE,
    Permission.TUNING_JOBS_CREATE,
    Permission.TUNING_JOBS_CANCEL,
    Permission.TUNING_JOBS_DELETE,
    Permission.PIPELINES_CREATE,
    Permission.PIPELINES_CANCEL,
    Permission.PIPELINES_DELETE,
    Permission.MODELS_UPLOAD,
    Permission.MODELS_UPDATE,
    Permission.MODELS_DELETE,
    Permission.CHANNELS_CREATE,
    Permission.CHANNELS_UPDATE,
    Permission.CHANNELS_DELETE,
    Permission.CHANNELS_TEST,
    Permission.ALERT_RULES_CREATE,
    Permission.ALERT_RULES_UPDATE,
    Permission.ALERT_RULES_DELETE,
}
_ADMIN = _EDITOR | {
    Permission.TOKENS_CREATE,
    Permission.TOKENS_LIST,
    Permission.TOKENS_DELETE,
    # Removing data for good (a policy that drops it, a purge) is past undoing: admins only.
    Permission.RETENTION_UPDATE,
    Permission.RUNS_PURGE,
}

ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: _VIEWER,
    Role.EDITOR: _EDITOR,
    Role.ADMIN: _ADMIN,
}


class TokenState(enum.StrEnum):
    """Whether a token still opens the API."""

    ACTIVE = "ACTIVE"
    REVOKED = "REVOKED"
    EXPIRED = "EXPIRED"


class ApiToken(Contract):
    """An API token as the API shows it: never its secret, only a recognisable prefix."""

    name: str = Field(description="`apiTokens/{tokenId}`.")
    token_id: str
    display_name: str = ""
    role: Role
    state: TokenState
    secret_prefix: str = Field(description="The secret's first characters, to recognise it.")
    create_time: datetime
    expire_time: datetime | None = None
    revoke_time: datetime | None = None


class CreateTokenRequest(Contract):
    """Body of ``POST /v1/apiTokens``."""

    display_name: str = Field(default="", max_length=200)
    role: Role = Role.VIEWER
    ttl_seconds: int | None = Field(
        default=None, gt=0, description="Expire this long after creation (default: never)."
    )


class CreatedToken(Contract):
    """The one answer that carries a token's secret; it is stored only as a hash."""

    token: ApiToken
    secret: str


class ListTokensResponse(Contract):
    """Page of ``GET /v1/apiTokens`` (revoked and expired included, newest first)."""

    api_tokens: list[ApiToken] = Field(default_factory=list)


class TokenGrant(Contract):
    """What a service needs to authorise a token, kept in the bus's token directory under
    the hash of its secret.
    """

    token_id: str
    role: Role
    expire_time: datetime | None = None
    run_id: RunId | None = Field(
        default=None,
        description="Held to one run: the token may read and write that run only (the token "
        "a training job's replicas get). None: the role's permissions everywhere.",
    )


SHARED_ROLE = "shared"
"""The role a caller holding a share link has: it reads one resource, nothing else."""


class Caller(Contract):
    """Answer of ``GET /v1/caller``: who the caller is and what it may do, so a client offers
    only what will work."""

    token_id: str = Field(description="The API token's id, or the share link's.")
    role: Literal["viewer", "editor", "admin", "shared"] = Field(
        description="The token's role, or `shared` for a share link."
    )
    permissions: list[str] = Field(description="Every permission the caller holds.")
    share: ShareLink | None = Field(
        default=None, description="For a share link: what it opens, and until when."
    )
