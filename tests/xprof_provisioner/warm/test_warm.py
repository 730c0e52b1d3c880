"""Pre-warming's rules with a scripted conversion (no XProf process): when a session is
warmed, again when a host lands later, and in what order caches come and go."""

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from mldiag_platform.storage import FileStore
from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReported,
)
from mldiag_xprof_provisioner.warm.service import SessionWarmer, marker_key, xprof_version
from xprof_provisioner.xprof_fakes import ALICE, World

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PREFIX = "run-1/plugins/profile/s1/"


class FakeRunner:
    """Writes what XProf's conversion would: per-host tables, the all-hosts stats, the marker."""

    def __init__(self) -> None:
        self.converted: list[list[str]] = []

    async def convert(self, directory: Path) -> dict[str, object]:
        return await asyncio.to_thread(self._convert, directory)

    def _convert(self, directory: Path) -> dict[str, object]:
        hosts = sorted(p.name.removesuffix(".xplane.pb") for p in directory.glob("*.xplane.pb"))
        self.converted.append(hosts)
        for host in hosts:
            (directory / f"{host}.SSTABLE").write_text(f"table of {host}")
        (directory / "ALL_HOSTS.op_stats_v2.pb").write_text(",".join(hosts))
        (directory / "cache_version.txt").write_text(xprof_version())
        return {"hosts": hosts}


class JournalStore(FileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.journal: list[tuple[str, str]] = []

    async def put(self, key: str, data: bytes) -> None:
        self.journal.append(("put", key.rsplit("/", 1)[-1]))
        await super().put(key, data)

    async def upload_from(self, path: Path, key: str) -> int:
        self.journal.append(("put", key.rsplit("/", 1)[-1]))
        return await super().upload_from(path, key)

    async def delete(self, key: str) -> None:
        if (await self.list(key)) == [key]:
            self.journal.append(("delete", key.rsplit("/", 1)[-1]))
        await super().delete(key)


def _session(*hosts: str, prewarmed: bool = False) -> ProfilerSession:
    return ProfilerSession(
        name="projects/p/locations/l/machineLearningRuns/run-1/profilerSessions/s1",
        session_id="s1",
        run_id="run-1",
        kind=ProfilerSessionKind.PROGRAMMATIC,
        phase=ProfilerSessionPhase.SUCCEEDED,
        hosts=[
            ProfilerSessionHost(
                host=host,
                phase=ProfilerSessionPhase.SUCCEEDED,
                start_time=T0,
                end_time=T0,
                file_uri=f"file:///s/{PREFIX}{host}.xplane.pb",
                size_bytes=1,
            )
            for host in hosts
        ],
        prewarmed=prewarmed,
        create_time=T0,
        update_time=T0,
    )


def _setup(tmp_path: Path) -> tuple[World, JournalStore, FakeRunner, SessionWarmer]:
    world = World(tmp_path)
    store = JournalStore(world.store.root)
    runner = FakeRunner()
    warmer = SessionWarmer(world.settings, store, world.recorder, runner, world.service)
    return world, store, runner, warmer


async def test_a_host_that_lands_after_the_warm_gets_the_session_warmed_again(
    tmp_path: Path,
) -> None:
    world, store, runner, warmer = _setup(tmp_path)
    await store.put(PREFIX + "h0.xplane.pb", b"0")
    assert (await warmer.warm(_session("h0"))).outcome == "warmed"
    # The registry's echo of the report: the marker says current, nothing happens.
    assert (await warmer.warm(_session("h0", prewarmed=True))).outcome == "skipped"
    assert runner.converted == [["h0"]]

    await store.put(PREFIX + "h1.xplane.pb", b"1")
    store.journal.clear()
    # Still flagged prewarmed (it never goes back), but the marker knows one host only.
    outcome = await warmer.warm(_session("h0", "h1", prewarmed=True))

    assert outcome.outcome == "rewarmed"
    assert runner.converted == [["h0"], ["h0", "h1"]]
    assert await store.get(PREFIX + "ALL_HOSTS.op_stats_v2.pb") == b"h0,h1"
    assert await store.get(PREFIX + "h1.SSTABLE") == b"table of h1"
    marker = json.loads(await store.get(marker_key("run-1", "s1")))
    assert sorted(marker["hosts"]) == ["h0", "h1"]
    # Nothing vouches for the old caches once their deletion begins; the markers come last.
    deletes = [name for op, name in store.journal if op == "delete"]
    assert deletes[:2] == ["s1.json", "cache_version.txt"]
    assert sorted(deletes[2:]) == ["ALL_HOSTS.op_stats_v2.pb", "h0.SSTABLE"]
    puts = [name for op, name in store.journal if op == "put"]
    assert puts[-2:] == ["cache_version.txt", "s1.json"]
    assert not list(world.settings.work_dir.glob("warm-*"))
    reports = [m for m in world.recorder.published if isinstance(m, ProfilerSessionReported)]
    assert len(reports) == 2
    assert reports[0].event_id == reports[1].event_id


async def test_a_rewarm_replaces_the_old_caches_in_running_instances(tmp_path: Path) -> None:
    world, store, _, warmer = _setup(tmp_path)
    await store.put(PREFIX + "h0.xplane.pb", b"0")
    await warmer.warm(_session("h0"))
    instance = (await world.service.start(["run-1"], ALICE)).instance
    copy = Path(instance.logdir) / "run-1/plugins/profile/s1"
    assert (copy / "ALL_HOSTS.op_stats_v2.pb").read_text() == "h0"
    (copy / "ALL_HOSTS.memory_stats.pb").write_text("XProf's own, from h0 alone")

    await store.put(PREFIX + "h1.xplane.pb", b"1")
    await warmer.warm(_session("h0", "h1"))

    assert (copy / "ALL_HOSTS.op_stats_v2.pb").read_text() == "h0,h1"
    assert (copy / "h1.SSTABLE").is_file()
    assert (copy / "h1.xplane.pb").is_file()
    assert not (copy / "ALL_HOSTS.memory_stats.pb").exists()
    assert (copy / "cache_version.txt").is_file()


async def test_caches_of_a_warm_by_an_earlier_provisioner_are_replaced(tmp_path: Path) -> None:
    # Stored before markers existed: cache_version.txt alone, from one host.
    world, store, runner, warmer = _setup(tmp_path)
    for name, data in (("h0.xplane.pb", b"0"), ("h1.xplane.pb", b"1")):
        await store.put(PREFIX + name, data)
    await store.put(PREFIX + "ALL_HOSTS.op_stats_v2.pb", b"h0")
    await store.put(PREFIX + "cache_version.txt", xprof_version().encode())

    assert (await warmer.warm(_session("h0", "h1", prewarmed=True))).outcome == "rewarmed"
    assert runner.converted == [["h0", "h1"]]
    assert await store.get(PREFIX + "ALL_HOSTS.op_stats_v2.pb") == b"h0,h1"
    assert world.recorder.published
