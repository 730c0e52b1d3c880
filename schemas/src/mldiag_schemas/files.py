"""Files of custom jobs: uploaded Python packages and replicas' logs (mldiag extensions to
the Vertex API, served by the training service).

A package is stored by content (``<storage>/packages/<sha256>/<name>``); a replica attempt's
logs are ``<storage>/jobs/<job>/logs/workerpool{p}-{i}/attempt-{n}/{stdout,stderr}.log``.
"""

import enum
import re

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.jobs import Int64

PACKAGE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$"
"""A package's file name: letters, digits, ``._+-``, no directory part."""

PACKAGE_SUFFIXES: tuple[str, ...] = (".whl", ".tar.gz", ".tgz", ".zip")
"""What pip installs: wheels and sdists."""

REPLICA_NAME_PATTERN = r"^workerpool([0-3])-(0|[1-9][0-9]{0,5})$"
"""A replica's name: ``workerpool{pool}-{index}`` (Vertex's)."""

REPLICA_NAME = re.compile(REPLICA_NAME_PATTERN)
""":data:`REPLICA_NAME_PATTERN`, compiled (groups: pool, index)."""


class LogStream(enum.StrEnum):
    """Which output of a replica."""

    STDOUT = "stdout"
    STDERR = "stderr"


class UploadedPackage(Contract):
    """The answer of ``POST /upload/v1/.../packages?name=…``: where the package is stored;
    pass ``uri`` in ``pythonPackageSpec.packageUris``."""

    uri: str = Field(description="``gs://…`` or ``file://…`` of the stored package.")
    sha256: str = Field(description="The SHA-256 of its bytes, hex (its storage folder).")
    size_bytes: Int64 = Field(ge=0, description="Its size (int64, a string on the wire).")


class JobLogFile(Contract):
    """One stored log of a replica attempt."""

    replica: str = Field(description="``workerpool{pool}-{index}``.")
    attempt: int = Field(ge=0, description="0 for the first run, +1 per restart.")
    stream: LogStream = Field(description="stdout or stderr.")
    size_bytes: Int64 = Field(ge=0, description="Bytes stored so far (int64).")
    uri: str = Field(description="Where it is stored (``gs://…`` or ``file://…``).")


class ListJobLogsResponse(Contract):
    """``GET .../customJobs/{id}/logs:list``: every stored log of the job, by replica, then
    attempt, then stream."""

    logs: list[JobLogFile] = Field(default_factory=list, description="The logs.")
