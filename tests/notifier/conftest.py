"""The notifier served in-process on real NATS and PostgreSQL, and real receivers for what
it sends: an HTTP server (webhooks, Slack, Alertmanager) and an SMTP server."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web
from aiosmtpd.controller import Controller

from conftest import ApiTokens
from mldiag_notifier.app import create_app
from mldiag_notifier.settings import NotifierSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_schemas.auth import Role
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import EventState, EventType, Severity, WorkloadEvent
from mldiag_schemas.runs import Run, RunCreated, RunPhase, RunState
from support import free_port, serving, wait_until


@dataclass
class Received:
    """One request a receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        import json  # noqa: PLC0415

        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server that records every request and answers from a script of statuses
    (per path; 200 once the script is used up)."""

    url: str
    requests: list[Received] = field(default_factory=list)
    scripts: dict[str, list[int]] = field(default_factory=dict)

    def on(self, path: str) -> list[Received]:
        """The requests to ``path``."""
        return [request for request in self.requests if request.path == path]

    async def received(self, path: str, count: int = 1, timeout: float = 15.0) -> list[Received]:
        """The requests to ``path`` once there are ``count`` of them (fails after
        ``timeout``)."""

        async def probe() -> list[Received]:
            return self.on(path)

        return await wait_until(probe, lambda found: len(found) >= count, timeout=timeout)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A real HTTP receiver on a free port."""
    port = free_port()
    found = Receiver(url=f"http://127.0.0.1:{port}")

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        found.requests.append(Received(request.path, dict(request.headers), body))
        script = found.scripts.get(request.path, [])
        status = script.pop(0) if script else 200
        return web.Response(status=status, text="nope" if status >= 400 else "ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield found
    await runner.cleanup()


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@dataclass(frozen=True)
class SmtpServer:
    """An SMTP server (aiosmtpd) and what it received."""

    port: int
    mailbox: _Mailbox


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    """A real SMTP server on a free port (no TLS offered)."""
    mailbox = _Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield SmtpServer(port, mailbox)
    controller.stop()


@pytest.fixture
def notifier_settings(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    tmp_path: Path,
) -> NotifierSettings:
    """A notifier on this test's namespace and schema, with quick retries."""
    return NotifierSettings(
        nats=nats_settings,
        database=database_settings,
        db_schema=db_schema,
        key_file=tmp_path / "notifier.key",
        analysis_wait_seconds=0.3,
        backoff_seconds=0.05,
        backoff_max_seconds=0.2,
        max_attempts=4,
        send_timeout_seconds=3,
        public_url="http://mldiag.example:8080",
    )


@pytest.fixture
async def notifier_api(
    notifier_settings: NotifierSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of a running notifier (consumers and dispatcher running)."""
    async with serving(create_app(notifier_settings), api_tokens.headers(Role.EDITOR)) as client:
        yield client


@pytest.fixture
async def notifier_db(
    database_settings: DatabaseSettings, db_schema: str
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the notifier's schema, to read its rows."""
    pool = await create_pool(database_settings, db_schema)
    yield pool
    await pool.close()


def make_run(
    run_id: str,
    *,
    project: str = "default",
    run_set: str = "nightly",
    labels: dict[str, str] | None = None,
) -> Run:
    """A run of ``project`` (location ``local``)."""
    now = datetime.now(UTC)
    return Run(
        name=f"projects/{project}/locations/local/machineLearningRuns/{run_id}",
        run_id=run_id,
        display_name=f"Run {run_id}",
        run_set=run_set,
        labels=labels or {},
        run_phase=RunPhase.ACTIVE,
        state=RunState.ACTIVE,
        create_time=now,
        update_time=now,
    )


def make_event(
    run_id: str,
    *,
    event_type: EventType = EventType.PERFORMANCE_DEGRADATION,
    severity: Severity = Severity.WARNING,
    resolved: bool = False,
    event_id: uuid.UUID | None = None,
) -> WorkloadEvent:
    """An event of ``run_id`` (open, or resolved a minute after it started)."""
    start = datetime.now(UTC)
    return WorkloadEvent(
        event_id=event_id or uuid.uuid4(),
        run_id=run_id,
        type=event_type,
        display_name=f"{event_type.value.lower()} on {run_id}",
        severity=severity,
        state=EventState.RESOLVED if resolved else EventState.OPEN,
        start_time=start,
        end_time=start if resolved else None,
        rule=event_type.value.lower(),
        time_lost_seconds=42.0,
    )


async def known_run(publisher: Publisher, pool: asyncpg.Pool, run: Run) -> None:
    """Publish the run's creation and wait until the notifier keeps it."""
    await publisher.publish(RunCreated(run=run))
    await wait_until(
        lambda: pool.fetchval("SELECT count(*) FROM runs WHERE run_id = $1", run.run_id)
    )


async def settle(seconds: float) -> None:
    """Let the notifier work a moment (for checks that nothing more comes)."""
    await asyncio.sleep(seconds)


BASE = "/v1/projects/default/locations/local"
SECRET = "shared-signing-secret"


async def webhook(
    client: httpx.AsyncClient, receiver: Receiver, channel: str = "hook", **rule: Any
) -> None:
    """A signed webhook channel to ``receiver``'s ``/<channel>`` and a rule sending to it."""
    response = await client.post(
        f"{BASE}/notificationChannels?channelId={channel}",
        json={
            "displayName": channel,
            "kind": "WEBHOOK",
            "config": {"url": f"{receiver.url}/{channel}"},
            "secrets": {"signingSecret": SECRET},
        },
    )
    assert response.status_code == 200, response.text
    await add_rule(client, f"to-{channel}", [channel], **rule)


async def add_rule(
    client: httpx.AsyncClient, rule_id: str, channels: list[str], **rule: Any
) -> None:
    response = await client.post(
        f"{BASE}/alertRules?ruleId={rule_id}",
        json={"displayName": rule_id, "channels": channels, **rule},
    )
    assert response.status_code == 200, response.text


@dataclass(frozen=True)
class Stage:
    """A running notifier with what its tests drive it by: its API (an editor's), its
    tables, the bus and an HTTP receiver."""

    api: httpx.AsyncClient
    db: asyncpg.Pool
    publisher: Publisher
    receiver: Receiver

    async def known_run(self, run: Run) -> None:
        """The run, kept by the notifier."""
        await known_run(self.publisher, self.db, run)

    async def hook(self, run_id: str = "r1", **rule: Any) -> None:
        """A known run ``run_id`` and a signed webhook channel ``hook`` with the rule
        ``to-hook`` (``rule``'s fields) sending every event to it."""
        await self.known_run(make_run(run_id))
        await webhook(self.api, self.receiver, **rule)

    async def publish(self, *messages: Envelope) -> None:
        """Publish ``messages`` in order."""
        for message in messages:
            await self.publisher.publish(message)

    async def deliveries(self, filter_text: str = "") -> list[dict[str, Any]]:
        """The delivery history (``filter`` as the API takes it)."""
        return await deliveries(self.api, filter_text)


@pytest.fixture
def stage(
    notifier_api: httpx.AsyncClient,
    notifier_db: asyncpg.Pool,
    publisher: Publisher,
    receiver: Receiver,
) -> Stage:
    """The running notifier and its receiver (see :class:`Stage`)."""
    return Stage(notifier_api, notifier_db, publisher, receiver)


async def deliveries(client: httpx.AsyncClient, filter_text: str = "") -> list[dict[str, Any]]:
    """The delivery history through ``client`` (``filter`` as the API takes it)."""
    response = await client.get(f"{BASE}/notificationDeliveries", params={"filter": filter_text})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["notificationDeliveries"]
    return found
