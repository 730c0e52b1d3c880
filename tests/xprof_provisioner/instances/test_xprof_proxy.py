"""The proxy's allow-list on its own: what passes, in what form."""

import httpx
import pytest

from mldiag_xprof_provisioner.errors import ForbiddenParameter, ForbiddenRoute, InvalidParameter
from mldiag_xprof_provisioner.instances.proxy import (
    API_PARAMETERS,
    STATIC_FILES,
    XProfClient,
    route,
)

RUNS = ("run-a", "run-b")


def test_static_files_pass_without_their_query() -> None:
    for name in STATIC_FILES:
        passed = route(f"data/plugin/profile/{name}", [("is_oss", "true")], RUNS)
        assert (passed.path, passed.query, passed.static) == (
            f"data/plugin/profile/{name}",
            (),
            True,
        )


@pytest.mark.parametrize(
    "path",
    [
        "data/plugin/profile",
        "data/plugin/profile/",
        "data/plugin/profile/trace_viewer@",
        "data/plugin/profile/overview_page/",
        "data/plugin/profile/kernel_viewer/run-a",
    ],
)
def test_the_page_and_its_routes_are_xprofs_index_page(path: str) -> None:
    passed = route(path, [("run", "run-a/s1"), ("tool", "trace_viewer@")], RUNS)
    assert (passed.path, passed.query, passed.static) == ("data/plugin/profile/", (), False)


def test_the_read_only_api_keeps_the_uis_parameters() -> None:
    query = [
        ("run", "run-b/2026_01_01"),
        ("tag", "trace_viewer@"),
        ("host", "worker-0"),
        ("tool", "trace_viewer@"),
        ("resolution", "8000"),
        ("start_time_ms", "1.5"),
        ("end_time_ms", "2.5"),
        ("hosts", "worker-0,worker-1"),
    ]
    passed = route("data/plugin/profile/data", query, RUNS)
    assert passed.path == "data/plugin/profile/data"
    assert passed.query == tuple(query)
    assert not passed.static
    assert route("data/plugin/profile/runs", [], RUNS).query == ()
    assert set(API_PARAMETERS) == {
        "runs",
        "run_tools",
        "hosts",
        "module_list",
        "config",
        "version",
        "data",
        "data_csv",
    }


@pytest.mark.parametrize(
    ("path", "query", "error"),
    [
        ("data/plugin/profile/data", [("session_path", "/")], ForbiddenParameter),
        ("data/plugin/profile/trace_viewer_v2.wasm", [("run_path", "/")], ForbiddenParameter),
        ("data/plugin/profile/run_tools", [("run", "run-a/s"), ("tag", "x")], ForbiddenParameter),
        ("data/plugin/profile/config", [("x", "1")], ForbiddenParameter),
        ("data/plugin/profile/hosts", [("run", "run-c/s1")], InvalidParameter),
        ("data/plugin/profile/hosts", [("run", "run-a")], InvalidParameter),
        ("data/plugin/profile/hosts", [("run", "run-a/../../x")], InvalidParameter),
        ("data/plugin/profile/data", [("run", "run-a/s"), ("host", "a/b")], InvalidParameter),
        ("data/plugin/profile/data", [("run", "run-a/s"), ("hosts", "a,../b")], InvalidParameter),
        ("data/plugin/profile/data", [("tag", "../x")], InvalidParameter),
        ("data/plugin/profile/data", [("tool", "x" * 5000)], InvalidParameter),
        ("data/plugin/profile/capture_profile", [], ForbiddenRoute),
        ("data/plugin/profile/generate_cache", [], ForbiddenRoute),
        ("data/plugin/profile/data/extra", [], ForbiddenRoute),
        ("data/plugin/profile/a/b/c", [], ForbiddenRoute),
        ("data/plugin/profile/x.txt", [], ForbiddenRoute),
        ("data/plugin/profilex", [], ForbiddenRoute),
        ("index.html", [], ForbiddenRoute),
        ("", [], ForbiddenRoute),
    ],
)
def test_everything_else_is_refused(
    path: str, query: list[tuple[str, str]], error: type[Exception]
) -> None:
    with pytest.raises(error):
        route(path, query, RUNS)


def test_a_forced_regeneration_is_not_passed_on() -> None:
    # It would make XProf rewrite cache files under their readers; the UI never sends it.
    with pytest.raises(ForbiddenParameter):
        route(
            "data/plugin/profile/data",
            [("run", "run-a/s1"), ("tag", "overview_page"), ("use_saved_result", "false")],
            RUNS,
        )


async def test_conversion_locks_go_once_answered_and_a_stopped_instance_is_forgotten() -> None:
    answers = iter([500, 200, 200, 200])
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        # Every request carries the instance's secret, whatever the caller sent.
        assert request.headers["x-mldiag-instance-secret"] == "the-instance-secret"
        seen.append(request.url.params["host"])
        return httpx.Response(next(answers))

    client = XProfClient(timeout_seconds=5, max_connections=4)
    client._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    query = [("run", "run-a/s1"), ("tag", "trace_viewer@")]
    try:
        for host in ("h0", "h0", "h0", "h1"):
            passed = route("data/plugin/profile/data", [*query, ("host", host)], RUNS)
            upstream = await client.send(
                "GET", "instance-1", 9100, passed, "", secret="the-instance-secret"
            )
            await upstream.close()
            # Nobody holds or waits on a conversion's lock: none is kept, whatever the key.
            assert client._converting._locks == {}
    finally:
        await client.aclose()
    assert len(seen) == 4
    assert client._converted == {
        "instance-1": {
            ("run-a/s1", "trace_viewer@", "h0", ""),
            ("run-a/s1", "trace_viewer@", "h1", ""),
        }
    }
    client.forget("instance-1")
    assert client._converted == {}
