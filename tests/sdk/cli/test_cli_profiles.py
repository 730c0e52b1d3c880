"""``mldiag profiles|targets|xprof`` against a scripted HTTP edge: the requests they send,
what they print, and their exit statuses."""

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mldiag.cli.profiles import capture_duration, duration_argument
from sdk.cli.fake_edge import FakeEdge
from support import free_port

RUN = "/v1/machineLearningRuns/r1"
OPERATION = "projects/default/locations/local/operations/op-1"
SESSION_NAME = "projects/default/locations/local/machineLearningRuns/r1/profilerSessions/s1"

Mldiag = Callable[..., Any]


@pytest.fixture
def edge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEdge]:
    monkeypatch.delenv("MLDIAG_XPROF_URL", raising=False)
    monkeypatch.setenv("MLDIAG_TOKEN", "tok-secret")
    server = FakeEdge()
    server.start()
    yield server
    server.stop()


def session(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": SESSION_NAME,
        "sessionId": "s1",
        "runId": "r1",
        "kind": "ON_DEMAND",
        "phase": "FAILED",
        "hosts": [
            {
                "host": "h1",
                "phase": "SUCCEEDED",
                "startTime": "2026-01-01T12:00:00Z",
                "fileUri": "gs://b/r1/plugins/profile/s1/h1.xplane.pb",
                "sizeBytes": 2_500_000,
            },
            {"host": "h2", "phase": "FAILED", "error": "UNAVAILABLE: No trace event"},
        ],
        "durationSeconds": 2.0,
        "tracerLevels": {"hostTracerLevel": 2, "deviceTracerLevel": 1, "pythonTracerLevel": 0},
        "storageFolderUri": "gs://b/r1/plugins/profile/s1",
        "dashboardUri": "",
        "createTime": "2026-01-01T12:00:00Z",
        "updateTime": "2026-01-01T12:00:05Z",
    }
    body.update(changes)
    return body


def operation(done: bool, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": OPERATION,
        "done": done,
        "metadata": {
            "verb": "capture",
            "target": SESSION_NAME,
            "createTime": "2026-01-01T12:00:00Z",
        },
    }
    body.update(changes)
    return body


def api(edge: FakeEdge) -> list[str]:
    return ["--api-url", edge.url, "--xprof-url", edge.url]


# profiler sessions


def test_profiles_list_prints_one_row_per_session(edge: FakeEdge, mldiag: Mldiag) -> None:
    page = {
        "profilerSessions": [session(dashboardUri="http://x/open?s1"), session(sessionId="s0")],
        "nextPageToken": "t2",
    }
    edge.answer("GET", f"{RUN}/profilerSessions", page)
    result = mldiag("profiles", "list", "r1", "--api-url", edge.url)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == [
        "SESSION",
        "ID",
        "KIND",
        "PHASE",
        "HOSTS",
        "DURATION",
        "CREATED",
        "DASHBOARD",
    ]
    assert lines[1].split() == [
        "s1",
        "ON_DEMAND",
        "FAILED",
        "2",
        "(1",
        "failed)",
        "2s",
        "2026-01-01",
        "12:00:00",
        "http://x/open?s1",
    ]
    assert "more sessions: --page-token t2" in result.out
    [request] = edge.seen
    assert request.headers["Authorization"] == "Bearer tok-secret"

    as_json = mldiag("profiles", "list", "r1", "--json", "--api-url", edge.url)
    assert json.loads(as_json.out) == page


def test_profiles_list_all_follows_the_pages(edge: FakeEdge, mldiag: Mldiag) -> None:
    path = f"{RUN}/profilerSessions"
    edge.answer("GET", path, {"profilerSessions": [session()], "nextPageToken": "t2"})
    edge.answer("GET", path, {"profilerSessions": [session(sessionId="s0")]})
    result = mldiag("profiles", "list", "r1", "--all", "--format", "json", "--api-url", edge.url)
    assert result.code == 0, result.err
    assert [s["sessionId"] for s in json.loads(result.out)["profilerSessions"]] == ["s1", "s0"]
    assert [r.query for r in edge.seen] == [{}, {"pageToken": "t2"}]


def test_profiles_list_says_when_there_are_none(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("GET", f"{RUN}/profilerSessions", {"profilerSessions": []})
    result = mldiag("profiles", "list", "r1", "--api-url", edge.url)
    assert (result.code, result.out) == (0, "no profiler sessions in run r1\n")


def test_profiles_describe_shows_hosts_files_errors_and_a_link(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    edge.answer("GET", f"{RUN}/profilerSessions/s1", session())
    result = mldiag("profiles", "describe", "r1", "s1", *api(edge))
    assert result.code == 0, result.err
    out = result.out
    assert "tracer levels   host 2, device 1, python 0" in out
    assert "storage folder  gs://b/r1/plugins/profile/s1" in out
    # No dashboardUri yet: the provisioner's link stands in.
    assert f"dashboard       {edge.url}/xprof/open?run=r1&session=s1" in out
    hosts = out.split("\nhosts\n")[1].split("\n\n")[0].splitlines()
    assert hosts[0].split() == ["HOST", "PHASE", "SIZE", "STARTED", "FILE"]
    assert hosts[1].split() == [
        "h1",
        "SUCCEEDED",
        "2.4",
        "MiB",
        "2026-01-01",
        "12:00:00",
        "gs://b/r1/plugins/profile/s1/h1.xplane.pb",
    ]
    assert hosts[2].split() == ["h2", "FAILED"]
    assert out.rstrip().endswith("errors\n  h2: UNAVAILABLE: No trace event")


def test_profiles_describe_an_unknown_session_exits_1(edge: FakeEdge, mldiag: Mldiag) -> None:
    error = {"error": {"code": "profiler_session_not_found", "message": "no session s9"}}
    edge.answer("GET", f"{RUN}/profilerSessions/s9", error, status=404)
    result = mldiag("profiles", "describe", "r1", "s9", "--api-url", edge.url)
    assert (result.code, result.out) == (1, "")
    assert result.err == "error: profiler_session_not_found: no session s9\n"


def test_capture_sends_the_request_and_prints_the_operation(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("POST", f"{RUN}/profilerSessions:capture", operation(False))
    result = mldiag(
        "profiles",
        "capture",
        "r1",
        "--duration",
        "500ms",
        "--targets",
        "h1,h2",
        "--targets",
        "h3",
        "--host-tracer-level",
        "3",
        "--python-tracer-level",
        "1",
        "--session-id",
        "s1",
        "--api-url",
        edge.url,
    )
    assert result.code == 0, result.err
    [request] = edge.seen
    assert request.body == {
        "durationSeconds": 0.5,
        "targets": ["h1", "h2", "h3"],
        "tracerLevels": {"hostTracerLevel": 3, "deviceTracerLevel": 1, "pythonTracerLevel": 1},
        "sessionId": "s1",
    }
    assert result.out.splitlines() == [
        "capture started: operation op-1 (session s1, 0.5s on h1, h2, h3)",
        "follow it: mldiag operations wait op-1  (or capture with --wait)",
    ]


def test_capture_defaults(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("POST", f"{RUN}/profilerSessions:capture", operation(False))
    result = mldiag("profiles", "capture", "r1", "--json", "--api-url", edge.url)
    assert result.code == 0, result.err
    assert edge.seen[0].body == {
        "durationSeconds": 2.0,
        "targets": [],
        "tracerLevels": {"hostTracerLevel": 2, "deviceTracerLevel": 1, "pythonTracerLevel": 0},
    }
    assert json.loads(result.out) == operation(False)


def test_capture_wait_prints_the_session(edge: FakeEdge, mldiag: Mldiag) -> None:
    finished = session(phase="SUCCEEDED", hosts=[session()["hosts"][0]], dashboardUri="http://d")
    edge.answer("POST", f"{RUN}/profilerSessions:capture", operation(False))
    wait = "/v1/operations/op-1:wait"
    edge.answer("POST", wait, operation(False))
    edge.answer("POST", wait, operation(True, response=finished))
    result = mldiag("profiles", "capture", "r1", "--duration", "1s", "--wait", *api(edge))
    assert result.code == 0, result.err
    assert [r.body for r in edge.requests("POST", wait)] == [{"timeout": "20s"}] * 2
    assert "phase           SUCCEEDED" in result.out
    assert "dashboard       http://d" in result.out
    assert "h1    SUCCEEDED  2.4 MiB" in result.out


def test_capture_wait_exits_1_with_the_operation_error(edge: FakeEdge, mldiag: Mldiag) -> None:
    failed = operation(
        True, error={"code": "targets_missing", "message": "no profiler target is registered"}
    )
    edge.answer("POST", f"{RUN}/profilerSessions:capture", failed)
    result = mldiag("profiles", "capture", "r1", "--wait", "--api-url", edge.url)
    assert result.code == 1
    assert result.out == "capture failed: operation op-1 (session s1)\n"
    assert result.err == "error: targets_missing: no profiler target is registered\n"
    assert edge.requests("POST", "/v1/operations/op-1:wait") == []  # done already


def test_capture_wait_gives_up_after_its_timeout(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("POST", f"{RUN}/profilerSessions:capture", operation(False))
    edge.answer("POST", "/v1/operations/op-1:wait", operation(False), delay=0.3)
    result = mldiag(
        "profiles", "capture", "r1", "--wait", "--timeout", "500ms", "--api-url", edge.url
    )
    assert result.code == 1
    assert result.err.startswith("error: not_done: capture op-1 is still running after 0.5s")
    waits = edge.requests("POST", "/v1/operations/op-1:wait")
    assert waits
    assert all(wait.body == {"timeout": "1s"} for wait in waits)  # never past the deadline


# profiler targets


def test_targets_list(edge: FakeEdge, mldiag: Mldiag) -> None:
    target = {
        "name": "projects/default/locations/local/machineLearningRuns/r1/profilerTargets/h1-0",
        "targetId": "h1-0",
        "runId": "r1",
        "host": "h1",
        "processIndex": 0,
        "address": "10.0.0.5:9999",
        "pid": 4242,
        "registerTime": "2026-01-01T12:00:00Z",
        "updateTime": "2026-01-01T12:30:00Z",
    }
    edge.answer("GET", f"{RUN}/profilerTargets", {"profilerTargets": [target]})
    registered = ["2026-01-01", "12:00:00"]
    result = mldiag("targets", "list", "r1", "--api-url", edge.url)
    assert result.code == 0, result.err
    assert [line.split() for line in result.out.splitlines()] == [
        ["TARGET", "ID", "HOST", "PROCESS", "ADDRESS", "PID", "REGISTERED", "UPDATED"],
        ["h1-0", "h1", "0", "10.0.0.5:9999", "4242", *registered, "2026-01-01", "12:30:00"],
    ]
    edge.answer("GET", "/v1/machineLearningRuns/r2/profilerTargets", {"profilerTargets": []})
    empty = mldiag("targets", "list", "r2", "--api-url", edge.url)
    assert empty.out.startswith("no profiler targets in run r2")


# XProf instances


def instance(**changes: Any) -> dict[str, Any]:
    body = {
        "name": "xprofInstances/xp-1",
        "instanceId": "xp-1",
        "runIds": ["r1", "r2"],
        "state": "RUNNING",
        "url": "/xprof/xp-1/",
        "memoryBytes": 150 * 1024 * 1024,
        "createTime": "2026-01-01T12:00:00Z",
        "lastAccessTime": "2026-01-01T12:10:00Z",
    }
    body.update(changes)
    return body


def test_xprof_deploy_asks_for_the_runs_and_prints_where_to_open(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    edge.answer("POST", "/v1/xprofInstances", instance(), status=201)
    result = mldiag("xprof", "deploy", "r1", "r2", "r1", "--xprof-url", edge.url + "/")
    assert result.code == 0, result.err
    [request] = edge.seen
    assert request.body == {"runIds": ["r1", "r2"]}
    assert request.headers["Authorization"] == "Bearer tok-secret"
    assert result.out.splitlines() == [
        "xprof instance xp-1 RUNNING, serving runs r1, r2",
        f"open: {edge.url}/xprof/xp-1/",
    ]


def test_xprof_list_and_delete(edge: FakeEdge, mldiag: Mldiag, monkeypatch: Any) -> None:
    monkeypatch.setenv("MLDIAG_XPROF_URL", edge.url)  # the environment names it too
    edge.answer("GET", "/v1/xprofInstances", {"xprofInstances": [instance()]})
    edge.answer("GET", "/v1/xprofInstances", {"xprofInstances": []})  # after the delete
    listed = mldiag("xprof", "list")
    assert listed.code == 0, listed.err
    url = f"{edge.url}/xprof/xp-1/"
    assert [line.split() for line in listed.out.splitlines()] == [
        ["INSTANCE", "ID", "STATE", "RUNS", "MEMORY", "LAST", "ACCESS", "URL"],
        ["xp-1", "RUNNING", "r1,r2", "150.0", "MiB", "2026-01-01", "12:10:00", url],
    ]
    edge.answer("DELETE", "/v1/xprofInstances/xp-1", instance(state="STOPPED"))
    deleted = mldiag("xprof", "delete", "xprofInstances/xp-1")
    assert (deleted.code, deleted.out) == (0, "deleted xprof instance xp-1 (STOPPED)\n")
    assert mldiag("xprof", "list").out == "no xprof instances\n"


def test_xprof_open_prints_the_link_and_opens_a_browser(
    edge: FakeEdge, mldiag: Mldiag, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    result = mldiag("xprof", "open", "r1", "s1", "--xprof-url", edge.url)
    link = f"{edge.url}/xprof/open?run=r1&session=s1"
    # The browser (no header to send) gets the token; what is printed never has it.
    assert (result.code, result.out) == (0, link + "\n")
    assert opened == [link + "&token=tok-secret"]

    assert edge.seen == []  # a link to a named session needs no request

    # Without a session: the run's newest one with a file.
    landed = {"host": "h1", "phase": "SUCCEEDED"}
    edge.answer(
        "GET",
        f"{RUN}/profilerSessions",
        {
            "profilerSessions": [
                session(sessionId="s3", hosts=[{"host": "h1", "phase": "ACTIVE"}]),
                session(sessionId="s2", hosts=[landed]),
            ]
        },
    )
    quiet = mldiag("xprof", "open", "r1", "--no-browser", "--json", *api(edge))
    assert json.loads(quiet.out) == {"url": f"{edge.url}/xprof/open?run=r1&session=s2"}
    assert len(opened) == 1  # no second browser

    edge.answer("GET", "/v1/machineLearningRuns/r2/profilerSessions", {"profilerSessions": []})
    none = mldiag("xprof", "open", "r2", "--no-browser", *api(edge))
    assert none.code == 1
    assert none.err.startswith("error: no_sessions: run r2 has no profile with a file yet")


def test_an_unreachable_provisioner_exits_3_naming_its_option(mldiag: Mldiag) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = mldiag("xprof", "list", "--xprof-url", url)
    assert result.code == 3
    assert result.err.startswith(f"error: cannot reach the xprof-provisioner at {url}")
    assert "--xprof-url / MLDIAG_XPROF_URL" in result.err


def test_an_unreachable_registry_keeps_its_message(mldiag: Mldiag) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = mldiag("profiles", "list", "r1", "--api-url", url)
    assert result.code == 3
    assert result.err.startswith(f"error: cannot reach the mldiag API at {url}")
    assert "--api-url / MLDIAG_API_URL" in result.err


# arguments


@pytest.mark.parametrize(
    "argv",
    [
        ["profiles", "describe", "r1"],
        ["profiles", "capture", "r1", "--duration", "0s"],
        ["profiles", "capture", "r1", "--duration", "10m"],
        ["profiles", "capture", "r1", "--duration", "fast"],
        ["profiles", "capture", "r1", "--host-tracer-level", "4"],
        ["profiles", "capture", "r1", "--device-tracer-level", "2"],
        ["profiles", "capture", "r1", "--python-tracer-level", "x"],
        ["profiles", "capture", "r1", "--targets", ","],
        ["targets", "list"],
        ["xprof", "deploy"],
        ["xprof", "delete"],
        ["xprof", "open"],
    ],
)
def test_bad_arguments_exit_2_before_any_request(argv: list[str], mldiag: Mldiag) -> None:
    result = mldiag(*argv, "--api-url", f"http://127.0.0.1:{free_port()}")
    assert result.code == 2
    assert "error:" in result.err
    assert result.out == ""


def test_durations() -> None:
    assert [duration_argument(t) for t in ("2s", "500ms", "1m", "1.5h", "3")] == [
        2.0,
        0.5,
        60.0,
        5400.0,
        3.0,
    ]
    assert capture_duration("5m") == 300.0
    for bad in ("", "-1s", "2 weeks", "1d", "0ms"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration_argument(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="at most 5m"):
        capture_duration("301s")
