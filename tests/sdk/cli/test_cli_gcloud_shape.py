"""The CLI's gcloud shape against a scripted HTTP edge: group aliases, full resource names
for every resource kind, ``--format`` projections, ``--limit``/``--sort-by``/``--uri``,
errors on stderr, and ``--version``."""

import csv
import importlib.metadata
import io
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from mldiag.cli import build_parser, installed_version
from sdk.cli.fake_edge import FakeEdge

Mldiag = Callable[..., Any]

RUNS = "/v1/machineLearningRuns"
LONG = "/v1/projects/p/locations/l"
FULL = "projects/p/locations/l"


@pytest.fixture
def edge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEdge]:
    monkeypatch.setenv("MLDIAG_TOKEN", "tok-secret")
    server = FakeEdge()
    server.start()
    yield server
    server.stop()


def run(run_id: str, created: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"projects/default/locations/local/machineLearningRuns/{run_id}",
        "runId": run_id,
        "displayName": f"run {run_id}",
        "runPhase": "ACTIVE",
        "createTime": created,
        "labels": {"team": f"t-{run_id}"},
    }
    body.update(changes)
    return body


THREE_RUNS = [
    run("r2", "2026-01-02T00:00:00Z"),
    run("r3", "2026-01-03T00:00:00Z", labels={"team": "a,b"}),
    run("r1", "2026-01-01T00:00:00Z"),
]


# aliases

ALIASES = [
    ("machine-learning-runs", "runs", "list"),
    ("monitored-events", "events", "list"),
    ("profiler-sessions", "profiles", "capture"),
    ("profiler-targets", "targets", "list"),
    ("custom-jobs", "jobs", "list"),
    ("hp-tuning-jobs", "hp-tuning-jobs", "list"),
    ("models", "models", "list"),
]


@pytest.mark.parametrize(("alias", "name", "verb"), ALIASES)
def test_every_gcloud_group_name_runs_the_same_verb(alias: str, name: str, verb: str) -> None:
    extra = ["r1"] if name in ("profiles", "targets") else []
    by_alias = build_parser().parse_args([alias, verb, *extra])
    by_name = build_parser().parse_args([name, verb, *extra])
    assert by_alias.api_handler is by_name.api_handler
    assert by_alias.verb == verb


def test_an_alias_talks_to_the_api_as_the_group_does(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("GET", f"{RUNS}/r1", run("r1", "2026-01-01T00:00:00Z"))
    result = mldiag("machine-learning-runs", "describe", "r1", "--api-url", edge.url)
    assert result.code == 0, result.err
    assert "runId" in result.out
    assert [s.path for s in edge.seen] == [f"{RUNS}/r1"]


# full resource names

FULL_NAMES = [
    (["runs", "describe", f"{FULL}/machineLearningRuns/r1"], f"{LONG}/machineLearningRuns/r1"),
    (
        ["metrics", "list", f"{FULL}/machineLearningRuns/r1"],
        f"{LONG}/machineLearningRuns/r1/metrics",
    ),
    (
        ["configs", "show", f"{FULL}/machineLearningRuns/r1"],
        f"{LONG}/machineLearningRuns/r1/configs",
    ),
    (["operations", "describe", f"{FULL}/operations/op-1"], f"{LONG}/operations/op-1"),
    (
        ["events", "describe", f"{FULL}/machineLearningRuns/r1/monitoredEvents/e1"],
        f"{LONG}/machineLearningRuns/r1/monitoredEvents/e1",
    ),
    (
        ["profiles", "describe", "r1", f"{FULL}/machineLearningRuns/r1/profilerSessions/s1"],
        f"{LONG}/machineLearningRuns/r1/profilerSessions/s1",
    ),
    (
        ["targets", "list", f"{FULL}/machineLearningRuns/r1"],
        f"{LONG}/machineLearningRuns/r1/profilerTargets",
    ),
    (["jobs", "describe", f"{FULL}/customJobs/7"], f"{LONG}/customJobs/7"),
    (
        ["hp-tuning-jobs", "describe", f"{FULL}/hyperparameterTuningJobs/8"],
        f"{LONG}/hyperparameterTuningJobs/8",
    ),
    (
        ["training-pipelines", "describe", f"{FULL}/trainingPipelines/9"],
        f"{LONG}/trainingPipelines/9",
    ),
    (["models", "describe", f"{FULL}/models/m1@2"], f"{LONG}/models/m1@2"),
    (
        ["alerts", "channels", "describe", f"{FULL}/notificationChannels/c1"],
        f"{LONG}/notificationChannels/c1",
    ),
    (["alerts", "rules", "describe", f"{FULL}/alertRules/a1"], f"{LONG}/alertRules/a1"),
]


@pytest.mark.parametrize(("argv", "path"), FULL_NAMES, ids=lambda v: str(v[0]))
def test_a_full_name_addresses_its_project_and_location(
    edge: FakeEdge, mldiag: Mldiag, argv: list[str], path: str
) -> None:
    edge.answer("GET", path, {"name": path.removeprefix("/v1/"), "entries": []})
    result = mldiag(*argv, "--api-url", edge.url)
    # Some verbs read more than the one resource (a job's replicas, a model's versions):
    # the first request is the resource named, under the full name's project and location.
    assert edge.seen, result.err
    assert edge.seen[0].path == path


def test_a_short_id_uses_the_options_project_and_location(edge: FakeEdge, mldiag: Mldiag) -> None:
    mldiag("runs", "describe", "r1", "--project", "p", "--location", "l", "--api-url", edge.url)
    mldiag("runs", "describe", "r1", "--api-url", edge.url)
    assert [s.path for s in edge.seen] == [f"{LONG}/machineLearningRuns/r1", f"{RUNS}/r1"]


def test_a_full_name_agreeing_with_the_options_is_fine(edge: FakeEdge, mldiag: Mldiag) -> None:
    name = f"{FULL}/machineLearningRuns/r1"
    mldiag("runs", "describe", name, "--project", "p", "--api-url", edge.url)
    assert [s.path for s in edge.seen] == [f"{LONG}/machineLearningRuns/r1"]


def test_a_full_name_conflicting_with_an_option_is_a_usage_error(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    name = f"{FULL}/machineLearningRuns/r1"
    result = mldiag("runs", "describe", name, "--project", "q", "--api-url", edge.url)
    assert result.code == 2
    assert result.out == ""
    assert "--project q" in result.err
    assert name in result.err
    assert edge.seen == []


def test_two_full_names_of_different_locations_are_a_usage_error(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    a = f"{FULL}/machineLearningRuns/r1"
    b = "projects/p/locations/other/machineLearningRuns/r2"
    result = mldiag("configs", "diff", a, b, "--api-url", edge.url)
    assert result.code == 2
    assert a in result.err and b in result.err
    assert edge.seen == []


def test_a_full_name_of_another_collection_is_refused_by_the_parser(mldiag: Mldiag) -> None:
    result = mldiag("runs", "describe", f"{FULL}/customJobs/7")
    assert result.code == 2
    assert "projects/P/locations/L/machineLearningRuns/ID" in result.err
    assert result.out == ""


def test_an_event_run_conflicting_with_its_full_name_is_a_usage_error(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    name = f"{FULL}/machineLearningRuns/r1/monitoredEvents/e1"
    result = mldiag("events", "describe", name, "--run", "r2", "--api-url", edge.url)
    assert result.code == 2
    assert "--run r2" in result.err
    assert edge.seen == []


# --format


def listed(edge: FakeEdge, *argv: str) -> list[str]:
    edge.answer("GET", RUNS, {"machineLearningRuns": THREE_RUNS, "nextPageToken": ""})
    return ["runs", "list", *argv, "--api-url", edge.url]


def test_format_json_and_yaml_print_the_body(edge: FakeEdge, mldiag: Mldiag) -> None:
    as_json = mldiag(*listed(edge, "--format", "json"))
    as_yaml = mldiag(*listed(edge, "--format=yaml"))
    body = {"machineLearningRuns": THREE_RUNS, "nextPageToken": ""}
    assert json.loads(as_json.out) == body
    assert yaml.safe_load(as_yaml.out) == body


def test_format_table_is_the_default(edge: FakeEdge, mldiag: Mldiag) -> None:
    lines = mldiag(*listed(edge)).out.splitlines()
    assert lines[0].split()[:2] == ["RUN", "ID"]
    assert [line.split()[0] for line in lines[1:]] == ["r2", "r3", "r1"]


def test_format_csv_has_every_flattened_field(edge: FakeEdge, mldiag: Mldiag) -> None:
    rows = list(csv.reader(io.StringIO(mldiag(*listed(edge, "--format", "csv")).out)))
    assert rows[0] == [
        "name",
        "runId",
        "displayName",
        "runPhase",
        "createTime",
        "labels.team",
    ]
    assert rows[2][1] == "r3"
    assert rows[2][5] == "a,b"  # quoted by the csv writer, read back whole
    assert len(rows) == 4


def test_format_csv_with_fields(edge: FakeEdge, mldiag: Mldiag) -> None:
    out = mldiag(*listed(edge, "--format", "csv(runId, labels.team)")).out
    assert out.splitlines() == ["runId,labels.team", "r2,t-r2", 'r3,"a,b"', "r1,t-r1"]


def test_format_value_is_tab_separated_without_a_header(edge: FakeEdge, mldiag: Mldiag) -> None:
    out = mldiag(*listed(edge, "--format", "value(runId,labels.team,missing.field)")).out
    assert out.splitlines() == ["r2\tt-r2\t", "r3\ta,b\t", "r1\tt-r1\t"]


def test_format_value_projects_one_resource(edge: FakeEdge, mldiag: Mldiag) -> None:
    edge.answer("GET", f"{RUNS}/r1", run("r1", "2026-01-01T00:00:00Z"))
    result = mldiag("runs", "describe", "r1", "--format=value(name)", "--api-url", edge.url)
    assert result.out == "projects/default/locations/local/machineLearningRuns/r1\n"


@pytest.mark.parametrize("bad", ["xml", "value()", "value(a b)", "csv(,)", "value(name"])
def test_a_bad_format_is_a_usage_error(mldiag: Mldiag, bad: str) -> None:
    result = mldiag("runs", "list", "--format", bad)
    assert result.code == 2
    assert result.out == ""
    assert "--format" in result.err


# --limit, --sort-by, --uri


def test_sort_by_sorts_what_is_shown(edge: FakeEdge, mldiag: Mldiag) -> None:
    out = mldiag(*listed(edge, "--sort-by", "~createTime", "--format", "value(runId)")).out
    assert out.split() == ["r3", "r2", "r1"]
    out = mldiag(*listed(edge, "--sort-by", "runId")).out
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["r1", "r2", "r3"]


def test_sort_by_several_keys_and_missing_values(edge: FakeEdge, mldiag: Mldiag) -> None:
    runs = [run("a", "t1", runSet="x"), run("b", "t2"), run("c", "t3", runSet="x")]
    edge.answer("GET", RUNS, {"machineLearningRuns": runs})
    out = mldiag(
        "runs", "list", "--sort-by", "runSet,~runId", "--format=value(runId)", "--api-url", edge.url
    ).out
    assert out.split() == ["b", "c", "a"]


def test_limit_cuts_and_uri_prints_full_names(edge: FakeEdge, mldiag: Mldiag) -> None:
    out = mldiag(*listed(edge, "--sort-by", "labels.team", "--limit", "2", "--uri")).out
    assert out.splitlines() == [
        "projects/default/locations/local/machineLearningRuns/r3",
        "projects/default/locations/local/machineLearningRuns/r1",
    ]


def test_limit_stops_paging_once_it_has_enough(edge: FakeEdge, mldiag: Mldiag) -> None:
    for page, token in ((THREE_RUNS[:2], "t2"), (THREE_RUNS[2:], "t3"), ([], "")):
        edge.answer("GET", RUNS, {"machineLearningRuns": page, "nextPageToken": token})
    result = mldiag("runs", "list", "--limit", "3", "--format=value(runId)", "--api-url", edge.url)
    assert result.out.split() == ["r2", "r3", "r1"]
    assert [s.query.get("pageToken", "") for s in edge.requests("GET", RUNS)] == ["", "t2"]


def test_limit_with_sort_by_reads_every_page_first(edge: FakeEdge, mldiag: Mldiag) -> None:
    for page, token in ((THREE_RUNS[:2], "t2"), (THREE_RUNS[2:], "")):
        edge.answer("GET", RUNS, {"machineLearningRuns": page, "nextPageToken": token})
    argv = ["--limit", "1", "--sort-by", "labels.team", "--format=value(runId)"]
    assert mldiag("runs", "list", *argv, "--api-url", edge.url).out.split() == ["r3"]
    assert len(edge.requests("GET", RUNS)) == 2


def test_sort_by_an_orderable_field_is_sent_to_the_api(edge: FakeEdge, mldiag: Mldiag) -> None:
    for page, token in ((THREE_RUNS[:2], "t2"), (THREE_RUNS[2:], "")):
        edge.answer("GET", RUNS, {"machineLearningRuns": page, "nextPageToken": token})
    argv = ["--limit", "2", "--sort-by", "~runPhase,runId", "--format=value(runId)"]
    result = mldiag("runs", "list", *argv, "--api-url", edge.url)
    # The API sorted: the first page has the two asked for, and the only read.
    assert [s.query.get("orderBy") for s in edge.requests("GET", RUNS)] == ["runPhase desc, runId"]
    assert result.out.split() == ["r2", "r3"]


def test_sort_by_a_field_the_api_cannot_order_by_is_sorted_here(
    edge: FakeEdge, mldiag: Mldiag
) -> None:
    edge.answer("GET", RUNS, {"machineLearningRuns": THREE_RUNS})
    result = mldiag("runs", "list", "--sort-by", "labels.team", "--uri", "--api-url", edge.url)
    assert edge.seen[0].query.get("orderBy", "") == ""
    assert result.out.splitlines()[0].endswith("/r3")  # "a,b" < "t-r1" < "t-r2"


def test_limit_applies_to_json_too(edge: FakeEdge, mldiag: Mldiag) -> None:
    body = json.loads(mldiag(*listed(edge, "--limit", "1", "--format", "json")).out)
    assert [r["runId"] for r in body["machineLearningRuns"]] == ["r2"]


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["operations", "list"],
        ["events", "list"],
        ["profiles", "list", "r1"],
        ["targets", "list", "r1"],
        ["xprof", "list"],
        ["auth", "tokens", "list"],
        ["metrics", "list", "r1"],
        ["jobs", "list"],
        ["hp-tuning-jobs", "list"],
        ["training-pipelines", "list"],
        ["models", "list"],
        ["models", "versions", "m1"],
        ["alerts", "channels", "list"],
        ["alerts", "rules", "list"],
        ["alerts", "deliveries", "list"],
    ],
)
def test_every_list_verb_takes_the_listing_flags(argv: list[str]) -> None:
    args = build_parser().parse_args([*argv, "--limit", "2", "--sort-by", "~name", "--uri"])
    assert (args.limit, args.sort_by, args.uri, args.is_listing) == (2, "~name", True, True)


# errors go to stderr


def test_an_api_refusal_is_on_stderr_only(edge: FakeEdge, mldiag: Mldiag) -> None:
    result = mldiag("runs", "describe", "nope", "--api-url", edge.url)
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith("error: not_found: ")


def test_a_usage_error_is_on_stderr_only(edge: FakeEdge, mldiag: Mldiag) -> None:
    result = mldiag("runs", "update", "r1", "--api-url", edge.url)
    assert result.code == 2
    assert result.out == ""
    assert "nothing to update" in result.err


def test_an_operation_not_done_is_said_on_stderr(edge: FakeEdge, mldiag: Mldiag) -> None:
    running = {"name": f"{FULL}/operations/op-1", "done": False, "metadata": {"verb": "CAPTURE"}}
    edge.answer("POST", "/v1/operations/op-1:wait", running)
    result = mldiag("operations", "wait", "op-1", "--timeout", "1", "--api-url", edge.url)
    assert result.code == 1
    assert "error" not in result.out
    assert result.err == "error: not_done: operation op-1 is still running\n"
    assert edge.seen[0].body == {"timeout": "1s"}


def test_json_output_of_a_wait_has_nothing_on_stderr(edge: FakeEdge, mldiag: Mldiag) -> None:
    done = {"name": f"{FULL}/operations/op-1", "done": True}
    edge.answer("POST", "/v1/operations/op-1:wait", done)
    result = mldiag("operations", "wait", "op-1", "--format=json", "--api-url", edge.url)
    assert (result.code, json.loads(result.out), result.err) == (0, done, "")


# --version


def test_version_prints_the_installed_distributions_version(mldiag: Mldiag) -> None:
    result = mldiag("--version")
    assert result.code == 0
    expected = None
    for distribution in ("mldiag-sdk", "mldiag"):
        try:
            expected = importlib.metadata.version(distribution)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    assert expected is not None
    assert result.out == f"mldiag {expected}\n"
    assert installed_version() == expected


# progress on waits


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_operations_wait_on_a_terminal_keeps_a_progress_line(
    edge: FakeEdge, mldiag: Mldiag, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = {"name": f"{FULL}/operations/op-1", "done": False}
    done = {**running, "done": True}
    wait = "/v1/operations/op-1:wait"
    edge.answer("POST", wait, running, delay=0.3)
    edge.answer("POST", wait, done)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    result = mldiag("operations", "wait", "op-1", "--timeout", "10s", "--api-url", edge.url)
    assert result.code == 0
    assert [r.body for r in edge.requests("POST", wait)] == [{"timeout": "2.0s"}] * 2
    assert terminal.getvalue().startswith("\roperation op-1: running (0s)")
    assert terminal.getvalue().endswith("\n")
    assert "done" in result.out


def test_capture_wait_in_json_writes_nothing_but_the_answer(
    edge: FakeEdge, mldiag: Mldiag, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = "projects/default/locations/local/machineLearningRuns/r1/profilerSessions/s1"
    started = {"name": f"{FULL}/operations/op-1", "done": False, "metadata": {"target": session}}
    finished = {**started, "done": True, "response": {"sessionId": "s1"}}
    edge.answer("POST", f"{RUNS}/r1/profilerSessions:capture", started)
    edge.answer("POST", "/v1/operations/op-1:wait", started)
    edge.answer("POST", "/v1/operations/op-1:wait", finished)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = ["profiles", "capture", "r1", "--wait", "--format=json", "--api-url", edge.url]
    result = mldiag(*argv, "--xprof-url", edge.url)
    assert result.code == 0, terminal.getvalue()
    assert json.loads(result.out) == finished
    assert terminal.getvalue() == ""
    # No per-host reads either: they are for the progress line only.
    assert edge.requests("GET", f"{RUNS}/r1/profilerSessions/s1") == []


def test_capture_wait_on_a_terminal_shows_each_hosts_phase(
    edge: FakeEdge, mldiag: Mldiag, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "projects/default/locations/local/machineLearningRuns/r1/profilerSessions/s1"
    started = {"name": f"{FULL}/operations/op-1", "done": False, "metadata": {"target": name}}
    hosts = [{"host": "h1", "phase": "SUCCEEDED"}, {"host": "h2", "phase": "ACTIVE"}]
    edge.answer("POST", f"{RUNS}/r1/profilerSessions:capture", started)
    edge.answer("GET", f"{RUNS}/r1/profilerSessions/s1", {"phase": "ACTIVE", "hosts": hosts})
    edge.answer("POST", "/v1/operations/op-1:wait", started)
    edge.answer("POST", "/v1/operations/op-1:wait", {**started, "done": True, "response": {}})
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    result = mldiag("profiles", "capture", "r1", "--wait", "--api-url", edge.url)
    assert result.code == 0, terminal.getvalue()
    assert "capture op-1: ACTIVE; h1 SUCCEEDED, h2 ACTIVE (0s)" in terminal.getvalue()
    assert [r.body for r in edge.requests("POST", "/v1/operations/op-1:wait")] == [
        {"timeout": "2s"}
    ] * 2
