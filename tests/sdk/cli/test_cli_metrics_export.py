"""``mldiag metrics export`` against the real run-registry and ingestion (real NATS and
PostgreSQL): a whole metric streamed to stdout or a file, as CSV or JSON Lines."""

import csv
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.connected

STEPS = list(range(300))


def _values(host: int) -> list[float]:
    values = [(host + 1) / (s + 1) for s in STEPS]
    values[7] = math.nan
    values[8] = math.inf
    return values


def _written(platform_apps: Any, mldiag: Callable[..., Any]) -> None:
    api = ("--api-url", platform_apps.api_url)
    assert mldiag("runs", "create", *api, "--display-name", "e", "--run-id", "cli-e").code == 0
    written = httpx.post(
        f"{platform_apps.ingestion_url}/v1/machineLearningRuns/cli-e/metrics:write",
        # json.dumps writes NaN and Infinity as the API reads them (httpx's json= refuses)
        content=json.dumps(
            {
                "series": [
                    {"name": "train/loss", "steps": STEPS, "values": _values(h), "host": f"h{h}"}
                    for h in range(2)
                ]
            }
        ),
        headers={**platform_apps.tokens.headers(), "Content-Type": "application/json"},
    )
    assert written.status_code == 202, written.text
    deadline = time.monotonic() + 20
    while True:
        listing = mldiag("metrics", "list", "cli-e", *api, "--format", "json")
        if json.loads(listing.out)["metrics"] == [
            {"name": "train/loss", "pointCount": 600, "lastStep": 299}
        ]:
            return
        assert time.monotonic() < deadline, listing.out
        time.sleep(0.1)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_a_metric_is_exported_to_stdout_and_to_a_file(
    platform_apps: Any, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", platform_apps.api_url)
    _written(platform_apps, mldiag)

    result = mldiag("metrics", "export", "cli-e", "train/loss", *api)
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert [(int(r["step"]), r["host"]) for r in rows] == [
        (s, f"h{h}") for s in STEPS for h in range(2)
    ]
    for row in rows:
        want = _values(int(row["host"][1]))[int(row["step"])]
        assert _same(float(row["value"]), want)
    assert rows[14]["value"] == "NaN" and rows[16]["value"] == "Infinity"

    target = tmp_path / "loss.jsonl"
    saved = mldiag(
        "metrics",
        "export",
        "cli-e",
        "train/loss",
        *api,
        "--format",
        "jsonl",
        "--start-step",
        "100",
        "--end-step",
        "149",
        "-o",
        str(target),
    )
    assert saved.code == 0, saved.err
    assert saved.out == ""
    assert saved.err.startswith("wrote ") and str(target) in saved.err
    points = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(p["step"], p["host"]) for p in points] == [
        (s, f"h{h}") for s in range(100, 150) for h in range(2)
    ]
    assert all(_same(p["value"], _values(int(p["host"][1]))[p["step"]]) for p in points)


def test_export_mistakes_are_clear(
    platform_apps: Any, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", platform_apps.api_url)
    target = tmp_path / "never.csv"
    unknown = mldiag("metrics", "export", "no-such-run", "loss", *api, "-o", str(target))
    assert unknown.code == 1 and unknown.err.startswith("error: run_not_found: ")
    assert not target.exists()  # nothing is written when the registry refuses
    backwards = mldiag(
        "metrics", "export", "cli-x", "loss", *api, "--start-step", "5", "--end-step", "2"
    )
    assert backwards.code == 2 and "--start-step must not be greater" in backwards.err
    bad = mldiag("metrics", "export", "cli-x", "loss", *api, "--format", "xlsx")
    assert bad.code == 2 and "invalid choice" in bad.err
