"""Whether a model's ``artifactUri`` holds files: the registry stores metadata only, but it
never registers a version whose files are not there.

``gs://B/P`` is ``<file root>/gs/B/P`` on file storage (as the executor writes outputs) and
a prefix of bucket ``B`` on GCS storage; ``file:///x`` is the folder ``/x``.
"""

import asyncio
from pathlib import Path
from urllib.parse import urlparse

import structlog

from mldiag_platform.storage import GcsStore, ObjectStore, local_path_of_uri

log = structlog.get_logger(__name__)


def _holds_a_file(path: Path) -> bool:
    if path.is_file():
        return True
    if not path.is_dir():
        return False
    return any(entry.is_file() for entry in path.rglob("*"))


class ArtifactFiles:
    """Looks into object storage for a model's files."""

    def __init__(self, storage_url: str) -> None:
        self._storage_url = storage_url
        self._buckets: dict[str, ObjectStore] = {}

    async def holds_files(self, uri: str) -> bool:
        """Whether ``uri`` is a file, or a folder holding at least one file (at any depth);
        :class:`InvalidArgument` for a URI that is not ``gs://`` or ``file://``."""
        path = local_path_of_uri(uri, self._storage_url)
        if path is not None:
            return await asyncio.to_thread(_holds_a_file, path)
        parsed = urlparse(uri)
        prefix = parsed.path.strip("/")
        try:
            store = self._buckets.get(parsed.netloc)
            if store is None:  # one client per bucket: building one reads credentials
                store = self._buckets[parsed.netloc] = GcsStore(parsed.netloc)
            keys = await store.list(f"{prefix}/" if prefix else "")
        except Exception:  # an unreadable bucket holds nothing to vouch for
            log.warning("models.bucket_unreadable", bucket=parsed.netloc, exc_info=True)
            return False
        return bool(keys)
