"""Real XProf processes behind the real routes and proxy, on a real xplane made with JAX:
what the UI needs comes through, what XProf must never be asked does not, and memory
recycling restarts XProf. Tokens are held in memory (no NATS). The stack and its fixtures are
``live_stack.py`` and ``conftest.py`` one level up, shared with ``warm/test_warm_live.py``."""

import asyncio
import urllib.error
import urllib.request
from typing import Any

import httpx
import pytest

from mldiag_schemas.profiling import XProfInstanceState
from support import wait_until
from xprof_provisioner.live_stack import HOST, Stack

pytestmark = pytest.mark.connected


def _json(response: httpx.Response) -> Any:
    return response.json()


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

    # XProf's 500s for what the request asked wrong are 404s with its words, paths left out
    # (issue 14, item 9: they were passed on as 500s, or as 503s when XProf hung up).
    for params in (
        {"run": "run-1/s1", "tag": "hlo_stats", "host": "no-such-host"},
        {"run": "run-1/s1", "tag": "graph_viewer", "host": HOST, "program_id": "1"},
    ):
        no_data = await stack.client.get(f"{base}/data_csv", params=params)
        assert no_data.status_code == 404, no_data.text
        error = no_data.json()["error"]
        assert error["code"] == "xprof_no_data"
        assert str(stack.settings.work_dir) not in error["message"]
    missing_run = await stack.client.get(f"{base}/run_tools")
    assert missing_run.status_code == 400


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


def _direct(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    """The status of a GET straight to an instance's port, around the proxy."""
    request = urllib.request.Request(  # http to ourselves
        f"http://127.0.0.1:{port}/{path}", headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            status: int = response.status
    except urllib.error.HTTPError as refused:
        return refused.code
    return status


async def test_an_instance_refuses_every_caller_that_goes_around_the_proxy(
    stack: Stack, xplane: bytes
) -> None:
    # Issue 14, item 7: any local process could ask XProf for session_path=/, run_path= or
    # capture_profile on 127.0.0.1:<port>. Now it must present the instance's secret.
    await stack.put_session(xplane, "run-1", "s1")
    location = await stack.open("run-1", "s1")
    [instance] = await stack.service.list_instances()
    around = [
        "data/plugin/profile/runs",
        "data/plugin/profile/runs?session_path=/etc",
        "data/plugin/profile/run_tools?run_path=/",
        "data/plugin/profile/capture_profile?service_addr=127.0.0.1:1&duration=10",
        "data/plugin/profile/",
        "data/plugin/profile/bundle.js",
    ]
    for path in around:
        assert await asyncio.to_thread(_direct, instance.port, path) == 403, path
        guessed = {"x-mldiag-instance-secret": "mldiag_" + "0" * 43}
        assert await asyncio.to_thread(_direct, instance.port, path, guessed) == 403, path

    # Through the proxy, end to end, the same instance serves the UI and the trace.
    base = location.split("?")[0]
    page = await stack.client.get(location)
    assert page.status_code == 200
    assert _json(await stack.client.get(f"{base}runs")) == ["run-1/s1"]
    trace = await stack.client.get(
        f"{base}data", params={"run": "run-1/s1", "tag": "trace_viewer@", "host": HOST}
    )
    assert trace.status_code == 200, trace.text[:300]
    # No answer of the proxy carries the secret back.
    record = stack.service._instances[instance.instance_id]
    for answer in (page, trace):
        assert record.secret not in str(answer.headers)
        assert record.secret not in answer.text
