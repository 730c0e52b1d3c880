"""A custom job monitored from end to end, with the real registry, ingestion, event-detector
and analyzer on real NATS and PostgreSQL: the job's run is created from ``CustomJobCreated``;
a replica supervised by ``mldiag run --replica`` (played here by the HTTP calls the launcher
makes, with the replica's run-scoped token) steps, crashes and is restarted by the job — an
ORCHESTRATOR_INTERRUPTION whose time lost counts in goodput — then crashes for good and the
job fails: one TERMINATION, analysed."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_analyzer.app import create_app as create_analyzer
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_event_detector.app import create_app as create_detector
from mldiag_event_detector.settings import EventDetectorSettings
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.auth import new_secret, open_token_directory, secret_hash
from mldiag_platform.bus import Publisher, connect_bus
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role, TokenGrant
from mldiag_schemas.jobs import CustomJob, JobState, RpcStatus
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from support import serving, wait_until

pytestmark = pytest.mark.connected

PROJECT, LOCATION = "acme", "us-central1"
REPLICA = "workerpool0-0"


@dataclass
class Stack:
    api: httpx.AsyncClient
    """The registry, as an admin."""
    replica: httpx.AsyncClient
    """Ingestion, as the replica: its run-scoped token."""
    detector: httpx.AsyncClient
    job_id: str
    namespace: str

    @property
    def run(self) -> str:
        return f"/v1/projects/{PROJECT}/locations/{LOCATION}/machineLearningRuns/{self.job_id}"

    async def handled(self, durable: str) -> float:
        """How many messages the detector's durable has handled."""
        text = (await self.detector.get("/metrics")).text
        key = f'mldiag_bus_messages_handled_total{{durable="{self.namespace}-{durable}"}} '
        line = next((line for line in text.splitlines() if line.startswith(key)), None)
        return float(line.split()[-1]) if line else 0.0

    async def heartbeat(self, pid: int) -> None:
        beat = {"host": REPLICA, "pid": pid, "intervalSeconds": 1.0}
        answer = await self.replica.post(f"{self.run}:heartbeat", json=beat)
        assert answer.status_code == 204, answer.text

    async def signal(self, **body: Any) -> None:
        answer = await self.replica.post(f"{self.run}:reportSignal", json=body)
        assert answer.status_code == 204, answer.text

    async def steps(self, first: int, last: int) -> None:
        now = datetime.now(UTC).isoformat()
        steps = list(range(first, last + 1))
        series = {
            "name": "step_time",
            "host": REPLICA,
            "steps": steps,
            "values": [0.05] * len(steps),
            "times": [now] * len(steps),
        }
        answer = await self.replica.post(f"{self.run}/metrics:write", json={"series": [series]})
        assert answer.status_code == 202, answer.text

    async def events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.api.get(f"{self.run}/monitoredEvents")).json()[
            "events"
        ]
        return found


def _created(job_id: str) -> CustomJobCreated:
    job = CustomJob.model_validate(
        {
            "name": f"projects/{PROJECT}/locations/{LOCATION}/customJobs/{job_id}",
            "displayName": "crashy",
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {"machineType": "n1-standard-4"},
                        "replicaCount": "1",
                        "containerSpec": {"imageUri": "python", "command": ["python", "t.py"]},
                    }
                ]
            },
        }
    )
    return CustomJobCreated(job_id=job_id, project=PROJECT, location=LOCATION, job=job)


@pytest.fixture
async def stack(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
    publisher: Publisher,
) -> AsyncIterator[Stack]:
    job_id = str(uuid.uuid4().int)[:18]
    secret = new_secret()  # what the scheduler grants the job's replicas
    async with (
        connect_bus(nats_settings, "test-scheduler") as scheduler,
        open_token_directory(scheduler) as directory,
    ):
        grant = TokenGrant(token_id=f"job-{job_id}", role=Role.EDITOR, run_id=job_id)
        await directory.grant(secret_hash(secret), grant)
    registry = create_registry(
        RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)
    )
    detector = create_detector(
        EventDetectorSettings(
            nats=nats_settings,
            database=database_settings,
            db_schema=f"{db_schema}_d",
            clock_seconds=0.1,
        )
    )
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    analyzer = create_analyzer(AnalyzerSettings(nats=nats_settings))
    async with (
        serving(registry, api_tokens.headers(Role.ADMIN)) as api,
        serving(detector) as detector_client,
        serving(ingestion, {"Authorization": f"Bearer {secret}"}) as replica,
        serving(analyzer),
    ):
        stack = Stack(api, replica, detector_client, job_id, nats_settings.namespace)
        await publisher.publish(_created(job_id))

        async def run_phase() -> str | None:
            answer = await api.get(stack.run)
            return answer.json()["runPhase"] if answer.status_code == 200 else None

        assert await wait_until(run_phase) == "ACTIVE"
        # The detector has read the run's RunCreated: it knows the run is a job's.
        await wait_until(lambda: stack.handled(bus.DETECTOR_RUNS_DURABLE))
        yield stack


async def test_a_restart_is_an_interruption_in_goodput_and_a_failure_one_analysed_termination(
    stack: Stack, publisher: Publisher
) -> None:
    # Attempt 0 starts, steps to 20, crashes (the launcher reports the exit).
    await stack.heartbeat(pid=4100)
    await stack.steps(1, 20)
    await wait_until(lambda: stack.handled(bus.DETECTOR_METRICS_DURABLE))
    await stack.signal(kind="PROCESS_EXITED", host=REPLICA, pid=4100, exitCode=1, message="boom")
    await wait_until(lambda: stack.handled(bus.DETECTOR_SIGNALS_DURABLE))
    assert await stack.events() == []  # a replica down is the job's to judge
    await asyncio.sleep(1.0)  # the job's restart backoff

    # Attempt 1: a new launcher process under the same replica name, resuming at step 15.
    await stack.heartbeat(pid=4200)
    await publisher.publish(
        CustomJobStateChanged(
            job_id=stack.job_id,
            project=PROJECT,
            location=LOCATION,
            previous_state=JobState.RUNNING,
            state=JobState.RUNNING,
            restarts=1,
        )
    )
    await stack.steps(15, 25)

    async def resolved_interruption() -> list[dict[str, Any]]:
        return [
            event
            for event in await stack.events()
            if event["type"] == "ORCHESTRATOR_INTERRUPTION" and event["state"] == "RESOLVED"
        ]

    [interruption] = await wait_until(resolved_interruption)
    assert interruption["hosts"] == [REPLICA]
    assert interruption["timeLostSeconds"] >= 1.0
    goodput = (await stack.api.get(f"{stack.run}:goodput")).json()
    disruptions = next(b for b in goodput["buckets"] if b["kind"] == "DISRUPTIONS")
    assert disruptions["signalSeconds"] >= 1.0
    assert any(e["type"] == "ORCHESTRATOR_INTERRUPTION" for e in goodput["events"])

    # Attempt 1 crashes for good; the job gives up and fails.
    await stack.signal(
        kind="EXCEPTION",
        host=REPLICA,
        pid=4200,
        errorType="ValueError",
        message="ValueError: loss is nan",
    )
    await stack.signal(kind="PROCESS_EXITED", host=REPLICA, pid=4200, exitCode=1)
    await wait_until(lambda: stack.handled(bus.DETECTOR_SIGNALS_DURABLE), lambda n: n >= 3)
    await publisher.publish(
        CustomJobStateChanged(
            job_id=stack.job_id,
            project=PROJECT,
            location=LOCATION,
            previous_state=JobState.RUNNING,
            state=JobState.FAILED,
            error=RpcStatus(code=13, message="workerpool0-0 exited with status 1"),
            restarts=1,
        )
    )

    async def analysed_termination() -> list[dict[str, Any]]:
        return [
            event
            for event in await stack.events()
            if event["type"] == "TERMINATION" and event.get("analyzerReports")
        ]

    [termination] = await wait_until(analysed_termination)
    assert termination["hosts"] == [REPLICA]
    facts = termination["evidence"]["facts"]
    assert (facts["classification"], facts["source"]) == ("user_exception", "job")
    assert facts["jobError"] == "workerpool0-0 exited with status 1"
    assert termination["analyzerReports"][0]["analyzer"] == "workload-exception"
    run = (await stack.api.get(stack.run)).json()
    assert run["runPhase"] == "FAILED"
    assert run["labels"]["mldiag-job-restarts"] == "1"
    kinds = sorted(event["type"] for event in await stack.events())
    assert kinds == ["ORCHESTRATOR_INTERRUPTION", "TERMINATION"]  # nothing twice
