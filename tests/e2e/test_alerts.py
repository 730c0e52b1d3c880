"""Alerts through the whole stack, as a user sets them up: `mldiag up --detach` (the notifier
among its services), a webhook channel and a rule made with `mldiag alerts` through the one
base URL, a run whose loss spikes (an event opens) and comes back (it resolves). The receiver
gets OPENED (with the analysis's top cause) and RESOLVED, each signed with the channel's
secret; the delivery history lists both DELIVERED, by event and by run. A NaN loss, whose
event carries a non-finite value in its evidence, reaches the receiver too.
"""

import json
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import httpx
import pytest

from e2e.webhook import Receiver, webhook_receiver
from stacks import Stack, running_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("mldiag-alerts-e2e-") as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(secrets.token_urlsafe(24)) as running:
        yield running


def _ok(result: CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _create_run(stack: Stack, run_id: str, suite: str) -> None:
    run = httpx.post(
        f"{stack.api}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": "alerts e2e", "labels": {"suite": suite}},
        headers=stack.auth,
        timeout=5,
    )
    assert run.status_code == 200, run.text


def _write(stack: Stack, run_id: str, steps: list[int], values: list[float]) -> None:
    series = [{"name": "loss", "steps": steps, "values": values, "host": "host-0"}]
    # json.dumps writes NaN as the API takes it.
    written = httpx.post(
        f"{stack.api}/v1/machineLearningRuns/{run_id}/metrics:write",
        content=json.dumps({"series": series}),
        headers=stack.auth,
        timeout=5,
    )
    assert written.status_code == 202, written.text


def test_an_event_reaches_a_webhook_opened_then_resolved(
    stack: Stack, receiver: Receiver, tmp_path: Path
) -> None:
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(receiver.secret + "\n")
    created = _ok(
        stack.cli(
            "alerts",
            "channels",
            "create",
            "--kind=webhook",
            "--display-name=On-call hook",
            "--id=oncall",
            f"--config=url={receiver.url}",
            f"--secret-file=signingSecret={secret_file}",
        )
    )
    assert "created webhook channel oncall; secrets kept: signingSecret" in created
    # The secret went in and never comes back out.
    described = json.loads(
        _ok(stack.cli("alerts", "channels", "describe", "oncall", "--format=json"))
    )
    assert described["secretKeys"] == ["signingSecret"]
    assert receiver.secret not in json.dumps(described)

    tested = _ok(stack.cli("alerts", "channels", "test", "oncall"))
    assert "delivered a TEST notification through oncall" in tested
    test = receiver.wait_for(lambda item: item.body["kind"] == "TEST", "TEST notification")
    assert test.signed

    suite = uuid.uuid4().hex[:8]
    run_id = f"alerts-{suite}"
    _ok(
        stack.cli(
            "alerts",
            "rules",
            "create",
            "--display-name=Numerics of this run",
            "--id=numerics",
            "--channel=oncall",
            "--event-type=NUMERICAL_INSTABILITY",
            "--min-severity=INFO",
            f"--label=suite={suite}",
        )
    )
    rules = _ok(stack.cli("alerts", "rules", "list"))
    assert "numerics" in rules and "NUMERICAL_INSTABILITY" in rules

    _create_run(stack, run_id, suite)
    # Twelve steady steps (the spike rule's warm-up), then a loss 100 times its median.
    _write(
        stack, run_id, list(range(1, 14)), [1.0 + step / 1000 for step in range(1, 13)] + [100.0]
    )

    opened = receiver.wait_for(
        lambda item: item.body["kind"] == "OPENED" and item.body["run"]["runId"] == run_id,
        "OPENED notification",
    )
    assert opened.signed, "the OPENED notification's signature does not verify"
    event = opened.body["event"]
    assert event["type"] == "NUMERICAL_INSTABILITY"
    assert opened.body["rule"] == "numerics"
    assert opened.body["topCause"]["analyzer"] == "numerical-instability"
    assert f"/runs/{run_id}/events/{event['eventId']}" in opened.body["link"]

    # The loss is back where it was for ten steps: the detector resolves the event.
    _write(stack, run_id, list(range(14, 24)), [1.0] * 10)
    resolved = receiver.wait_for(
        lambda item: (
            item.body["kind"] == "RESOLVED" and item.body["event"]["eventId"] == event["eventId"]
        ),
        "RESOLVED notification",
    )
    assert resolved.signed
    assert resolved.delivery != opened.delivery

    listed = json.loads(
        _ok(
            stack.cli(
                "alerts", "deliveries", "list", f"--event={event['eventId']}", "--format=json"
            )
        )
    )
    deliveries = listed["notificationDeliveries"]
    assert sorted(d["kind"] for d in deliveries) == ["OPENED", "RESOLVED"]
    assert {d["state"] for d in deliveries} == {"DELIVERED"}
    assert {d["channel"] for d in deliveries} == {"oncall"}
    by_run = _ok(stack.cli("alerts", "deliveries", "list", f"--run={run_id}"))
    assert by_run.count("DELIVERED") == 2
    # Each notification arrived once, whatever the bus redelivered.
    mine = [item for item in receiver.received if item.body["kind"] != "TEST"]
    assert len(mine) == 2

    # A channel a rule names is not deleted; once the rule is gone it is.
    refused = stack.cli("alerts", "channels", "delete", "oncall")
    assert refused.returncode == 1
    assert "channel_in_use" in refused.stderr and "numerics" in refused.stderr
    _ok(stack.cli("alerts", "rules", "delete", "numerics"))
    _ok(stack.cli("alerts", "channels", "delete", "oncall"))
    assert "no notification channels" in _ok(stack.cli("alerts", "channels", "list"))


def test_a_nan_loss_reaches_the_webhook(stack: Stack, receiver: Receiver) -> None:
    # Its evidence holds NaN (the first bad value): stored, routed and sent all the same.
    suite = uuid.uuid4().hex[:8]
    run_id = f"alerts-nan-{suite}"
    hook = json.dumps(
        {
            "displayName": "NaN hook",
            "kind": "WEBHOOK",
            "config": {"url": receiver.url},
            "secrets": {"signingSecret": receiver.secret},
        }
    )
    (stack.home / "nan-hook.json").write_text(hook)
    _ok(
        stack.cli(
            "alerts",
            "channels",
            "create",
            "--id=nan-hook",
            f"--from-file={stack.home / 'nan-hook.json'}",
        )
    )
    _ok(
        stack.cli(
            "alerts",
            "rules",
            "create",
            "--display-name=NaN",
            "--channel=nan-hook",
            f"--label=suite={suite}",
            "--no-resolve",
        )
    )
    _create_run(stack, run_id, suite)
    _write(stack, run_id, [1, 2, 3, 4], [0.9, 0.7, float("nan"), 0.5])
    opened = receiver.wait_for(
        lambda item: item.body["kind"] == "OPENED" and item.body["run"]["runId"] == run_id,
        "OPENED notification of the NaN",
    )
    assert opened.signed
    assert opened.body["event"]["evidence"]["firstBadStep"] == 3
