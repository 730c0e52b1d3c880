"""The provisioner's domain logic with a fake XProf launcher, a fake publisher and a FileStore."""

import asyncio
import threading
from pathlib import Path

import pytest

from mldiag_platform.storage import FileStore
from mldiag_xprof_provisioner.errors import (
    InstanceNotFound,
    InstanceNotRunning,
    InvalidRunId,
    InvalidSessionId,
    NoFreePorts,
    RunNotFound,
    SessionNotFound,
    TooManyInstances,
    XProfStartFailed,
)
from mldiag_xprof_provisioner.instances import copies
from mldiag_xprof_provisioner.instances.copies import OWNER_FILE
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from support import wait_until
from xprof_provisioner.xprof_fakes import ALICE, BOB, FAILED, RUNNING, STARTING, STOPPED, World


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


async def _launched(world: World) -> None:
    """Wait until the (gated) XProf of a start in progress has been launched."""

    async def count() -> int:
        return len(world.launcher.launched)

    await wait_until(count, lambda launched: launched > 0, timeout=5)


async def test_start_copies_the_runs_profiles_and_reports_a_running_instance(world: World) -> None:
    await world.store.put("run-1/plugins/profile/s1/host1.xplane.pb", b"xplane")
    await world.store.put("run-1/plugins/profile/s2/host2.xplane.pb", b"other")
    await world.store.put("run-1/metrics.json", b"not a profile")
    await world.store.put("run-10/plugins/profile/s9/host.xplane.pb", b"another run")

    started = await world.start(["run-1"])

    instance = started.instance
    assert started.created
    assert instance.state is RUNNING
    assert instance.run_ids == ["run-1"]
    assert instance.name == f"xprofInstances/{instance.instance_id}"
    # Never XProf's own address: the UI through the proxy.
    assert instance.url == (
        f"https://mldiag.example/xprof/{instance.instance_id}/data/plugin/profile/"
    )
    assert 9100 <= instance.port < 9120
    assert instance.grpc_port == 0
    assert instance.memory_limit_bytes == 4 * 1024**3
    assert instance.memory_bytes == 100 * 1024 * 1024
    [process] = world.launcher.launched
    assert process.spec.logdir == Path(instance.logdir)
    assert process.spec.port == instance.port
    assert process.spec.log_path == Path(instance.logdir).parent / "xprof.log"
    # XProf lists <run>/<session>: each run is a directory of the logdir.
    assert process.files_at_launch == [
        "run-1/plugins/profile/s1/host1.xplane.pb",
        "run-1/plugins/profile/s2/host2.xplane.pb",
    ]
    copy = Path(instance.logdir) / "run-1/plugins/profile/s1/host1.xplane.pb"
    assert copy.read_bytes() == b"xplane"
    assert world.recorder.states() == [STARTING, RUNNING]


async def test_an_instance_serves_several_runs_and_is_reused_for_any_subset(world: World) -> None:
    await world.store.put("run-a/plugins/profile/s1/h.xplane.pb", b"a")
    await world.store.put("run-b/plugins/profile/s2/h.xplane.pb", b"b")
    both = await world.start(["run-b", "run-a", "run-b"])
    assert both.instance.run_ids == ["run-a", "run-b"]
    assert world.launcher.launched[0].files_at_launch == [
        "run-a/plugins/profile/s1/h.xplane.pb",
        "run-b/plugins/profile/s2/h.xplane.pb",
    ]
    again = await world.start(["run-a"])
    assert not again.created
    assert again.instance.instance_id == both.instance.instance_id
    # A run it does not serve needs another instance; then the tighter fit wins.
    other = await world.start(["run-a", "run-c"])
    assert other.created
    only_a = await world.start(["run-a"])
    assert only_a.instance.instance_id == both.instance.instance_id
    assert len(world.launcher.launched) == 2


async def test_a_run_without_profiles_gets_no_instance(world: World) -> None:
    # An instance that would serve nothing must not take a slot (issue 14, item 8).
    await world.store.put("empty-run/plugins/profile/s1/h.trace.json.gz", b"not an xplane")
    with pytest.raises(RunNotFound, match="empty-run") as caught:
        await world.service.start(["run-0", "empty-run"], ALICE)
    assert caught.value.http_status == 404
    assert caught.value.details == [{"runId": "empty-run"}, {"runId": "run-0"}]
    assert world.launcher.launched == []
    assert await world.service.list_instances() == []


async def test_starting_a_run_again_returns_its_instance(world: World) -> None:
    first = await world.start(["run-1"])
    world.clock.advance(10)
    second = await world.start(["run-1"])
    assert not second.created
    assert second.instance.instance_id == first.instance.instance_id
    assert second.instance.last_access_time == world.clock.now
    assert len(world.launcher.launched) == 1


async def test_concurrent_starts_of_one_run_share_one_xprof(world: World) -> None:
    world.launcher.behaviour = "gated"
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    first = asyncio.create_task(world.service.start(["run-1"], ALICE))
    second = asyncio.create_task(world.service.start(["run-1"], ALICE))
    await _launched(world)
    [listed] = await world.service.list_instances()
    assert listed.state is STARTING
    world.launcher.gate.set()
    results = await asyncio.gather(first, second)
    assert sorted(r.created for r in results) == [False, True]
    assert {r.instance.instance_id for r in results} == {listed.instance_id}
    assert all(r.instance.state is RUNNING for r in results)
    assert len(world.launcher.launched) == 1


async def test_more_than_max_instances_in_use_is_refused_with_a_clear_error(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, max_instances=2)
    first = await world.start(["run-1"])
    second = await world.start(["run-2"])
    # Both answering a request: neither can make room.
    leases = [await world.service.acquire(i.instance.instance_id) for i in (first, second)]
    with pytest.raises(TooManyInstances, match="no room for another XProf") as caught:
        await world.start(["run-3"])
    assert caught.value.code == "too_many_instances"
    assert caught.value.http_status == 429
    assert caught.value.details == [{"scope": "service", "limit": 2}]
    for lease in leases:
        lease.release()
    third = await world.start(["run-3"])
    assert third.instance.state is RUNNING
    # The caller's least recently used instance made room.
    states = {i.run_ids[0]: i.state for i in await world.service.list_instances()}
    assert states == {"run-1": STOPPED, "run-2": RUNNING, "run-3": RUNNING}


async def test_ports_are_checked_and_never_shared_while_in_use(world: World) -> None:
    world.launcher.busy_ports = {9100, 9102}
    one = (await world.start(["run-1"])).instance
    two = (await world.start(["run-2"])).instance
    assert (one.port, two.port) == (9101, 9103)
    await world.service.stop(one.instance_id)
    # Freed ports return to the pool once their XProf is gone.
    three = (await world.start(["run-3"])).instance
    assert three.port == 9101


async def test_an_exhausted_port_range_is_a_clear_error(tmp_path: Path) -> None:
    world = World(tmp_path, instance_port_count=1)
    await world.start(["run-1"])
    with pytest.raises(NoFreePorts, match="9100-9100"):
        await world.start(["run-2"])


@pytest.mark.parametrize("run_id", ["Not.Valid", "", "a/../../etc", "-x", "../x"])
async def test_an_invalid_run_id_is_refused(world: World, run_id: str) -> None:
    with pytest.raises(InvalidRunId) as caught:
        await world.start([run_id])
    assert caught.value.http_status == 400
    assert world.launcher.launched == []


async def test_an_xprof_that_exits_is_failed_with_its_reason(world: World) -> None:
    world.launcher.behaviour = "exit"
    with pytest.raises(XProfStartFailed, match="boom") as caught:
        await world.start(["run-1"])
    assert caught.value.code == "xprof_start_failed"
    [failed] = await world.service.list_instances()
    assert caught.value.details == [{"instance": failed.name}]
    assert failed.state is FAILED
    assert "exited with status 1" in failed.error
    assert failed.url == ""
    assert not Path(failed.logdir).parent.exists()
    assert world.recorder.states() == [STARTING, FAILED]
    # The failed instance holds nothing: the run can be started again, on the same ports.
    world.launcher.behaviour = "ready"
    again = await world.start(["run-1"])
    assert again.created
    assert again.instance.port == failed.port


async def test_an_xprof_that_never_answers_is_stopped_and_failed(tmp_path: Path) -> None:
    world = World(tmp_path, startup_timeout_seconds=0.05)
    world.launcher.behaviour = "hang"
    with pytest.raises(XProfStartFailed, match=r"did not answer on port \d+ within 0.05 s"):
        await world.start(["run-1"])
    [process] = world.launcher.launched
    assert process.stops == 1
    [failed] = await world.service.list_instances()
    assert "something broke" in failed.error


async def test_stop_ends_the_process_deletes_the_copy_and_is_idempotent(world: World) -> None:
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    instance = (await world.start(["run-1"])).instance
    stopped = await world.service.stop(instance.instance_id)
    assert stopped.state is STOPPED
    assert stopped.url == ""
    assert world.launcher.launched[0].stops == 1
    assert not Path(instance.logdir).parent.exists()
    again = await world.service.stop(instance.instance_id)
    assert again.state is STOPPED
    assert world.launcher.launched[0].stops == 1
    assert world.recorder.states() == [STARTING, RUNNING, STOPPED]
    # A new start for the run makes a new instance rather than reviving the stopped one.
    fresh = await world.start(["run-1"])
    assert fresh.created
    assert fresh.instance.instance_id != instance.instance_id


async def test_stopping_a_starting_instance_cancels_its_start(world: World) -> None:
    world.launcher.behaviour = "gated"
    starting = asyncio.create_task(world.start(["run-1"]))
    await _launched(world)
    [listed] = await world.service.list_instances()
    stopped = await world.service.stop(listed.instance_id)
    assert stopped.state is STOPPED
    result = await starting
    assert result.instance.state is STOPPED
    assert world.launcher.launched[0].stops == 1
    assert world.recorder.states() == [STARTING, STOPPED]


async def test_concurrent_stops_stop_once(world: World) -> None:
    instance = (await world.start(["run-1"])).instance
    results = await asyncio.gather(*(world.service.stop(instance.instance_id) for _ in range(3)))
    assert {r.state for r in results} == {STOPPED}
    assert world.launcher.launched[0].stops == 1
    assert world.recorder.states().count(STOPPED) == 1


async def test_get_counts_as_access_and_unknown_ids_are_not_found(world: World) -> None:
    instance = (await world.start(["run-1"])).instance
    world.clock.advance(30)
    seen = await world.service.get(instance.instance_id)
    assert seen.last_access_time == world.clock.now
    listed = await world.service.list_instances()
    assert listed[0].last_access_time == world.clock.now
    with pytest.raises(InstanceNotFound) as caught:
        await world.service.get("nope")
    assert caught.value.code == "not_found"
    assert caught.value.http_status == 404
    with pytest.raises(InstanceNotFound):
        await world.service.stop("nope")


async def test_the_reaper_stops_idle_instances_and_later_forgets_them(world: World) -> None:
    idle = (await world.start(["run-1"])).instance
    busy = (await world.start(["run-2"])).instance
    world.clock.advance(45)
    await world.service.get(busy.instance_id)
    world.clock.advance(30)  # idle: 75 s unused, busy: 30 s

    await world.service.reap()

    states = {i.instance_id: i.state for i in await world.service.list_instances()}
    assert states == {idle.instance_id: STOPPED, busy.instance_id: RUNNING}
    assert world.launcher.launched[0].stops == 1
    world.clock.advance(61)
    await world.service.reap()
    remaining = await world.service.list_instances()
    # The stopped one is forgotten after as long again; busy has gone idle meanwhile.
    assert [(i.instance_id, i.state) for i in remaining] == [(busy.instance_id, STOPPED)]
    with pytest.raises(InstanceNotFound):
        await world.service.get(idle.instance_id)


async def test_the_reaper_task_runs_on_its_own(tmp_path: Path) -> None:
    world = World(tmp_path, idle_timeout_seconds=0.2)
    instance = (await world.start(["run-1"])).instance
    reaper = asyncio.create_task(world.service.run_reaper())
    try:
        world.clock.advance(1)
        for _ in range(100):
            if world.recorder.states(instance.instance_id)[-1:] == [STOPPED]:
                break
            await asyncio.sleep(0.02)
    finally:
        reaper.cancel()
        await asyncio.wait({reaper})
    assert world.recorder.states(instance.instance_id)[-1] is STOPPED


async def test_a_crashed_xprof_is_noticed_as_failed(world: World) -> None:
    instance = (await world.start(["run-1"])).instance
    world.launcher.launched[0].exit_status = -9
    seen = await world.service.get(instance.instance_id)
    assert seen.state is FAILED
    assert "exited with status -9" in seen.error
    assert "something broke" in seen.error
    # The run is served again by a fresh instance.
    replacement = await world.start(["run-1"])
    assert replacement.created
    assert replacement.instance.state is RUNNING


async def test_close_stops_every_instance(world: World) -> None:
    for run in ("run-1", "run-2", "run-3"):
        await world.start([run])
    await world.service.close()
    assert {i.state for i in await world.service.list_instances()} == {STOPPED}
    assert [p.stops for p in world.launcher.launched] == [1, 1, 1]


async def test_stale_copies_of_dead_provisioners_are_removed(world: World) -> None:
    work = world.settings.work_dir
    for name, owner in (("dead", "4242"), ("alive", "77"), ("garbled", "x")):
        (work / name / "logdir").mkdir(parents=True)
        (work / name / OWNER_FILE).write_text(owner)
    (work / "not-ours").mkdir()
    world.launcher.alive_pids = {77}
    await world.service.remove_stale_copies()
    assert sorted(p.name for p in work.iterdir()) == ["alive", "not-ours"]


async def test_object_keys_that_are_not_plain_files_are_skipped(world: World) -> None:
    class OddStore(FileStore):
        async def list(self, prefix: str = "") -> list[str]:
            keys = await super().list(prefix)
            return [*keys, f"{prefix}../../escape.pb", f"{prefix}folder/"]

    odd = OddStore(world.store.root)
    await odd.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    service = XProfProvisioner(world.settings, odd, world.recorder, world.launcher, world.clock)
    await service.start(["run-1"], ALICE)
    assert world.launcher.launched[0].files_at_launch == ["run-1/plugins/profile/s1/h.xplane.pb"]


class OrderedStore(FileStore):
    """Remembers which keys were read, in order."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.read: list[str] = []

    async def download_to(self, key: str, path: Path) -> int:
        size = await super().download_to(key, path)
        self.read.append(key.rsplit("/", 1)[-1])
        return size


async def test_xprofs_cache_markers_are_copied_after_the_files_they_vouch_for(
    world: World,
) -> None:
    store = OrderedStore(world.store.root)
    names = ["cache_version.txt", ".cached_tools.json", "h.xplane.pb", "h.SSTABLE", "a.pb"]
    for name in names:
        await store.put(f"run-1/plugins/profile/s1/{name}", b"x" * 3)
    service = XProfProvisioner(world.settings, store, world.recorder, world.launcher, world.clock)

    await service.start(["run-1"], ALICE)

    assert sorted(store.read[-2:]) == [".cached_tools.json", "cache_version.txt"]
    assert sorted(store.read) == sorted(names)
    store.read.clear()
    await store.put("run-1/plugins/profile/s2/cache_version.txt", b"2.24.2")
    await store.put("run-1/plugins/profile/s2/h.xplane.pb", b"x")
    await service.sync_session("run-1", "s2")
    assert store.read == ["h.xplane.pb", "cache_version.txt"]


async def test_a_stop_mid_copy_waits_for_writes_and_leaves_nothing(world: World) -> None:
    entered, release = threading.Event(), threading.Event()

    class SlowStore(FileStore):
        async def download_to(self, key: str, path: Path) -> int:
            def slow() -> None:
                entered.set()
                release.wait(5)

            await asyncio.to_thread(slow)
            return await super().download_to(key, path)

    store = SlowStore(world.store.root)
    await store.put("run-1/plugins/profile/s1/h.xplane.pb", b"xplane")
    service = XProfProvisioner(world.settings, store, world.recorder, world.launcher, world.clock)
    starting = asyncio.create_task(service.start(["run-1"], ALICE))
    await asyncio.to_thread(entered.wait, 5)
    [instance] = await service.list_instances()
    stopping = asyncio.create_task(service.stop(instance.instance_id))
    await asyncio.sleep(0.05)
    assert not stopping.done(), "the stop waits for the download in its thread"
    release.set()
    stopped = await stopping

    assert stopped.state is STOPPED
    assert not Path(instance.logdir).parent.exists(), "nothing landed after the delete"
    assert (await starting).instance.state is STOPPED
    assert world.launcher.launched == [], "a cancelled start launches nothing"


async def test_no_sync_writes_into_an_instance_being_torn_down(world: World) -> None:
    instance = (await world.start(["run-1"])).instance
    record = world.service._instances[instance.instance_id]
    await world.service.stop(instance.instance_id)
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"late")

    assert await copies.copy_session(world.store, record, "run-1", "s1") == 0
    assert not await asyncio.to_thread(Path(instance.logdir).exists)


async def test_a_bus_outage_does_not_stop_xprof_from_starting(tmp_path: Path) -> None:
    world = World(tmp_path, publish_fails=True)
    instance = (await world.start(["run-1"])).instance
    assert instance.state is RUNNING
    assert (await world.service.stop(instance.instance_id)).state is STOPPED


async def test_opening_a_session_starts_an_instance_and_names_its_hosts(world: World) -> None:
    await world.store.put("run-1/plugins/profile/s1/host-b.xplane.pb", b"b")
    await world.store.put("run-1/plugins/profile/s1/host-a.xplane.pb", b"a")
    await world.store.put("run-1/plugins/profile/s1/host-a.trace.json.gz", b"not a host")
    opened = await world.service.open_session("run-1", "s1", ALICE)
    assert opened.created
    assert opened.hosts == ["host-a", "host-b"]
    assert opened.instance.state is RUNNING
    assert opened.instance.run_ids == ["run-1"]
    again = await world.service.open_session("run-1", "s1", ALICE)
    assert not again.created
    assert again.instance.instance_id == opened.instance.instance_id


async def test_opening_a_session_that_landed_after_the_copy_copies_it(world: World) -> None:
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"one")
    instance = (await world.start(["run-1"])).instance
    await world.store.put("run-1/plugins/profile/s2/h.xplane.pb", b"two")
    await world.service.open_session("run-1", "s2", ALICE)
    assert (Path(instance.logdir) / "run-1/plugins/profile/s2/h.xplane.pb").read_bytes() == b"two"


@pytest.mark.parametrize(
    ("run_id", "session_id", "error"),
    [
        ("nothing-here", "s1", RunNotFound),
        ("run-1", "missing", SessionNotFound),
        ("run-1", "empty", SessionNotFound),
        ("run-1", "../s1", InvalidSessionId),
        ("Run.1", "s1", InvalidRunId),
    ],
)
async def test_opening_an_unknown_session_is_a_clear_error(
    world: World, run_id: str, session_id: str, error: type[Exception]
) -> None:
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    await world.store.put("run-1/plugins/profile/empty/h.trace.json.gz", b"no xplane")
    with pytest.raises(error):
        await world.service.open_session(run_id, session_id, ALICE)
    assert world.launcher.launched == []


async def test_a_session_change_syncs_new_files_into_instances_serving_the_run(
    world: World,
) -> None:
    await world.store.put("run-1/plugins/profile/s1/h1.xplane.pb", b"h1")
    serving = (await world.start(["run-1", "run-2"])).instance
    other = (await world.start(["run-3"])).instance
    logdir = Path(serving.logdir) / "run-1/plugins/profile/s1"
    # XProf wrote its own cache meanwhile: a sync must not overwrite it.
    (logdir / "h1.SSTABLE").write_bytes(b"computed by XProf")
    await world.store.put("run-1/plugins/profile/s1/h1.SSTABLE", b"pre-warmed")
    await world.store.put("run-1/plugins/profile/s1/h2.xplane.pb", b"h2")
    await world.store.put("run-1/plugins/profile/s1/cache_version.txt", b"2.24.2")

    copied = await world.service.sync_session("run-1", "s1")

    assert copied == 2
    assert (logdir / "h2.xplane.pb").read_bytes() == b"h2"
    assert (logdir / "cache_version.txt").read_bytes() == b"2.24.2"
    assert (logdir / "h1.SSTABLE").read_bytes() == b"computed by XProf"
    assert not (Path(other.logdir) / "run-1").exists()
    assert not any(p.name.endswith(".part") for p in logdir.iterdir())
    assert await world.service.sync_session("run-1", "s1") == 0
    assert await world.service.sync_session("run-9", "s1") == 0


async def test_a_request_in_flight_keeps_an_instance_from_being_reaped(world: World) -> None:
    instance = (await world.start(["run-1"])).instance
    lease = await world.service.acquire(instance.instance_id)
    assert lease.port == instance.port
    assert lease.run_ids == ("run-1",)
    world.clock.advance(120)  # a long conversion: past the idle timeout
    await world.service.reap()
    assert (await world.service.list_instances())[0].state is RUNNING
    lease.release()
    lease.release()  # idempotent
    world.clock.advance(30)
    await world.service.reap()  # used until the answer ended: not idle yet
    assert (await world.service.list_instances())[0].state is RUNNING
    world.clock.advance(31)
    await world.service.reap()
    assert (await world.service.list_instances())[0].state is STOPPED
    with pytest.raises(InstanceNotRunning) as caught:
        await world.service.acquire(instance.instance_id)
    assert caught.value.http_status == 409
    with pytest.raises(InstanceNotFound):
        await world.service.acquire("nope")


async def test_acquiring_a_starting_instance_waits_for_it(world: World) -> None:
    world.launcher.behaviour = "gated"
    starting = asyncio.create_task(world.start(["run-1"]))
    await _launched(world)
    [listed] = await world.service.list_instances()
    acquiring = asyncio.create_task(world.service.acquire(listed.instance_id))
    await asyncio.sleep(0.01)
    assert not acquiring.done()
    world.launcher.gate.set()
    lease = await acquiring
    await starting
    assert lease.instance_id == listed.instance_id
    lease.release()


async def test_an_instance_past_its_memory_cap_is_recycled_keeping_its_id(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, memory_limit_bytes=500 * 1024 * 1024)
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    instance = (await world.start(["run-1"])).instance
    [first] = world.launcher.launched
    first.rss = 2 * 1024**3  # a big trace was rendered
    lease = await world.service.acquire(instance.instance_id)
    await world.service.reap()
    # Not under a request: it would cut the answer.
    assert len(world.launcher.launched) == 1
    [measured] = await world.service.list_instances()
    assert measured.memory_bytes == 2 * 1024**3
    lease.release()

    await world.service.reap()
    during = await world.service.acquire(instance.instance_id)  # waits out the restart
    during.release()

    [recycled] = await world.service.list_instances()
    assert recycled.instance_id == instance.instance_id
    assert recycled.state is RUNNING
    assert recycled.recycles == 1
    assert recycled.memory_bytes == 100 * 1024 * 1024
    assert recycled.url == instance.url
    assert first.stops == 1
    [_, second] = world.launcher.launched
    assert second.spec == first.spec  # same logdir (with XProf's caches) and port
    assert "run-1/plugins/profile/s1/h.xplane.pb" in second.files_at_launch
    assert world.recorder.states() == [STARTING, RUNNING, STARTING, RUNNING]
    await world.service.stop(instance.instance_id)
    assert second.stops == 1


async def test_an_instance_that_fails_to_come_back_from_a_recycle_is_failed(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, memory_limit_bytes=1)
    instance = (await world.start(["run-1"])).instance
    world.launcher.behaviour = "exit"
    await world.service.reap()
    with pytest.raises(InstanceNotRunning):
        await world.service.acquire(instance.instance_id)
    [failed] = await world.service.list_instances()
    assert failed.state is FAILED
    assert "exited with status 1" in failed.error
    assert not Path(failed.logdir).parent.exists()


async def test_no_cap_means_no_recycle(tmp_path: Path) -> None:
    world = World(tmp_path, memory_limit_bytes=0)
    await world.start(["run-1"])
    world.launcher.launched[0].rss = 64 * 1024**3
    await world.service.reap()
    assert len(world.launcher.launched) == 1


async def test_stop_listeners_hear_of_every_stopped_instance(world: World) -> None:
    heard: list[str] = []
    world.service.on_stop(heard.append)
    instance = (await world.start(["run-1"])).instance
    await world.service.stop(instance.instance_id)
    assert heard == [instance.instance_id]


async def test_a_full_house_makes_room_from_instances_nobody_has_used_lately(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, max_instances=2, max_instances_per_caller=2)
    alice = (await world.start(["run-1"], ALICE)).instance
    world.clock.advance(10)
    bob = (await world.start(["run-2"], BOB)).instance
    # Both were used in the last minute: a third caller waits rather than cutting them off.
    with pytest.raises(TooManyInstances, match="used in the last 60 s"):
        await world.start(["run-3"], "token-carol")
    world.clock.advance(55)  # alice's: 65 s unused; bob's: 55 s
    carol = await world.start(["run-3"], "token-carol")
    assert carol.created
    states = {i.instance_id: i.state for i in await world.service.list_instances()}
    assert states[alice.instance_id] is STOPPED
    assert states[bob.instance_id] is RUNNING


async def test_a_caller_at_its_limit_recycles_its_own_least_recently_used(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, max_instances=4, max_instances_per_caller=2)
    first = (await world.start(["run-1"], ALICE)).instance
    world.clock.advance(1)
    second = (await world.start(["run-2"], ALICE)).instance
    world.clock.advance(1)
    await world.service.get(first.instance_id)  # first is now the more recently used
    third = (await world.start(["run-3"], ALICE)).instance
    states = {i.instance_id: i.state for i in await world.service.list_instances()}
    assert states == {
        first.instance_id: RUNNING,
        second.instance_id: STOPPED,
        third.instance_id: RUNNING,
    }
    # Reusing an instance someone else started costs nothing against one's own limit.
    shared = await world.start(["run-3"], BOB)
    assert not shared.created
