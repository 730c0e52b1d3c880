"""Property tests of the contracts (hypothesis): what the bus and the HTTP edge rely on.

- Whatever bytes or JSON arrive, parsing a bus message raises nothing but ``ValueError``:
  the consumer's boundary turns that into a dead letter; anything else once killed the loop.
- Messages survive the wire unchanged, NaN and infinities included (dump, parse, equal).
- A field the reader does not know, at any depth, changes nothing on the bus (tolerant
  readers, so services upgrade one at a time), while an HTTP body with it is refused.
"""

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from mldiag_schemas.envelope import Envelope
from mldiag_schemas.messages import MESSAGE_TYPES, parse_message
from mldiag_schemas.monitoring import MonitoringRules, MonitoringRulesChanged
from mldiag_schemas.runs import CreateRunRequest, Run, RunCreated, RunState
from mldiag_schemas.telemetry import (
    MetricColumns,
    MetricPointsReceived,
    RunHeartbeat,
    WriteMetricsRequest,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = datetime(2026, 1, 1, tzinfo=UTC)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
UNKNOWN_KEY = st.from_regex(r"zz[A-Za-z]{1,10}", fullmatch=True)


def _type_of(model: type[Envelope]) -> str:
    default: str = model.model_fields["type"].default
    return default


def _samples() -> list[Envelope]:
    run = Run(
        name="projects/p/locations/l/machineLearningRuns/run-1",
        run_id="run-1",
        display_name="a run",
        run_set="set",
        labels={"team": "ml"},
        state=RunState.ACTIVE,
        create_time=NOW,
        update_time=NOW,
    )
    return [
        MetricPointsReceived(
            run_id="run-1",
            batch_id=uuid.uuid4(),
            chunk=0,
            series=[MetricColumns(name="loss", host="h0", steps=[1, 2], values=[0.5, math.nan])],
        ),
        RunHeartbeat(
            run_id="run-1", host="h0", pid=42, step=7, interval_seconds=10.0, received_at=NOW
        ),
        RunCreated(run=run),
        MonitoringRulesChanged(project="p", location="us-central1", rules=MonitoringRules()),
    ]


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_are_a_message_or_a_value_error(raw: bytes) -> None:
    try:
        parse_message(raw)
    except ValueError:
        return


@pytest.mark.parametrize("model", MESSAGE_TYPES, ids=_type_of)
def test_any_json_is_a_message_or_a_value_error(model: type[Envelope]) -> None:
    @SETTINGS
    @given(st.dictionaries(st.text(max_size=12), JSON, max_size=6), st.integers(-1, 3))
    def check(document: dict[str, Any], version: int) -> None:
        document.update(type=_type_of(model), schemaVersion=version)
        try:
            message = parse_message(json.dumps(document).encode())
        except ValueError:
            return
        assert isinstance(message, model)

    check()


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True)),
        min_size=1,
        max_size=30,
    )
)
def test_metric_columns_survive_the_wire(points: list[tuple[int, float]]) -> None:
    message = MetricPointsReceived(
        run_id="run-1",
        batch_id=uuid.uuid4(),
        chunk=0,
        series=[
            MetricColumns(name="loss", steps=[s for s, _ in points], values=[v for _, v in points])
        ],
    )
    wire = message.model_dump_json()
    parsed = parse_message(wire.encode())
    assert parsed.model_dump_json() == wire  # NaN != NaN, so compare the wire forms


@pytest.mark.parametrize("sample", _samples(), ids=lambda m: m.type)
def test_an_unknown_field_at_any_depth_is_ignored_on_the_bus(sample: Envelope) -> None:
    @SETTINGS
    @given(st.data(), UNKNOWN_KEY, JSON)
    def check(data: st.DataObject, key: str, value: Any) -> None:
        wire = json.loads(sample.model_dump_json())
        target = data.draw(st.sampled_from(_objects_in(wire)))
        target[key] = value
        assert parse_message(json.dumps(wire).encode()) == _comparable(sample)

    check()


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (CreateRunRequest, {"displayName": "x", "labels": {"a": "b"}}),
        (
            WriteMetricsRequest,
            {"series": [{"name": "loss", "steps": [1], "values": [0.5], "host": "h0"}]},
        ),
    ],
)
def test_an_unknown_field_is_refused_in_an_http_body(
    model: type[BaseModel], body: dict[str, Any]
) -> None:
    @SETTINGS
    @given(st.data(), UNKNOWN_KEY, JSON)
    def check(data: st.DataObject, key: str, value: Any) -> None:
        document = json.loads(json.dumps(body))
        target = data.draw(st.sampled_from(_objects_in(document)))
        target[key] = value
        with pytest.raises(ValidationError, match=key):
            model.model_validate_json(json.dumps(document))

    model.model_validate(body)  # the body itself is valid
    check()


def _objects_in(document: Any) -> list[dict[str, Any]]:
    """Every JSON object in ``document`` whose keys are a contract's fields (not a map of
    user keys such as labels or configs, where any key is data)."""
    found: list[dict[str, Any]] = []
    if isinstance(document, dict):
        found.append(document)
        for key, value in document.items():
            if key not in {"labels", "fingerprint", "rules", "configs", "userConfigs"}:
                found.extend(_objects_in(value))
    elif isinstance(document, list):
        for item in document:
            found.extend(_objects_in(item))
    return found


def _comparable(message: Envelope) -> Envelope:
    """``message`` as parsed back from its own wire form (NaN makes ``==`` false)."""
    return parse_message(message.model_dump_json().encode())
