"""docker-compose.yml against the code it runs.

Reads the file (no Docker engine needed) and checks it against the services themselves: the
modules the commands run, the settings fields the environment sets, the ports the services
listen on, publish and probe, and the names and ports the URLs point at.
"""

import asyncio
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import urlparse

import pytest
import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from mldiag.cli.substrate import DEFAULT_OUT
from mldiag_platform import substrate
from mldiag_schemas.bus import Namespace

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
SUBSTRATE_DIR = "MLDIAG_SUBSTRATE_DIR"
"""Where compose reads the files `mldiag substrate generate` writes."""


@dataclass(frozen=True)
class Platform:
    """One of our services as compose should run it."""

    service: str
    module: str
    env_prefix: str
    port: int


PLATFORM = (
    Platform("run-registry", "mldiag_run_registry", "MLDIAG_RUN_REGISTRY_", 8080),
    Platform("ingestion", "mldiag_ingestion", "MLDIAG_INGESTION_", 8081),
    Platform("event-detector", "mldiag_event_detector", "MLDIAG_EVENT_DETECTOR_", 8082),
    Platform("analyzer", "mldiag_analyzer", "MLDIAG_ANALYZER_", 8083),
    Platform("xprof-provisioner", "mldiag_xprof_provisioner", "MLDIAG_XPROF_PROVISIONER_", 8084),
    Platform("training", "mldiag_training", "MLDIAG_TRAINING_", 8085),
    Platform("executor", "mldiag_executor", "MLDIAG_EXECUTOR_", 8086),
    Platform("notifier", "mldiag_notifier", "MLDIAG_NOTIFIER_", 8087),
)
"""The services on the bus (each with its own NATS user)."""
EDGE = Platform("edge", "mldiag_platform.edge", "MLDIAG_EDGE_", 8080)
"""The one base URL in front of them (compose and `mldiag up`; an Ingress in Kubernetes)."""
by_service = pytest.mark.parametrize("platform", PLATFORM, ids=lambda p: p.service)

# ${NAME:-default} and ${NAME-default}; $$ is a literal dollar.
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?P<op>:?-)?(?P<default>[^}]*)\}|\$(?P<bare>\w+)")
_HEALTHZ_URL = re.compile(
    r"https?://(?P<host>127\.0\.0\.1|localhost):(?P<port>\d+)/(_edge/)?healthz\b"
)
DEFAULT_NATS_PORT = 4222
DEFAULT_POSTGRES_PORT = 5432


def _interpolate(value: Any, given: dict[str, str]) -> Any:
    """Resolve variables to ``given`` or their defaults, as compose does with an environment
    of ``given`` alone."""
    if isinstance(value, dict):
        return {key: _interpolate(item, given) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, given) for item in value]
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _value_of(match, given), value)
    return value


def _value_of(match: re.Match[str], given: dict[str, str]) -> str:
    if match.group(0) == "$$":
        return "$"
    if match.group("bare") or not match.group("op"):
        pytest.fail(f"{match.group(0)} has no default: the file must work without a .env")
    return given.get(match.group("name")) or match.group("default")


@pytest.fixture(scope="module")
def substrate_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `mldiag substrate generate` writes, where compose is told to read it."""
    out = tmp_path_factory.mktemp("substrate")
    secrets = {name: f"secret-of-{name}" for name in substrate.SECRET_NAMES}
    for name, text in substrate.compose_files(Namespace("mldiag"), secrets).items():
        (out / name).write_text(text)
    return out


@pytest.fixture(scope="module")
def compose(substrate_dir: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict)
    resolved: dict[str, Any] = _interpolate(loaded, {SUBSTRATE_DIR: str(substrate_dir)})
    return resolved


def test_the_default_substrate_dir_is_where_generate_writes() -> None:
    text = COMPOSE_FILE.read_text()
    assert f"${{{SUBSTRATE_DIR}:-./{DEFAULT_OUT}}}/" in text


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """The variables a container gets: its env files, then ``environment`` over them."""
    merged: dict[str, str] = {}
    for path in _env_files(service):
        for line in Path(path).read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                merged[key] = value
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    merged.update({str(key): str(value) for key, value in env.items()})
    return merged


def _env_files(service: dict[str, Any]) -> list[str]:
    files = service.get("env_file") or []
    entries = [files] if isinstance(files, (str, dict)) else files
    return [entry["path"] if isinstance(entry, dict) else str(entry) for entry in entries]


def _container_ports(service: dict[str, Any]) -> dict[int, str]:
    """Container ports published, each with the host address it is bound to ("" for all)."""
    published: dict[int, str] = {}
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            target, host_ip = str(entry["target"]), str(entry.get("host_ip", ""))
        else:
            parts = str(entry).split("/", 1)[0].rsplit(":", 2)
            target = parts[-1]
            host_ip = parts[0] if len(parts) == 3 else ""
        first, _, last = target.partition("-")
        for port in range(int(first), int(last or first) + 1):
            published[port] = host_ip
    return published


def _named_volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named volumes a service mounts: volume name -> path in the container."""
    mounts: dict[str, str] = {}
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type", "volume") == "volume" and entry.get("source"):
                mounts[str(entry["source"])] = str(entry["target"])
            continue
        source, _, rest = str(entry).partition(":")
        if rest and not source.startswith((".", "/", "~", "$")):
            mounts[source] = rest.split(":", 1)[0]
    return mounts


def _healthcheck_test(service: dict[str, Any]) -> list[str]:
    check = service.get("healthcheck") or {}
    test = check.get("test")
    if check.get("disable") or not test or test == ["NONE"]:
        return []
    return [test] if isinstance(test, str) else [str(part) for part in test]


def _flag(command: list[str], *names: str) -> str | None:
    """The value after a command-line flag, if present."""
    for index, part in enumerate(command[:-1]):
        if part in names:
            return command[index + 1]
    return None


def _settings_type(annotation: Any) -> type[BaseSettings] | None:
    candidates = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    for candidate in (annotation, *candidates):
        if isinstance(candidate, type) and issubclass(candidate, BaseSettings):
            return candidate
    return None


def settings_env_names(settings_class: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings class reads, nested settings included.

    A nested settings field is built by its default_factory, so it reads its own prefix.
    """
    prefix = str(settings_class.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field_name, field in settings_class.model_fields.items():
        nested = _settings_type(field.annotation)
        if nested is not None:
            names |= settings_env_names(nested)
            continue
        alias = field.validation_alias or field.alias
        if isinstance(alias, str):
            names.add(alias.upper())
        elif isinstance(alias, AliasChoices):
            names |= {choice.upper() for choice in alias.choices if isinstance(choice, str)}
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


def settings_class_of(platform: Platform) -> type[BaseSettings]:
    module = importlib.import_module(f"{platform.module}.settings")
    found = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseSettings)
        and obj.__module__ == module.__name__
        and obj.model_config.get("env_prefix") == platform.env_prefix
    ]
    assert len(found) == 1, (
        f"{module.__name__} should define one settings class with prefix "
        f"{platform.env_prefix}, found {found}"
    )
    return found[0]


def settings_from(
    platform: Platform, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> BaseSettings:
    """Build the service's settings from exactly the environment compose gives it."""
    for name in list(os.environ):
        if name.upper().startswith("MLDIAG_") or name.upper() == "STORAGE_EMULATOR_HOST":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return settings_class_of(platform)()


def test_every_service_has_an_image_or_a_build(services: dict[str, dict[str, Any]]) -> None:
    assert services
    missing = [
        name
        for name, service in services.items()
        if not service.get("image") and not service.get("build")
    ]
    assert not missing, f"services with neither image nor build: {missing}"


def test_every_platform_service_is_in_the_file(services: dict[str, dict[str, Any]]) -> None:
    for platform in PLATFORM:
        assert platform.service in services, f"{platform.service} is not in {COMPOSE_FILE.name}"
        assert services[platform.service].get("build"), f"{platform.service} must build the repo"


@by_service
def test_command_runs_the_service_module(
    platform: Platform, services: dict[str, dict[str, Any]]
) -> None:
    command = services[platform.service]["command"]
    assert isinstance(command, list), "use the exec form so signals reach the service"
    assert Path(command[0]).name == "python"
    assert command[1:] == ["-m", platform.module]
    assert importlib.util.find_spec(platform.module) is not None
    assert importlib.util.find_spec(f"{platform.module}.__main__") is not None, (
        f"`python -m {platform.module}` needs {platform.module}/__main__.py"
    )


@by_service
def test_every_mldiag_variable_is_a_settings_field(
    platform: Platform, services: dict[str, dict[str, Any]]
) -> None:
    valid = settings_env_names(settings_class_of(platform))
    assert f"{platform.env_prefix}PORT" in valid
    env = _environment(services[platform.service])
    unknown = sorted(
        name for name in env if name.upper().startswith("MLDIAG_") and name.upper() not in valid
    )
    assert not unknown, f"{platform.service} sets variables no settings field reads: {unknown}"


@by_service
def test_settings_accept_the_environment_and_listen_where_published_and_probed(
    platform: Platform, services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = services[platform.service]
    settings: Any = settings_from(platform, _environment(service), monkeypatch)

    assert settings.host == "0.0.0.0", "in a container the service must listen on all interfaces"
    assert settings.port == platform.port
    assert settings.port in _container_ports(service), f"port {settings.port} is not published"
    probed = [
        int(match.group("port"))
        for part in _healthcheck_test(service)
        for match in _HEALTHZ_URL.finditer(part)
    ]
    assert probed == [settings.port], f"the health check should probe /healthz on {settings.port}"
    assert settings.log.format == "json"


@by_service
def test_health_check_is_exec_form_and_restart_policy_is_set(
    platform: Platform, services: dict[str, dict[str, Any]]
) -> None:
    service = services[platform.service]
    test = _healthcheck_test(service)
    # The slim image has no curl or shell tools to rely on: the probe is the image's python.
    assert test[:3] == ["CMD", "python", "-c"]
    assert "urlopen" in test[3]
    assert service.get("restart") == "unless-stopped"


@contextmanager
def _serve_status(status: int) -> Iterator[int]:
    """A loopback HTTP server that answers every GET with ``status``; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_health_probes_exit_non_zero_on_an_unhealthy_answer(
    services: dict[str, dict[str, Any]], status: int, healthy: bool
) -> None:
    # /healthz answers 503 while a connection is down; the probe must then exit non-zero.
    # Each distinct probe runs as written, pointed at a loopback server instead of its port.
    with _serve_status(status) as port:
        probes = {
            _HEALTHZ_URL.sub(f"http://127.0.0.1:{port}/healthz", _healthcheck_test(service)[3])
            for service in (services[platform.service] for platform in (*PLATFORM, EDGE))
        }
        for probe in probes:
            result = subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, timeout=30, check=False
            )
            assert (result.returncode == 0) is healthy, result.stderr.decode()


def _one_shot(service: dict[str, Any]) -> bool:
    """A job that runs to completion (postgres-roles), not a server."""
    return service.get("restart") == "no" and not _healthcheck_test(service)


def test_depends_on_waits_for_healthy_services(services: dict[str, dict[str, Any]]) -> None:
    checked = 0
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions, not a list"
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown service {target}"
            if _one_shot(services[target]):
                assert spec.get("condition") == "service_completed_successfully", name
            else:
                assert spec.get("condition") == "service_healthy", f"{name} -> {target}"
                assert _healthcheck_test(services[target]), f"{target} has no health check"
            checked += 1
    assert checked >= len(PLATFORM)


@by_service
def test_depends_on_every_server_it_is_pointed_at(
    platform: Platform, services: dict[str, dict[str, Any]]
) -> None:
    env = _environment(services[platform.service])
    pointed_at = {
        urlparse(url).hostname
        for name in ("MLDIAG_NATS_URL", "MLDIAG_DATABASE_URL", "STORAGE_EMULATOR_HOST")
        for url in env.get(name, "").split(",")
        if url
    }
    assert pointed_at, "every service talks to NATS at least"
    assert pointed_at <= set(services[platform.service].get("depends_on", {}))


def test_named_volumes_are_declared_and_used(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose.get("volumes") or {})
    used = {volume for service in services.values() for volume in _named_volume_mounts(service)}
    assert used, "the data of nats, postgres and fake-gcs-server belongs on volumes"
    assert used - declared == set(), "volumes used but not declared at the top level"
    assert declared - used == set(), "volumes declared but never mounted"


def test_nats_runs_jetstream_on_a_volume(services: dict[str, dict[str, Any]]) -> None:
    nats = services["nats"]
    command = [str(part) for part in nats["command"]]
    assert "-js" in command or "--jetstream" in command
    store = _flag(command, "-sd", "--store_dir")
    assert store in _named_volume_mounts(nats).values(), "the JetStream store must be a volume"
    assert _flag(command, "-m", "--http_port") == "8222"
    assert any("8222/healthz" in part for part in _healthcheck_test(nats))


def _nats_port(services: dict[str, dict[str, Any]], host: str) -> int:
    command = [str(part) for part in services[host].get("command") or []]
    return int(_flag(command, "-p", "--port") or DEFAULT_NATS_PORT)


@by_service
def test_nats_url_points_at_the_nats_container(
    platform: Platform, services: dict[str, dict[str, Any]]
) -> None:
    env = _environment(services[platform.service])
    for url in env["MLDIAG_NATS_URL"].split(","):
        parsed = urlparse(url)
        assert parsed.scheme == "nats"
        assert parsed.hostname in services, f"{url} names no compose service"
        assert parsed.port == _nats_port(services, parsed.hostname)


def test_database_url_points_at_the_postgres_container(
    services: dict[str, dict[str, Any]], substrate_dir: Path
) -> None:
    users = 0
    roles_sql = (substrate_dir / "postgres-roles.sql").read_text()
    for platform in PLATFORM:
        service = services[platform.service]
        url = _environment(service).get("MLDIAG_DATABASE_URL")
        if url is None:
            continue
        users += 1
        parsed = urlparse(url)
        assert parsed.scheme in ("postgresql", "postgres")
        assert parsed.hostname in services, f"{url} names no compose service"
        server = _environment(services[parsed.hostname])
        assert parsed.port == int(server.get("PGPORT", DEFAULT_POSTGRES_PORT))
        # Its own role, made by postgres-roles before it starts; never the superuser.
        assert parsed.username == substrate.database_role(platform.service)
        assert parsed.username != server["POSTGRES_USER"]
        assert f"ALTER ROLE {parsed.username} WITH LOGIN" in roles_sql
        assert f"PASSWORD '{parsed.password}'" in roles_sql
        assert service["depends_on"]["postgres-roles"]
        assert parsed.path.lstrip("/") == server["POSTGRES_DB"]
    assert users == 4, (
        "run-registry, event-detector, training and notifier keep tables in PostgreSQL"
    )


def test_postgres_takes_passwords_and_postgres_roles_runs_the_generated_sql(
    services: dict[str, dict[str, Any]], substrate_dir: Path
) -> None:
    server = _environment(services["postgres"])
    assert server["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    assert server["POSTGRES_PASSWORD"] == f"secret-of-{substrate.POSTGRES_SUPERUSER_KEY}"
    job = services["postgres-roles"]
    command = [str(part) for part in job["command"]]
    assert _flag(command, "-h") == "postgres"
    assert _flag(command, "-U") == server["POSTGRES_USER"]
    assert _environment(job)["PGPASSWORD"] == server["POSTGRES_PASSWORD"]
    script = _flag(command, "-f")
    mounted = {
        target: source
        for source, target, *_ in (str(volume).split(":") for volume in job["volumes"])
    }
    assert mounted[str(script)] == str(substrate_dir / "postgres-roles.sql")


@by_service
def test_every_service_connects_to_nats_as_its_own_user(
    platform: Platform,
    services: dict[str, dict[str, Any]],
    substrate_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings: Any = settings_from(platform, _environment(services[platform.service]), monkeypatch)
    assert settings.nats.user == platform.service
    password = settings.nats.password.get_secret_value()
    assert password == f"secret-of-{substrate.nats_password_key(platform.service)}"
    authorization = (substrate_dir / "nats-auth.conf").read_text()
    assert f'"user": "{platform.service}"' in authorization
    assert f'"password": "{password}"' in authorization


def test_nats_loads_the_generated_authorization(
    services: dict[str, dict[str, Any]], substrate_dir: Path
) -> None:
    nats = services["nats"]
    command = [str(part) for part in nats["command"]]
    config = _flag(command, "-c", "--config")
    mounted = {
        target: source
        for source, target, *_ in (
            str(volume).split(":") for volume in nats["volumes"] if str(volume).startswith("/")
        )
    }
    assert mounted[str(config)] == str(substrate_dir / "nats-auth.conf")
    # The same command line, on a real nats-server, with the paths and ports of this machine.
    from mldiag.local.nats import find_nats_server  # noqa: PLC0415

    port, monitor = _free_port(), _free_port()
    local = [
        {config: mounted[str(config)], "/data": str(substrate_dir / "store")}.get(part, part)
        for part in command
    ]
    local[local.index("8222")] = str(monitor)
    process = subprocess.Popen(
        [find_nats_server(), *local, "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert asyncio.run(_anonymous_refused(f"nats://127.0.0.1:{port}"))
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _anonymous_refused(url: str) -> bool:
    import nats  # noqa: PLC0415

    for _ in range(100):
        try:
            client = await nats.connect(url, allow_reconnect=False, connect_timeout=1)
        except nats.errors.Error as error:
            return "Authorization Violation" in str(error)
        except OSError:
            await asyncio.sleep(0.05)  # not listening yet
            continue
        await client.close()
        return False
    return False


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_nats_cli_signs_in_as_the_operator(services: dict[str, dict[str, Any]]) -> None:
    env = _environment(services["nats-cli"])
    assert env["NATS_USER"] == substrate.OPERATOR
    assert env["NATS_PASSWORD"] == f"secret-of-nats-{substrate.OPERATOR}"


def test_object_storage_is_the_emulator_with_the_bucket_ready(
    services: dict[str, dict[str, Any]],
) -> None:
    users = 0
    for platform in PLATFORM:
        env = _environment(services[platform.service])
        storage_url = env.get("MLDIAG_STORAGE_URL")
        if storage_url is None:
            continue
        users += 1
        storage = urlparse(storage_url)
        assert storage.scheme == "gs"
        assert storage.netloc, "gs:// needs a bucket"
        emulator_url = env.get("STORAGE_EMULATOR_HOST", "")
        assert emulator_url.startswith("http://"), "google-cloud-storage needs the scheme"
        emulator = urlparse(emulator_url)
        assert emulator.hostname in services, f"{emulator_url} names no compose service"
        server = services[emulator.hostname]
        command = [str(part) for part in server["command"]]
        assert _flag(command, "-scheme") == "http"
        assert emulator.port == int(_flag(command, "-port") or 4443)
        # Healthy only once the bucket exists, and the services wait for healthy.
        probe = " ".join(_healthcheck_test(server))
        assert f"/storage/v1/b/{storage.netloc}" in probe
    # Profiles (run-registry, xprof-provisioner), packages and logs (training, executor).
    assert users == 4


def test_services_agree_on_the_installation(services: dict[str, dict[str, Any]]) -> None:
    for name in ("MLDIAG_NATS_URL", "MLDIAG_NATS_NAMESPACE", "MLDIAG_STORAGE_URL"):
        values = {_environment(services[platform.service]).get(name) for platform in PLATFORM} - {
            None
        }
        assert len(values) == 1, f"the services disagree on {name}: {values}"


def test_xprof_instances_are_not_published_and_work_dir_is_a_volume(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # XProf has no authentication: browsers reach it only through the provisioner's proxy.
    platform = next(p for p in PLATFORM if p.service == "xprof-provisioner")
    service = services[platform.service]
    settings: Any = settings_from(platform, _environment(service), monkeypatch)
    published = _container_ports(service)
    for port in settings.instance_ports:
        assert port not in published, f"XProf port {port} is published"
    assert str(settings.work_dir) in _named_volume_mounts(service).values()


# --- the edge --------------------------------------------------------------------------------


def test_the_edge_is_the_one_base_url_in_front_of_every_routed_service(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mldiag_platform.edge.routes import SERVICES as ROUTED  # noqa: PLC0415

    edge = services[EDGE.service]
    assert [str(part) for part in edge["command"]] == ["python", "-m", EDGE.module]
    assert edge.get("build"), "the edge runs from the repository's image"
    env = _environment(edge)
    unknown = {name for name in env if name.startswith("MLDIAG_")} - settings_env_names(
        settings_class_of(EDGE)
    )
    assert not unknown, f"the edge sets variables no settings field reads: {unknown}"
    # No credentials: it touches neither NATS nor PostgreSQL.
    assert not _env_files(edge)
    assert not {"MLDIAG_NATS_URL", "MLDIAG_DATABASE_URL"} & set(env)
    settings: Any = settings_from(EDGE, env, monkeypatch)
    assert settings.host == "0.0.0.0"
    assert settings.port == EDGE.port == 8080
    # Published on every interface (what users reach); the services' HTTP ports are not,
    # except ingestion's writes and OTLP receivers, reached from other machines.
    assert _container_ports(edge) == {8080: ""}
    upstreams = settings.upstreams()
    assert set(upstreams) == set(ROUTED)
    by_service = {platform.service: platform for platform in PLATFORM}
    for service, url in upstreams.items():
        parsed = urlparse(url)
        assert parsed.hostname == service, f"{service}'s URL {url} names another container"
        target: Any = settings_from(
            by_service[service], _environment(services[service]), monkeypatch
        )
        assert parsed.port == target.port, f"{service} listens on {target.port}, not {url}"
    for service in ("run-registry", "ingestion"):
        assert edge["depends_on"][service]["condition"] == "service_healthy"


def test_users_reach_the_services_through_the_edge_only(
    services: dict[str, dict[str, Any]],
) -> None:
    for platform in PLATFORM:
        published = _container_ports(services[platform.service])
        everywhere = {port for port, host in published.items() if host == ""}
        if platform.service == "ingestion":
            # Older SDK setups name ingestion's port, and OTLP exporters need their own.
            assert everywhere == {8081, 4317, 4318}
        else:
            assert everywhere == set(), f"{platform.service} is published beyond loopback"


def test_links_people_open_use_the_one_base_url(services: dict[str, dict[str, Any]]) -> None:
    registry = _environment(services["run-registry"])
    provisioner = _environment(services["xprof-provisioner"])
    training = _environment(services["training"])
    assert registry["MLDIAG_RUN_REGISTRY_XPROF_URL"] == "http://localhost:8080"
    assert provisioner["MLDIAG_XPROF_PROVISIONER_PUBLIC_URL"] == "http://localhost:8080"
    notifier = _environment(services["notifier"])
    assert notifier["MLDIAG_NOTIFIER_PUBLIC_URL"] == "http://localhost:8080"
    # Replicas run in the executor's container and reach the edge by its service name.
    assert training["MLDIAG_TRAINING_PUBLIC_API_URL"] == "http://edge:8080"


def test_the_executor_keeps_its_identity_and_state(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = next(p for p in PLATFORM if p.service == "executor")
    service = services["executor"]
    settings: Any = settings_from(platform, _environment(service), monkeypatch)
    assert settings.backend == "local"
    # Not the container's host name, which a recreated container changes (a new durable).
    assert settings.executor_id == "compose-local"
    assert str(settings.state_dir) in _named_volume_mounts(service).values()
