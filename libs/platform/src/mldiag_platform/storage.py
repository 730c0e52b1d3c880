"""Object storage behind one small interface: ``file://`` and ``gs://``.

Paths are ``/``-separated keys relative to the store's root (the artifacts root), e.g.
``<run>/plugins/profile/<session>/<host>.xplane.pb``. ``gs://`` uses google-cloud-storage,
which honours ``STORAGE_EMULATOR_HOST`` (fake-gcs-server, gcp-storage-emulator); its blocking
calls run in a worker thread.
"""

import asyncio
import os
import shutil
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import urlparse

from mldiag_platform.errors import InvalidArgument, NotFound


class ObjectStore(Protocol):
    """The operations mldiag needs from object storage."""

    url: str

    async def put(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key``, replacing what was there."""
        ...

    async def get(self, key: str) -> bytes:
        """Read ``key``; raise :class:`NotFound` when it does not exist."""
        ...

    async def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        ...

    async def download_to(self, key: str, path: Path) -> int:
        """Stream ``key`` into the local file ``path`` without holding it in memory; returns
        its size in bytes. ``path`` is replaced atomically (see :func:`write_atomically`),
        so it is never half written; raise :class:`NotFound` when ``key`` does not exist."""
        ...

    async def upload_from(self, path: Path, key: str) -> int:
        """Stream the local file ``path`` to ``key``, replacing what was there; returns its
        size in bytes."""
        ...

    async def size(self, key: str) -> int:
        """The size of ``key`` in bytes; raise :class:`NotFound` when it does not exist."""
        ...

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``key`` from ``offset`` (fewer at its end, none past
        it), for reading a log that is still growing; raise :class:`NotFound` when ``key``
        does not exist."""
        ...


def _clean_key(key: str) -> str:
    path = PurePosixPath(key)
    if path.is_absolute() or ".." in path.parts or not key or key.endswith("/"):
        raise InvalidArgument(f"invalid object key {key!r}")
    return str(path)


class FileStore:
    """Objects as files under a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = f"file://{self.root}"

    def path_of(self, key: str) -> Path:
        """The local file that holds ``key``."""
        return self.root / _clean_key(key)

    async def put(self, key: str, data: bytes) -> None:
        """Write atomically: a reader never sees half an object."""
        path = self.path_of(key)
        await asyncio.to_thread(write_atomically, path, data)

    async def get(self, key: str) -> bytes:
        """Read the file, or raise :class:`NotFound`."""
        try:
            return await asyncio.to_thread(self.path_of(key).read_bytes)
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found") from None

    async def list(self, prefix: str = "") -> list[str]:
        """Every file under the root whose key starts with ``prefix``."""

        # Walk only the prefix's folder (a job's logs, not every run's profiles); a prefix
        # that could leave the root walks the root, where the filter finds nothing.
        folder = PurePosixPath(prefix).parent if "/" in prefix else PurePosixPath()
        start = self.root if ".." in folder.parts or folder.is_absolute() else self.root / folder

        def scan() -> list[str]:
            if not start.exists():
                return []
            keys = (
                str(path.relative_to(self.root).as_posix())
                for path in start.rglob("*")
                if path.is_file() and not path.name.startswith(".tmp-")
            )
            return sorted(key for key in keys if key.startswith(prefix))

        return await asyncio.to_thread(scan)

    async def delete(self, key: str) -> None:
        """Remove the file if present."""
        await asyncio.to_thread(self.path_of(key).unlink, True)

    async def download_to(self, key: str, path: Path) -> int:
        """Copy the file to ``path`` through a temporary name, or raise :class:`NotFound`."""
        source = self.path_of(key)

        def copy() -> int:
            try:
                return replace_atomically(path, partial(shutil.copyfile, source))
            except FileNotFoundError:
                if source.is_file():
                    raise  # it was the destination that went missing
                raise NotFound(f"object {key!r} not found") from None

        return await asyncio.to_thread(copy)

    async def upload_from(self, path: Path, key: str) -> int:
        """Copy ``path`` in atomically: a reader never sees half an object."""
        target = self.path_of(key)
        return await asyncio.to_thread(replace_atomically, target, partial(shutil.copyfile, path))

    async def size(self, key: str) -> int:
        """The file's size, or raise :class:`NotFound`."""
        try:
            stat = await asyncio.to_thread(self.path_of(key).stat)
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found") from None
        return stat.st_size

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        """Seek and read, or raise :class:`NotFound`."""
        path = self.path_of(key)

        def read() -> bytes:
            with path.open("rb") as file:
                file.seek(offset)
                return file.read(length)

        try:
            return await asyncio.to_thread(read)
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found") from None


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary name beside it, so a reader never sees half a file.

    The temporary name (``.tmp-<name>-<pid>-<random>``) is hidden, unique per writer (two
    threads may write one path at once) and ends in neither the file's suffix nor any other,
    so a scan meanwhile takes it for nothing it knows. Blocking: run it in a thread.
    """
    replace_atomically(path, lambda temporary: temporary.write_bytes(data))


def replace_atomically(path: Path, write: Callable[[Path], object]) -> int:
    """Have ``write`` fill a temporary name beside ``path`` (named as in
    :func:`write_atomically`), then rename it to ``path``; returns the size written. Nothing
    is left behind when ``write`` fails. Blocking: run it in a thread.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        write(temporary)
        size = temporary.stat().st_size
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return size


_write_atomically = write_atomically  # the earlier private name, for existing callers


class GcsStore:
    """Objects in a Google Cloud Storage bucket, under an optional prefix."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        from google.cloud import storage  # noqa: PLC0415  # heavy import, only for gs://

        self._client = client or _default_client(storage)
        self._bucket = self._client.bucket(bucket)
        self._prefix = prefix.strip("/")
        self.url = f"gs://{bucket}/{self._prefix}".rstrip("/")

    def _name(self, key: str) -> str:
        key = _clean_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    async def put(self, key: str, data: bytes) -> None:
        """Upload ``data``."""
        blob = self._bucket.blob(self._name(key))
        await asyncio.to_thread(blob.upload_from_string, data)

    async def get(self, key: str) -> bytes:
        """Download, or raise :class:`NotFound`."""
        from google.api_core.exceptions import NotFound as GcsNotFound  # noqa: PLC0415

        blob = self._bucket.blob(self._name(key))
        try:
            data: bytes = await asyncio.to_thread(blob.download_as_bytes)
        except GcsNotFound:
            raise NotFound(f"object {key!r} not found") from None
        return data

    async def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (relative to the store's prefix)."""
        full = f"{self._prefix}/{prefix}" if self._prefix else prefix
        strip = len(self._prefix) + 1 if self._prefix else 0

        def scan() -> list[str]:
            blobs = self._client.list_blobs(self._bucket, prefix=full)
            return sorted(blob.name[strip:] for blob in blobs)

        return await asyncio.to_thread(scan)

    async def delete(self, key: str) -> None:
        """Delete if present."""
        from google.api_core.exceptions import NotFound as GcsNotFound  # noqa: PLC0415

        blob = self._bucket.blob(self._name(key))
        try:
            await asyncio.to_thread(blob.delete)
        except GcsNotFound:
            return

    async def download_to(self, key: str, path: Path) -> int:
        """Download to ``path`` through a temporary name, or raise :class:`NotFound`."""
        from google.api_core.exceptions import NotFound as GcsNotFound  # noqa: PLC0415

        blob = self._bucket.blob(self._name(key))

        def download(temporary: Path) -> None:
            blob.download_to_filename(str(temporary))

        try:
            return await asyncio.to_thread(replace_atomically, path, download)
        except GcsNotFound:
            raise NotFound(f"object {key!r} not found") from None

    async def upload_from(self, path: Path, key: str) -> int:
        """Upload ``path`` (resumably, in chunks, once it is large)."""
        blob = self._bucket.blob(self._name(key))

        def upload() -> int:
            size = path.stat().st_size
            blob.upload_from_filename(str(path))
            return size

        return await asyncio.to_thread(upload)

    async def size(self, key: str) -> int:
        """The blob's size from its metadata, or raise :class:`NotFound`."""
        name = self._name(key)
        blob = await asyncio.to_thread(self._bucket.get_blob, name)
        if blob is None:
            raise NotFound(f"object {key!r} not found")
        return int(blob.size)

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        """A ranged download (HTTP Range), or raise :class:`NotFound`."""
        from google.api_core.exceptions import NotFound as GcsNotFound  # noqa: PLC0415
        from google.api_core.exceptions import RequestRangeNotSatisfiable  # noqa: PLC0415

        if length <= 0:
            await self.size(key)  # still says whether it exists
            return b""
        blob = self._bucket.blob(self._name(key))
        try:
            # `end` is inclusive in google-cloud-storage.
            data: bytes = await asyncio.to_thread(
                blob.download_as_bytes, start=offset, end=offset + length - 1
            )
        except GcsNotFound:
            raise NotFound(f"object {key!r} not found") from None
        except RequestRangeNotSatisfiable:
            return b""  # at or past the end
        return data


def _default_client(storage: Any) -> Any:
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # The emulator needs no credentials; the client must not go looking for them.
        from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415

        return storage.Client(
            project="mldiag-local",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        )
    return storage.Client()


def open_store(url: str) -> ObjectStore:
    """The store for ``file://DIR`` (relative paths allowed) or ``gs://BUCKET[/PREFIX]``."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return FileStore(Path(parsed.netloc + parsed.path))
    if parsed.scheme == "gs" and parsed.netloc:
        return GcsStore(parsed.netloc, parsed.path)
    raise InvalidArgument(f"unsupported storage URL {url!r}: use file://DIR or gs://BUCKET")


def local_path_of_uri(uri: str, storage_url: str) -> Path | None:
    """Where a job's storage URI lives on this machine, given the platform's storage URL.

    ``file:///x`` is ``/x``; ``gs://B/P`` is ``<root>/gs/B/P`` when ``storage_url`` is
    ``file://<root>`` (the executor maps outputs the same way), and None with GCS storage
    (the bucket is read through a :class:`GcsStore`). Raises :class:`InvalidArgument` for
    any other URI, or one holding ``..``.
    """
    parsed = urlparse(uri)
    if parsed.scheme == "file" and (parsed.netloc or parsed.path):
        return Path(parsed.netloc + parsed.path)
    if parsed.scheme == "gs" and parsed.netloc:
        relative = PurePosixPath(parsed.path.lstrip("/"))
        if ".." in relative.parts:
            raise InvalidArgument(f"{uri!r}: '..' is not allowed in a storage URI")
        store = urlparse(storage_url)
        if store.scheme != "file":
            return None
        return Path(store.netloc + store.path).resolve() / "gs" / parsed.netloc / relative
    raise InvalidArgument(f"unsupported storage URI {uri!r}: use gs://BUCKET/PATH or file:///PATH")
