"""The HTTP API over the real router and error boundary, with the service on fakes."""

import asyncio
import select
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from mldiag_platform.http import create_http_app
from mldiag_schemas.auth import Role
from mldiag_xprof_provisioner.instances import handlers
from mldiag_xprof_provisioner.instances.proxy import XProfClient
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import StaticTokens, served_on_port
from xprof_provisioner.xprof_fakes import World


@asynccontextmanager
async def _no_connections(_app: FastAPI) -> AsyncIterator[None]:
    yield


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, World]]:
    world = World(tmp_path, max_instances=2)
    for run in ("run-0", "run-1", "run-2", "run-3"):
        await world.store.put(f"{run}/plugins/profile/s0/h0.xplane.pb", b"xplane")
    app = create_http_app("xprof-provisioner", _no_connections, {})
    app.state.service = world.service
    app.state.xprof_client = XProfClient(timeout_seconds=5, max_connections=4)
    tokens = app.state.tokens = StaticTokens()
    app.include_router(handlers.router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers=tokens.headers(Role.EDITOR)
    ) as client:
        client.tokens = tokens  # type: ignore[attr-defined]
        yield client, world
    await app.state.xprof_client.aclose()


async def test_start_get_list_and_stop(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    created = await client.post("/v1/xprofInstances", json={"runIds": ["run-1"]})
    assert created.status_code == 201
    body = created.json()
    assert body["state"] == "RUNNING"
    assert body["runIds"] == ["run-1"]
    assert body["url"] == f"https://mldiag.example/xprof/{body['instanceId']}/data/plugin/profile/"
    instance_id = body["instanceId"]

    again = await client.post("/v1/xprofInstances", json={"runIds": ["run-1"]})
    assert again.status_code == 200
    assert again.json()["instanceId"] == instance_id

    got = await client.get(f"/v1/xprofInstances/{instance_id}")
    assert got.status_code == 200
    assert got.json()["name"] == f"xprofInstances/{instance_id}"

    listed = await client.get("/v1/xprofInstances")
    assert listed.status_code == 200
    assert [i["instanceId"] for i in listed.json()["xprofInstances"]] == [instance_id]

    deleted = await client.delete(f"/v1/xprofInstances/{instance_id}")
    assert deleted.status_code == 200
    assert deleted.json()["state"] == "STOPPED"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"runIds": ["Bad.Run"]}', "invalid_run_id"),
        (b'{"runIds": ["ok", ""]}', "invalid_run_id"),
        (b'{"runIds": []}', "invalid_start_request"),
        (b'{"runId": "r"}', "invalid_start_request"),
        (b"{}", "invalid_start_request"),
        (b'{"runIds": ["r"], "extra": 1}', "invalid_start_request"),
        (b"not json", "invalid_start_request"),
        (b"", "invalid_start_request"),
    ],
)
async def test_bad_start_requests_are_400_with_stable_codes(
    api: tuple[httpx.AsyncClient, World], body: bytes, code: str
) -> None:
    client, world = api
    response = await client.post(
        "/v1/xprofInstances", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert world.launcher.launched == []


async def test_unknown_instances_are_404(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    for response in (
        await client.get("/v1/xprofInstances/nope"),
        await client.delete("/v1/xprofInstances/nope"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


async def test_capacity_and_start_failures_map_to_their_codes(
    api: tuple[httpx.AsyncClient, World],
) -> None:
    client, world = api
    world.launcher.behaviour = "exit"
    failed = await client.post("/v1/xprofInstances", json={"runIds": ["run-0"]})
    assert failed.status_code == 503
    error = failed.json()["error"]
    assert error["code"] == "xprof_start_failed"
    assert "boom" in error["message"]
    assert error["details"][0]["instance"].startswith("xprofInstances/")

    world.launcher.behaviour = "ready"
    for run in ("run-1", "run-2"):
        started = await client.post("/v1/xprofInstances", json={"runIds": [run]})
        assert started.status_code == 201
        # Answering a request: it cannot be recycled to make room.
        await world.service.acquire(started.json()["instanceId"])
    refused = await client.post("/v1/xprofInstances", json={"runIds": ["run-3"]})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_instances"


async def test_the_start_body_is_documented(api: tuple[httpx.AsyncClient, World]) -> None:
    client, _ = api
    spec = (await client.get("/openapi.json")).json()
    start = spec["paths"]["/v1/xprofInstances"]["post"]
    schema = start["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["runIds"]
    assert {"200", "201", "400", "404", "413", "429", "503"} <= set(start["responses"])


def test_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = XProfProvisionerSettings()
    assert (defaults.host, defaults.port) == ("127.0.0.1", 8084)
    assert defaults.work_dir == Path(".mldiag/xprof")
    assert defaults.instance_ports == range(9100, 9200)
    assert (defaults.max_instances, defaults.idle_timeout_seconds) == (4, 900.0)
    assert defaults.startup_timeout_seconds == 30.0
    assert defaults.base_url == ""  # instance URLs are paths on this service
    assert defaults.memory_limit_bytes == 4 * 1024**3
    assert (defaults.warm_concurrency, defaults.warm_timeout_seconds) == (1, 900.0)
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_MAX_INSTANCES", "9")
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT", "20000")
    monkeypatch.setenv("MLDIAG_NATS_NAMESPACE", "other")
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_MEMORY_LIMIT_BYTES", "1000")
    monkeypatch.setenv("MLDIAG_XPROF_PROVISIONER_PUBLIC_URL", "https://mldiag.example/")
    configured = XProfProvisionerSettings()
    assert configured.memory_limit_bytes == 1000
    assert configured.base_url == "https://mldiag.example"
    assert configured.max_instances == 9
    assert configured.instance_ports.start == 20000
    assert configured.nats.namespace == "other"
    with pytest.raises(ValueError, match="past 65535"):
        XProfProvisionerSettings(first_instance_port=65500, instance_port_count=100)


Api = tuple[httpx.AsyncClient, World]


async def _running(api: Api, run: str = "run-1") -> str:
    client, world = api
    await world.store.put(f"{run}/plugins/profile/s1/host-b.xplane.pb", b"b")
    await world.store.put(f"{run}/plugins/profile/s1/host-a.xplane.pb", b"a")
    created = await client.post("/v1/xprofInstances", json={"runIds": [run]})
    instance_id: str = created.json()["instanceId"]
    return instance_id


async def test_the_open_link_starts_an_instance_and_redirects_to_the_session(api: Api) -> None:
    client, world = api
    await world.store.put("run-1/plugins/profile/s1/host-b.xplane.pb", b"b")
    await world.store.put("run-1/plugins/profile/s1/host-a.xplane.pb", b"a")
    opened = await client.get("/xprof/open", params={"run": "run-1", "session": "s1"})
    assert opened.status_code == 303, opened.text
    [instance] = await world.service.list_instances()
    assert opened.headers["location"] == (
        f"/xprof/{instance.instance_id}/data/plugin/profile/"
        "?run=run-1%2Fs1&tool=trace_viewer%40&host=host-a"
    )
    assert "set-cookie" not in opened.headers  # a header token stays a header
    chosen = await client.get(
        "/xprof/open",
        params={"run": "run-1", "session": "s1", "tool": "overview_page", "host": "host-b"},
    )
    assert chosen.headers["location"].endswith("?run=run-1%2Fs1&tool=overview_page&host=host-b")
    assert len(world.launcher.launched) == 1


async def test_a_token_in_the_link_becomes_the_cookie_and_leaves_the_url(api: Api) -> None:
    client, world = api
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    secret = client.tokens.secrets[Role.VIEWER]  # type: ignore[attr-defined]
    opened = await client.get(
        "/xprof/open",
        params={"run": "run-1", "session": "s1", "token": secret},
        headers={"authorization": ""},
    )
    assert opened.status_code == 303, opened.text
    assert secret not in opened.headers["location"]
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith(f"mldiag_token={secret};")
    assert "HttpOnly" in cookie
    assert "Path=/xprof" in cookie
    assert "SameSite=lax" in cookie
    # The cookie alone now opens the proxy (403 here: a forbidden route, past the auth).
    instance_id = opened.headers["location"].split("/")[2]
    client.cookies.set("mldiag_token", secret)
    behind = await client.get(
        f"/xprof/{instance_id}/data/plugin/profile/capture_profile",
        headers={"authorization": ""},
    )
    assert behind.status_code == 403
    client.cookies.clear()
    bad = await client.get(
        "/xprof/open",
        params={"run": "run-1", "session": "s1", "token": "mldiag_not-a-token"},
        headers={"authorization": ""},
    )
    assert bad.status_code == 401
    assert "set-cookie" not in bad.headers


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"run": "no-such-run", "session": "s1"}, 404, "run_not_found"),
        ({"run": "run-1", "session": "s9"}, 404, "session_not_found"),
        ({"run": "Run.1", "session": "s1"}, 400, "invalid_run_id"),
        ({"run": "run-1", "session": "../../etc"}, 400, "invalid_session_id"),
        ({"run": "run-1", "session": "s1", "host": "../x"}, 400, "invalid_parameter"),
        ({"run": "run-1", "session": "s1", "host": "other"}, 400, "invalid_parameter"),
        ({"run": "run-1", "session": "s1", "tool": "x/y"}, 400, "invalid_parameter"),
        ({"run": "run-1"}, 400, "invalid_argument"),
    ],
)
async def test_bad_open_links_are_clear_errors(
    api: Api, params: dict[str, str], status: int, code: str
) -> None:
    client, world = api
    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    response = await client.get("/xprof/open", params=params)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_the_open_link_maps_a_full_house_to_429(api: Api) -> None:
    client, world = api
    for run in ("run-1", "run-2"):
        await world.service.acquire(await _running(api, run))
    await world.store.put("run-3/plugins/profile/s1/h.xplane.pb", b"x")
    refused = await client.get("/xprof/open", params={"run": "run-3", "session": "s1"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_instances"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("data/plugin/profile/runs?session_path=/etc", 400, "forbidden_parameter"),
        ("data/plugin/profile/bundle.js?run_path=/", 400, "forbidden_parameter"),
        ("data/plugin/profile/?session_path=/etc", 400, "forbidden_parameter"),
        ("data/plugin/profile/runs?debug=1", 400, "forbidden_parameter"),
        (
            "data/plugin/profile/data?run=run-1/s1&tag=trace_viewer@&evil=1",
            400,
            "forbidden_parameter",
        ),
        ("data/plugin/profile/data?run=../../etc/s1&tag=trace_viewer@", 400, "invalid_parameter"),
        ("data/plugin/profile/data?run=run-2/s1&tag=trace_viewer@", 400, "invalid_parameter"),
        ("data/plugin/profile/data?run=run-1/s1&module_name=../x", 400, "invalid_parameter"),
        # Without a run XProf answered 500 (data) or dropped the connection (503 here).
        ("data/plugin/profile/data?tag=trace_viewer@", 400, "invalid_parameter"),
        ("data/plugin/profile/data_csv", 400, "invalid_parameter"),
        ("data/plugin/profile/run_tools", 400, "invalid_parameter"),
        ("data/plugin/profile/hosts?tag=trace_viewer@", 400, "invalid_parameter"),
        ("data/plugin/profile/module_list", 400, "invalid_parameter"),
        ("data/plugin/profile/capture_profile?service_addr=h:1", 403, "forbidden_route"),
        ("data/plugin/profile/generate_cache", 403, "forbidden_route"),
        ("data/plugin/profile/local", 403, "forbidden_route"),
        ("data/plugin/profile/../../../etc/passwd", 403, "forbidden_route"),
        ("etc/passwd", 403, "forbidden_route"),
        ("data/plugin/other/x", 403, "forbidden_route"),
    ],
)
async def test_the_proxy_refuses_what_is_not_the_ui_or_read_only(
    api: Api, path: str, status: int, code: str
) -> None:
    client, _ = api
    instance_id = await _running(api)
    response = await client.get(f"/xprof/{instance_id}/{path}")
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_the_proxy_needs_a_token_and_only_reads(api: Api) -> None:
    client, _ = api
    instance_id = await _running(api)
    url = f"/xprof/{instance_id}/data/plugin/profile/runs"
    anonymous = await client.get(url, headers={"authorization": ""})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    wrong = await client.get(url, headers={"authorization": "Bearer mldiag_nope"})
    assert wrong.status_code == 401
    for method in ("POST", "PUT", "DELETE"):
        refused = await client.request(method, url)
        assert refused.status_code == 405
        assert refused.json()["error"]["code"] == "method_not_allowed"
    unknown = await client.get("/xprof/no-such-instance/data/plugin/profile/runs")
    assert unknown.status_code == 404


async def test_the_proxy_reports_an_xprof_that_does_not_answer(api: Api) -> None:
    client, _ = api
    instance_id = await _running(api)  # the fake launcher listens nowhere
    response = await client.get(f"/xprof/{instance_id}/data/plugin/profile/runs")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "xprof_unreachable"


async def test_an_instances_bare_address_leads_to_its_ui(api: Api) -> None:
    client, _ = api
    instance_id = await _running(api)
    for path in (f"/xprof/{instance_id}", f"/xprof/{instance_id}/"):
        response = await client.get(path, params={"run": "run-1/s1"})
        assert response.status_code == 307
        assert response.headers["location"] == (
            f"/xprof/{instance_id}/data/plugin/profile/?run=run-1%2Fs1"
        )


# -- issue 14: bodies read with their limit, instances only for real runs, per caller --------

_CHUNK = b" " * 65_536


async def test_a_chunked_start_body_over_the_limit_is_refused_as_it_arrives(api: Api) -> None:
    # Item 5: a chunked body (no Content-Length) was read whole before its size was checked.
    client, world = api
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(1024):  # 64 MiB if read whole
            pulled += len(_CHUNK)
            yield _CHUNK

    response = await client.post(
        "/v1/xprofInstances", content=body(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert error["details"] == [{"limitBytes": 65_536}]
    # Refused as soon as it passed the limit: two chunks read, not 1024.
    assert pulled <= 2 * len(_CHUNK)
    assert world.launcher.launched == []


async def test_a_declared_start_body_over_the_limit_is_refused_unread(api: Api) -> None:
    client, _ = api
    response = await client.post(
        "/v1/xprofInstances",
        content=b'{"runIds": ["' + b"a" * 70_000 + b'"]}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_ghost_runs_get_404_and_never_lock_out_a_real_open(api: Api) -> None:
    # Item 8: four starts for runs that do not exist took every slot for 15 minutes.
    client, world = api
    viewer = client.tokens.headers(Role.VIEWER)  # type: ignore[attr-defined]
    for ghost in ("ghost-1", "ghost-2", "ghost-3", "ghost-4"):
        refused = await client.post("/v1/xprofInstances", json={"runIds": [ghost]}, headers=viewer)
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "run_not_found"
        assert refused.json()["error"]["details"] == [{"runId": ghost}]
    mixed = await client.post(
        "/v1/xprofInstances", json={"runIds": ["run-1", "ghost-1"]}, headers=viewer
    )
    assert mixed.status_code == 404
    assert world.launcher.launched == []

    await world.store.put("run-1/plugins/profile/s1/h.xplane.pb", b"x")
    opened = await client.get(
        "/xprof/open", params={"run": "run-1", "session": "s1"}, headers=viewer
    )
    assert opened.status_code == 303, opened.text
    assert len(world.launcher.launched) == 1


async def test_one_callers_flood_does_not_block_another_caller(tmp_path: Path) -> None:
    world = World(tmp_path, max_instances=3, max_instances_per_caller=2)
    runs = [f"run-{i}" for i in range(8)]
    for run in runs:
        await world.store.put(f"{run}/plugins/profile/s1/h.xplane.pb", b"x")
    app = create_http_app("xprof-provisioner", _no_connections, {})
    app.state.service = world.service
    app.state.xprof_client = XProfClient(timeout_seconds=5, max_connections=4)
    tokens = app.state.tokens = StaticTokens()
    app.include_router(handlers.router)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        viewer, editor = tokens.headers(Role.VIEWER), tokens.headers(Role.EDITOR)
        # The viewer opens every run: each start beyond its two recycles its own oldest.
        for run in runs[:7]:
            flood = await client.post("/v1/xprofInstances", json={"runIds": [run]}, headers=viewer)
            assert flood.status_code == 201, flood.text
        active = [i for i in await world.service.list_instances() if i.state.value == "RUNNING"]
        assert sorted(i.run_ids[0] for i in active) == ["run-5", "run-6"]
        # The editor gets an instance at once, without waiting for any idle timeout.
        mine = await client.post("/v1/xprofInstances", json={"runIds": ["run-7"]}, headers=editor)
        assert mine.status_code == 201, mine.text
        # Holding requests on both of its instances, the viewer is refused a third ...
        for instance in active:
            await world.service.acquire(instance.instance_id)
        more = await client.post("/v1/xprofInstances", json={"runIds": ["run-0"]}, headers=viewer)
        assert more.status_code == 429
        assert more.json()["error"]["details"] == [{"scope": "caller", "limit": 2}]
        # ... while the editor still reaches what it started.
        again = await client.post("/v1/xprofInstances", json={"runIds": ["run-7"]}, headers=editor)
        assert again.status_code == 200
    await app.state.xprof_client.aclose()


def _send_chunked_until_refused(port: int, token: str, limit: int) -> tuple[int, bytes]:
    """POST a chunked body of up to ``limit`` bytes over a raw socket, a chunk at a time,
    stopping when the server answers; returns the body bytes sent and what came back before
    the server closed the connection.

    Paced (the answer is awaited briefly after each chunk) so the server has read all that
    was sent when it hangs up: unread bytes would make its close a reset, which can drop the
    answer before it is read.
    """
    head = (
        "POST /v1/xprofInstances HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    frame = f"{len(_CHUNK):x}\r\n".encode() + _CHUNK + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        while sent < limit:
            sock.sendall(frame)
            sent += len(_CHUNK)
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                break  # an answer (or a hang-up) came before the body's end
        answer = b""
        while chunk := sock.recv(65_536):  # a timeout (OSError) if the server kept it open
            answer += chunk
    return sent, answer


@pytest.mark.connected
async def test_a_real_server_stops_reading_a_chunked_body_past_the_limit(tmp_path: Path) -> None:
    world = World(tmp_path)
    app = create_http_app("xprof-provisioner", _no_connections, {})
    app.state.service = world.service
    app.state.xprof_client = XProfClient(timeout_seconds=5, max_connections=4)
    tokens = app.state.tokens = StaticTokens()
    app.include_router(handlers.router)
    planned = 8 * 1024 * 1024  # read whole, 128 chunks: under 7 s even paced
    async with served_on_port(app) as url:
        port = int(url.rsplit(":", 1)[1])
        sent, answer = await asyncio.to_thread(
            _send_chunked_until_refused, port, tokens.secrets[Role.VIEWER], planned
        )
    await app.state.xprof_client.aclose()
    print(f"\nchunked body: {sent / 2**20:.1f} MiB sent of {planned / 2**20:.0f} MiB")  # noqa: T201
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"payload_too_large"' in answer
    assert b"connection: close" in answer.lower()
    # Refused just past the 64 KiB limit, with the rest of the body still to come.
    assert sent <= 4 * len(_CHUNK)


def test_the_instance_ports_follow_the_stacks_port_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 14, item 7: `mldiag up --port-offset` moved every port but the instances'.
    from mldiag.local.config import resolve_config, service_environment  # noqa: PLC0415

    for name in ("MLDIAG_PORT_OFFSET", "MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT"):
        monkeypatch.delenv(name, raising=False)
    for offset, first in ((0, 9100), (1000, 10_100)):
        config = resolve_config("/tmp/mldiag-home", port_offset=offset, environ={})
        env = service_environment(config, "nats://127.0.0.1:1", "postgresql://x")
        for name, value in env.items():
            if name.startswith("MLDIAG_XPROF_PROVISIONER_"):
                monkeypatch.setenv(name, value)
        assert XProfProvisionerSettings().instance_ports.start == first
