"""Pre-warming and session changes with real XProf processes on a real xplane made with
JAX: sessions reach running instances, pre-warming stores caches XProf uses and reports
them, a broken xplane is never reported. Tokens are held in memory (no NATS) except in the
last test, which runs the assembled app on a real bus. The stack and its fixtures are
``live_stack.py`` and ``conftest.py`` one level up."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Delivery, Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_platform.storage import FileStore
from mldiag_schemas.bus import PROFILER_SESSION_CHANGED, PROFILER_SESSION_REPORTED
from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionChanged,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReported,
)
from mldiag_xprof_provisioner.app import create_app
from mldiag_xprof_provisioner.warm.service import xprof_version
from support import read_messages, serving, wait_until
from xprof_provisioner.live_stack import HOST, Stack, live_settings
from xprof_provisioner.xprof_fakes import Recorder

pytestmark = pytest.mark.connected

T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


async def test_the_app_warms_a_session_announced_on_the_bus_and_opens_it_by_link(
    tmp_path: Path,
    xplane: bytes,
    nats_settings: NatsSettings,
    publisher: Publisher,
    api_tokens: ApiTokens,
) -> None:
    settings = live_settings(tmp_path).model_copy(update={"nats": nats_settings})
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
