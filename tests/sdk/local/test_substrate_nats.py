"""The locked-down NATS of `mldiag up`: a real nats-server with the generated authorization.

Issue 14 saw any local process `kv.put` a grant into the token directory and mint a working
admin token. Here no one connects without a password, only run-registry writes the token
directory, and every service, with its own user and the platform's real bus code, can still
do what it does: declare the streams, pull and ack its real durables, dead-letter, publish its
subjects and read the directory.
"""

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from mldiag.local.nats import EmbeddedNats
from mldiag_analyzer import handlers as analyzer_handlers
from mldiag_event_detector import handlers as detector_handlers
from mldiag_executor.handlers import dispatch_consumer
from mldiag_ingestion import handlers as ingestion_handlers
from mldiag_notifier import handlers as notifier_handlers
from mldiag_platform import substrate
from mldiag_platform.auth import (
    TokenDirectoryTampered,
    new_secret,
    open_token_directory,
    secret_hash,
)
from mldiag_platform.bus import ConsumerSpec, connect_bus
from mldiag_platform.errors import Unavailable
from mldiag_platform.settings import NatsSettings
from mldiag_run_registry.events import handlers as registry_events
from mldiag_run_registry.heartbeats import handlers as registry_heartbeats
from mldiag_run_registry.jobs import handlers as registry_jobs
from mldiag_run_registry.logs import handlers as registry_logs
from mldiag_run_registry.metrics import handlers as registry_metrics
from mldiag_run_registry.profiles import handlers as registry_profiles
from mldiag_run_registry.runs import handlers as registry_runs
from mldiag_schemas import bus
from mldiag_schemas.auth import Role, TokenGrant
from mldiag_schemas.bus import Namespace
from mldiag_schemas.messages import SUBJECT_OF
from mldiag_training.pipelines import handlers as training_pipelines
from mldiag_training.scheduler import handlers as training_scheduler
from mldiag_training.tuning import handlers as training_tuning
from mldiag_xprof_provisioner.captures.handlers import captures_consumer
from mldiag_xprof_provisioner.captures.settings import CaptureSettings
from mldiag_xprof_provisioner.warm import handlers as provisioner_warm
from support import free_port, wait_until, world_readable_tempdir

pytestmark = pytest.mark.connected

NAMESPACE = Namespace("locked")
SECRETS = {name: f"secret-of-{name}" for name in substrate.SECRET_NAMES}

# The durables each service really declares (its handlers' specs, not the permission table).
REAL_CONSUMERS: dict[str, list[ConsumerSpec[Any]]] = {
    "run-registry": [
        registry_metrics.metrics_consumer(10),
        registry_runs.CONFIGS_CONSUMER,
        registry_heartbeats.HEARTBEATS_CONSUMER,
        registry_events.EVENTS_CONSUMER,
        registry_events.ANALYSES_CONSUMER,
        registry_profiles.CAPTURE_REQUESTS_CONSUMER,
        registry_profiles.SESSIONS_CONSUMER,
        registry_jobs.JOBS_CONSUMER,
        registry_jobs.TUNING_CONSUMER,
        registry_jobs.TRIALS_CONSUMER,
        registry_logs.LOGS_CONSUMER,
    ],
    "ingestion": [ingestion_handlers.INGEST_CONSUMER],
    "event-detector": detector_handlers.consumers(10),
    "analyzer": [analyzer_handlers.EVENTS_CONSUMER, analyzer_handlers.UPDATES_CONSUMER],
    "xprof-provisioner": [
        captures_consumer(CaptureSettings()),
        provisioner_warm.SESSIONS_CONSUMER,
    ],
    "training": [
        training_scheduler.RUNS_CONSUMER,
        training_scheduler.REPLICAS_CONSUMER,
        training_tuning.TRIAL_JOBS_CONSUMER,
        training_tuning.TRIAL_METRICS_CONSUMER,
        training_pipelines.JOBS_CONSUMER,
    ],
    # Two executors: the user is not tied to one executor's durable.
    "executor": [dispatch_consumer("local-a"), dispatch_consumer("local-b")],
    "notifier": [
        notifier_handlers.EVENTS_CONSUMER,
        notifier_handlers.ANALYSES_CONSUMER,
        notifier_handlers.RUNS_CONSUMER,
    ],
}


@dataclass
class Server:
    url: str
    log_file: Path


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    home = world_readable_tempdir("mldiag-test-locked-nats-")
    nats_server = EmbeddedNats(
        home / "data",
        port=free_port(),
        monitor_port=free_port(),
        authorization=substrate.nats_authorization(NAMESPACE, SECRETS),
    )
    nats_server.start()
    try:
        yield Server(nats_server.url, nats_server.log_file)
    finally:
        nats_server.stop()
        shutil.rmtree(home, ignore_errors=True)


def settings_of(server: Server, user: str) -> NatsSettings:
    return NatsSettings(
        url=server.url,
        namespace=NAMESPACE.prefix,
        user=user,
        password=SECRETS[substrate.nats_password_key(user)],
        publish_timeout_seconds=1.0,
    )


@pytest.fixture
async def operator(server: Server) -> AsyncIterator[Client]:
    client = await nats.connect(
        server.url,
        user=substrate.OPERATOR,
        password=SECRETS[substrate.nats_password_key(substrate.OPERATOR)],
    )
    yield client
    await client.close()


async def _connect_refused(url: str, **credentials: str) -> str:
    errors: list[Exception] = []

    async def record(error: Exception) -> None:
        errors.append(error)

    with pytest.raises(NatsError) as refused:
        await nats.connect(
            url, allow_reconnect=False, connect_timeout=2, error_cb=record, **credentials
        )
    return str(refused.value)


async def test_anonymous_and_wrong_passwords_are_refused(server: Server) -> None:
    assert "Authorization Violation" in await _connect_refused(server.url)
    wrong = await _connect_refused(server.url, user="run-registry", password="guess")
    assert "Authorization Violation" in wrong


def test_the_config_holding_passwords_is_owner_only(server: Server) -> None:
    config = server.log_file.parent / "nats-server.conf"
    assert config.stat().st_mode & 0o777 == 0o600
    assert config.parent.stat().st_mode & 0o777 == 0o700


async def _granted_by(server: Server, user: str, role: Role) -> str:
    """Put a grant for a new secret into the token directory as ``user``; the secret."""
    secret = new_secret()
    async with (
        connect_bus(settings_of(server, user), f"test-{user}") as client_bus,
        open_token_directory(client_bus) as directory,
    ):
        await directory.grant(secret_hash(secret), TokenGrant(token_id=f"by-{user}", role=role))
    return secret


async def test_only_run_registry_writes_the_token_directory(server: Server) -> None:
    # The reproduction: a kv.put of an admin grant by another service's user.
    with pytest.raises(Exception) as refused:  # a timeout, whatever its class
        await _granted_by(server, "ingestion", Role.ADMIN)
    assert "timeout" in type(refused.value).__name__.lower()
    assert any(
        'Publish Violation - Subject "$KV.locked_auth_tokens.' in line
        for line in _violations_by(server, "ingestion")
    )
    granted = await _granted_by(server, "run-registry", Role.ADMIN)

    # What each reader sees: the registry's grant works, nothing of ingestion's was stored.
    async with (
        connect_bus(settings_of(server, "xprof-provisioner"), "test-reader") as reader,
        open_token_directory(reader) as directory,
    ):
        principal = await directory.authenticate(granted)
        assert principal.role is Role.ADMIN
        bucket = await reader.broker.config.connection_state.stream.key_value(
            NAMESPACE.bucket(bus.TOKEN_DIRECTORY_BUCKET)
        )
        stored = [entry.key async for entry in _entries(bucket)]
        assert stored == [secret_hash(granted)], "only the registry's grant is in the directory"


async def test_a_token_directory_made_to_take_other_subjects_is_refused(
    server: Server, operator: Client
) -> None:
    # Every reader may create the empty bucket; one created with an extra subject (a way for
    # its creator to publish grants past the permissions) must not be used.
    namespace = Namespace("tampered")
    name = namespace.bucket(bus.TOKEN_DIRECTORY_BUCKET)
    js = operator.jetstream()
    await js.add_stream(
        name=f"KV_{name}",
        subjects=[f"$KV.{name}.>", "tampered.backdoor.>"],
        max_msgs_per_subject=1,
    )
    try:
        settings = settings_of(server, substrate.OPERATOR).model_copy(
            update={"namespace": namespace.prefix}
        )
        async with connect_bus(settings, "test-tampered") as client_bus:
            with pytest.raises(TokenDirectoryTampered):
                async with open_token_directory(client_bus):
                    pass
    finally:
        await js.delete_stream(f"KV_{name}")


def _concrete(pattern: str) -> str:
    return ".".join("run-1" if token in ("*", ">") else token for token in pattern.split("."))


async def _wait(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    try:
        await wait_until(condition, timeout=10.0)
    except AssertionError as error:
        raise AssertionError(what) from error


async def _entries(bucket: KeyValue) -> AsyncIterator[Any]:
    for key in await bucket.keys():
        yield await bucket.get(key)


async def _dead_letter_consumers(js: JetStreamContext) -> set[str]:
    """The durables that dead-lettered something, read by an ephemeral pull (nothing acked)."""
    subscription = await js.pull_subscribe(
        NAMESPACE.subject(bus.DEADLETTER_PREFIX, ">"), stream=NAMESPACE.stream(bus.DEADLETTER)
    )
    try:
        messages = await subscription.fetch(1000, timeout=0.5)
    except TimeoutError:
        return set()
    finally:
        await subscription.unsubscribe()
    return {(message.headers or {}).get("Mldiag-Consumer", "") for message in messages}


def _violations_by(server: Server, user: str, client: str | None = None) -> list[str]:
    """The server's log lines about ``user`` (on connections named ``client``, if given)
    being refused something."""
    who = f':{client}" - "$G/user:{user}"' if client else f'"$G/user:{user}"'
    return [
        line
        for line in server.log_file.read_text().splitlines()
        if " Violation - " in line and who in line
    ]


@pytest.mark.parametrize("service", substrate.SERVICE_NAMES)
async def test_each_service_does_its_work_with_its_own_user(
    server: Server, operator: Client, service: str
) -> None:
    user = next(user for user in substrate.SERVICES if user.name == service)
    specs = REAL_CONSUMERS[service]
    async with connect_bus(settings_of(server, service), service) as client_bus:
        # Its real durables: garbage sent to each is pulled, dead-lettered and acked, which
        # takes creating the durable, fetching, publishing the dead letter and acking.
        for spec in specs:

            async def ignore(_deliveries: list[Any]) -> None:
                return None

            client_bus.consume(spec, ignore)
        await client_bus.start()
        js = operator.jetstream()
        for spec in specs:
            subject = NAMESPACE.subject(_concrete(spec.subject))
            await js.publish(subject, b"not a message", stream=NAMESPACE.stream(spec.stream))

        async def all_dead_lettered() -> bool:
            durables = {NAMESPACE.durable(spec.durable) for spec in specs}
            return durables <= await _dead_letter_consumers(js)

        await _wait(all_dead_lettered, f"every durable of {service} dead-letters")

        async def all_acked() -> bool:
            for spec in specs:
                info = await js.consumer_info(
                    NAMESPACE.stream(spec.stream), NAMESPACE.durable(spec.durable)
                )
                if info.num_ack_pending or info.num_pending:
                    return False
            return True

        await _wait(all_acked, f"every durable of {service} acks")

        # Its own subjects, through the real publisher (a refused publish times out); the
        # console's hints and executors' announcements are core NATS only.
        connection = client_bus.broker.config.connection_state.connection
        for pattern in user.publishes:
            subject = NAMESPACE.subject(_concrete(pattern))
            if pattern.startswith((bus.CONSOLE_UPDATED, bus.EXECUTOR_ANNOUNCED)):
                await connection.publish(subject, b"{}")
                continue
            await client_bus.publisher.publish_raw(subject, b"{}", f"{service}-{pattern}")
        await connection.flush()

        # What it follows on core NATS.
        heard: list[str] = []

        async def hear(subject: str, _payload: bytes) -> None:
            heard.append(subject)

        for pattern in user.listens:
            await client_bus.listen(pattern, hear)
        # The subscriptions reach the server before anything is published to them.
        await connection.flush()
        for pattern in user.listens:
            await operator.publish(NAMESPACE.subject(_concrete(pattern)), b"{}")
        await operator.flush()

        async def heard_all() -> bool:
            return len(heard) >= len(user.listens)  # its own earlier publishes may arrive too

        await _wait(heard_all, f"{service} hears what it listens to")
        await client_bus.stop_consumers()
    assert _violations_by(server, service, client=service) == []


async def test_a_service_cannot_publish_another_ones_subjects(server: Server) -> None:
    async with connect_bus(settings_of(server, "ingestion"), "test-ingestion") as client_bus:
        # The server drops the publish: no stream acks it, and the wait for that times out.
        with pytest.raises(Unavailable) as refused:
            await client_bus.publisher.publish_raw(
                NAMESPACE.subject(bus.RUN_DELETED, "run-1"), b"{}", "forged-delete"
            )
    assert isinstance(refused.value.__cause__, TimeoutError)


async def test_no_one_reads_another_users_replies(server: Server) -> None:
    refused = asyncio.Event()

    async def on_error(_error: Exception) -> None:
        refused.set()

    client = await nats.connect(
        server.url,
        user="analyzer",
        password=SECRETS[substrate.nats_password_key("analyzer")],
        name="snooper",
        error_cb=on_error,
    )
    try:
        await client.subscribe("_INBOX.run-registry.>")
        await client.flush()
        await asyncio.wait_for(refused.wait(), 5.0)
    finally:
        await client.close()
    violations = _violations_by(server, "analyzer", client="snooper")
    assert any('Subscription Violation - Subject "_INBOX.run-registry.>"' in v for v in violations)


def test_every_message_is_published_by_some_user() -> None:
    published = {pattern for user in substrate.NATS_USERS for pattern in user.publishes}
    for subject in SUBJECT_OF.values():
        assert f"{subject}.*" in published, f"no NATS user may publish {subject}"


async def test_an_in_cluster_publisher_may_only_send_metric_writes(server: Server) -> None:
    async with connect_bus(settings_of(server, substrate.OPERATOR), "test-streams"):
        pass  # the streams exist, whichever test ran first
    user = substrate.TELEMETRY_PUBLISHER
    client = await nats.connect(
        server.url,
        user=user,
        password=SECRETS[substrate.nats_password_key(user)],
        inbox_prefix=substrate.inbox_prefix(user),
    )
    try:
        js = client.jetstream(timeout=1.0)
        stream = NAMESPACE.stream(bus.TELEMETRY)
        ack = await js.publish(NAMESPACE.subject(bus.METRICS_INGEST, "run-1"), b"{}", stream=stream)
        assert ack.stream == stream
        with pytest.raises(TimeoutError):  # refused: nothing answers
            await js.publish(NAMESPACE.subject(bus.METRICS_RECEIVED, "run-1"), b"{}")
    finally:
        await client.close()


def _covers(pattern: str, subject: str) -> bool:
    """Whether NATS subject ``pattern`` matches every subject ``subject`` (itself a pattern)
    matches: token by token, ``*`` covers one token, ``>`` the rest."""
    wanted, given = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(given) > index
        if index >= len(given) or token not in ("*", given[index]):
            return False
    return len(wanted) == len(given)


@pytest.mark.parametrize("service", substrate.SERVICE_NAMES)
def test_the_table_grants_the_durables_the_service_declares(service: str) -> None:
    user = next(user for user in substrate.SERVICES if user.name == service)
    granted = {(c.stream.name, c.durable, c.subject) for c in user.consumes if not c.any_durable}
    declared = {(s.stream.name, s.durable, s.subject) for s in REAL_CONSUMERS[service]}
    # A durable of no fixed name (an executor's, executor-<id>) is granted by stream, name
    # prefix and a subject pattern that covers the one it filters on.
    open_ended = [c for c in user.consumes if c.any_durable]
    for spec in REAL_CONSUMERS[service]:
        for consumer in open_ended:
            if (
                spec.stream == consumer.stream
                and spec.durable.startswith(consumer.durable + "-")
                and _covers(consumer.subject, spec.subject)
            ):
                declared.discard((spec.stream.name, spec.durable, spec.subject))
    assert granted == declared


async def test_an_older_dispatch_stream_of_another_retention_does_not_stop_a_start(
    server: Server, operator: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    # JetStream refuses to change a stream's retention: an install that made DISPATCH with
    # limits retention (before it was a work queue) gets a warning naming it, not a crash.
    namespace = Namespace("olderinstall")
    js = operator.jetstream()
    await js.add_stream(
        name=namespace.stream(bus.DISPATCH), subjects=namespace.stream_subjects(bus.DISPATCH)
    )
    try:
        settings = settings_of(server, substrate.OPERATOR).model_copy(
            update={"namespace": namespace.prefix}
        )
        async with connect_bus(settings, "test-older-install"):
            pass
        info = await js.stream_info(namespace.stream(bus.DISPATCH))
        assert str(info.config.retention) in ("limits", "RetentionPolicy.LIMITS")
        assert "bus.stream.update_refused" in capsys.readouterr().out
    finally:
        for spec in bus.ALL_STREAMS:
            with contextlib.suppress(NatsError):
                await js.delete_stream(namespace.stream(spec))
