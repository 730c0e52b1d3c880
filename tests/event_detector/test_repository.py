"""The detector's ledger against real PostgreSQL: each message is folded once, whether its
copy comes in a later batch or in the same one."""

import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

from mldiag_event_detector.repository import DetectorRepository
from mldiag_event_detector.service import Folded, ledger_id
from mldiag_event_detector.state import RunState
from mldiag_platform.bus import Publisher
from mldiag_platform.database import load_migrations, open_database
from mldiag_platform.outbox import Outbox, outbox_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.monitoring import MonitoringRules
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived

pytestmark = pytest.mark.connected


class RecordingFold:
    """A fold that keeps what it was given, per run, and produces nothing."""

    def __init__(self) -> None:
        self.folded: dict[str, list[Envelope]] = {}

    def __call__(
        self, state: RunState, _project: MonitoringRules, messages: Sequence[Envelope]
    ) -> Folded:
        self.folded.setdefault(state.run_id, []).extend(messages)
        return Folded([], None)


@pytest.fixture
async def repository(
    database_settings: DatabaseSettings, db_schema: str, publisher: Publisher
) -> AsyncIterator[DetectorRepository]:
    migrations = [
        *outbox_migrations(),
        *load_migrations("event-detector", "mldiag_event_detector.migrations"),
    ]
    async with open_database(database_settings, db_schema, migrations) as pool:
        yield DetectorRepository(pool, Outbox(pool, publisher))
        await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")


def _write(run_id: str, start: int) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        series=[MetricColumns(name="step_time", host="h0", steps=[start], values=[1.0])],
    )


def _batch(*messages: Envelope) -> dict[str, list[tuple[uuid.UUID, Envelope]]]:
    by_run: dict[str, list[tuple[uuid.UUID, Envelope]]] = {}
    for message in messages:
        by_run.setdefault(message.partition(), []).append((ledger_id(message), message))
    return by_run


async def test_a_write_republished_in_the_same_batch_is_folded_once(
    repository: DetectorRepository,
) -> None:
    original = _write("run-a", start=0)
    republished = original.model_copy(update={"event_id": uuid.uuid4()})
    other = _write("run-b", start=0)
    fold = RecordingFold()

    await repository.apply(_batch(original, republished, other), fold)

    assert fold.folded == {"run-a": [original], "run-b": [other]}


async def test_a_write_seen_in_an_earlier_batch_is_not_folded_again(
    repository: DetectorRepository,
) -> None:
    first, second = _write("run-a", start=0), _write("run-a", start=1)
    fold = RecordingFold()

    await repository.apply(_batch(first), fold)
    await repository.apply(_batch(first.model_copy(update={"event_id": uuid.uuid4()})), fold)
    await repository.apply(_batch(second, first), fold)

    assert fold.folded == {"run-a": [first, second]}
