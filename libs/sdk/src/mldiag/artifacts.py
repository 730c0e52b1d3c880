"""A run's artifacts root, as the SDK writes to it: a ``file://`` directory or a ``gs://``
bucket (with an optional prefix).

Keys are ``/``-separated paths under the root, such as
``<run>/plugins/profile/<session>/<host>.xplane.pb``: the layout the platform's own storage
reads (``mldiag_platform.storage``, which the SDK does not depend on). ``gs://`` needs the
``gcs`` extra (``pip install 'mldiag-sdk[gcs]'``); google-cloud-storage is imported only when a
``gs://`` root is used, and honours ``STORAGE_EMULATOR_HOST`` (fake-gcs-server, an emulator).
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import urlparse


class ArtifactsError(Exception):
    """The artifacts root cannot be written to as given (a bad URL, a missing package)."""


class ArtifactStore(Protocol):
    """Where the SDK copies files of a run."""

    url: str
    """The root, as a URL (``file:///abs/dir`` or ``gs://bucket/prefix``)."""

    def uri_of(self, key: str) -> str:
        """The URL of ``key`` under the root."""
        ...

    def upload(self, source: Path, key: str) -> str:
        """Copy the local file ``source`` to ``key``, replacing what was there; its URL."""
        ...


def _clean_key(key: str) -> str:
    path = PurePosixPath(key)
    if not key or key.endswith("/") or path.is_absolute() or ".." in path.parts:
        raise ArtifactsError(f"invalid artifact key {key!r}")
    return str(path)


class LocalArtifacts:
    """Artifacts as files under a local directory (``file://DIR``)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = f"file://{self.root}"

    def uri_of(self, key: str) -> str:
        """``file://<root>/<key>``."""
        return f"{self.url}/{_clean_key(key)}"

    def upload(self, source: Path, key: str) -> str:
        """Copy atomically: the file appears whole or not at all. The temporary name starts
        with ``.tmp-``, which the platform's storage never lists."""
        target = self.root / _clean_key(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".tmp-{target.name}-{os.getpid()}")
        try:
            shutil.copyfile(source, temporary)
            temporary.replace(target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return self.uri_of(key)


class GcsArtifacts:
    """Artifacts as objects in a Google Cloud Storage bucket (``gs://BUCKET[/PREFIX]``)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        self._client = client or _gcs_client()
        self._bucket_name = bucket
        self._bucket = self._client.bucket(bucket)
        self._prefix = prefix.strip("/")
        self.url = f"gs://{bucket}/{self._prefix}".rstrip("/")

    def _name(self, key: str) -> str:
        key = _clean_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def uri_of(self, key: str) -> str:
        """``gs://<bucket>/<prefix>/<key>``."""
        return f"gs://{self._bucket_name}/{self._name(key)}"

    def upload(self, source: Path, key: str) -> str:
        """Upload from the file (streamed, resumable for large files); an object becomes
        visible only once complete."""
        self._bucket.blob(self._name(key)).upload_from_filename(str(source))
        return self.uri_of(key)


def _gcs_client() -> Any:
    try:
        storage = importlib.import_module("google.cloud.storage")
    except ImportError:
        raise ArtifactsError(
            "a gs:// artifacts root needs google-cloud-storage: pip install 'mldiag-sdk[gcs]'"
        ) from None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # An emulator takes no credentials, and the client must not go looking for any.
        credentials = importlib.import_module("google.auth.credentials")
        return storage.Client(
            project="mldiag-local", credentials=credentials.AnonymousCredentials()
        )
    return storage.Client()


def open_artifacts(root: str) -> ArtifactStore:
    """The store of ``root``: ``file://DIR`` (a relative DIR is from the working directory),
    a bare local path, or ``gs://BUCKET[/PREFIX]``; :class:`ArtifactsError` otherwise."""
    parsed = urlparse(root)
    if parsed.scheme == "file":
        return LocalArtifacts(Path(parsed.netloc + parsed.path))
    if parsed.scheme == "gs" and parsed.netloc:
        return GcsArtifacts(parsed.netloc, parsed.path)
    if not parsed.scheme and root:
        return LocalArtifacts(Path(root))
    raise ArtifactsError(
        f"unsupported artifacts root {root!r}: use file://DIR or gs://BUCKET[/PREFIX]"
    )
