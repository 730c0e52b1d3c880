"""Configuration of the embedded stack: the services it runs, the ports it takes and the
environment its services get. Flags beat the environment, which beats the defaults.
"""

import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mldiag.credentials import default_home
from mldiag.local.errors import LocalStackError
from mldiag.local.process import (
    LOCALHOST,
    child_env,
)
from mldiag.local.secrets import kept_secrets

STATE_FILE = "state.json"
"""Name of the state file in the home directory; present only while a supervisor runs."""
DEFAULT_NATS_PORT = 14222
DEFAULT_NATS_MONITOR_PORT = 18222
DEFAULT_POSTGRES_PORT = 15432
DEFAULT_OTLP_GRPC_PORT = 4317
"""ingestion's OTLP/gRPC receiver: the port OpenTelemetry exporters use by default."""
DEFAULT_OTLP_HTTP_PORT = 4318
"""ingestion's OTLP/HTTP receiver: the OpenTelemetry default for ``http/protobuf``."""
DEFAULT_XPROF_INSTANCE_PORT = 9100
"""First port of the xprof-provisioner's XProf instances (loopback, moved by the offset)."""
DEFAULT_REPLICA_PORT = 20000
"""First port the local executor offers training replicas (moved by the offset)."""
REPLICA_PORT_COUNT = 1000
"""How many ports from the first the local executor offers."""
DEFAULT_HEALTH_TIMEOUT = 60.0


@dataclass(frozen=True)
class ServiceSpec:
    """One platform process as the supervisor runs it: ``python -m MODULE``."""

    name: str
    module: str
    default_port: int
    label: str
    health_path: str = "/healthz"
    """Where the supervisor and ``mldiag status`` ask whether it is healthy."""

    @property
    def env_prefix(self) -> str:
        """Prefix of the service's settings, e.g. ``MLDIAG_RUN_REGISTRY``."""
        return "MLDIAG_" + self.name.upper().replace("-", "_")


EDGE = "edge"
"""The one base URL: routes every path to the service that serves it (the API address)."""

SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(EDGE, "mldiag_platform.edge", 8080, "API (edge)", "/_edge/healthz"),
    ServiceSpec("run-registry", "mldiag_run_registry", 8090, "run-registry"),
    ServiceSpec("ingestion", "mldiag_ingestion", 8081, "ingestion"),
    ServiceSpec("event-detector", "mldiag_event_detector", 8082, "event-detector"),
    ServiceSpec("analyzer", "mldiag_analyzer", 8083, "analyzer"),
    ServiceSpec("xprof-provisioner", "mldiag_xprof_provisioner", 8084, "xprof-provisioner"),
    ServiceSpec("training", "mldiag_training", 8085, "training"),
    ServiceSpec("executor", "mldiag_executor", 8086, "executor"),
    ServiceSpec("notifier", "mldiag_notifier", 8087, "notifier"),
)
"""Every process ``mldiag up`` starts besides NATS and PostgreSQL, the API's edge first."""
SERVICE_NAMES: tuple[str, ...] = tuple(spec.name for spec in SERVICES)
SPECS: dict[str, ServiceSpec] = {spec.name: spec for spec in SERVICES}
"""The services by name."""
EDGE_UPSTREAMS: dict[str, str] = {
    "run-registry": "MLDIAG_EDGE_RUN_REGISTRY_URL",
    "ingestion": "MLDIAG_EDGE_INGESTION_URL",
    "training": "MLDIAG_EDGE_TRAINING_URL",
    "xprof-provisioner": "MLDIAG_EDGE_XPROF_PROVISIONER_URL",
    "notifier": "MLDIAG_EDGE_NOTIFIER_URL",
}
"""The edge's setting that names each service behind it (mldiag_platform.edge.settings)."""


def service_spec(name: str) -> ServiceSpec:
    """The spec of service ``name`` (``run-registry`` or ``run_registry``)."""
    key = name.strip().replace("_", "-")
    if key not in SPECS:
        raise LocalStackError(f"unknown service {name!r}; the services are {', '.join(SPECS)}")
    return SPECS[key]


def service_available(spec: ServiceSpec) -> bool:
    """Whether ``python -m <module>`` can run here (its package and ``__main__`` exist)."""
    try:
        return importlib.util.find_spec(f"{spec.module}.__main__") is not None
    except ImportError:
        return False


@dataclass(frozen=True)
class StackConfig:
    """Where the stack lives and which ports it takes. Build it with :func:`resolve_config`."""

    home: Path
    nats_port: int = DEFAULT_NATS_PORT
    nats_monitor_port: int = DEFAULT_NATS_MONITOR_PORT
    postgres_port: int = DEFAULT_POSTGRES_PORT
    otlp_grpc_port: int = DEFAULT_OTLP_GRPC_PORT
    """ingestion's OTLP/gRPC port."""
    otlp_http_port: int = DEFAULT_OTLP_HTTP_PORT
    """ingestion's OTLP/HTTP port (the same routes are also on ingestion's HTTP port)."""
    xprof_instance_port: int = DEFAULT_XPROF_INSTANCE_PORT
    """First port of the XProf instances' range."""
    replica_port: int = DEFAULT_REPLICA_PORT
    """First port of the range the local executor gives training replicas."""
    service_ports: Mapping[str, int] = field(
        default_factory=lambda: {spec.name: spec.default_port for spec in SERVICES}
    )
    service_hosts: Mapping[str, str] = field(
        default_factory=lambda: {spec.name: LOCALHOST for spec in SERVICES}
    )
    services: tuple[str, ...] = SERVICE_NAMES
    """Services to start, in start order."""
    services_chosen: bool = False
    """True when the user named the services: a missing one is then an error, not a skip."""
    health_timeout: float = DEFAULT_HEALTH_TIMEOUT

    @property
    def state_file(self) -> Path:
        """``<home>/state.json``."""
        return self.home / STATE_FILE

    @property
    def logs_dir(self) -> Path:
        """``<home>/logs``: one log per component, plus ``up.log`` of a detached supervisor."""
        return self.home / "logs"

    @property
    def storage_dir(self) -> Path:
        """``<home>/storage``, the ``file://`` artifacts root."""
        return self.home / "storage"

    @property
    def storage_url(self) -> str:
        """``file://<home>/storage`` (absolute)."""
        return f"file://{self.storage_dir}"

    @property
    def secrets_dir(self) -> Path:
        """``<home>/secrets`` (owner-only): the passwords of the servers' users."""
        return self.home / "secrets"

    @property
    def xprof_dir(self) -> Path:
        """``<home>/xprof``, the xprof-provisioner's working directory."""
        return self.home / "xprof"

    @property
    def executor_dir(self) -> Path:
        """``<home>/executor``, the local executor's state (attempts, package cache)."""
        return self.home / "executor"

    def service_url(self, name: str) -> str:
        """``http://HOST:PORT`` of service ``name``, as a process on this machine reaches it."""
        return f"http://{probe_host(self.service_hosts[name])}:{self.service_ports[name]}"

    @property
    def api_url(self) -> str:
        """The one base URL: the edge's address (everything users call is reachable there)."""
        return self.service_url(EDGE)

    def port_of(self, key: str) -> int:
        """The port behind a key of :func:`resolve_config`'s ``ports`` (a service's name,
        ``nats``, ``nats-monitor``, ``postgres``, ``ingestion-otlp-grpc``,
        ``ingestion-otlp-http``, ``xprof-instances``, ``replicas``)."""
        fixed = {
            "nats": self.nats_port,
            "nats-monitor": self.nats_monitor_port,
            "postgres": self.postgres_port,
            "ingestion-otlp-grpc": self.otlp_grpc_port,
            "ingestion-otlp-http": self.otlp_http_port,
            "xprof-instances": self.xprof_instance_port,
            "replicas": self.replica_port,
        }
        return fixed[key] if key in fixed else self.service_ports[key]

    def ports(self) -> dict[str, int]:
        """Every port the stack listens on, by a label naming its owner."""
        ports = {
            "NATS": self.nats_port,
            "NATS monitoring": self.nats_monitor_port,
            "PostgreSQL": self.postgres_port,
        }
        for name in self.services:
            ports[SPECS[name].label] = self.service_ports[name]
        if "ingestion" in self.services:
            ports["ingestion OTLP/gRPC"] = self.otlp_grpc_port
            ports["ingestion OTLP/HTTP"] = self.otlp_http_port
        return ports

    def ranges(self) -> dict[str, range]:
        """Port ranges handed out while the stack runs (not bound at start), by owner."""
        ranges = {}
        if "executor" in self.services:
            ranges["training replicas"] = range(
                self.replica_port, self.replica_port + REPLICA_PORT_COUNT
            )
        return ranges


def _int_from(value: str | int | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise LocalStackError(f"{what} must be a whole number, not {value!r}") from None
    return number


def resolve_config(
    home: str | Path | None = None,
    *,
    ports: Mapping[str, int | None] | None = None,
    port_offset: int | None = None,
    host: str | None = None,
    services: Sequence[str] | None = None,
    health_timeout: float = DEFAULT_HEALTH_TIMEOUT,
    environ: Mapping[str, str] | None = None,
) -> StackConfig:
    """Combine flags (arguments), environment and defaults, in that order of precedence.

    ``ports`` maps ``nats``, ``nats-monitor``, ``postgres`` and service names to a port or
    None. The environment offers ``MLDIAG_HOME``, ``MLDIAG_EMBEDDED_NATS_PORT``,
    ``MLDIAG_EMBEDDED_NATS_MONITOR_PORT``, ``MLDIAG_EMBEDDED_POSTGRES_PORT``,
    ``MLDIAG_PORT_OFFSET``, ``MLDIAG_INGESTION_OTLP_GRPC_PORT``,
    ``MLDIAG_INGESTION_OTLP_HTTP_PORT``, ``MLDIAG_EXECUTOR_FIRST_PORT`` and each service's
    ``MLDIAG_<SERVICE>_HOST`` / ``_PORT`` (``MLDIAG_EDGE_PORT``: the API address).
    ``port_offset`` is added to every port (to run a second stack next to the first).
    """
    env = os.environ if environ is None else environ
    given = dict(ports or {})
    offset = port_offset
    if offset is None:
        offset = _int_from(env.get("MLDIAG_PORT_OFFSET"), "MLDIAG_PORT_OFFSET") or 0

    def pick(key: str, env_name: str, default: int) -> int:
        chosen = given.get(key)
        if chosen is None:
            chosen = _int_from(env.get(env_name), env_name)
        port = (default if chosen is None else chosen) + offset
        if not 0 < port < 65536:
            raise LocalStackError(f"port {port} for {key} is outside 1-65535")
        return port

    service_ports = {
        spec.name: pick(spec.name, f"{spec.env_prefix}_PORT", spec.default_port)
        for spec in SERVICES
    }
    service_hosts = {
        spec.name: host or env.get(f"{spec.env_prefix}_HOST") or LOCALHOST for spec in SERVICES
    }
    chosen = tuple(dict.fromkeys(service_spec(name).name for name in services or ()))
    config = StackConfig(
        home=(Path(home) if home else default_home(env)).absolute(),
        nats_port=pick("nats", "MLDIAG_EMBEDDED_NATS_PORT", DEFAULT_NATS_PORT),
        nats_monitor_port=pick(
            "nats-monitor", "MLDIAG_EMBEDDED_NATS_MONITOR_PORT", DEFAULT_NATS_MONITOR_PORT
        ),
        postgres_port=pick("postgres", "MLDIAG_EMBEDDED_POSTGRES_PORT", DEFAULT_POSTGRES_PORT),
        otlp_grpc_port=pick(
            "ingestion-otlp-grpc", "MLDIAG_INGESTION_OTLP_GRPC_PORT", DEFAULT_OTLP_GRPC_PORT
        ),
        otlp_http_port=pick(
            "ingestion-otlp-http", "MLDIAG_INGESTION_OTLP_HTTP_PORT", DEFAULT_OTLP_HTTP_PORT
        ),
        xprof_instance_port=pick(
            "xprof-instances",
            "MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT",
            DEFAULT_XPROF_INSTANCE_PORT,
        ),
        replica_port=pick("replicas", "MLDIAG_EXECUTOR_FIRST_PORT", DEFAULT_REPLICA_PORT),
        service_ports=service_ports,
        service_hosts=service_hosts,
        services=tuple(name for name in SERVICE_NAMES if name in chosen) or SERVICE_NAMES,
        services_chosen=bool(chosen),
        health_timeout=health_timeout,
    )
    labels: dict[int, str] = {}
    for label, port in config.ports().items():
        if port in labels:
            raise LocalStackError(f"{labels[port]} and {label} are both given port {port}")
        labels[port] = label
    return config


def probe_host(host: str) -> str:
    """The address to check a service on: a wildcard bind address is reached on localhost."""
    return LOCALHOST if host in ("0.0.0.0", "", "::") else host


def service_environment(config: StackConfig, nats_url: str, database_url: str) -> dict[str, str]:
    """Environment of every service process: the embedded servers' URLs, every service's
    host and port (so services can find each other), the edge's upstreams, JSON logs.
    """
    env = child_env(
        {
            "MLDIAG_NATS_URL": nats_url,
            "MLDIAG_DATABASE_URL": database_url,
            "MLDIAG_STORAGE_URL": config.storage_url,
            "MLDIAG_LOG_FORMAT": "json",
            "MLDIAG_XPROF_PROVISIONER_WORK_DIR": str(config.xprof_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for spec in SERVICES:
        env[f"{spec.env_prefix}_HOST"] = config.service_hosts[spec.name]
        env[f"{spec.env_prefix}_PORT"] = str(config.service_ports[spec.name])
    for name, variable in EDGE_UPSTREAMS.items():
        env[variable] = config.service_url(name)
    # Links people open (dashboardUri, XProf instances) and the replicas' MLDIAG_API_URL
    # use the one base URL; the edge sends /xprof/ to the provisioner.
    env["MLDIAG_RUN_REGISTRY_XPROF_URL"] = config.api_url
    env["MLDIAG_XPROF_PROVISIONER_PUBLIC_URL"] = config.api_url
    env["MLDIAG_TRAINING_PUBLIC_API_URL"] = config.api_url
    env["MLDIAG_NOTIFIER_PUBLIC_URL"] = config.api_url  # the console links in notifications
    env["MLDIAG_INGESTION_OTLP_GRPC_PORT"] = str(config.otlp_grpc_port)
    env["MLDIAG_INGESTION_OTLP_HTTP_PORT"] = str(config.otlp_http_port)
    env["MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT"] = str(config.xprof_instance_port)
    # Replicas run as processes of this machine, their state under the home.
    env["MLDIAG_EXECUTOR_BACKEND"] = "local"
    env["MLDIAG_EXECUTOR_STATE_DIR"] = str(config.executor_dir)
    env["MLDIAG_EXECUTOR_FIRST_PORT"] = str(config.replica_port)
    env["MLDIAG_EXECUTOR_PORT_COUNT"] = str(REPLICA_PORT_COUNT)
    return env


@dataclass(frozen=True)
class Substrate:
    """How the embedded servers are locked down, and the credentials each service gets."""

    nats_authorization: str
    """The NATS server's ``authorization`` block: a user per service, no anonymous access."""
    postgres_password: str
    """The PostgreSQL superuser's password (only the supervisor logs in with it)."""
    postgres_setup_sql: str
    """Creates (or upgrades) a role per service that owns the service's schema."""
    credentials: Mapping[str, Mapping[str, str]]
    """Per service: its NATS user and password and its DSN, as environment variables."""

    def service_env(self, name: str) -> dict[str, str]:
        """The environment variables that give service ``name`` its own credentials."""
        return dict(self.credentials[name])


def locked_down_substrate(
    config: StackConfig, environ: Mapping[str, str] | None = None
) -> Substrate:
    """The access model of the stack in ``config``: secrets made at the first start and kept in
    ``<home>/secrets``, rendered for the namespace the services will use."""
    env = os.environ if environ is None else environ
    try:
        # Imported here: the SDK alone (without the platform) must still import this module.
        from mldiag_platform import substrate  # noqa: PLC0415
        from mldiag_schemas.bus import DEFAULT_NAMESPACE, Namespace  # noqa: PLC0415
    except ImportError as error:
        raise LocalStackError(
            f"the platform is not installed ({error}); `mldiag up` runs its services"
        ) from None
    namespace = Namespace(env.get("MLDIAG_NATS_NAMESPACE") or DEFAULT_NAMESPACE)
    secrets = kept_secrets(config.secrets_dir, substrate.SECRET_NAMES)
    return Substrate(
        nats_authorization=substrate.nats_authorization(namespace, secrets),
        postgres_password=secrets[substrate.POSTGRES_SUPERUSER_KEY],
        postgres_setup_sql=substrate.database_roles_sql(secrets),
        # The edge touches neither NATS nor PostgreSQL: it gets no credentials. The notifier
        # also gets its encryption key, made from a secret kept with the passwords.
        credentials={
            name: substrate.service_credentials(name, secrets, LOCALHOST, config.postgres_port)
            for name in SERVICE_NAMES
            if name in substrate.SERVICE_NAMES
        },
    )
