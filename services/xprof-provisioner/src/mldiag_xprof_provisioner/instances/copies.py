"""Instances' copies of their runs' sessions: downloading them from the object store into an
instance's own writable logdir, syncing sessions that land later, and finding the copies
that provisioners gone since left on disk.

XProf writes its caches next to each xplane and shows nothing on read-only data; a private
copy also keeps one instance from reading another's runs. A copy is
``<instance>/logdir/<run>/plugins/profile/<session>/...``, so XProf lists ``<run>/<session>``.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path, PurePosixPath

from prometheus_client import Counter

from mldiag_platform.errors import NotFound
from mldiag_platform.storage import ObjectStore
from mldiag_schemas.profiling import XPLANE_SUFFIX, session_prefix
from mldiag_xprof_provisioner.files import CACHE_MARKERS, OWNER_FILE, claim
from mldiag_xprof_provisioner.instances.records import InstanceRecord

SESSION_FILES_SYNCED = Counter(
    "mldiag_xprof_session_files_synced_total", "Files copied into running instances' logdirs."
)

_DOWNLOAD_CONCURRENCY = 8


def profile_prefix(run_id: str) -> str:
    """The object-store prefix of every session of a run (the schemas' ``session_prefix``
    less the session)."""
    return session_prefix(run_id, "").removesuffix("/")


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


def has_xplane(keys: Iterable[str], run_id: str) -> bool:
    """Whether ``keys`` hold a host's xplane in a session of the run
    (``<run>/plugins/profile/<session>/<host>.xplane.pb``)."""
    base = profile_prefix(run_id).rstrip("/") + "/"
    for key in keys:
        session, _, name = key.removeprefix(base).partition("/")
        if (
            key.startswith(base)
            and session
            and "/" not in name
            and name.endswith(XPLANE_SUFFIX)
            and len(name) > len(XPLANE_SUFFIX)
        ):
            return True
    return False


async def copy_runs(store: ObjectStore, record: InstanceRecord) -> tuple[int, int]:
    """Download the runs' session trees into the instance's own writable logdir; returns
    how many files and bytes. Pre-warmed caches in the store come along, so a warmed
    session opens without converting.
    """

    def prepare() -> None:
        for run_id in record.run_ids:
            # XProf refuses a logdir that does not exist; an empty run still shows as one.
            (record.logdir / run_id / "plugins" / "profile").mkdir(parents=True)
        claim(record.directory)

    await _write(record, prepare)
    copies = await asyncio.gather(
        *(_copy_prefix(store, record, run_id, profile_prefix(run_id)) for run_id in record.run_ids)
    )
    files = sum(count for count, _ in copies)
    size = sum(size for _, size in copies)
    record.log.debug("xprof.copy.done", files=files, bytes=size)
    return files, size


async def copy_session(
    store: ObjectStore,
    record: InstanceRecord,
    run_id: str,
    session_id: str,
    replace: Callable[[str], bool] | None = None,
) -> int:
    """Copy the files of one session the instance does not have yet; returns how many.

    Files of the copy's session directory that ``replace`` names are deleted first (XProf's
    cache markers before the rest, so it never trusts half a set) and copied anew.
    """
    if replace is not None:
        directory = record.logdir / run_id / "plugins" / "profile" / session_id
        await _write(record, partial(_delete_matching, directory, replace))
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


def _delete_matching(directory: Path, matches: Callable[[str], bool]) -> None:
    if not directory.is_dir():
        return
    doomed = [path for path in directory.iterdir() if path.is_file() and matches(path.name)]
    for path in sorted(doomed, key=lambda path: (path.name not in CACHE_MARKERS, path.name)):
        path.unlink(missing_ok=True)


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
        size = -1  # stays so when nothing was copied

        async def download() -> None:
            nonlocal size
            # Deleted between list and download: nothing to copy.
            with contextlib.suppress(NotFound):
                size = await store.download_to(key, target)

        async with gate:
            # Streamed straight into the copy (xplanes run to GBs), so the whole download
            # is a write the teardown waits for; a closing instance gets none.
            await _track(record, download)
            return size

    # XProf trusts every cache file of a session that has its markers: they go last, once
    # the files they vouch for have landed (as the pre-warm uploads them).
    first = [(key, target) for key, target in wanted if target.name not in CACHE_MARKERS]
    last = [(key, target) for key, target in wanted if target.name in CACHE_MARKERS]
    sizes: list[int] = []
    for batch in (first, last):
        fetched = await asyncio.gather(*(fetch(key, target) for key, target in batch))
        sizes += [size for size in fetched if size >= 0]
    return len(sizes), sum(sizes)


async def _write(record: InstanceRecord, write: Callable[[], None]) -> bool:
    """Run ``write`` into the copy in a thread, unless the instance is closing; ``False``
    when it was not run."""
    return await _track(record, partial(asyncio.to_thread, write))


async def _track(record: InstanceRecord, write: Callable[[], Awaitable[None]]) -> bool:
    """Run the write into the copy that ``write`` starts, unless the instance is closing;
    ``False`` when it was not run.

    A cancelled copy (a stop mid-start) does not wait for the write, whose thread cannot be
    stopped; the teardown does (``record.writes``), so nothing lands after its delete.
    """
    if record.closing:
        return False
    future = asyncio.ensure_future(write())
    record.writes.add(future)
    future.add_done_callback(record.writes.discard)
    await asyncio.shield(future)
    return True


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
