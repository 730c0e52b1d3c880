"""Who may do what on the substrate: NATS users with per-service permissions and PostgreSQL
roles with a schema each, in one table, and the configuration rendered from it.

The bus vocabulary (streams, subjects, durables, the token directory) lives in
:mod:`mldiag_schemas.bus`; this module says which service uses which part of it and turns
that into a nats-server ``authorization`` block, the SQL that creates the database roles,
and the credentials each service gets (env files for compose, Secrets for Kubernetes).
Everything here is pure: reading and keeping the secrets is the caller's job.

A service is allowed exactly what it does: publish its own subjects (and dead letters of
what it consumes), declare the namespace's streams, create and pull its own durables, and
read the token directory. Only run-registry (API tokens) and training (each job's run-scoped
replica token) may write the token directory. Replies go to an inbox of the user's own
(``_INBOX.<user>``), so no service can read another one's replies. The edge (the one base
URL) touches neither NATS nor PostgreSQL and has no user here.
"""

import base64
import hashlib
import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mldiag_schemas import bus
from mldiag_schemas.bus import ALL_STREAMS, Namespace, StreamSpec

DEFAULT_INBOX_PREFIX = "_INBOX"
"""nats-py's inbox prefix, for a connection without a user."""
OPERATOR = "operator"
"""The NATS user with every permission, for people (the nats CLI in the runbooks)."""
TELEMETRY_PUBLISHER = "telemetry-publisher"
"""The NATS user of in-cluster publishers: it may only publish metric writes to ingestion."""
POSTGRES_SUPERUSER = "mldiag"
"""The PostgreSQL superuser: it creates the roles and schemas, no service connects as it."""
POSTGRES_DATABASE = "mldiag"
"""The database every service's schema lives in."""

TokenAccess = Literal["write", "read", "none"]


@dataclass(frozen=True)
class Consumes:
    """A durable consumer a service pulls from, and the base subject it filters on."""

    stream: StreamSpec
    durable: str
    subject: str
    any_durable: bool = False
    """The durable's name is not fixed (an executor's is ``executor-<its id>``): any durable on
    ``stream`` is allowed. NATS wildcards match whole tokens and a durable name is one token,
    so ``executor-*`` cannot be said; the stream (a work queue of commands to executors)
    bounds what such a user reaches."""


@dataclass(frozen=True)
class BusUser:
    """One NATS user and the part of the bus vocabulary it uses."""

    name: str
    publishes: tuple[str, ...] = ()
    """Base subject patterns it publishes (JetStream or core NATS)."""
    consumes: tuple[Consumes, ...] = ()
    listens: tuple[str, ...] = ()
    """Base subject patterns it follows on core NATS."""
    tokens: TokenAccess = "none"
    reads_last: tuple[StreamSpec, ...] = ()
    """Streams whose last message on a subject it looks up (``STREAM.MSG.GET``)."""
    declares_streams: bool = False
    everything: bool = False
    """The operator: no restriction at all."""


def _one(subject: str) -> str:
    return f"{subject}.*"


SERVICES: tuple[BusUser, ...] = (
    BusUser(
        "run-registry",
        publishes=tuple(
            _one(subject)
            for subject in (
                bus.RUN_CREATED,
                bus.RUN_UPDATED,
                bus.RUN_PHASE_CHANGED,
                bus.RUN_DELETED,
                bus.MONITORING_RULES_CHANGED,
                bus.CAPTURE_PROFILE,
                bus.PROFILE_CAPTURE_FINISHED,
                bus.PROFILER_SESSION_CHANGED,
                bus.CONSOLE_UPDATED,
            )
        ),
        consumes=(
            Consumes(bus.TELEMETRY, bus.REGISTRY_METRICS_DURABLE, _one(bus.METRICS_RECEIVED)),
            Consumes(bus.TELEMETRY, bus.REGISTRY_CONFIGS_DURABLE, _one(bus.CONFIGS_RECEIVED)),
            Consumes(bus.TELEMETRY, bus.REGISTRY_HEARTBEATS_DURABLE, _one(bus.HEARTBEAT_RECEIVED)),
            Consumes(bus.EVENTS, bus.REGISTRY_EVENTS_DURABLE, bus.WORKLOAD_EVENTS + ".*.*"),
            Consumes(bus.ANALYSES, bus.REGISTRY_ANALYSES_DURABLE, _one(bus.ANALYSIS_COMPLETED)),
            Consumes(
                bus.PROFILING,
                bus.REGISTRY_CAPTURE_REQUESTS_DURABLE,
                _one(bus.PROFILE_CAPTURE_REQUESTED),
            ),
            Consumes(bus.PROFILING, bus.REGISTRY_SESSIONS_DURABLE, bus.PROFILING.subjects[0]),
            # Each job's run: created with the job, its phase mirrored from the job's state.
            Consumes(bus.TRAINING, bus.REGISTRY_JOBS_DURABLE, "training.job.>"),
            # A tuning job's (a study's) run, and each trial's outcome on the trial's run.
            Consumes(bus.TRAINING, bus.REGISTRY_TUNING_DURABLE, "training.tuning.>"),
            Consumes(bus.TRAINING, bus.REGISTRY_TRIALS_DURABLE, "training.trial.>"),
            # Workloads' log lines, stored for the run's logs.
            Consumes(bus.TELEMETRY, bus.REGISTRY_LOGS_DURABLE, _one(bus.LOGS_RECEIVED)),
        ),
        # The console's live pages follow these on core NATS.
        listens=(_one(bus.CONSOLE_UPDATED), "runs.run.*.*", _one(bus.PROFILER_SESSION_CHANGED)),
        tokens="write",
        declares_streams=True,
    ),
    BusUser(
        "ingestion",
        publishes=tuple(
            _one(subject)
            for subject in (
                bus.METRICS_RECEIVED,
                bus.HEARTBEAT_RECEIVED,
                bus.SIGNAL_RECEIVED,
                bus.CONFIGS_RECEIVED,
                bus.LOGS_RECEIVED,
            )
        ),
        consumes=(Consumes(bus.TELEMETRY, bus.INGESTION_INGEST_DURABLE, _one(bus.METRICS_INGEST)),),
        tokens="read",
        declares_streams=True,
    ),
    BusUser(
        "event-detector",
        publishes=tuple(
            _one(subject)
            for subject in (
                bus.WORKLOAD_EVENT_OPENED,
                bus.WORKLOAD_EVENT_UPDATED,
                bus.WORKLOAD_EVENT_RESOLVED,
            )
        ),
        consumes=(
            Consumes(bus.TELEMETRY, bus.DETECTOR_METRICS_DURABLE, _one(bus.METRICS_RECEIVED)),
            Consumes(bus.TELEMETRY, bus.DETECTOR_HEARTBEATS_DURABLE, _one(bus.HEARTBEAT_RECEIVED)),
            Consumes(bus.TELEMETRY, bus.DETECTOR_SIGNALS_DURABLE, _one(bus.SIGNAL_RECEIVED)),
            Consumes(bus.TELEMETRY, bus.DETECTOR_CONFIGS_DURABLE, _one(bus.CONFIGS_RECEIVED)),
            # The telling log lines of each run, kept as evidence.
            Consumes(bus.TELEMETRY, bus.DETECTOR_LOGS_DURABLE, _one(bus.LOGS_RECEIVED)),
            Consumes(bus.RUNS, bus.DETECTOR_RUNS_DURABLE, bus.RUNS.subjects[0]),
        ),
        declares_streams=True,
    ),
    BusUser(
        "analyzer",
        publishes=(_one(bus.ANALYSIS_COMPLETED), _one(bus.PROFILE_CAPTURE_REQUESTED)),
        consumes=(
            Consumes(bus.EVENTS, bus.ANALYZER_EVENTS_DURABLE, _one(bus.WORKLOAD_EVENT_OPENED)),
            # An update carrying new context is analysed again.
            Consumes(bus.EVENTS, bus.ANALYZER_UPDATES_DURABLE, _one(bus.WORKLOAD_EVENT_UPDATED)),
        ),
        declares_streams=True,
    ),
    BusUser(
        "xprof-provisioner",
        publishes=(
            _one(bus.PROFILE_CAPTURE_FINISHED),
            _one(bus.PROFILER_SESSION_REPORTED),
            _one(bus.XPROF_INSTANCE_CHANGED),
        ),
        consumes=(
            Consumes(bus.PROFILING, bus.PROVISIONER_CAPTURES_DURABLE, _one(bus.CAPTURE_PROFILE)),
            Consumes(
                bus.PROFILING, bus.PROVISIONER_SESSIONS_DURABLE, _one(bus.PROFILER_SESSION_CHANGED)
            ),
        ),
        # Every replica syncs every change into its own instances (the durable is shared).
        listens=(_one(bus.PROFILER_SESSION_CHANGED),),
        tokens="read",
        declares_streams=True,
    ),
    BusUser(
        "training",
        publishes=tuple(
            _one(subject)
            for subject in (
                bus.JOB_CREATED,
                bus.JOB_STATE_CHANGED,
                bus.START_REPLICA,
                bus.STOP_REPLICA,
                bus.TUNING_JOB_CREATED,
                bus.TUNING_JOB_STATE_CHANGED,
                bus.TRIAL_ENDED,
            )
        ),
        consumes=(
            # Replicas start only once the job's run exists.
            Consumes(bus.RUNS, bus.TRAINING_RUNS_DURABLE, _one(bus.RUN_CREATED)),
            Consumes(bus.TRAINING, bus.TRAINING_REPLICAS_DURABLE, "training.replica.*.*"),
            # The tuning controller: its trials' jobs ending, and their metric points.
            Consumes(bus.TRAINING, bus.TRAINING_TRIAL_JOBS_DURABLE, _one(bus.JOB_STATE_CHANGED)),
            Consumes(bus.TELEMETRY, bus.TRAINING_TRIAL_METRICS_DURABLE, _one(bus.METRICS_RECEIVED)),
            # Training pipelines: the custom and tuning jobs they run changing state.
            Consumes(
                bus.TRAINING, bus.TRAINING_PIPELINE_JOBS_DURABLE, "training.*.state_changed.*"
            ),
        ),
        # A trial is finalised once its run's last metric points (looked up here) are read.
        reads_last=(bus.TELEMETRY,),
        # Executors' capacity, repeated every few seconds on core NATS.
        listens=(_one(bus.EXECUTOR_ANNOUNCED),),
        # It grants (and revokes) each job's run-scoped replica token.
        tokens="write",
        declares_streams=True,
    ),
    BusUser(
        "executor",
        publishes=(
            _one(bus.REPLICA_STARTED),
            _one(bus.REPLICA_EXITED),
            _one(bus.EXECUTOR_ANNOUNCED),
        ),
        consumes=(
            Consumes(
                bus.DISPATCH,
                bus.EXECUTOR_DURABLE_PREFIX,
                "dispatch.replica.*.*",
                any_durable=True,
            ),
        ),
        declares_streams=True,
    ),
    BusUser(
        "notifier",
        # It publishes nothing: deliveries are its own records, kept in its database.
        consumes=(
            # Opened and resolved (it skips updates) on one durable.
            Consumes(bus.EVENTS, bus.NOTIFIER_EVENTS_DURABLE, bus.WORKLOAD_EVENTS + ".*.*"),
            Consumes(bus.ANALYSES, bus.NOTIFIER_ANALYSES_DURABLE, _one(bus.ANALYSIS_COMPLETED)),
            # Runs' project, run set and labels, which rules match on.
            Consumes(bus.RUNS, bus.NOTIFIER_RUNS_DURABLE, "runs.run.>"),
        ),
        # Its API authenticates callers against the token directory.
        tokens="read",
        declares_streams=True,
    ),
)
"""The platform's services, each with the bus access it needs."""

SERVICE_NAMES: tuple[str, ...] = tuple(user.name for user in SERVICES)

NATS_USERS: tuple[BusUser, ...] = (
    *SERVICES,
    BusUser(TELEMETRY_PUBLISHER, publishes=(_one(bus.METRICS_INGEST),)),
    BusUser(OPERATOR, everything=True),
)
"""Every NATS user of an installation."""

DATABASE_USERS: frozenset[str] = frozenset(
    {"run-registry", "event-detector", "training", "notifier"}
)
"""Services that keep tables today (the others get a role and schema for when they do)."""


def inbox_prefix(user: str | None) -> str:
    """The inbox prefix a connection as ``user`` uses (and the only one it may read)."""
    return f"{DEFAULT_INBOX_PREFIX}.{user}" if user else DEFAULT_INBOX_PREFIX


def database_role(service: str) -> str:
    """The PostgreSQL role of a service, e.g. ``mldiag_run_registry``."""
    return "mldiag_" + database_schema(service)


def database_schema(service: str) -> str:
    """The one schema a service's role owns (the default ``db_schema`` of its settings)."""
    return service.replace("-", "_")


def nats_password_key(user: str) -> str:
    """The name a NATS user's password is kept under."""
    return f"nats-{user}"


def database_password_key(service: str) -> str:
    """The name a service role's password is kept under."""
    return f"postgres-{service}"


POSTGRES_SUPERUSER_KEY = "postgres-superuser"
"""The name the PostgreSQL superuser's password is kept under."""
NOTIFIER_KEY = "notifier-secret-key"
"""The name the secret the notifier's encryption key is made from is kept under."""

SECRET_NAMES: tuple[str, ...] = (
    *(nats_password_key(user.name) for user in NATS_USERS),
    *(database_password_key(service) for service in SERVICE_NAMES),
    POSTGRES_SUPERUSER_KEY,
    NOTIFIER_KEY,
)
"""Every secret an installation needs, generated once and kept."""


def nats_permissions(user: BusUser, namespace: Namespace) -> dict[str, dict[str, list[str]]]:
    """The ``permissions`` of ``user`` on a server shared by namespace ``namespace``."""
    if user.everything:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    api = "$JS.API"
    publish = [namespace.subject(subject) for subject in user.publishes]
    subscribe = [f"{inbox_prefix(user.name)}.>"]
    subscribe += [namespace.subject(subject) for subject in user.listens]
    if user.declares_streams:
        publish.append(f"{api}.INFO")
        for spec in ALL_STREAMS:
            name = namespace.stream(spec)
            publish += [f"{api}.STREAM.{verb}.{name}" for verb in ("INFO", "CREATE", "UPDATE")]
    for consumer in user.consumes:
        stream = namespace.stream(consumer.stream)
        durable = "*" if consumer.any_durable else namespace.durable(consumer.durable)
        publish += [
            f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
            f"{api}.CONSUMER.CREATE.{stream}.{durable}",
            f"{api}.CONSUMER.CREATE.{stream}.{durable}.>",
            f"{api}.CONSUMER.INFO.{stream}.{durable}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
            namespace.subject(bus.DEADLETTER_PREFIX, consumer.subject),
        ]
    publish += [f"{api}.STREAM.MSG.GET.{namespace.stream(spec)}" for spec in user.reads_last]
    if user.tokens != "none":
        bucket = namespace.bucket(bus.TOKEN_DIRECTORY_BUCKET)
        kv = f"KV_{bucket}"
        # Reading is a stream lookup, direct gets and an ordered (ephemeral) consumer for
        # the watch. Creating the empty bucket is allowed to every reader so that no start
        # order is imposed; the bucket's shape is checked by whoever opens it.
        publish += [
            f"{api}.STREAM.INFO.{kv}",
            f"{api}.STREAM.CREATE.{kv}",
            f"{api}.STREAM.MSG.GET.{kv}",
            f"{api}.DIRECT.GET.{kv}",
            f"{api}.DIRECT.GET.{kv}.>",
            f"{api}.CONSUMER.CREATE.{kv}",
            f"{api}.CONSUMER.CREATE.{kv}.>",
            f"{api}.CONSUMER.INFO.{kv}.>",
            f"{api}.CONSUMER.DELETE.{kv}.>",
            f"$JS.FC.{kv}.>",
        ]
        if user.tokens == "write":
            publish.append(f"$KV.{bucket}.>")
    return {
        "publish": {"allow": list(dict.fromkeys(publish))},
        "subscribe": {"allow": list(dict.fromkeys(subscribe))},
    }


def nats_authorization(namespace: Namespace, secrets: Mapping[str, str]) -> str:
    """The nats-server ``authorization { users = [...] }`` block for ``namespace``.

    Anonymous connections are refused once a server has it. Passwords are written as they
    are (the file must be readable by its owner only); json gives the double-quoted strings
    the NATS configuration syntax reads.
    """
    lines = ["authorization {", "  users = ["]
    for user in NATS_USERS:
        entry = {
            "user": user.name,
            "password": secrets[nats_password_key(user.name)],
            "permissions": nats_permissions(user, namespace),
        }
        lines.append(textwrap.indent(json.dumps(entry, indent=2), "    "))
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def database_url(service: str, secrets: Mapping[str, str], host: str, port: int = 5432) -> str:
    """The DSN a service connects with: its own role and password."""
    password = secrets[database_password_key(service)]
    return f"postgresql://{database_role(service)}:{password}@{host}:{port}/{POSTGRES_DATABASE}"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def database_roles_sql(secrets: Mapping[str, str], database: str = POSTGRES_DATABASE) -> str:
    """SQL, run by the superuser in ``database``, that gives every service a login role owning
    its schema and nothing else. Idempotent: every start runs it, and it upgrades a database
    an older version filled as the superuser (the schema and everything in it change owner).
    """
    statements = [
        "\\set ON_ERROR_STOP on",
        f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC;',
        "REVOKE ALL ON SCHEMA public FROM PUBLIC;",
    ]
    for service in SERVICE_NAMES:
        role, schema = database_role(service), database_schema(service)
        password = _literal(secrets[database_password_key(service)])
        statements += [
            # Names come from the table above; values are quoted by _literal.
            f"SELECT format('CREATE ROLE %I', {_literal(role)}) WHERE NOT EXISTS "  # noqa: S608
            f"(SELECT FROM pg_roles WHERE rolname = {_literal(role)})\\gexec",
            f"ALTER ROLE {role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
            f"NOBYPASSRLS PASSWORD {password};",
            f'GRANT CONNECT, TEMPORARY ON DATABASE "{database}" TO {role};',
            f"CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {role};",
            f"ALTER SCHEMA {schema} OWNER TO {role};",
            f"REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;",
            _hand_over_sql(schema, role),
        ]
    return "\n".join(statements) + "\n"


def _hand_over_sql(schema: str, role: str) -> str:
    # Tables (their indexes and owned sequences follow), free-standing sequences and views
    # that an older version created as the superuser.
    return f"""DO $$
DECLARE item record;
BEGIN
  FOR item IN
    SELECT c.oid::regclass AS name, c.relkind FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = {_literal(schema)} AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
      AND pg_get_userbyid(c.relowner) <> {_literal(role)}
      AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                      AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO %I',
      CASE item.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                        WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
      item.name, {_literal(role)});
  END LOOP;
END $$;"""  # noqa: S608  # names from the table above, quoted by _literal


def notifier_secret_key(secrets: Mapping[str, str]) -> str:
    """The notifier's Fernet key (URL-safe base64 of 32 bytes), which encrypts channels'
    secrets at rest: the SHA-256 of its kept secret, so every rendering (the embedded stack,
    compose, Kubernetes) gives the same key for the same secrets. Losing it makes the stored
    channel secrets unreadable: keep the secrets file backed up."""
    digest = hashlib.sha256(secrets[NOTIFIER_KEY].encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()


def service_credentials(
    service: str,
    secrets: Mapping[str, str],
    postgres_host: str,
    postgres_port: int = 5432,
) -> dict[str, str]:
    """The environment that gives a service its NATS user and its database role (and the
    notifier its encryption key)."""
    env = {
        "MLDIAG_NATS_USER": service,
        "MLDIAG_NATS_PASSWORD": secrets[nats_password_key(service)],
        "MLDIAG_DATABASE_URL": database_url(service, secrets, postgres_host, postgres_port),
    }
    if service == "notifier":
        env["MLDIAG_NOTIFIER_SECRET_KEY"] = notifier_secret_key(secrets)
    return env


def compose_files(
    namespace: Namespace, secrets: Mapping[str, str], postgres_host: str = "postgres"
) -> dict[str, str]:
    """The files docker-compose.yml reads, by name: the NATS authorization block, one env
    file per service, the PostgreSQL superuser's env file, the roles SQL, the nats CLI's."""
    files = {
        "nats-auth.conf": nats_authorization(namespace, secrets),
        "postgres.env": _env_file({"POSTGRES_PASSWORD": secrets[POSTGRES_SUPERUSER_KEY]}),
        "postgres-roles.env": _env_file({"PGPASSWORD": secrets[POSTGRES_SUPERUSER_KEY]}),
        "postgres-roles.sql": database_roles_sql(secrets),
        "nats-cli.env": _env_file(
            {"NATS_USER": OPERATOR, "NATS_PASSWORD": secrets[nats_password_key(OPERATOR)]}
        ),
    }
    for service in SERVICE_NAMES:
        env = service_credentials(service, secrets, postgres_host)
        if service not in DATABASE_USERS:
            del env["MLDIAG_DATABASE_URL"]  # compose checks every variable is read
        files[f"{service}.env"] = _env_file(env)
    return files


def _env_file(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


NATS_AUTH_SECRET = "mldiag-nats-auth"  # noqa: S105  # a Secret's name
CREDENTIALS_SECRET = "mldiag-credentials"  # noqa: S105  # a Secret's name


def kubernetes_secrets(
    namespace: Namespace, secrets: Mapping[str, str], postgres_host: str, postgres_port: int = 5432
) -> str:
    """Two Secret manifests (YAML): ``mldiag-nats-auth`` (key ``auth.conf``: the
    authorization block the NATS server config includes) and ``mldiag-credentials``
    (``<service>-nats-password``, ``<service>-database-url``, the superuser's password, the
    roles SQL for a job that runs it and the notifier's ``notifier-secret-key``)."""
    auth = nats_authorization(namespace, secrets)
    credentials: dict[str, str] = {}
    for service in SERVICE_NAMES:
        credentials[f"{service}-nats-password"] = secrets[nats_password_key(service)]
        credentials[f"{service}-database-url"] = database_url(
            service, secrets, postgres_host, postgres_port
        )
    credentials[f"{TELEMETRY_PUBLISHER}-nats-password"] = secrets[
        nats_password_key(TELEMETRY_PUBLISHER)
    ]
    credentials["operator-nats-password"] = secrets[nats_password_key(OPERATOR)]
    credentials["notifier-secret-key"] = notifier_secret_key(secrets)
    credentials["postgres-superuser-password"] = secrets[POSTGRES_SUPERUSER_KEY]
    credentials["postgres-roles.sql"] = database_roles_sql(secrets)
    return _secret_yaml(NATS_AUTH_SECRET, {"auth.conf": auth}) + _secret_yaml(
        CREDENTIALS_SECRET, credentials
    )


def _secret_yaml(name: str, data: Mapping[str, str]) -> str:
    # JSON strings are YAML scalars, so every value is quoted safely without a YAML library.
    lines = [
        "---",
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        f"  name: {name}",
        "  labels:",
        "    app.kubernetes.io/part-of: mldiag",
        "type: Opaque",
        "stringData:",
    ]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in data.items()]
    return "\n".join(lines) + "\n"
