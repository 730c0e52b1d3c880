"""``mldiag events list|describe``, ``mldiag runs goodput`` and ``mldiag rules show|set``
against a served run-registry (real NATS and PostgreSQL), invoked in-process."""

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mldiag_platform.bus import Publisher
from mldiag_schemas.analyses import (
    Analysis,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
    Layer,
    RecommendedAction,
)
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import (
    EventState,
    EventType,
    Evidence,
    MetricWindow,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
)
from mldiag_schemas.telemetry import MetricPoint, MetricPointsReceived
from support import poll_until

pytestmark = pytest.mark.connected

NOW = datetime.now(UTC).replace(microsecond=0)


def _json(result: Any) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def _event(run_id: str, kind: EventType, minutes_ago: float, **changes: Any) -> WorkloadEvent:
    fields: dict[str, Any] = {
        "event_id": uuid.uuid4(),
        "run_id": run_id,
        "type": kind,
        "display_name": f"{kind.value.lower()} on h1",
        "severity": Severity.CRITICAL,
        "state": EventState.OPEN,
        "start_time": NOW - timedelta(minutes=minutes_ago),
        "rule": "hang",
        "thresholds": {"floorSeconds": 300.0},
        "hosts": ["h1"],
        "time_lost_seconds": 200.0,
        "evidence": Evidence(
            metric="step_time",
            host="h1",
            first_bad_step=42,
            first_bad_value=9.5,
            windows=[MetricWindow(metric="step_time", host="h1", start_step=40, end_step=42)],
            facts={"lastHeartbeat": "12s ago"},
        ),
    }
    fields.update(changes)
    return WorkloadEvent(**fields)


async def test_events_goodput_and_rules(
    platform_apps: Any, mldiag: Callable[..., Any], publisher: Publisher
) -> None:
    api = ("--api-url", platform_apps.api_url)
    for run_id in ("ev-a", "ev-b"):
        assert (
            mldiag("runs", "create", *api, "--display-name", run_id, "--run-id", run_id).code == 0
        )

    hang = _event("ev-a", EventType.HANG, 90)
    slow = _event(
        "ev-a",
        EventType.PERFORMANCE_DEGRADATION,
        30,
        state=EventState.RESOLVED,
        end_time=NOW - timedelta(minutes=20),
        time_lost_seconds=12.0,
    )
    other = _event("ev-b", EventType.STRAGGLER, 10, time_lost_seconds=0.0)
    analysis = Analysis(
        analysis_id=uuid.uuid4(),
        event_id=hang.event_id,
        run_id="ev-a",
        analyzer_insight_found=True,
        reports=[
            AnalyzerReport(
                analyzer="data-input-stall",
                layer=Layer.FRAMEWORK,
                detection_state=DetectionState.DETECTED,
                details="host h1 waits on its data loader",
                hosts=["h1"],
                evidence=["data wait 95% of the step"],
                score=0.8,
                recommended_actions=[
                    RecommendedAction(
                        description="raise the prefetch depth",
                        documentation_url="https://docs.example/input-stall",
                    )
                ],
            )
        ],
        probable_cause="data-input-stall",
        time_lost_seconds=200.0,
        create_time=NOW,
    )
    points = [
        MetricPoint(name="step_time", step=step, value=2.0, time=NOW, host="h0", process_index=0)
        for step in range(5)
    ]
    messages: list[Envelope] = [
        WorkloadEventOpened(event=hang),
        WorkloadEventOpened(event=slow),
        WorkloadEventOpened(event=other),
        AnalysisCompleted(analysis=analysis),
        MetricPointsReceived.model_validate(
            {"run_id": "ev-a", "batch_id": uuid.uuid4(), "chunk": 0, "points": points}
        ),
    ]
    await publisher.publish_many(messages)

    listing = poll_until(
        lambda: _json(mldiag("events", "list", *api, "--json")),
        lambda page: (
            len(page["events"]) == 3
            and page["events"][2]["analyzerReports"] != []
            and bool(page["events"])
        ),
    )
    assert [e["eventId"] for e in listing["events"]] == [
        str(other.event_id),
        str(slow.event_id),
        str(hang.event_id),
    ]

    table = mldiag("events", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split()[:4] == ["EVENT", "ID", "RUN", "TYPE"]
    hang_line = next(line for line in lines if str(hang.event_id) in line)
    assert "HANG" in hang_line and "data-input-stall" in hang_line and "3m20s" in hang_line

    def listed(*options: str) -> list[str]:
        page = _json(mldiag("events", "list", *api, "--json", *options))
        return [e["eventId"] for e in page["events"]]

    assert listed("--run", "ev-a") == [str(slow.event_id), str(hang.event_id)]
    assert listed("--type", "hang") == [str(hang.event_id)]
    assert listed("--state", "resolved") == [str(slow.event_id)]
    assert listed("--since", "1h") == [str(other.event_id), str(slow.event_id)]
    until = (NOW - timedelta(minutes=60)).isoformat()
    assert listed("--run", "ev-a", "--until", until) == [str(hang.event_id)]
    paged = _json(mldiag("events", "list", *api, "--json", "--page-size", "1", "--all"))
    assert len(paged["events"]) == 3
    assert mldiag("events", "list", *api, "--run", "nope").code == 1

    described = mldiag("events", "describe", str(hang.event_id), "--run", "ev-a", *api)
    assert described.code == 0, described.err
    for text in (
        "type        HANG",
        "rule        hang (floorSeconds=300.0)",
        "first bad step  42 (value 9.5)",
        "facts.lastHeartbeat  12s ago",
        "1. DETECTED  data-input-stall  (framework, score 0.8)",
        "host h1 waits on its data loader",
        "- data wait 95% of the step",
        "- raise the prefetch depth",
        "https://docs.example/input-stall",
    ):
        assert " ".join(text.split()) in " ".join(described.out.split()), (text, described.out)
    by_name = _json(mldiag("events", "describe", listing["events"][2]["name"], *api, "--json"))
    assert by_name["eventId"] == str(hang.event_id)
    missing_run = mldiag("events", "describe", str(hang.event_id), *api)
    assert missing_run.code == 2 and "--run" in missing_run.err
    not_found = mldiag("events", "describe", str(uuid.uuid4()), "--run", "ev-a", *api)
    assert not_found.code == 1 and "event_not_found" in not_found.err

    poll_until(
        lambda: _json(mldiag("runs", "goodput", "ev-a", *api, "--json")),
        lambda answer: answer["steps"] == 5,
    )
    goodput = mldiag("runs", "goodput", "ev-a", *api)
    assert goodput.code == 0, goodput.err
    assert goodput.out.startswith("run ev-a: goodput ")
    buckets = [line.split()[0] for line in goodput.out.splitlines()[2:10]]
    assert buckets == [
        "BUCKET",
        "PRODUCTIVE",
        "STARTUP",
        "DATA_LOADING",
        "CHECKPOINTING",
        "DISRUPTIONS",
        "EVENTS",
        "UNACCOUNTED",
    ]
    assert str(hang.event_id) in goodput.out and "DISRUPTIONS" in goodput.out

    _check_rules(mldiag, api)


def _check_rules(mldiag: Callable[..., Any], api: tuple[str, str]) -> None:
    empty = mldiag("rules", "show", *api)
    assert empty.code == 0 and empty.out.startswith("no overrides for the project")

    changed = mldiag("rules", "set", "hang.floorSeconds=60", "straggler.enabled=false", *api)
    assert changed.code == 0, changed.err
    assert changed.out.splitlines()[2:] == [
        "RULE       SETTING       VALUE",
        "hang       floorSeconds  60.0",
        "straggler  enabled       false",
    ]
    kept = _json(
        mldiag(
            "rules", "set", "--unset", "straggler", "hang.stepFactor=5", *api, "--format", "json"
        )
    )
    assert kept["rules"] == {
        "hang": {"enabled": None, "thresholds": {"floorSeconds": 60.0, "stepFactor": 5.0}}
    }
    refused = mldiag("rules", "set", "hang.floorSecs=1", *api)
    assert refused.code == 1 and "invalid_monitoring_rules" in refused.err
    assert mldiag("rules", "set", "hang=1", *api).code == 2  # argparse: not RULE.NAME=VALUE

    run = mldiag("rules", "set", "--run", "ev-a", "loss-spike.factor=20", *api)
    assert run.code == 0, run.err
    assert "overrides for run ev-a" in run.out and "loss-spike factor 20.0" in " ".join(
        run.out.split()
    )
    shown = _json(mldiag("rules", "show", "--run", "ev-a", *api, "--format", "json"))
    assert shown == {"rules": {"loss-spike": {"enabled": None, "thresholds": {"factor": 20.0}}}}
