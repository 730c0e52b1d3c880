"""`mldiag up` configuration, the state file and the CLI's answers when nothing runs."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest

from mldiag.cli import build_parser, config_from_args, main, supervisor_command
from mldiag.local.errors import LocalStackError
from mldiag.local.process import process_start_ticks
from mldiag.local.stack import (
    SERVICE_NAMES,
    STATE_FILE,
    Component,
    StackState,
    read_state,
    resolve_config,
    service_environment,
    service_spec,
    stop_stack,
    write_state,
)
from support import free_port

_STACK_ENV = (
    "MLDIAG_HOME",
    "MLDIAG_PORT_OFFSET",
    "MLDIAG_EMBEDDED_NATS_PORT",
    "MLDIAG_EMBEDDED_NATS_MONITOR_PORT",
    "MLDIAG_EMBEDDED_POSTGRES_PORT",
    "MLDIAG_EXECUTOR_FIRST_PORT",
    *(
        f"{service_spec(name).env_prefix}_{what}"
        for name in SERVICE_NAMES
        for what in ("HOST", "PORT")
    ),
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _STACK_ENV:
        monkeypatch.delenv(name, raising=False)


def test_defaults() -> None:
    config = resolve_config(environ={})
    # per user, not per folder: `mldiag status` finds the stack from anywhere
    assert config.home == Path(platformdirs.user_data_dir("mldiag"))
    assert (config.nats_port, config.nats_monitor_port, config.postgres_port) == (
        14222,
        18222,
        15432,
    )
    assert dict(config.service_ports) == {
        "edge": 8080,
        "run-registry": 8090,
        "ingestion": 8081,
        "event-detector": 8082,
        "analyzer": 8083,
        "xprof-provisioner": 8084,
        "training": 8085,
        "executor": 8086,
        "notifier": 8087,
    }
    # The one base URL is the edge's.
    assert config.api_url == "http://127.0.0.1:8080"
    assert config.replica_port == 20000
    assert config.services == SERVICE_NAMES
    assert not config.services_chosen
    assert config.storage_url == f"file://{config.home}/storage"


def test_flags_beat_environment_which_beats_defaults() -> None:
    environ = {
        "MLDIAG_HOME": "/srv/mldiag",
        "MLDIAG_RUN_REGISTRY_PORT": "9000",
        "MLDIAG_INGESTION_PORT": "9001",
        "MLDIAG_INGESTION_HOST": "0.0.0.0",
        "MLDIAG_EMBEDDED_POSTGRES_PORT": "25432",
    }
    config = resolve_config(ports={"ingestion": 7001, "nats": None}, environ=environ)
    assert config.home == Path("/srv/mldiag")
    assert config.service_ports["run-registry"] == 9000
    assert config.service_ports["ingestion"] == 7001
    assert config.service_hosts["ingestion"] == "0.0.0.0"
    assert config.service_hosts["analyzer"] == "127.0.0.1"
    assert config.postgres_port == 25432
    assert config.nats_port == 14222


def test_port_offset_shifts_every_port() -> None:
    config = resolve_config(port_offset=100, environ={"MLDIAG_ANALYZER_PORT": "9083"})
    assert config.service_ports["edge"] == 8180
    assert config.service_ports["run-registry"] == 8190
    assert config.service_ports["analyzer"] == 9183
    assert config.replica_port == 20100
    assert (config.nats_port, config.postgres_port) == (14322, 15532)
    assert resolve_config(environ={"MLDIAG_PORT_OFFSET": "5"}).nats_port == 14227


def test_bad_ports_are_refused_clearly() -> None:
    with pytest.raises(LocalStackError, match="both given port 8081"):
        resolve_config(ports={"run-registry": 8081})
    with pytest.raises(LocalStackError, match="whole number"):
        resolve_config(environ={"MLDIAG_EMBEDDED_NATS_PORT": "many"})
    with pytest.raises(LocalStackError, match="outside"):
        resolve_config(ports={"nats": 70000}, environ={})


def test_services_are_chosen_by_name_in_start_order() -> None:
    config = resolve_config(services=["ingestion", "run_registry"], environ={})
    assert config.services == ("run-registry", "ingestion")
    assert config.services_chosen
    with pytest.raises(LocalStackError, match="unknown service 'api'"):
        resolve_config(services=["api"], environ={})


def test_service_environment_points_at_the_embedded_servers() -> None:
    config = resolve_config("/tmp/h", port_offset=1, environ={})
    env = service_environment(config, "nats://127.0.0.1:14223", "postgresql://x@127.0.0.1:1/db")
    assert env["MLDIAG_NATS_URL"] == "nats://127.0.0.1:14223"
    assert env["MLDIAG_DATABASE_URL"] == "postgresql://x@127.0.0.1:1/db"
    assert env["MLDIAG_STORAGE_URL"] == "file:///tmp/h/storage"
    assert env["MLDIAG_LOG_FORMAT"] == "json"
    assert env["MLDIAG_RUN_REGISTRY_PORT"] == "8091"
    assert env["MLDIAG_EDGE_PORT"] == "8081"
    assert env["MLDIAG_XPROF_PROVISIONER_HOST"] == "127.0.0.1"
    assert env["MLDIAG_XPROF_PROVISIONER_WORK_DIR"] == "/tmp/h/xprof"
    # Links and replicas use the one base URL; the edge knows where each service is.
    assert env["MLDIAG_RUN_REGISTRY_XPROF_URL"] == "http://127.0.0.1:8081"
    assert env["MLDIAG_TRAINING_PUBLIC_API_URL"] == "http://127.0.0.1:8081"
    assert env["MLDIAG_EDGE_RUN_REGISTRY_URL"] == "http://127.0.0.1:8091"
    assert env["MLDIAG_EDGE_INGESTION_URL"] == "http://127.0.0.1:8082"
    assert env["MLDIAG_EDGE_TRAINING_URL"] == "http://127.0.0.1:8086"
    assert env["MLDIAG_EDGE_XPROF_PROVISIONER_URL"] == "http://127.0.0.1:8085"
    # The local executor: replicas are processes here, state under the home.
    assert env["MLDIAG_EXECUTOR_BACKEND"] == "local"
    assert env["MLDIAG_EXECUTOR_STATE_DIR"] == "/tmp/h/executor"
    assert env["MLDIAG_EXECUTOR_FIRST_PORT"] == "20001"
    assert not any(key.startswith("PG") for key in env)


def test_parser_reads_up_flags() -> None:
    args = build_parser().parse_args(
        ["up", "--detach", "--api-port", "9080", "--services", "ingestion, run-registry"]
    )
    assert args.detach
    config = config_from_args(args)
    assert config.service_ports["edge"] == 9080
    assert config.services == ("run-registry", "ingestion")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--services", "nope"])


def test_supervisor_command_spells_out_the_same_config(monkeypatch: pytest.MonkeyPatch) -> None:
    config = resolve_config("/tmp/h", port_offset=7, services=["analyzer"], environ={})
    command = supervisor_command(config)
    assert command[:4] == [sys.executable, "-m", "mldiag.cli", "up"]
    # The background process must not depend on the caller's environment.
    monkeypatch.setenv("MLDIAG_PORT_OFFSET", "1000")
    monkeypatch.setenv("MLDIAG_INGESTION_PORT", "1")
    again = config_from_args(build_parser().parse_args(command[3:]))
    assert again == config


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = StackState(
        home=str(tmp_path),
        supervisor_pid=42,
        supervisor_start_ticks=7,
        status="healthy",
        started_at="2026-01-01T00:00:00+00:00",
        ready_seconds=1.5,
        components=[
            Component(name="nats", kind="nats", label="NATS", url="nats://127.0.0.1:1", pid=43),
            Component(
                name="analyzer",
                kind="service",
                label="analyzer",
                url="http://127.0.0.1:2",
                pid=44,
                state="restarting",
                restarts=2,
                last_exit_status=-9,
                last_restart_at="2026-01-01T00:01:00+00:00",
            ),
        ],
        skipped=["analyzer"],
    )
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert not list(tmp_path.glob("*.partial"))


def test_unreadable_or_missing_state_reads_as_none(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    (tmp_path / STATE_FILE).write_text("{not json")
    assert read_state(tmp_path) is None
    (tmp_path / STATE_FILE).write_text('{"version": 99}')
    assert read_state(tmp_path) is None


def test_status_and_down_when_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--home", str(tmp_path)]) == 1
    assert "not running" in capsys.readouterr().out
    assert main(["down", "--home", str(tmp_path)]) == 0
    assert "not running" in capsys.readouterr().out


def test_down_removes_a_stale_state_file(tmp_path: Path) -> None:
    # This process's pid with start ticks it never had: a pid that has been reused.
    state = StackState(
        home=str(tmp_path),
        supervisor_pid=os.getpid(),
        supervisor_start_ticks=1,
        status="healthy",
        started_at="2026-01-01T00:00:00+00:00",
        components=[
            Component(
                name="nats", kind="nats", label="NATS", url="x", pid=os.getpid(), start_ticks=1
            )
        ],
    )
    write_state(tmp_path, state)
    result = stop_stack(tmp_path)
    assert not result.was_running
    assert not (tmp_path / STATE_FILE).exists()


def test_a_state_file_without_restart_fields_still_reads(tmp_path: Path) -> None:
    # Written before the supervisor restarted anything: every component counts as running.
    (tmp_path / STATE_FILE).write_text(
        '{"version": 1, "home": "h", "supervisor_pid": 1, "supervisor_start_ticks": null, '
        '"status": "healthy", "started_at": "t", "components": '
        '[{"name": "nats", "kind": "nats", "label": "NATS", "url": "nats://x"}]}'
    )
    state = read_state(tmp_path)
    assert state is not None
    nats = state.components[0]
    assert (nats.state, nats.restarts, nats.last_exit_status) == ("running", 0, None)


def test_status_shows_restarts_and_a_service_given_up_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    storage = tmp_path / "storage"
    storage.mkdir()
    write_state(
        tmp_path,
        StackState(
            home=str(tmp_path),
            supervisor_pid=os.getpid(),  # a live supervisor
            supervisor_start_ticks=process_start_ticks(os.getpid()),
            status="healthy",
            started_at="2026-01-01T00:00:00+00:00",
            components=[
                Component(name="storage", kind="storage", label="storage", url=f"file://{storage}"),
                Component(
                    name="ingestion",
                    kind="service",
                    label="ingestion",
                    url=closed,
                    health_url=f"{closed}/healthz",
                    pid=os.getpid(),
                    state="restarting",
                    restarts=1,
                    last_exit_status=-signal.SIGKILL,
                    last_restart_at="2026-01-01T00:05:00+00:00",
                ),
                Component(
                    name="analyzer",
                    kind="service",
                    label="analyzer",
                    url=closed,
                    pid=_dead_pid(),
                    state="failed",
                    restarts=4,
                    last_exit_status=1,
                    last_restart_at="2026-01-01T00:06:00+00:00",
                ),
            ],
        ),
    )
    assert main(["status", "--home", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "degraded: analyzer failed (crash loop); the rest keeps running" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert rows["ingestion"][1:2] == ["restarting"]
    assert rows["analyzer"][1:2] == ["failed"]
    assert "RESTARTS" in rows["COMPONENT"]
    assert (
        "  ingestion: restarted 1 time, last at 2026-01-01T00:05:00+00:00; "
        "last exit: signal 9 (SIGKILL)"
    ) in out
    assert (
        "  analyzer: failed in a crash loop (restarted 4 times, last at "
        "2026-01-01T00:06:00+00:00; last exit: status 1)"
    ) in out


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
