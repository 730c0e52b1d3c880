"""Events on the bus to notifications at real receivers: the top cause, signatures, retries,
dead deliveries, one notification whatever redelivers it, grouping, the hourly limit,
routing, and every channel kind."""

import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage

import asyncpg
import pytest

from conftest import ApiTokens
from mldiag_notifier.app import create_app
from mldiag_notifier.settings import NotifierSettings
from mldiag_notifier.signature import verify
from mldiag_platform.bus import Publisher
from mldiag_schemas.alerts import DELIVERY_HEADER, SIGNATURE_HEADER
from mldiag_schemas.analyses import (
    Analysis,
    AnalysisCompleted,
    AnalyzerReport,
    DetectionState,
    Layer,
)
from mldiag_schemas.auth import Role
from mldiag_schemas.events import (
    EventType,
    Evidence,
    Severity,
    WorkloadEvent,
    WorkloadEventOpened,
    WorkloadEventResolved,
    WorkloadEventUpdated,
)
from notifier.conftest import (
    BASE,
    SECRET,
    Received,
    Receiver,
    SmtpServer,
    Stage,
    add_rule,
    deliveries,
    known_run,
    make_event,
    make_run,
    settle,
    webhook,
)
from support import serving, wait_until

pytestmark = pytest.mark.connected


def analysis_of(
    event: WorkloadEvent,
    cause: str = "another process took 80% of the CPUs",
    create_time: datetime | None = None,
) -> AnalysisCompleted:
    reports = [
        AnalyzerReport(
            analyzer="input-pipeline",
            layer=Layer.FRAMEWORK,
            detection_state=DetectionState.NOT_DETECTED,
            details="no stall",
        ),
        AnalyzerReport(
            analyzer="host-cpu-contention",
            layer=Layer.INFRASTRUCTURE,
            detection_state=DetectionState.DETECTED,
            details=cause,
            evidence=["stress-ng at 790% CPU"],
            score=0.9,
        ),
    ]
    analysis = Analysis(
        analysis_id=uuid.uuid4(),
        event_id=event.event_id,
        run_id=event.run_id,
        analyzer_insight_found=True,
        reports=reports,
        probable_cause="host-cpu-contention",
        time_lost_seconds=120.0,
        create_time=create_time or datetime.now(UTC),
    )
    return AnalysisCompleted(analysis=analysis)


async def test_an_opened_event_carries_its_top_cause_signed_and_its_resolution_follows(
    stage: Stage,
) -> None:
    await stage.hook()
    event = make_event("r1")
    await stage.publish(WorkloadEventOpened(event=event))
    await stage.publish(analysis_of(event))
    [request] = await stage.receiver.received("/hook")

    assert verify(SECRET, request.headers[SIGNATURE_HEADER], request.body, time.time())
    body = request.json()
    assert body["kind"] == "OPENED"
    assert body["notificationId"] == request.headers[DELIVERY_HEADER]
    assert body["topCause"] == {
        "analyzer": "host-cpu-contention",
        "details": "another process took 80% of the CPUs",
        "evidence": ["stress-ng at 790% CPU"],
    }
    assert body["timeLostSeconds"] == 120.0
    assert body["run"]["displayName"] == "Run r1"
    assert body["rule"] == "to-hook"
    assert body["link"] == (f"http://mldiag.example:8080/console/#/runs/r1/events/{event.event_id}")
    assert body["summary"].startswith("OPEN · ")

    # Updates are not notified; the resolution is.
    await stage.publish(WorkloadEventUpdated(event=event.model_copy(update={"revision": 2})))
    resolved = make_event("r1", resolved=True, event_id=event.event_id)
    await stage.publish(WorkloadEventResolved(event=resolved))
    await stage.receiver.received("/hook", 2)
    second = stage.receiver.on("/hook")[1].json()
    assert second["kind"] == "RESOLVED"
    assert second["summary"].startswith("RESOLVED · ")
    await settle(0.5)
    assert len(stage.receiver.on("/hook")) == 2


async def test_an_event_whose_evidence_holds_nan_is_notified(stage: Stage) -> None:
    await stage.hook()
    event = make_event("r1", event_type=EventType.NUMERICAL_INSTABILITY)
    event = event.model_copy(update={"evidence": Evidence(metric="loss", first_bad_value=math.nan)})
    await stage.publish(WorkloadEventOpened(event=event))
    [request] = await stage.receiver.received("/hook")
    assert b'"firstBadValue":NaN' in request.body


async def test_without_an_analysis_it_goes_after_the_wait(stage: Stage) -> None:
    await stage.hook()
    published = time.monotonic()
    await stage.publish(WorkloadEventOpened(event=make_event("r1")))
    [request] = await stage.receiver.received("/hook")
    assert time.monotonic() - published >= 0.3  # the analysis wait
    assert request.json()["topCause"] is None
    assert request.json()["timeLostSeconds"] == 42.0


async def test_an_event_before_its_run_is_known_waits_for_it(stage: Stage) -> None:
    await webhook(stage.api, stage.receiver)
    await stage.publish(WorkloadEventOpened(event=make_event("late")))
    await settle(0.05)
    await stage.known_run(make_run("late"))
    [request] = await stage.receiver.received("/hook")
    assert request.json()["run"]["runId"] == "late"


async def test_a_receiver_failing_twice_gets_it_once_on_the_third_attempt(stage: Stage) -> None:
    await stage.hook()
    stage.receiver.scripts["/hook"] = [503, 503]
    await stage.publish(WorkloadEventOpened(event=make_event("r1")))
    [delivery] = await wait_until(lambda: stage.deliveries('state="DELIVERED"'), timeout=10)
    assert delivery["attempts"] == 3
    assert delivery["deliverTime"]
    requests = stage.receiver.on("/hook")
    assert len(requests) == 3
    assert len({request.headers[DELIVERY_HEADER] for request in requests}) == 1
    await settle(0.3)
    assert len(stage.receiver.on("/hook")) == 3


async def test_a_4xx_is_dead_at_once_with_the_reason(stage: Stage) -> None:
    await stage.hook()
    stage.receiver.scripts["/hook"] = [400]
    await stage.publish(WorkloadEventOpened(event=make_event("r1")))
    [delivery] = await wait_until(lambda: stage.deliveries('state="DEAD"'))
    assert delivery["attempts"] == 1
    assert delivery["lastError"] == "HTTP 400: nope"
    assert len(stage.receiver.on("/hook")) == 1


async def test_attempts_run_out_into_dead(stage: Stage) -> None:
    await stage.hook()
    stage.receiver.scripts["/hook"] = [500] * 10
    await stage.publish(WorkloadEventOpened(event=make_event("r1")))
    [delivery] = await wait_until(lambda: stage.deliveries('state="DEAD"'), timeout=10)
    assert delivery["attempts"] == 4  # max_attempts in these tests
    assert delivery["lastError"].startswith("HTTP 500")


async def test_a_redelivered_event_and_two_replicas_send_one_notification(
    stage: Stage, notifier_settings: NotifierSettings
) -> None:
    await stage.hook()
    async with serving(create_app(notifier_settings)):
        event = make_event("r1")
        # Three messages of one event (new envelope ids, so the stream keeps them all), as
        # a redelivery or a republished event would bring it, split between the replicas.
        for _ in range(3):
            await stage.publish(WorkloadEventOpened(event=event))
        await stage.publish(analysis_of(event))
        await stage.receiver.received("/hook")
        await settle(1.0)
    assert len(stage.receiver.on("/hook")) == 1
    assert len(await stage.deliveries()) == 1


async def test_events_of_a_run_opening_together_are_grouped_into_one_notification(
    stage: Stage,
) -> None:
    await stage.hook(groupWindowSeconds=1.5)
    first, *others = [make_event("r1") for _ in range(3)]
    await stage.publish(WorkloadEventOpened(event=first))
    await stage.receiver.received("/hook")
    for event in others:
        await stage.publish(WorkloadEventOpened(event=event))
    suppressed = await wait_until(
        lambda: stage.deliveries('state="SUPPRESSED"'), lambda found: len(found) == 2
    )
    assert {d["lastError"] for d in suppressed} == {"grouped"}
    await stage.receiver.received("/hook", 2, timeout=5)
    grouped = stage.receiver.on("/hook")[1].json()
    assert [e["eventId"] for e in grouped["grouped"]] == [str(e.event_id) for e in others]
    assert grouped["summary"].startswith("OPEN · 2 events on run")
    await settle(0.5)
    assert len(stage.receiver.on("/hook")) == 2


async def test_events_folded_into_a_group_resolve_without_a_notification_each(
    stage: Stage,
) -> None:
    await stage.hook(groupWindowSeconds=1.0)
    first, *others = [make_event("r1") for _ in range(3)]
    await stage.publish(WorkloadEventOpened(event=first))
    await stage.receiver.received("/hook")
    await stage.publish(*(WorkloadEventOpened(event=event) for event in others))
    await stage.receiver.received("/hook", 2, timeout=5)  # the grouped notification
    for event in (first, *others):
        resolved = make_event("r1", resolved=True, event_id=event.event_id)
        await stage.publish(WorkloadEventResolved(event=resolved))
    [resolution] = (await stage.receiver.received("/hook", 3))[2:]
    assert resolution.json()["kind"] == "RESOLVED"
    assert resolution.json()["event"]["eventId"] == str(first.event_id)
    folded = await wait_until(
        lambda: stage.deliveries('kind="RESOLVED" AND state="SUPPRESSED"'),
        lambda found: len(found) == 2,
    )
    assert {d["eventId"] for d in folded} == {str(event.event_id) for event in others}
    assert {d["lastError"] for d in folded} == {"grouped"}
    await settle(0.5)
    assert len(stage.receiver.on("/hook")) == 3


async def test_a_re_analysis_updates_the_cause_without_a_second_notification(
    stage: Stage,
) -> None:
    await stage.hook()
    event = make_event("r1")
    first = analysis_of(event, "a first look", datetime.now(UTC))
    later = analysis_of(event, "a closer look", first.analysis.create_time + timedelta(seconds=5))
    await stage.publish(WorkloadEventOpened(event=event), first)
    [opened] = await stage.receiver.received("/hook")
    assert opened.json()["topCause"]["details"] == "a first look"
    # The re-analysis of a later revision, then the first analysis redelivered late.
    await stage.publish(
        WorkloadEventUpdated(event=event.model_copy(update={"revision": 2})), later, first
    )
    await settle(0.3)
    resolved = make_event("r1", resolved=True, event_id=event.event_id)
    await stage.publish(WorkloadEventResolved(event=resolved))
    resolution = (await stage.receiver.received("/hook", 2))[1].json()
    assert resolution["kind"] == "RESOLVED"
    assert resolution["topCause"]["details"] == "a closer look"
    await settle(0.5)
    assert len(stage.receiver.on("/hook")) == 2
    assert len(await stage.deliveries()) == 2


async def test_past_max_per_hour_deliveries_are_suppressed(stage: Stage) -> None:
    await stage.hook(groupWindowSeconds=0, maxPerHour=2)
    for _ in range(4):
        await stage.publish(WorkloadEventOpened(event=make_event("r1")))
    limited = await wait_until(
        lambda: stage.deliveries('state="SUPPRESSED"'), lambda found: len(found) == 2
    )
    assert {d["lastError"] for d in limited} == {"rate limited"}
    await stage.receiver.received("/hook", 2)
    await settle(0.5)
    assert len(stage.receiver.on("/hook")) == 2


async def test_rules_route_by_type_severity_run_set_and_labels(stage: Stage) -> None:
    await stage.known_run(make_run("nightly-a", labels={"team": "a"}))
    await stage.known_run(make_run("weekly-b", run_set="weekly"))
    await stage.known_run(make_run("other", project="elsewhere"))
    await webhook(stage.api, stage.receiver, groupWindowSeconds=0)  # rule to-hook: all ≥ WARNING
    solo = {"groupWindowSeconds": 0}
    await add_rule(stage.api, "hangs", ["hook"], eventTypes=["HANG"], **solo)
    await add_rule(stage.api, "critical", ["hook"], minSeverity="CRITICAL", **solo)
    await add_rule(stage.api, "weekly", ["hook"], runSets=["weekly"], minSeverity="INFO", **solo)
    await add_rule(stage.api, "team-a", ["hook"], labels={"team": "a"}, **solo)
    await add_rule(stage.api, "off", ["hook"], enabled=False, **solo)

    hang = make_event("nightly-a", event_type=EventType.HANG, severity=Severity.CRITICAL)
    info = make_event("weekly-b", severity=Severity.INFO)
    warning = make_event("weekly-b", event_type=EventType.STRAGGLER)
    elsewhere = make_event("other", severity=Severity.CRITICAL)
    for event in (hang, info, warning, elsewhere):
        await stage.publish(WorkloadEventOpened(event=event))
    found = await wait_until(stage.deliveries, lambda d: len(d) >= 7)
    await settle(0.5)
    found = await stage.deliveries()
    routed = {(d["rule"], d["eventId"]) for d in found}
    expected = {
        ("to-hook", str(hang.event_id)),
        ("hangs", str(hang.event_id)),
        ("critical", str(hang.event_id)),
        ("team-a", str(hang.event_id)),
        ("weekly", str(info.event_id)),
        ("weekly", str(warning.event_id)),
        ("to-hook", str(warning.event_id)),
    }
    assert routed == expected
    assert len(found) == len(expected)
    by_event = await stage.deliveries(f'eventId="{hang.event_id}"')
    assert {d["rule"] for d in by_event} == {"to-hook", "hangs", "critical", "team-a"}
    by_run = await stage.deliveries('runId="weekly-b"')
    assert len(by_run) == 3


async def test_email_arrives_at_an_smtp_server(stage: Stage, smtp_server: SmtpServer) -> None:
    await stage.known_run(make_run("r1"))
    response = await stage.api.post(
        f"{BASE}/notificationChannels?channelId=mail",
        json={
            "displayName": "Mail",
            "kind": "EMAIL",
            "config": {
                "to": "oncall@example.com, lead@example.com",
                "from": "mldiag@example.com",
                "smtpHost": "127.0.0.1",
                "smtpPort": str(smtp_server.port),
                "tls": "none",
            },
        },
    )
    assert response.status_code == 200, response.text
    await add_rule(stage.api, "mail-all", ["mail"])
    event = make_event("r1")
    await stage.publish(WorkloadEventOpened(event=event))
    await stage.publish(analysis_of(event))
    await wait_until(lambda: _mail(smtp_server))
    [(sender, recipients, content)] = smtp_server.mailbox.messages
    assert sender == "mldiag@example.com"
    assert recipients == ["oncall@example.com", "lead@example.com"]
    mail = message_from_bytes(content, policy=policy.default)
    assert isinstance(mail, EmailMessage)
    assert str(mail["Subject"]).startswith("OPEN · ")
    text = mail.get_content()
    assert "Top cause (host-cpu-contention): another process took 80% of the CPUs" in text
    assert f"/events/{event.event_id}" in text


async def test_slack_alertmanager_and_apprise_speak_their_formats(stage: Stage) -> None:
    await stage.known_run(make_run("r1"))
    channels = [
        ("slack", "SLACK", {}, {"webhookUrl": f"{stage.receiver.url}/slack"}),
        ("am", "ALERTMANAGER", {"url": f"{stage.receiver.url}/am"}, {"bearerToken": "tok"}),
        ("apprise", "APPRISE", {}, {"urls": f"json://{stage.receiver.url[7:]}/apprise"}),
    ]
    for channel_id, kind, config, secrets in channels:
        response = await stage.api.post(
            f"{BASE}/notificationChannels?channelId={channel_id}",
            json={"displayName": channel_id, "kind": kind, "config": config, "secrets": secrets},
        )
        assert response.status_code == 200, response.text
    await add_rule(stage.api, "everywhere", ["slack", "am", "apprise"])
    event = make_event("r1", event_type=EventType.HANG)
    await stage.publish(WorkloadEventOpened(event=event))
    await stage.publish(analysis_of(event))
    await wait_until(lambda: _requests(stage.receiver), lambda found: len(found) == 3, timeout=10)

    [slack] = stage.receiver.on("/slack")
    assert slack.json()["text"].startswith("OPEN · ")
    assert slack.json()["blocks"][0]["type"] == "section"

    [alert] = stage.receiver.on("/am/api/v2/alerts")[0].json()
    assert alert["labels"] == {
        "alertname": "HANG",
        "run": "r1",
        "severity": "WARNING",
        "event_id": str(event.event_id),
    }
    assert (
        alert["annotations"]["cause"] == "host-cpu-contention: another process took 80% of the CPUs"
    )
    assert "endsAt" not in alert
    assert stage.receiver.on("/am/api/v2/alerts")[0].headers["Authorization"] == "Bearer tok"

    [apprise] = stage.receiver.on("/apprise")
    assert apprise.json()["title"].startswith("OPEN · ")

    resolved = make_event("r1", event_type=EventType.HANG, resolved=True, event_id=event.event_id)
    await stage.publish(WorkloadEventResolved(event=resolved))
    await stage.receiver.received("/am/api/v2/alerts", 2)
    [ended] = stage.receiver.on("/am/api/v2/alerts")[1].json()
    assert "endsAt" in ended


async def _mail(server: SmtpServer) -> list[tuple[str, list[str], bytes]]:
    return server.mailbox.messages


async def _requests(receiver: Receiver) -> list[Received]:
    return receiver.requests


async def test_a_delivery_left_retrying_at_a_restart_goes_after_it(
    notifier_settings: NotifierSettings,
    api_tokens: ApiTokens,
    notifier_db: asyncpg.Pool,
    publisher: Publisher,
    receiver: Receiver,
) -> None:
    slow = notifier_settings.model_copy(update={"backoff_seconds": 1.0, "backoff_max_seconds": 1.0})
    receiver.scripts["/hook"] = [503]
    async with serving(create_app(slow), api_tokens.headers(Role.EDITOR)) as client:
        await known_run(publisher, notifier_db, make_run("r1"))
        await webhook(client, receiver)
        await publisher.publish(WorkloadEventOpened(event=make_event("r1")))
        await wait_until(lambda: deliveries(client, 'state="RETRYING"'))
    async with serving(create_app(notifier_settings), api_tokens.headers(Role.EDITOR)) as client:
        [delivery] = await wait_until(lambda: deliveries(client, 'state="DELIVERED"'), timeout=10)
    assert delivery["attempts"] == 2
    assert len(receiver.on("/hook")) == 2
