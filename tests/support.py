"""Helpers shared by tests (importable because pytest puts tests/ on the path)."""

import asyncio
import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import uvicorn
from fastapi import APIRouter, FastAPI
from nats.aio.msg import Msg

from mldiag_platform.auth import Principal, new_secret, secret_from_authorization
from mldiag_platform.bus import Delivery
from mldiag_platform.errors import Unauthenticated
from mldiag_platform.http import create_http_app
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Permission, Role
from mldiag_schemas.bus import Namespace, stream_of
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.messages import parse_message

T = TypeVar("T")
E = TypeVar("E", bound=Envelope)
BusHandler = Callable[[list[Delivery[E]]], Awaitable[None]]


class StaticTokens:
    """One token per role, held in memory: the token directory of apps tested without NATS."""

    def __init__(self) -> None:
        self.secrets = {role: new_secret() for role in Role}

    def headers(self, role: Role = Role.EDITOR) -> dict[str, str]:
        """An ``Authorization`` header for ``role``."""
        return {"Authorization": f"Bearer {self.secrets[role]}"}

    async def identify(self, authorization: str | None) -> Principal:
        """Like the real directory: 401 for an unknown secret."""
        secret = secret_from_authorization(authorization)
        for role, known in self.secrets.items():
            if secret == known:
                return Principal(f"static-{role.value}", role)
        raise Unauthenticated("the API token is not valid (unknown or revoked)")

    async def authorize(self, authorization: str | None, permission: Permission) -> Principal:
        """Like the real directory: 401 for an unknown secret, 403 for a missing permission."""
        principal = await self.identify(authorization)
        principal.require(permission)
        return principal


@asynccontextmanager
async def router_client(
    router: APIRouter, role: Role = Role.VIEWER, **state: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an in-process app serving ``router`` alone, with ``state`` set on
    ``app.state`` and :class:`StaticTokens` as its token directory; it calls as ``role``.
    For a feature slice tested without the rest of its service."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield

    app = create_http_app("test", lifespan, {})
    for name, value in state.items():
        setattr(app.state, name, value)
    tokens = app.state.tokens = StaticTokens()
    app.include_router(router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers=tokens.headers(role)
    ) as client:
        yield client


def with_credentials(base_url: str, secret: str) -> str:
    """``http://host:port`` as ``http://sdk:<secret>@host:port``: HTTP Basic with the token as
    password, the way the official SDK's base URL carries it."""
    scheme, _, rest = base_url.partition("://")
    return f"{scheme}://sdk:{secret}@{rest}"


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_flags() -> list[str]:
    """Every port flag of ``mldiag up``, each with a free port: a stack that touches no
    other server on the machine, whatever the CLI grows."""
    from mldiag.cli.stack import PORT_FLAGS  # noqa: PLC0415  # the CLI only where needed

    return [arg for flag, _key, _what in PORT_FLAGS for arg in (flag, str(free_port()))]


def world_readable_tempdir(prefix: str) -> Path:
    """A temp dir whose path an unprivileged server process (PostgreSQL as root) can enter."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


async def wait_until(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool] = bool,
    timeout: float = 15.0,
    interval: float = 0.05,
) -> T:
    """Call ``probe`` until ``accept`` approves its result; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if accept(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last result: {result!r}")
        await asyncio.sleep(interval)


def poll_until(
    probe: Callable[[], T], accept: Callable[[T], bool] = bool, timeout: float = 15.0
) -> T:
    """:func:`wait_until` for a blocking ``probe`` (a CLI invoked in-process, say)."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if accept(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last result: {result!r}")
        time.sleep(0.1)


@asynccontextmanager
async def serving(
    app: FastAPI, headers: dict[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan (real connections) and give a client that calls it in-process,
    sending ``headers`` (a token, usually) with every request.
    """
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as client:
            yield client


async def drop_namespace(url: str, namespace: str) -> None:
    """Delete every stream of a NATS namespace, its key-value buckets included."""
    client = await nats.connect(url)
    try:
        js = client.jetstream()
        for info in await js.streams_info():
            stream = info.config.name or ""
            # Streams are upper-cased; key-value buckets live in `KV_<bucket>` streams.
            if stream.startswith((namespace.upper() + "_", f"KV_{namespace}_")):
                with contextlib.suppress(Exception):
                    await js.delete_stream(stream)
    finally:
        await client.close()


async def read_stream(url: str, subject: str, stream: str) -> list[Msg]:
    """Every message stored on ``subject`` in ``stream`` (an ephemeral pull, nothing acked)."""
    client = await nats.connect(url)
    try:
        sub = await client.jetstream().pull_subscribe(subject, stream=stream)
        try:
            return await sub.fetch(1000, timeout=0.5)
        except TimeoutError:  # nats-py raises both its own and asyncio's
            return []
    finally:
        await client.close()


async def read_dead_letters(settings: NatsSettings) -> list[Msg]:
    """Every dead letter of the namespace, with its headers (``Mldiag-Reason``...)."""
    namespace = settings.namespace
    return await read_stream(
        settings.url, f"{namespace}.deadletter.>", f"{namespace.upper()}_DEADLETTER"
    )


async def get_json(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """GET ``path``, which must answer 200, and its JSON object."""
    response = await client.get(path)
    assert response.status_code == 200, response.text  # a test helper
    body: dict[str, Any] = response.json()
    return body


async def read_messages(
    settings: NatsSettings, base_subject: str, message_type: type[E]
) -> list[E]:
    """Parsed messages of one type under ``<namespace>.<base_subject>.*``."""
    namespace = Namespace(settings.namespace)
    raw = await read_stream(
        settings.url,
        namespace.subject(base_subject, "*"),
        namespace.stream(stream_of(base_subject)),
    )
    parsed = (parse_message(message.data) for message in raw)
    return [message for message in parsed if isinstance(message, message_type)]


@contextmanager
def served_in_thread(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port in a thread (for blocking clients such as
    the SDK's threads or the CLI); yield its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the server stopped while starting"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@asynccontextmanager
async def served_on_port(
    app: FastAPI, port: int | None = None, **config: Any
) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on ``port`` (default: a free one) in this event loop (for
    other processes, such as the official SDK in a subprocess); yield its base URL.
    ``config``: more ``uvicorn.Config`` options (``lifespan="off"``...)."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, **config)
    )
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(400):  # up to 20 s for the lifespan (migrations, streams)
            if server.started:
                break
            if task.done():
                await task  # it failed to start: say why
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def failing_once(handle: BusHandler[E], fail: str, seen: list[int]) -> BusHandler[E]:
    """``handle`` failing each batch's first delivery once: ``"before-commit"`` before it
    runs (the database went away), ``"after-commit"`` after (a crash before the ack, the
    commit made); every delivery's count goes into ``seen``."""

    async def handler(deliveries: list[Delivery[E]]) -> None:
        seen.extend(d.num_delivered for d in deliveries)
        first_time = all(d.num_delivered == 1 for d in deliveries)
        if fail == "before-commit" and first_time:
            raise ConnectionError("database went away")
        await handle(deliveries)
        if fail == "after-commit" and first_time:
            raise ConnectionError("crashed before the ack")

    return handler
