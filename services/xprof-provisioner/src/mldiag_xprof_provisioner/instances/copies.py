"""Instances' copies of their runs' sessions: downloading them from the object store into an
instance's own writable logdir, syncing sessions that land later, and finding the copies
that provisioners gone since left on disk.

XProf writes its caches next to each xplane and shows nothing on read-only data; a private
copy also keeps one instance from reading another's runs. A copy is
``<instance>/logdir/<run>/plugins/profile/<session>/...``, so XProf lists ``<run>/<session>``.
"""

import asyncio
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from prometheus_client import Counter

from mldiag_platform.errors import NotFound
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.profiling import XPLANE_SUFFIX, session_prefix
from mldiag_xprof_provisioner.instances.records import InstanceRecord

SESSION_FILES_SYNCED = Counter(
    "mldiag_xprof_session_files_synced_total", "Files copied into running instances' logdirs."
)

OWNER_FILE = "owner.pid"
"""Inside each instance (and pre-warm) directory: the pid of the provisioner that made it."""
_DOWNLOAD_CONCURRENCY = 8


def profile_prefix(run_id: str) -> str:
    """The object-store prefix of every session of a run."""
    return f"{run_id}/plugins/profile/"


def session_hosts(keys: Iterable[str], prefix: str) -> list[str]:
    """The hosts that have an xplane directly under ``prefix``, sorted."""
    hosts = {
        name[: -len(XPLANE_SUFFIX)]
        for key in keys
        if key.startswith(prefix)
        and "/" not in (name := key[len(prefix) :])
        and name.endswith(XPLANE_SUFFIX)
        and len(name) > len(XPLANE_SUFFIX)
    }
    return sorted(hosts)


async def copy_runs(store: ObjectStore, record: InstanceRecord) -> tuple[int, int]:
    """Download the runs' session trees into the instance's own writable logdir; returns
    how many files and bytes. Pre-warmed caches in the store come along, so a warmed
    session opens without converting.
    """

    def prepare() -> None:
        for run_id in record.run_ids:
            # XProf refuses a logdir that does not exist; an empty run still shows as one.
            (record.logdir / run_id / "plugins" / "profile").mkdir(parents=True)
        (record.directory / OWNER_FILE).write_text(str(os.getpid()))

    await asyncio.to_thread(prepare)
    copies = await asyncio.gather(
        *(_copy_prefix(store, record, run_id, profile_prefix(run_id)) for run_id in record.run_ids)
    )
    files = sum(count for count, _ in copies)
    size = sum(size for _, size in copies)
    record.log.debug("xprof.copy.done", files=files, bytes=size)
    return files, size


async def copy_session(
    store: ObjectStore, record: InstanceRecord, run_id: str, session_id: str
) -> int:
    """Copy the files of one session the instance does not have yet; returns how many."""
    count, size = await _copy_prefix(
        store, record, run_id, session_prefix(run_id, session_id), skip_existing=True
    )
    if count:
        SESSION_FILES_SYNCED.inc(count)
        record.log.info(
            "xprof.session.synced",
            run_id=run_id,
            session_id=session_id,
            files=count,
            bytes=size,
        )
    return count


async def _copy_prefix(
    store: ObjectStore,
    record: InstanceRecord,
    run_id: str,
    prefix: str,
    *,
    skip_existing: bool = False,
) -> tuple[int, int]:
    run_root = record.logdir / run_id
    base = profile_prefix(run_id)
    keys = await store.list(prefix)
    targets = [(key, _target(run_root / "plugins" / "profile", key[len(base) :])) for key in keys]
    wanted = [
        (key, target)
        for key, target in targets
        if target is not None and not (skip_existing and target.exists())
    ]
    gate = asyncio.Semaphore(_DOWNLOAD_CONCURRENCY)

    async def fetch(key: str, target: Path) -> int:
        async with gate:
            try:
                data = await store.get(key)
            except NotFound:
                return -1  # deleted between list and get: nothing to copy
            await asyncio.to_thread(write_atomically, target, data)
            return len(data)

    sizes = [size for size in await asyncio.gather(*(fetch(k, t) for k, t in wanted)) if size >= 0]
    return len(sizes), sum(sizes)


def stale_copies(work_dir: Path, is_alive: Callable[[int], bool]) -> list[Path]:
    """The instance and pre-warm directories under ``work_dir`` whose provisioner is gone
    (blocking: run it in a thread)."""
    if not work_dir.is_dir():
        return []
    found = []
    for directory in work_dir.iterdir():
        owner = directory / OWNER_FILE
        if not owner.is_file():
            continue  # not one of ours: leave it alone
        text = owner.read_text().strip()
        if not text.isdigit() or not is_alive(int(text)):
            found.append(directory)
    return found


def _target(root: Path, relative: str) -> Path | None:
    """Where an object lands under ``root``; ``None`` for keys that are not plain files."""
    if not relative or relative.endswith("/"):
        return None  # a "directory" placeholder object
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        return None  # never write outside the copy, whatever a bucket lists
    return root.joinpath(*path.parts)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary name, so XProf never reads half a file.

    The temporary name ends in neither ``.xplane.pb`` nor a cache suffix, so a rescan that
    runs meanwhile does not take it for a host.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.part")
    temporary.write_bytes(data)
    temporary.replace(path)
