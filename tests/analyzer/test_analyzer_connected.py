"""The analyzer against real NATS: an opened event comes back as an analysis and a profile
capture request; a replay of the event adds neither; an update that brings the run's
signals is analysed again (once, however often it is delivered), one without them is not."""

import uuid

import pytest

from analyzer.analyzer_contexts import degradation, hosts, neighbour
from mldiag_analyzer.app import create_app
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.analyses import AnalysisCompleted
from mldiag_schemas.bus import (
    ANALYSIS_COMPLETED,
    ANALYZER_EVENTS_DURABLE,
    ANALYZER_UPDATES_DURABLE,
    PROFILE_CAPTURE_REQUESTED,
)
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventUpdated
from mldiag_schemas.profiling import ProfileCaptureRequested
from support import read_messages, serving, wait_until

pytestmark = pytest.mark.connected


async def test_opened_event_yields_analysis_and_capture_request(
    publisher: Publisher, nats_settings: NatsSettings
) -> None:
    slowed, ctx = degradation(
        hosts(host_2={"step_time": 1.7, "throttled": True, "clock_drop_mhz": 90.0})
    )
    opened = WorkloadEventOpened(event=slowed, context=ctx)
    settings = AnalyzerSettings(nats=nats_settings, runbook_base_url="https://docs.example/rb/")
    async with serving(create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        await publisher.publish(opened)
        [completed] = await wait_until(
            lambda: read_messages(nats_settings, ANALYSIS_COMPLETED, AnalysisCompleted)
        )
        [capture] = await wait_until(
            lambda: read_messages(nats_settings, PROFILE_CAPTURE_REQUESTED, ProfileCaptureRequested)
        )
        # the same event again (a detector replay, under a new message id) changes nothing
        await publisher.publish(opened.model_copy(update={"event_id": uuid.uuid4()}))
        handled = f'mldiag_bus_messages_handled_total{{durable="{nats_settings.namespace}-{ANALYZER_EVENTS_DURABLE}"}} 2.0'

        async def metrics() -> str:
            return (await client.get("/metrics")).text

        await wait_until(metrics, accept=lambda text: handled in text)

    analysis = completed.analysis
    assert analysis.event_id == slowed.event_id
    assert analysis.probable_cause == "thermal-throttling"
    assert analysis.reports[0].hosts == ["host-2"]
    assert analysis.capture_requested
    assert analysis.reports[0].recommended_actions[0].documentation_url == (
        "https://docs.example/rb/thermal-throttling.md"
    )
    assert capture.workload_event_id == slowed.event_id
    assert capture.kind == "SNAPSHOT"
    assert capture.run_id == "run-1"
    assert len(await read_messages(nats_settings, ANALYSIS_COMPLETED, AnalysisCompleted)) == 1
    assert (
        len(await read_messages(nats_settings, PROFILE_CAPTURE_REQUESTED, ProfileCaptureRequested))
        == 1
    )


async def test_an_update_with_context_is_analysed_again(
    publisher: Publisher, nats_settings: NatsSettings
) -> None:
    slowed, _ = degradation()
    contended, ctx = degradation(
        hosts(**{f"host_{i}": {"contention": neighbour()} for i in range(4)})
    )
    revised = contended.model_copy(update={"revision": 2})
    with_context = WorkloadEventUpdated(event=revised, context=ctx)
    settings = AnalyzerSettings(nats=nats_settings)
    async with serving(create_app(settings)) as client:
        await publisher.publish(
            WorkloadEventUpdated(event=slowed.model_copy(update={"revision": 3}))
        )  # no context: acked, ignored
        await publisher.publish(with_context)
        # redelivered under a new message id: the same analysis id, dropped as a duplicate
        await publisher.publish(with_context.model_copy(update={"event_id": uuid.uuid4()}))
        handled = f'mldiag_bus_messages_handled_total{{durable="{nats_settings.namespace}-{ANALYZER_UPDATES_DURABLE}"}} 3.0'

        async def metrics() -> str:
            return (await client.get("/metrics")).text

        await wait_until(metrics, accept=lambda text: handled in text)
        [completed] = await wait_until(
            lambda: read_messages(nats_settings, ANALYSIS_COMPLETED, AnalysisCompleted)
        )
    analysis = completed.analysis
    assert analysis.event_id == slowed.event_id
    assert analysis.probable_cause == "host-cpu-contention"
    assert not analysis.capture_requested
    assert len(await read_messages(nats_settings, ANALYSIS_COMPLETED, AnalysisCompleted)) == 1
    assert (
        await read_messages(nats_settings, PROFILE_CAPTURE_REQUESTED, ProfileCaptureRequested) == []
    )
