"""``mldiag runs|metrics|operations|configs`` against the real run-registry and ingestion
(real NATS and PostgreSQL), invoked in-process as a person or a script would.
"""

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import yaml

from support import free_port

pytestmark = pytest.mark.connected


def _json(result: Any) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_runs_lifecycle_configs_diff_and_operations(
    platform_apps: Any, mldiag: Callable[..., Any]
) -> None:
    api = ("--api-url", platform_apps.api_url)

    created = mldiag(
        "runs",
        "create",
        *api,
        "--display-name",
        "baseline",
        "--run-id",
        "cli-a",
        "--run-set",
        "sweep",
        "--label",
        "team=ml",
        "--label",
        "gpu=h100",
        "--user-config",
        "lr=0.001",
        "--user-config",
        "optimizer.name=adam",
        "--software-config",
        "framework=jax",
        "--hardware-config",
        "num_slices=2",
    )
    assert created.code == 0, created.err
    assert created.out.startswith("created run cli-a (operation ")
    assert "configs.userConfigs.optimizer.name  adam" in created.out

    # --format json prints the API's operation body, before or after the command
    second = _json(
        mldiag(
            "--format",
            "json",
            "--api-url",
            platform_apps.api_url,
            "runs",
            "create",
            "--display-name",
            "variant",
            "--run-id",
            "cli-b",
            "--run-set",
            "sweep",
            "--user-config",
            "lr=0.002",
            "--user-config",
            "optimizer.name=adam",
            "--user-config",
            "warmup=100",
            "--software-config",
            "framework=jax",
        )
    )
    assert second["done"] is True
    assert second["metadata"]["verb"] == "create"
    assert second["response"]["configs"]["userConfigs"] == {
        "lr": 0.002,
        "optimizer": {"name": "adam"},
        "warmup": 100,
    }

    _check_listing(mldiag, api)
    _check_describe_and_update(mldiag, api)
    _check_diff_and_delete(mldiag, api)
    _check_operations(mldiag, api)


def _check_listing(mldiag: Callable[..., Any], api: tuple[str, str]) -> None:
    table = mldiag("runs", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == [
        "RUN",
        "ID",
        "DISPLAY",
        "NAME",
        "RUN",
        "SET",
        "PHASE",
        "CREATED",
        "LABELS",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["cli-b", "cli-a"]  # newest first
    assert "gpu=h100,team=ml" in lines[2]

    listing = _json(
        mldiag(
            "runs",
            "list",
            *api,
            "--format",
            "json",
            "--filter",
            'runSet = "sweep"',
            "--order-by",
            "displayName",
        )
    )
    assert [run["runId"] for run in listing["machineLearningRuns"]] == ["cli-a", "cli-b"]
    paged = mldiag("runs", "list", *api, "--page-size", "1")
    assert "more runs: --page-token" in paged.out
    everything = _json(
        mldiag("runs", "list", *api, "--page-size", "1", "--all", "--format", "json")
    )
    assert [run["runId"] for run in everything["machineLearningRuns"]] == ["cli-b", "cli-a"]
    as_yaml = yaml.safe_load(mldiag("runs", "list", *api, "--format", "yaml").out)
    assert as_yaml == _json(mldiag("runs", "list", *api, "--format", "json"))


def _check_describe_and_update(mldiag: Callable[..., Any], api: tuple[str, str]) -> None:
    described = mldiag("runs", "describe", "cli-a", *api)
    assert described.code == 0
    assert "runId  " in described.out and "cli-a" in described.out
    assert "labels.team" in described.out
    before = _json(mldiag("runs", "describe", "cli-a", *api, "--format", "json"))
    assert before["displayName"] == "baseline"

    # update reads the etag itself; labels are edited, not replaced
    updated = mldiag(
        "runs",
        "update",
        "cli-a",
        *api,
        "--display-name",
        "baseline v2",
        "--label",
        "stage=2",
        "--remove-label",
        "gpu",
        "--phase",
        "COMPLETED",
    )
    assert updated.code == 0, updated.err
    assert updated.out.startswith("updated run cli-a (operation ")
    after = _json(mldiag("runs", "describe", "cli-a", *api, "--format", "json"))
    assert after["displayName"] == "baseline v2"
    assert after["labels"] == {"team": "ml", "stage": "2"}
    assert after["runPhase"] == "COMPLETED"
    assert after["etag"] != before["etag"]

    stale = mldiag("runs", "update", "cli-b", *api, "--etag", "stale", "--display-name", "x")
    assert stale.code == 1
    assert stale.err.strip().startswith("error: etag_mismatch: ")
    fresh_etag = _json(mldiag("runs", "describe", "cli-b", *api, "--format", "json"))["etag"]
    explicit = mldiag(
        "runs",
        "update",
        "cli-b",
        *api,
        "--etag",
        fresh_etag,
        "--run-set",
        "other",
        "--format",
        "json",
    )
    assert _json(explicit)["response"]["runSet"] == "other"


def _check_diff_and_delete(mldiag: Callable[..., Any], api: tuple[str, str]) -> None:
    diff = mldiag("configs", "diff", "cli-a", "cli-b", *api)
    assert diff.code == 0, diff.err
    assert diff.out.startswith("configs of cli-a → cli-b: 1 added, 1 removed, 1 changed")
    rows = {line.split()[1]: line.split() for line in diff.out.splitlines()[3:]}
    assert rows["userConfigs.lr"] == ["changed", "userConfigs.lr", "0.001", "0.002"]
    assert rows["userConfigs.warmup"] == ["added", "userConfigs.warmup", "100"]
    assert rows["hardwareConfigs.num_slices"] == ["removed", "hardwareConfigs.num_slices", "2"]
    assert "softwareConfigs.framework" not in rows and "userConfigs.optimizer.name" not in rows
    diff_json = _json(mldiag("configs", "diff", "cli-a", "cli-b", *api, "--format", "json"))
    assert diff_json["base"].endswith("/machineLearningRuns/cli-a")
    assert {
        "section": "userConfigs",
        "key": "lr",
        "change": "CHANGED",
        "baseValue": 0.001,
        "otherValue": 0.002,
    } in diff_json["differences"]
    everything = mldiag("configs", "diff", "cli-a", "cli-b", "--all", *api)
    assert "unchanged  softwareConfigs.framework" in everything.out
    shown = mldiag("configs", "show", "cli-a", *api)
    assert shown.code == 0, shown.err
    assert shown.out.splitlines()[0].split() == ["SECTION", "KEY", "VALUE"]
    assert ["userConfigs", "lr", "0.001"] in [line.split() for line in shown.out.splitlines()]
    same = mldiag("configs", "diff", "cli-a", "cli-a", *api)
    assert (same.code, same.out.strip()) == (0, "configs of cli-a and cli-a are the same")

    deleted = mldiag("runs", "delete", "cli-b", *api)
    assert deleted.code == 0, deleted.err
    assert deleted.out.startswith("deleted run cli-b (operation ")
    gone = mldiag("runs", "describe", "cli-b", *api)
    assert gone.code == 1
    assert gone.err.startswith("error: run_not_found: ")
    assert len(gone.err.strip().splitlines()) == 1


def _check_operations(mldiag: Callable[..., Any], api: tuple[str, str]) -> None:
    operations = _json(mldiag("operations", "list", *api, "--format", "json"))
    verbs = [op["metadata"]["verb"] for op in operations["operations"]]
    assert verbs == ["delete", "update", "update", "create", "create"]
    ops_table = mldiag("operations", "list", *api)
    assert ops_table.out.splitlines()[0].split() == [
        "ID",
        "VERB",
        "TARGET",
        "DONE",
        "ERROR",
        "CREATED",
    ]
    assert "machineLearningRuns/cli-b" in ops_table.out.splitlines()[1]
    newest = operations["operations"][0]
    op_id = newest["name"].rsplit("/", 1)[-1]
    shown = mldiag("operations", "describe", op_id, *api)
    assert shown.code == 0 and "metadata.verb" in shown.out and "delete" in shown.out
    by_name = _json(mldiag("operations", "describe", newest["name"], *api, "--format", "json"))
    assert by_name == newest
    waited = _json(mldiag("operations", "wait", op_id, *api, "--timeout", "2", "--format", "json"))
    assert waited["done"] is True
    cancel = mldiag("operations", "cancel", op_id, *api)
    assert cancel.code == 1 and cancel.err.startswith("error: operation_already_done: ")
    assert mldiag("operations", "delete", op_id, *api).code == 0
    missing = mldiag("operations", "describe", op_id, *api)
    assert missing.code == 1 and missing.err.startswith("error: operation_not_found: ")


def test_metrics_list_get_buckets_and_latest(
    platform_apps: Any, mldiag: Callable[..., Any]
) -> None:
    api = ("--api-url", platform_apps.api_url)
    assert mldiag("runs", "create", *api, "--display-name", "m", "--run-id", "cli-m").code == 0
    steps = list(range(200))
    written = httpx.post(
        f"{platform_apps.ingestion_url}/v1/machineLearningRuns/cli-m/metrics:write",
        json={
            "series": [
                {
                    "name": "train/loss",
                    "steps": steps,
                    "values": [1.0 / (s + 1) for s in steps],
                    "host": "h0",
                },
                {
                    "name": "train/loss",
                    "steps": steps,
                    "values": [2.0 / (s + 1) for s in steps],
                    "host": "h1",
                },
                {"name": "lr", "steps": [0, 1], "values": [0.1, 0.05], "host": "h0"},
            ]
        },
        headers=platform_apps.tokens.headers(),
    )
    assert written.status_code == 202, written.text
    deadline = time.monotonic() + 20
    while True:
        listing = _json(mldiag("metrics", "list", "cli-m", *api, "--format", "json"))
        counts = {m["name"]: m["pointCount"] for m in listing["metrics"]}
        if counts == {"train/loss": 400, "lr": 2}:
            break
        assert time.monotonic() < deadline, counts
        time.sleep(0.1)

    table = mldiag("metrics", "list", "cli-m", *api)
    assert table.out.splitlines()[0].split() == ["NAME", "POINTS", "LAST", "STEP"]
    assert ["train/loss", "400", "199"] in [line.split() for line in table.out.splitlines()]

    raw = _json(mldiag("metrics", "get", "cli-m", "lr", *api, "--format", "json"))
    assert [(p["step"], p["value"]) for p in raw["points"]] == [(0, 0.1), (1, 0.05)]
    paged = _json(
        mldiag(
            "metrics",
            "get",
            "cli-m",
            "train/loss",
            *api,
            "--page-size",
            "150",
            "--all",
            "--format",
            "json",
        )
    )
    assert len(paged["points"]) == 400 and paged["nextPageToken"] == ""
    raw_table = mldiag("metrics", "get", "cli-m", "lr", *api)
    assert raw_table.out.splitlines()[0].split() == ["STEP", "VALUE", "SERIES", "TIME"]
    assert raw_table.out.splitlines()[1].split()[:3] == ["0", "0.1", "h0"]

    buckets = _json(
        mldiag(
            "metrics",
            "get",
            "cli-m",
            "train/loss",
            *api,
            "--buckets",
            "4",
            "--group-by",
            "host",
            "--format",
            "json",
        )
    )
    assert buckets["groupBy"] == "host"
    assert [line["host"] for line in buckets["series"]] == ["h0", "h1"]
    assert sum(b["count"] for b in buckets["series"][0]["buckets"]) == 200
    merged = mldiag(
        "metrics", "get", "cli-m", "train/loss", *api, "--buckets", "2", "--group-by", "none"
    )
    assert merged.code == 0, merged.err
    head, _, body = merged.out.partition("\n\n")
    assert head.startswith("train/loss: bucket width ") and "group by none" in head
    rows = [line.split() for line in body.splitlines()]
    assert rows[0] == ["SERIES", "STEPS", "COUNT", "NAN", "MIN", "MAX", "MEAN", "LAST"]
    assert sum(int(row[2]) for row in rows[1:]) == 400

    latest = mldiag("metrics", "latest", "cli-m", *api)
    assert latest.code == 0, latest.err
    latest_rows = [line.split() for line in latest.out.splitlines()[1:]]
    assert ["lr", "h0", "1", "0.05"] in [row[:4] for row in latest_rows]
    only_loss = _json(
        mldiag("metrics", "get", "cli-m", "train/loss", *api, "--latest", "--format", "json")
    )
    assert {(v["host"], v["step"]) for v in only_loss["values"]} == {("h0", 199), ("h1", 199)}

    unknown = mldiag("metrics", "list", "no-such-run", *api)
    assert unknown.code == 1 and unknown.err.startswith("error: run_not_found: ")
    bad = mldiag("metrics", "get", "cli-m", "lr", *api, "--group-by", "host")
    assert bad.code == 2 and "--group-by needs --buckets" in bad.err


def test_api_down_is_exit_3_naming_the_url(mldiag: Callable[..., Any]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = mldiag("runs", "list", "--api-url", url)
    assert result.code == 3
    assert result.err.startswith(f"error: cannot reach the mldiag API at {url}")
    assert "mldiag up" in result.err
    assert result.out == ""


def test_api_url_and_token_come_from_the_environment(
    platform_apps: Any, mldiag: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLDIAG_API_URL", platform_apps.api_url)
    monkeypatch.setenv("MLDIAG_TOKEN", platform_apps.tokens.viewer)
    result = mldiag("runs", "list")
    assert (result.code, result.out.strip()) == (0, "no runs")
    refused = mldiag("runs", "create", "--display-name", "x")
    assert refused.code == 1
    assert refused.err.startswith("error: permission_denied: the viewer role does not grant")
    long_form = mldiag(
        "runs", "list", "--project", "default", "--location", "local", "--format", "json"
    )
    assert _json(long_form) == {"machineLearningRuns": [], "nextPageToken": ""}
    monkeypatch.setenv("MLDIAG_TOKEN", "mldiag_not-a-token")
    unknown = mldiag("runs", "list")
    assert unknown.code == 1 and unknown.err.startswith("error: unauthenticated: ")


def test_auth_tokens_create_list_and_revoke(
    platform_apps: Any, mldiag: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = ("--api-url", platform_apps.api_url)
    created = _json(
        mldiag("auth", "tokens", "create", *api, "--role", "editor", "--format", "json")
    )
    token_id, secret = created["token"]["tokenId"], created["secret"]
    listed = mldiag("auth", "tokens", "list", *api)
    assert listed.code == 0 and token_id in listed.out and secret not in listed.out
    monkeypatch.setenv("MLDIAG_TOKEN", secret)
    assert mldiag("runs", "create", *api, "--display-name", "by-editor").code == 0
    denied = mldiag("auth", "tokens", "list", *api)
    assert denied.code == 1 and "apiTokens.list" in denied.err
    monkeypatch.setenv("MLDIAG_TOKEN", platform_apps.tokens.admin)
    revoked = mldiag("auth", "tokens", "revoke", token_id, *api)
    assert (revoked.code, revoked.out.strip()) == (0, f"revoked {token_id}")
    monkeypatch.setenv("MLDIAG_TOKEN", secret)
    assert mldiag("runs", "list", *api).err.startswith("error: unauthenticated: ")
