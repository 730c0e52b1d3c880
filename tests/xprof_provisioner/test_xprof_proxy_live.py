"""Real XProf processes behind the real routes and proxy, on a real xplane made with JAX:
what the UI needs comes through, what XProf must never be asked does not, sessions reach
running instances, pre-warming stores caches XProf uses, and memory recycling restarts XProf.
Tokens are held in memory (no NATS) except in the last test, which runs the assembled app
on a real bus."""

import asyncio
import random
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from conftest import ApiTokens
from mldiag_platform.bus import Delivery, Publisher
from mldiag_platform.http import create_http_app
from mldiag_platform.settings import NatsSettings, StorageSettings
from mldiag_platform.storage import FileStore
from mldiag_schemas.auth import Role
from mldiag_schemas.bus import PROFILER_SESSION_CHANGED, PROFILER_SESSION_REPORTED
from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionChanged,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReported,
    XProfInstanceState,
)
from mldiag_xprof_provisioner import handlers
from mldiag_xprof_provisioner.app import create_app
from mldiag_xprof_provisioner.process import SubprocessLauncher
from mldiag_xprof_provisioner.proxy import XProfClient
from mldiag_xprof_provisioner.service import XProfProvisioner
from mldiag_xprof_provisioner.sessions_handlers import SessionsBusHandler
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from mldiag_xprof_provisioner.warm import SessionWarmer, SubprocessWarmRunner, xprof_version
from support import StaticTokens, read_messages, serving, wait_until
from xprof_provisioner.xprof_fakes import Recorder

pytestmark = pytest.mark.connected

HOST = "host-a"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_TRACE_SCRIPT = Path(__file__).with_name("jax_trace.py")


@pytest.fixture(scope="module")
def xplane(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real (small) xplane: a JAX loop traced with the python tracer on."""
    logdir = tmp_path_factory.mktemp("jax-trace")
    subprocess.run(  # our own script
        [sys.executable, "-P", str(_TRACE_SCRIPT), str(logdir), "trace", "0.1"],
        check=True,
        timeout=120,
        capture_output=True,
    )
    [path] = (logdir / "plugins" / "profile" / "trace").glob("*.xplane.pb")
    data = path.read_bytes()
    shutil.rmtree(logdir)
    return data


@dataclass
class Stack:
    client: httpx.AsyncClient
    service: XProfProvisioner
    store: FileStore
    recorder: Recorder
    tokens: StaticTokens
    settings: XProfProvisionerSettings
    handler: SessionsBusHandler

    async def put_session(self, data: bytes, run: str, session: str, host: str = HOST) -> None:
        await self.store.put(f"{run}/plugins/profile/{session}/{host}.xplane.pb", data)

    async def open(self, run: str, session: str, **extra: str) -> str:
        """The open link's redirect target (a path below the proxy)."""
        opened = await self.client.get(
            "/xprof/open", params={"run": run, "session": session, **extra}
        )
        assert opened.status_code == 303, opened.text
        location: str = opened.headers["location"]
        return location


def _settings(tmp_path: Path, **overrides: Any) -> XProfProvisionerSettings:
    # A random range: other suites on this machine may run XProfs on the default one.
    base = random.randrange(20_000, 32_000, 20)
    return XProfProvisionerSettings(
        work_dir=tmp_path / "work",
        first_instance_port=base,
        instance_port_count=20,
        storage=StorageSettings(url=f"file://{tmp_path / 'storage'}"),
        public_url="http://mldiag.test",
        **overrides,
    )


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    overrides = getattr(request, "param", {})
    settings = _settings(tmp_path, **overrides)
    store = FileStore(tmp_path / "storage")
    recorder = Recorder()
    service = XProfProvisioner(settings, store, recorder, SubprocessLauncher())
    warmer = SessionWarmer(settings, store, recorder, SubprocessWarmRunner(), service)
    app = _app(service, settings)
    tokens: StaticTokens = app.state.tokens
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://mldiag.test",
        headers=tokens.headers(Role.VIEWER),
        timeout=120,
    ) as client:
        try:
            yield Stack(
                client,
                service,
                store,
                recorder,
                tokens,
                settings,
                SessionsBusHandler(service, warmer),
            )
        finally:
            await service.close()
            await app.state.xprof_client.aclose()


def _app(service: XProfProvisioner, settings: XProfProvisionerSettings) -> FastAPI:
    app = create_http_app("xprof-provisioner", None, {})
    app.state.service = service
    app.state.tokens = StaticTokens()
    app.state.xprof_client = XProfClient(settings.proxy_timeout_seconds, settings.proxy_connections)
    app.include_router(handlers.router)
    return app


def _json(response: httpx.Response) -> Any:
    return response.json()


def _reports(recorder: Recorder) -> list[ProfilerSessionReported]:
    return [m for m in recorder.published if isinstance(m, ProfilerSessionReported)]


def _session(
    run: str, session: str, phase: ProfilerSessionPhase, *, prewarmed: bool = False
) -> ProfilerSession:
    return ProfilerSession(
        name=f"projects/p/locations/l/machineLearningRuns/{run}/profilerSessions/{session}",
        session_id=session,
        run_id=run,
        kind=ProfilerSessionKind.PROGRAMMATIC,
        phase=phase,
        hosts=[
            ProfilerSessionHost(
                host=HOST,
                phase=phase,
                start_time=T0,
                end_time=T0 if phase is not ProfilerSessionPhase.ACTIVE else None,
                file_uri=f"file:///s/{run}/plugins/profile/{session}/{HOST}.xplane.pb",
                size_bytes=1,
            )
        ],
        prewarmed=prewarmed,
        create_time=T0,
        update_time=T0,
    )


def _changed(session: ProfilerSession) -> Delivery[ProfilerSessionChanged]:
    message = ProfilerSessionChanged(session=session)
    return Delivery(message, f"t.{PROFILER_SESSION_CHANGED}.{session.run_id}", 1)


async def test_the_proxy_serves_the_ui_tool_list_and_trace_of_a_real_session(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-1", "s1")
    location = await stack.open("run-1", "s1")
    [instance] = await stack.service.list_instances()
    assert location == (
        f"/xprof/{instance.instance_id}/data/plugin/profile/"
        f"?run=run-1%2Fs1&tool=trace_viewer%40&host={HOST}"
    )
    base = f"/xprof/{instance.instance_id}/data/plugin/profile"

    page = await stack.client.get(location)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "document.location.pathname.split(defaultPath)" in page.text  # XProf's <base> trick
    bundle = await stack.client.get(f"{base}/bundle.js")
    assert bundle.status_code == 200
    assert bundle.headers["content-type"].startswith("application/javascript")
    # XProf gzips everything; the proxy passes it on as it came.
    assert bundle.headers["content-encoding"] == "gzip"
    assert "content-security-policy" in bundle.headers
    assert bundle.headers["cache-control"].startswith("private")

    assert _json(await stack.client.get(f"{base}/runs")) == ["run-1/s1"]
    tools = _json(await stack.client.get(f"{base}/run_tools", params={"run": "run-1/s1"}))
    assert "trace_viewer@" in tools
    assert "overview_page" in tools
    hosts = await stack.client.get(
        f"{base}/hosts", params={"run": "run-1/s1", "tag": "trace_viewer@"}
    )
    assert _json(hosts) == [{"hostname": HOST}]
    trace = await stack.client.get(
        f"{base}/data",
        # what the UI sends: its page's parameters too
        params={"run": "run-1/s1", "tag": "trace_viewer@", "host": HOST, "tool": "trace_viewer@"},
    )
    assert trace.status_code == 200, trace.text[:500]
    assert trace.headers["cache-control"] == "no-store"
    events = _json(trace)["traceEvents"]
    assert len(events) > 10

    raw = await stack.client.head(f"{base}/runs")
    assert raw.status_code == 200

    # Through the same door, the things XProf must never be asked:
    snoop = await stack.client.get(f"{base}/runs", params={"session_path": "/etc"})
    assert snoop.status_code == 400
    assert snoop.json()["error"]["code"] == "forbidden_parameter"
    capture = await stack.client.get(
        f"{base}/capture_profile", params={"service_addr": "127.0.0.1:1", "duration": "10"}
    )
    assert capture.status_code == 403
    assert capture.json()["error"]["code"] == "forbidden_route"
    anonymous = await stack.client.get(f"{base}/runs", headers={"authorization": ""})
    assert anonymous.status_code == 401


async def test_many_users_at_once_are_answered(stack: Stack, xplane: bytes) -> None:
    await stack.put_session(xplane, "run-1", "s1")
    await stack.open("run-1", "s1")
    [instance] = await stack.service.list_instances()
    base = f"/xprof/{instance.instance_id}/data/plugin/profile"
    secrets = list(stack.tokens.secrets.values())

    async def one(i: int) -> int:
        if i % 3 == 0:
            url, params = f"{base}/data", {"run": "run-1/s1", "tag": "trace_viewer@", "host": HOST}
        elif i % 3 == 1:
            url, params = f"{base}/run_tools", {"run": "run-1/s1"}
        else:
            url, params = f"{base}/styles.css", {}
        headers = {"authorization": f"Bearer {secrets[i % len(secrets)]}"}
        response = await stack.client.get(url, params=params, headers=headers)
        return response.status_code

    statuses = await asyncio.gather(*(one(i) for i in range(12)))
    assert statuses == [200] * 12
    # The answers were use: the instance was touched after it started.
    [used] = await stack.service.list_instances()
    assert used.last_access_time > instance.create_time


async def test_an_instance_serving_two_runs_lists_both_runs_sessions(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-a", "s1")
    await stack.put_session(xplane, "run-b", "s2")
    await stack.put_session(xplane, "run-b", "s3")
    created = await stack.client.post("/v1/xprofInstances", json={"runIds": ["run-a", "run-b"]})
    assert created.status_code == 201, created.text
    instance = created.json()
    assert instance["runIds"] == ["run-a", "run-b"]
    path = instance["url"].removeprefix("http://mldiag.test")
    assert _json(await stack.client.get(f"{path}runs")) == ["run-b/s3", "run-b/s2", "run-a/s1"]
    tools = await stack.client.get(f"{path}run_tools", params={"run": "run-b/s2"})
    assert "trace_viewer@" in _json(tools)
    # The open link of either run reuses it.
    location = await stack.open("run-b", "s3")
    assert location.startswith(f"/xprof/{instance['instanceId']}/")


async def test_a_session_change_syncs_the_session_into_a_running_instance(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-1", "first")
    location = await stack.open("run-1", "first")
    base = location.split("?")[0]
    assert _json(await stack.client.get(f"{base}runs")) == ["run-1/first"]

    await stack.put_session(xplane, "run-1", "second")
    active = _session("run-1", "second", ProfilerSessionPhase.ACTIVE)
    await stack.handler.on_sessions([_changed(active)])

    # XProf rescans on every `runs`: the new session is there without a restart.
    assert _json(await stack.client.get(f"{base}runs")) == ["run-1/second", "run-1/first"]
    tools = await stack.client.get(f"{base}run_tools", params={"run": "run-1/second"})
    assert "trace_viewer@" in _json(tools)
    assert _reports(stack.recorder) == []  # ACTIVE: no warm
    assert len(await stack.service.list_instances()) == 1


async def test_pre_warming_stores_caches_that_xprof_uses_and_reports_them(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-1", "s1")
    done = _session("run-1", "s1", ProfilerSessionPhase.SUCCEEDED)

    await stack.handler.on_sessions([_changed(done)])

    keys = set(await stack.store.list("run-1/plugins/profile/s1/"))
    prefix = "run-1/plugins/profile/s1/"
    assert {
        f"{prefix}{HOST}.SSTABLE",
        f"{prefix}{HOST}.metadata.SSTABLE",
        f"{prefix}{HOST}.trie.SSTABLE",
        f"{prefix}ALL_HOSTS.op_stats_v2.pb",
        f"{prefix}cache_version.txt",
    } <= keys
    assert (await stack.store.get(f"{prefix}cache_version.txt")).decode() == xprof_version()
    [reported] = _reports(stack.recorder)
    assert reported.run_id == "run-1"
    report = reported.report
    assert (report.session_id, report.host, report.prewarmed) == ("s1", HOST, True)
    assert report.phase is ProfilerSessionPhase.SUCCEEDED
    assert report.update_time == done.update_time
    assert report.file_uri == done.hosts[0].file_uri
    assert not list(stack.settings.work_dir.glob("warm-*"))  # scratch cleaned up

    # A redelivery finds the marker: no second conversion, the same report (deduped).
    await stack.handler.on_sessions([_changed(done)])
    [first, again] = _reports(stack.recorder)
    assert first.event_id == again.event_id
    # Once reported, the registry's echo (prewarmed) changes nothing.
    await stack.handler.on_sessions(
        [_changed(_session("run-1", "s1", ProfilerSessionPhase.SUCCEEDED, prewarmed=True))]
    )
    assert len(_reports(stack.recorder)) == 2

    # A fresh instance copies the caches and answers from them: no conversion.
    location = await stack.open("run-1", "s1")
    base = location.split("?")[0]
    trace = await stack.client.get(
        f"{base}data", params={"run": "run-1/s1", "tag": "trace_viewer@", "host": HOST}
    )
    assert trace.status_code == 200
    [instance] = await stack.service.list_instances()
    xprof_log = (Path(instance.logdir).parent / "xprof.log").read_text()
    assert "Cache version file not found" not in xprof_log


async def test_pre_warming_copies_the_caches_into_running_instances(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-1", "s1")
    await stack.open("run-1", "s1")
    [instance] = await stack.service.list_instances()
    await stack.handler.on_sessions(
        [_changed(_session("run-1", "s1", ProfilerSessionPhase.SUCCEEDED))]
    )
    session_dir = Path(instance.logdir) / "run-1/plugins/profile/s1"
    assert (session_dir / f"{HOST}.SSTABLE").is_file()
    assert (session_dir / "cache_version.txt").read_text() == xprof_version()


async def test_a_broken_xplane_is_logged_and_never_reported(stack: Stack) -> None:
    await stack.put_session(b"\x08\x01 this is not an xplane", "run-1", "broken")
    broken = _session("run-1", "broken", ProfilerSessionPhase.SUCCEEDED)
    await stack.handler.on_sessions([_changed(broken)])  # does not raise: the message is acked
    assert _reports(stack.recorder) == []
    keys = await stack.store.list("run-1/plugins/profile/broken/")
    assert keys == [f"run-1/plugins/profile/broken/{HOST}.xplane.pb"]
    assert not list(stack.settings.work_dir.glob("warm-*"))


@pytest.mark.parametrize("stack", [{"memory_limit_bytes": 1}], indirect=True)
async def test_an_instance_past_its_memory_cap_is_restarted_and_keeps_serving(
    stack: Stack, xplane: bytes
) -> None:
    await stack.put_session(xplane, "run-1", "s1")
    location = await stack.open("run-1", "s1")
    base = location.split("?")[0]
    [before] = await stack.service.list_instances()
    assert before.memory_bytes > 50 * 1024 * 1024  # an idle XProf is ~110 MB
    assert before.memory_limit_bytes == 1

    await stack.service.reap()

    async def recycled() -> int:
        [now] = await stack.service.list_instances()
        return now.recycles if now.state is XProfInstanceState.RUNNING else 0

    await wait_until(recycled, lambda count: count >= 1, timeout=30)
    [after] = await stack.service.list_instances()
    assert after.instance_id == before.instance_id
    assert after.port == before.port
    assert after.url == before.url
    assert _json(await stack.client.get(f"{base}runs")) == ["run-1/s1"]


async def test_the_app_warms_a_session_announced_on_the_bus_and_opens_it_by_link(
    tmp_path: Path,
    xplane: bytes,
    nats_settings: NatsSettings,
    publisher: Publisher,
    api_tokens: ApiTokens,
) -> None:
    settings = _settings(tmp_path).model_copy(update={"nats": nats_settings})
    store = FileStore(tmp_path / "storage")
    await store.put(f"run-bus/plugins/profile/s1/{HOST}.xplane.pb", xplane)
    async with serving(create_app(settings)) as client:
        done = _session("run-bus", "s1", ProfilerSessionPhase.SUCCEEDED)
        await publisher.publish(ProfilerSessionChanged(session=done))

        async def reports() -> list[ProfilerSessionReported]:
            return await read_messages(
                nats_settings, PROFILER_SESSION_REPORTED, ProfilerSessionReported
            )

        [reported] = await wait_until(reports, bool, timeout=60)
        assert reported.report.prewarmed
        assert "run-bus/plugins/profile/s1/cache_version.txt" in await store.list("run-bus/")

        # A browser with nothing but the link: the token becomes the cookie.
        opened = await client.get(
            "/xprof/open", params={"run": "run-bus", "session": "s1", "token": api_tokens.viewer}
        )
        assert opened.status_code == 303, opened.text
        assert api_tokens.viewer not in opened.headers["location"]
        page = await client.get(opened.headers["location"])
        assert page.status_code == 200
        base = opened.headers["location"].split("?")[0]
        trace = await client.get(
            f"{base}data", params={"run": "run-bus/s1", "tag": "trace_viewer@", "host": HOST}
        )
        assert trace.status_code == 200
        client.cookies.clear()
        assert (await client.get(f"{base}runs")).status_code == 401
