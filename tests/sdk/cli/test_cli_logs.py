"""``mldiag logs`` against a served run-registry (real NATS and PostgreSQL), invoked
in-process: the text and JSON shapes, every filter, the run's full name, errors, and a
follower that prints lines as they land and stops once the run has ended."""

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from mldiag_platform.bus import Publisher
from mldiag_run_registry.logs import service as logs_service
from mldiag_schemas.logs import LogLine, LogLinesReceived, LogSeverity, LogStream
from support import poll_until

pytestmark = pytest.mark.connected


def _lines(run_id: str, *lines: LogLine) -> LogLinesReceived:
    return LogLinesReceived(run_id=run_id, event_id=uuid.uuid4(), lines=list(lines))


def _at(now: datetime, seconds_ago: float, text: str, **fields: Any) -> LogLine:
    return LogLine(time=now - timedelta(seconds=seconds_ago), text=text, **fields)


async def test_logs_prints_filters_and_refuses(
    platform_apps: Any, mldiag: Callable[..., Any], publisher: Publisher
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)  # `--since 25s` is read when it runs
    api = ("--api-url", platform_apps.api_url)
    assert mldiag("runs", "create", *api, "--display-name", "lg", "--run-id", "lg-a").code == 0
    await publisher.publish(
        _lines(
            "lg-a",
            _at(now, 30, "epoch 1 loss 0.5", host="h0"),
            _at(now, 20, "NCCL WARN timeout", host="h1", severity=LogSeverity.WARNING),
            _at(now, 10, "boom", host="h0", stream=LogStream.STDERR),
        )
    )
    out = poll_until(lambda: mldiag("logs", "lg-a", *api).out, lambda o: o.count("\n") == 3)
    first = out.splitlines()[0]
    assert first.endswith(" h0 stdout  epoch 1 loss 0.5")
    assert datetime.fromisoformat(first.split()[0]) == now - timedelta(seconds=30)

    def texts(*options: str) -> list[str]:
        result = mldiag("logs", "lg-a", *api, "--format", "json", *options)
        assert result.code == 0, result.err
        return [json.loads(line)["text"] for line in result.out.splitlines()]

    assert texts("--grep", "bo+m") == ["boom"]
    assert texts("--stream", "stderr") == ["boom"]
    assert texts("--host", "h1") == ["NCCL WARN timeout"]
    assert texts("--severity", "warning") == ["NCCL WARN timeout"]
    assert texts("--since", "25s") == ["NCCL WARN timeout", "boom"]
    assert texts("--until", (now - timedelta(seconds=25)).isoformat()) == ["epoch 1 loss 0.5"]
    assert texts("--limit", "2") == ["epoch 1 loss 0.5", "NCCL WARN timeout"]
    full = "projects/default/locations/local/machineLearningRuns/lg-a"
    assert mldiag("logs", full, *api).out == out

    bad = mldiag("logs", "lg-a", *api, "--grep", "(")
    assert (bad.code, bad.err.split(":")[:2]) == (1, ["error", " invalid_grep"])
    assert mldiag("logs", "nope", *api).code == 1
    assert mldiag("logs", "lg-a", *api, "--since", "yesterday").code == 2
    assert mldiag("logs", "lg-a", *api, "--stream", "stdin").code == 2


async def test_follow_prints_new_lines_until_the_run_has_ended(
    platform_apps: Any,
    mldiag: Callable[..., Any],
    publisher: Publisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs_service, "ENDED_GRACE", timedelta(0))
    now = datetime.now(UTC)
    api = ("--api-url", platform_apps.api_url)
    assert mldiag("runs", "create", *api, "--display-name", "lg", "--run-id", "lg-f").code == 0
    await publisher.publish(_lines("lg-f", _at(now, 5, "before")))
    poll_until(lambda: mldiag("logs", "lg-f", *api).out, lambda o: "before" in o)

    follower = asyncio.create_task(asyncio.to_thread(mldiag, "logs", "lg-f", "--follow", *api))
    await asyncio.sleep(1.5)
    await publisher.publish(_lines("lg-f", _at(now, 0, "after", host="h9")))
    await asyncio.sleep(2.5)  # the follower polls every second
    assert not follower.done()
    headers = {"Authorization": f"Bearer {platform_apps.tokens.admin}"}
    async with httpx.AsyncClient(base_url=platform_apps.api_url, headers=headers) as client:
        run = (await client.get("/v1/machineLearningRuns/lg-f")).json()
        ended = await client.patch(
            "/v1/machineLearningRuns/lg-f",
            params={"updateMask": "runPhase"},
            json={"runPhase": "COMPLETED", "etag": run["etag"]},
        )
        assert ended.status_code == 200, ended.text
    result = await asyncio.wait_for(follower, timeout=10)
    assert result.code == 0, result.err
    assert [line.split("  ", 1)[1] for line in result.out.splitlines()] == ["before", "after"]
