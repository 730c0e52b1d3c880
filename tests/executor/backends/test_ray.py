"""The Ray backend against a real two-node Ray cluster on loopback addresses (started once
for the module with ``ray start``, its own temp dir and ports, torn down by process
group): replicas run under the launcher and report their exits, stops kill, a job's
replicas are gang-placed across the nodes with each other's node addresses, and a new
executor process re-attaches to what runs.

The pure parts (resources, names, address rewriting) are unit tests without Ray."""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import nats
import psutil  # type: ignore[import-untyped,unused-ignore]
import pytest

from executor.backends.support_gang import gang_commands
from executor.support_executor import start_command
from mldiag_executor.backends.addresses import Slot, local_slots, rewrite_addresses
from mldiag_executor.backends.base import ReplicaExit
from mldiag_executor.backends.ray import (
    RayBackend,
    RayBackendSettings,
    RayMissing,
    cluster_capacity,
    key_of,
    ray_resources,
)
from mldiag_executor.errors import Rejected
from mldiag_executor.launch import LaunchConfig, Storage, attempt_name, prepare
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.replicas import (
    ExecutorAnnounced,
    ReplicaExited,
    ReplicaKey,
    ReplicaStarted,
    Resources,
    StartReplica,
)
from support import free_port, read_messages

EXECUTOR = "ray-test"
NO_API = {"MLDIAG_API_URL": "http://127.0.0.1:1", "MLDIAG_INGESTION_URL": "http://127.0.0.1:1"}
HEAD_IP = "127.0.0.2"
SECOND_IP = "127.0.0.3"
ONE_CPU = Resources(cpus=1, memory_bytes=0)
# Slow machines start Ray's agents slowly; the defaults give up after seconds.
RAY_ENV = {
    "RAY_agent_register_timeout_ms": "300000",
    "RAY_raylet_start_wait_time_s": "300",
    "RAY_gcs_server_port_wait_time_s": "300",
    "RAY_enable_worker_prestart": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


# --- without Ray ------------------------------------------------------------------------------


def test_resources_become_a_bundle() -> None:
    assert ray_resources(Resources(cpus=4, memory_bytes=1 << 30)) == {
        "CPU": 4,
        "memory": float(1 << 30),
    }
    gpu = Resources(cpus=8, memory_bytes=0, accelerator_type="NVIDIA_TESLA_T4", accelerator_count=2)
    assert ray_resources(gpu) == {"CPU": 8, "GPU": 2, "accelerator_type:T4": 0.001}
    with pytest.raises(Rejected, match="no Ray accelerator_type"):
        ray_resources(gpu.model_copy(update={"accelerator_type": "NVIDIA_B300"}))


def test_cluster_capacity_names_the_accelerator_the_vertex_way() -> None:
    totals = {"CPU": 16.0, "memory": 1e10, "GPU": 4.0, "accelerator_type:A100": 2.0}
    assert cluster_capacity(totals) == Resources(
        cpus=16, memory_bytes=10**10, accelerator_type="NVIDIA_TESLA_A100", accelerator_count=4
    )
    assert cluster_capacity({"CPU": 2.0}) == Resources(cpus=2, memory_bytes=0)


def test_actor_names_are_attempt_keys() -> None:
    key = ReplicaKey(job_id="98", pool=1, index=2, attempt=3)
    assert key_of(attempt_name(key)) == key
    assert key_of("something-else") is None


def test_addresses_move_to_the_nodes_replicas_landed_on() -> None:
    (chief, worker) = gang_commands(
        executor_id=EXECUTOR,
        address="10.0.0.1",
        pools=[(1, ONE_CPU), (1, ONE_CPU)],
        deadline=datetime.now(UTC),
        logs_root="file:///tmp/logs",
    )
    env = worker.launch.env
    assert local_slots(env, "10.0.0.1", worker.replica, worker.launch.port) == [
        Slot(0, 0, 20000),
        Slot(1, 0, 20001),
    ]
    assert local_slots(env, "10.9.9.9", worker.replica, 20001) == [Slot(1, 0, 20001)]
    moved = rewrite_addresses(env, "10.0.0.1", {20000: "10.0.0.7", 20001: "10.0.0.8"})
    assert json.loads(moved["CLUSTER_SPEC"])["cluster"] == {
        "workerpool0": ["10.0.0.7:20000"],
        "workerpool1": ["10.0.0.8:20001"],
    }
    assert moved["MASTER_ADDR"] == "10.0.0.7"
    assert moved["JAX_COORDINATOR_ADDRESS"] == "10.0.0.7:20000"
    # A longer address that merely starts with the executor's is left alone.
    assert rewrite_addresses({"X": "10.0.0.10:20000"}, "10.0.0.1", {20000: "h"}) == {
        "X": "10.0.0.10:20000"
    }
    assert chief.launch.env["MASTER_ADDR"] == "10.0.0.1"


def test_an_executor_without_ray_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mldiag_executor.backends import create_backend  # noqa: PLC0415
    from mldiag_executor.settings import ExecutorSettings  # noqa: PLC0415

    settings = ExecutorSettings(backend="ray", executor_id="r", state_dir=tmp_path)
    assert create_backend(settings).name == "ray"
    monkeypatch.setitem(sys.modules, "ray", None)  # what an interpreter without Ray has
    with pytest.raises(RayMissing, match="pip install 'ray\\[default\\]'"):
        create_backend(settings)


# --- a real cluster ---------------------------------------------------------------------------


@dataclass
class RayCluster:
    address: str
    groups: list[int]


def _ray_start(arguments: list[str], temp_dir: Path) -> int:
    ray = str(Path(sys.executable).parent / "ray")
    ports = [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]
    # Ray's raylet gives its agents 15 s to come up; on a loaded machine they take longer. A
    # root test run lifts the cluster's priority while it starts (and lowers it back after).
    nice = ["nice", "-n", "-15"] if os.geteuid() == 0 else []
    process = subprocess.Popen(  # its daemons keep its process group: the teardown's handle
        [
            *nice,
            ray,
            "start",
            *arguments,
            f"--temp-dir={temp_dir}",
            "--num-cpus=1",
            "--object-store-memory=80000000",
            "--disable-usage-stats",
            *ports,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **RAY_ENV},
    )
    output, _ = process.communicate(timeout=600)
    if nice:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, process.pid, 0)
    if process.returncode != 0:
        _stop_groups([process.pid])
        pytest.fail(f"ray start {' '.join(arguments)} failed:\n{output.decode()[-3000:]}")
    return process.pid


def _stop_groups(groups: list[int]) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)
        if signum == signal.SIGTERM:
            time.sleep(2)


CLUSTER_ATTEMPTS = 3
"""Ray's node agents sometimes die seconds after `ray start` said the node is up (a
runtime-env agent exiting, and its raylet with it): the cluster is checked and started
afresh, so a test never meets a cluster that lost a node before it began."""


def _alive_nodes(gcs: str) -> int:
    """How many nodes the cluster at ``gcs`` counts alive (asked from a fresh driver)."""
    probe = "import ray; ray.init(address={!r}); print(sum(n['Alive'] for n in ray.nodes()))"
    done = subprocess.run(  # fixed argument list
        [sys.executable, "-c", probe.format(gcs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **RAY_ENV},
    )
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else 0


def _start_cluster(root: Path) -> RayCluster:
    groups: list[int] = []
    gcs = f"{HEAD_IP}:{free_port()}"
    try:
        groups.append(
            _ray_start(
                [
                    "--head",
                    f"--node-ip-address={HEAD_IP}",
                    f"--port={gcs.rpartition(':')[2]}",
                    "--include-dashboard=false",
                    f"--dashboard-port={free_port()}",
                    f"--ray-client-server-port={free_port()}",
                ],
                root / "head",
            )
        )
        groups.append(
            _ray_start([f"--address={gcs}", f"--node-ip-address={SECOND_IP}"], root / "second")
        )
    except BaseException:
        _stop_groups(groups)
        raise
    return RayCluster(gcs, groups)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A head on 127.0.0.2 and a second node on 127.0.0.3, one CPU each."""
    pytest.importorskip("ray")
    # Unix socket paths are short: a temp dir of our own right under /tmp.
    root = Path(tempfile.mkdtemp(prefix="mldiag-ray-", dir="/tmp"))
    cluster = None
    try:
        failures: list[str] = []
        for attempt in range(CLUSTER_ATTEMPTS):
            try:
                cluster = _start_cluster(root / f"attempt-{attempt}")
            except pytest.fail.Exception as failed:  # `ray start` itself failed
                failures.append(str(failed))
                continue
            time.sleep(5)  # past the moment a dying agent takes its raylet down
            if _alive_nodes(cluster.address) == 2:
                break
            failures.append("a node died after `ray start`")
            _stop_groups(cluster.groups)
            cluster = None
        if cluster is None:
            pytest.fail(
                f"no healthy two-node Ray cluster in {CLUSTER_ATTEMPTS} attempts: {failures}"
            )
        yield cluster
    finally:
        if cluster is not None:
            _stop_groups(cluster.groups)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def config(tmp_path: Path) -> LaunchConfig:
    return LaunchConfig(
        storage=Storage(f"file://{tmp_path / 'store'}"),
        state_dir=tmp_path / "state",
        images={"python-test": sys.executable},
    )


def _backend(
    cluster: RayCluster, config: LaunchConfig, placement_timeout: float = 120
) -> RayBackend:
    return RayBackend(
        executor_id=EXECUTOR,
        storage=config.storage,
        state_dir=config.state_dir,
        settings=RayBackendSettings(
            address=cluster.address,
            node_ip_address=HEAD_IP,
            gang_wait_seconds=5,
            placement_timeout_seconds=placement_timeout,
            group_linger_seconds=0,
            refresh_seconds=0.5,
        ),
        deadline_grace_seconds=0.5,
    )


@pytest.fixture
async def backend(ray_cluster: RayCluster, config: LaunchConfig) -> AsyncIterator[RayBackend]:
    backend = _backend(ray_cluster, config)
    await backend.connect()
    yield backend
    for key in backend.running():
        await backend.stop(key, 0)
    for key in list(backend._attempts):  # free the cluster for the next test
        await backend.reported(key)
    await backend.close()


def _command(tmp_path: Path, script: str, *, job_id: str) -> StartReplica:
    return start_command(
        executor_id=EXECUTOR,
        job_id=job_id,
        logs_uri=f"gs://bucket/jobs/{job_id}/logs/workerpool0-0/attempt-0",
        command=["python", "-c", textwrap.dedent(script)],
        env={**NO_API, "MARKER_DIR": str(tmp_path)},
    )


async def _start(backend: RayBackend, config: LaunchConfig, command: StartReplica) -> None:
    await backend.start(command, await prepare(command, config))


async def _next_exit(backend: RayBackend, timeout: float = 180) -> ReplicaExit:
    ended = await asyncio.wait_for(anext(backend.exits()), timeout)
    await backend.reported(ended.key)
    return ended


async def _wait_for_file(path: Path, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while not (text := await asyncio.to_thread(lambda: path.read_text() if path.exists() else "")):
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.1)
    return text.strip()


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie left to whoever adopted it."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.ray
@pytest.mark.connected
async def test_a_replica_runs_writes_its_logs_and_exits(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    assert backend.capacity().cpus == 2
    command = _command(
        tmp_path,
        """
        import os, pathlib
        pathlib.Path(os.environ["MARKER_DIR"], "ran").write_text(os.environ["MLDIAG_HOST"])
        print("hello from ray")
        """,
        job_id="101",
    )
    await _start(backend, config, command)
    await _start(backend, config, command)  # a redelivery starts nothing
    ended = await _next_exit(backend)
    assert (ended.key, ended.reason, ended.exit_code) == (command.replica, "exited", 0)
    assert (tmp_path / "ran").read_text() == "workerpool0-0"
    logs = tmp_path / "store/gs/bucket/jobs/101/logs/workerpool0-0/attempt-0"
    assert "hello from ray" in (logs / "stdout.log").read_text()


@pytest.mark.ray
@pytest.mark.connected
async def test_a_failing_replica_reports_its_exit_code_and_stderr(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        """
        import sys
        print("about to fail", file=sys.stderr)
        sys.exit(3)
        """,
        job_id="102",
    )
    await _start(backend, config, command)
    ended = await _next_exit(backend)
    assert (ended.reason, ended.exit_code) == ("exited", 3)
    assert "about to fail" in ended.message


@pytest.mark.ray
@pytest.mark.connected
async def test_stop_kills_a_running_replica(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        """
        import os, pathlib, time
        pathlib.Path(os.environ["MARKER_DIR"], "pid").write_text(str(os.getpid()))
        time.sleep(600)
        """,
        job_id="103",
    )
    await _start(backend, config, command)
    pid = int(await _wait_for_file(tmp_path / "pid"))
    await backend.stop(command.replica, 1)
    ended = await _next_exit(backend)
    assert ended.reason == "killed"
    assert ended.exit_code is not None and ended.exit_code != 0
    assert _gone(pid)


@pytest.mark.ray
@pytest.mark.connected
async def test_a_job_is_gang_placed_across_nodes_with_their_addresses(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import os, pathlib
        name = os.environ["MLDIAG_REPLICA"]
        pathlib.Path(os.environ["MARKER_DIR"], name).write_text(os.environ["CLUSTER_SPEC"])
        """
    )
    commands = gang_commands(
        executor_id=EXECUTOR,
        address=backend.address(),
        # One CPU each, one CPU per node: the group must spread them.
        pools=[(1, ONE_CPU), (1, ONE_CPU)],
        deadline=datetime.now(UTC) + timedelta(hours=1),
        logs_root="gs://bucket/jobs/104/logs",
        command=["python", "-c", script],
        image_uri="python-test",
        job_id="104",
    )
    for command in commands:
        env = {**command.launch.env, **NO_API, "MARKER_DIR": str(tmp_path)}
        launch = command.launch.model_copy(update={"env": env})
        await _start(backend, config, command.model_copy(update={"launch": launch}))
    ends = [await _next_exit(backend), await _next_exit(backend)]
    assert sorted((e.reason, e.exit_code) for e in ends) == [("exited", 0), ("exited", 0)]
    chief = json.loads((tmp_path / "workerpool0-0").read_text())
    worker = json.loads((tmp_path / "workerpool1-0").read_text())
    assert chief["cluster"] == worker["cluster"]
    hosts = {entry.rpartition(":")[0] for entries in chief["cluster"].values() for entry in entries}
    assert hosts == {HEAD_IP, SECOND_IP}
    assert worker["task"] == {"type": "workerpool1", "index": 0}


@pytest.mark.ray
@pytest.mark.connected
async def test_a_new_executor_process_reattaches_to_running_replicas(
    ray_cluster: RayCluster, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        """
        import os, pathlib, time
        pathlib.Path(os.environ["MARKER_DIR"], "pid").write_text(str(os.getpid()))
        time.sleep(600)
        """,
        job_id="105",
    )
    first = _backend(ray_cluster, config)
    await _start(first, config, command)
    pid = int(await _wait_for_file(tmp_path / "pid"))
    await first.close()  # the executor goes; the detached actor and its process stay
    os.kill(pid, 0)
    second = _backend(ray_cluster, config)
    try:
        assert await second.recover() == [command.replica]
        assert second.running() == [command.replica]
        await _start(second, config, command)  # known: nothing starts twice
        await second.stop(command.replica, 1)
        ended = await _next_exit(second)
        assert (ended.key, ended.reason) == (command.replica, "killed")
        assert _gone(pid)
        assert await second.recover() == []
    finally:
        await second.close()


@pytest.mark.ray
@pytest.mark.connected
async def test_the_deadline_kills_a_replica(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    command = _command(tmp_path, "import time; time.sleep(600)", job_id="106")
    command = command.model_copy(update={"deadline": datetime.now(UTC) + timedelta(seconds=3)})
    await _start(backend, config, command)
    ended = await _next_exit(backend)
    assert ended.reason == "killed"
    assert "deadline" in ended.message


@pytest.mark.ray
@pytest.mark.connected
async def test_a_job_no_node_fits_fails_its_setup(
    ray_cluster: RayCluster, config: LaunchConfig, tmp_path: Path
) -> None:
    backend = _backend(ray_cluster, config, placement_timeout=2)
    try:
        command = _command(tmp_path, "print('never')", job_id="107")
        big = command.launch.model_copy(update={"resources": Resources(cpus=2, memory_bytes=0)})
        # Two CPUs in the cluster, one per node: the sum fits, no node does.
        await _start(backend, config, command.model_copy(update={"launch": big}))
        ended = await _next_exit(backend, timeout=60)
        assert ended.reason == "setup_failed"
        assert "found no nodes" in ended.message
    finally:
        await backend.close()


@pytest.mark.ray
@pytest.mark.connected
async def test_the_executor_service_runs_a_job_on_ray_over_the_bus(
    ray_cluster: RayCluster, nats_settings: NatsSettings, publisher: Publisher, tmp_path: Path
) -> None:
    """``python -m mldiag_executor`` with ``MLDIAG_EXECUTOR_BACKEND=ray``: a command on its
    DISPATCH subject runs on the cluster; the facts and an announcement say so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLDIAG_")}
    env.update(
        MLDIAG_NATS_URL=nats_settings.url,
        MLDIAG_NATS_NAMESPACE=nats_settings.namespace,
        MLDIAG_EXECUTOR_BACKEND="ray",
        MLDIAG_EXECUTOR_EXECUTOR_ID=EXECUTOR,
        MLDIAG_EXECUTOR_PORT=str(free_port()),
        MLDIAG_EXECUTOR_STATE_DIR=str(tmp_path / "state"),
        MLDIAG_EXECUTOR_ANNOUNCE_SECONDS="0.5",
        MLDIAG_EXECUTOR_IMAGES=json.dumps({"python-test": sys.executable}),
        MLDIAG_EXECUTOR_RAY_ADDRESS=ray_cluster.address,
        MLDIAG_EXECUTOR_RAY_NODE_IP_ADDRESS=HEAD_IP,
        MLDIAG_EXECUTOR_RAY_GROUP_LINGER_SECONDS="0",
        MLDIAG_STORAGE_URL=f"file://{tmp_path / 'store'}",
    )
    client = await nats.connect(nats_settings.url)
    announced: list[ExecutorAnnounced] = []

    async def on_announce(message: Any) -> None:
        announced.append(ExecutorAnnounced.model_validate_json(message.data))

    await client.subscribe(
        f"{nats_settings.namespace}.{bus.EXECUTOR_ANNOUNCED}.{EXECUTOR}", cb=on_announce
    )
    process = await asyncio.to_thread(_spawn_executor, env, tmp_path / "executor.log")
    try:
        command = _command(tmp_path, "print('on ray')", job_id="108")
        await publisher.publish(command)
        exited = await _fact(nats_settings, ReplicaExited)
        assert (exited.replica, exited.reason, exited.exit_code) == (command.replica, "exited", 0)
        started = await _fact(nats_settings, ReplicaStarted)
        assert started.replica == command.replica
        assert announced, "no announcement"
        assert announced[-1].backend == "ray"
        assert announced[-1].capacity.cpus == 2
        logs = tmp_path / "store/gs/bucket/jobs/108/logs/workerpool0-0/attempt-0"
        assert "on ray" in (logs / "stdout.log").read_text()
    finally:
        await client.close()
        await asyncio.to_thread(_stop_executor, process)


def _spawn_executor(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "mldiag_executor"], env=env, stdout=log, stderr=log
        )


def _stop_executor(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


Fact = TypeVar("Fact", ReplicaStarted, ReplicaExited)


async def _fact(nats_settings: NatsSettings, kind: type[Fact], timeout: float = 180) -> Fact:
    subject = bus.REPLICA_STARTED if kind is ReplicaStarted else bus.REPLICA_EXITED
    deadline = time.monotonic() + timeout
    while not (found := await read_messages(nats_settings, subject, kind)):
        assert time.monotonic() < deadline, f"no {kind.__name__}"
        await asyncio.sleep(0.2)
    [fact] = found
    return fact


@pytest.mark.ray
@pytest.mark.connected
async def test_a_restarted_replica_goes_back_to_its_node(
    backend: RayBackend, config: LaunchConfig, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import os, pathlib, sys, time
        if os.environ["MLDIAG_REPLICA"] == "workerpool1-0":
            sys.exit(3 if os.environ["MLDIAG_ATTEMPT"] == "0" else 0)
        while not pathlib.Path(os.environ["MARKER_DIR"], "finish").exists():
            time.sleep(0.05)
        """
    )

    def commands(attempt: int) -> list[StartReplica]:
        made = gang_commands(
            executor_id=EXECUTOR,
            address=backend.address(),
            pools=[(1, ONE_CPU), (1, ONE_CPU)],
            deadline=datetime.now(UTC) + timedelta(hours=1),
            logs_root="gs://bucket/jobs/109/logs",
            command=["python", "-c", script],
            image_uri="python-test",
            job_id="109",
            attempt=attempt,
        )
        out = []
        for command in made:
            env = {**command.launch.env, **NO_API, "MARKER_DIR": str(tmp_path)}
            out.append(
                command.model_copy(
                    update={"launch": command.launch.model_copy(update={"env": env})}
                )
            )
        return out

    chief, worker = commands(0)
    for command in (chief, worker):
        await _start(backend, config, command)
    failed = await asyncio.wait_for(anext(backend.exits()), 180)
    assert (failed.key, failed.exit_code) == (worker.replica, 3)
    first_host = backend.host(worker.replica)
    assert first_host in {HEAD_IP, SECOND_IP}
    await backend.reported(worker.replica)
    # The scheduler restarts the worker alone: attempt 1, the chief still running.
    _, restarted = commands(1)
    await _start(backend, config, restarted)
    ended = await asyncio.wait_for(anext(backend.exits()), 180)
    assert (ended.key, ended.reason, ended.exit_code) == (restarted.replica, "exited", 0)
    assert backend.host(restarted.replica) == first_host
    assert backend.host(chief.replica) not in {"", first_host}
    await backend.reported(restarted.replica)
    (tmp_path / "finish").write_text("1")
    assert (await _next_exit(backend)).key == chief.replica
