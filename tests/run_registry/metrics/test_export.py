"""Writing points from columns (no I/O): a page is byte for byte what pydantic writes for
the same points, whatever the numbers (huge steps, every year a time can spell, subnormal,
huge, negative-zero and non-finite values); CSV and JSON Lines read back to the points."""

import csv
import io
import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from mldiag_run_registry.metrics import export
from mldiag_run_registry.metrics.blocks import PointBlock
from mldiag_schemas.telemetry import ReadMetricSeriesResponse

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
YEAR_10000_US = 253_402_300_800_000_000


@dataclass(frozen=True)
class Series:
    host: str
    process_index: int | None
    labels: dict[str, str]


SERIES = {
    3: Series("h0", None, {}),
    8: Series('h "1", east\nrack', 7, {"device": "0", "note": 'a "b", c'}),
    12: Series("hôte-é", 0, {"x": "\u2028 \t"}),
}


def _value(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(
            [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1.7976931348623157e308, 1e-5]
        )
    if roll < 0.5:
        return rng.gauss(0, 1) * 10.0 ** rng.randint(-300, 300)
    return rng.gauss(0, 1) * 10.0 ** rng.randint(-8, 20)


def _block(rng: random.Random, count: int) -> PointBlock:
    steps = sorted(rng.choice([rng.randrange(1000), rng.randrange(2**63)]) for _ in range(count))
    times = [
        rng.choice(
            [
                0,
                rng.randrange(YEAR_10000_US),
                1_767_225_600_000_000 + rng.randrange(10**9),
                1_767_225_600_000_000 + rng.randrange(100) * 1_000_000,  # whole seconds
            ]
        )
        for _ in range(count)
    ]
    return PointBlock(
        np.array(steps, np.int64),
        np.array([rng.choice(list(SERIES)) for _ in range(count)], np.int64),
        np.array(times, np.int64),
        np.array([_value(rng) for _ in range(count)], np.float64),
    )


def _pydantic_page(metric: str, block: PointBlock, token: str) -> bytes:
    points = []
    for step, series_id, micros, value in zip(
        block.steps.tolist(),
        block.series_ids.tolist(),
        block.times_us.tolist(),
        block.values.tolist(),
        strict=True,
    ):
        series = SERIES[series_id]
        points.append(
            {
                "step": step,
                "value": value,
                "time": EPOCH + timedelta(microseconds=micros),
                "host": series.host,
                "process_index": series.process_index,
                "labels": series.labels,
            }
        )
    page = {"metric": metric, "points": points, "next_page_token": token}
    return ReadMetricSeriesResponse.model_validate(page).model_dump_json().encode()


@pytest.mark.parametrize("seed", range(5))
def test_a_page_is_byte_for_byte_what_pydantic_writes(seed: int) -> None:
    rng = random.Random(seed)
    block = _block(rng, rng.choice([1, 2, 17, 3000]))
    got = export.page_json("train/loss:x", block, SERIES, "dG9rZW4=")
    assert got == _pydantic_page("train/loss:x", block, "dG9rZW4=")


def test_an_empty_page_and_empty_lines() -> None:
    empty = PointBlock.empty()
    assert export.page_json("m", empty, {}, "") == _pydantic_page("m", empty, "")
    assert export.csv_lines(empty, SERIES) == b""
    assert export.jsonl_lines(empty, SERIES) == b""


def test_negative_steps_are_written_too() -> None:
    # steps are never negative once stored; the writer still spells one right
    block = PointBlock(
        np.array([-5, 3], np.int64),
        np.array([3, 3], np.int64),
        np.array([0, 1], np.int64),
        np.array([1.0, 2.0]),
    )
    assert export.page_json("m", block, SERIES, "") == _pydantic_page("m", block, "")


def test_csv_lines_read_back_to_the_points() -> None:
    rng = random.Random(11)
    block = _block(rng, 500)
    text = (export.CSV_HEADER + export.csv_lines(block, SERIES)).decode()
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(rows) == len(block)
    for row, step, series_id, micros, value in zip(
        rows,
        block.steps.tolist(),
        block.series_ids.tolist(),
        block.times_us.tolist(),
        block.values.tolist(),
        strict=True,
    ):
        series = SERIES[series_id]
        assert int(row["step"]) == step
        read = float(row["value"])
        assert (math.isnan(read) and math.isnan(value)) or (
            read == value and math.copysign(1, read) == math.copysign(1, value)
        )
        assert datetime.fromisoformat(row["time"]) == EPOCH + timedelta(microseconds=micros)
        assert row["host"] == series.host
        index = row["processIndex"]
        assert (int(index) if index else None) == series.process_index
        assert json.loads(row["labels"]) == series.labels


def test_non_finite_values_are_spelled_as_the_api_spells_them() -> None:
    block = PointBlock(
        np.array([0, 1, 2], np.int64),
        np.array([3, 3, 3], np.int64),
        np.array([0, 0, 0], np.int64),
        np.array([math.nan, math.inf, -math.inf]),
    )
    assert export.csv_lines(block, SERIES).decode().splitlines() == [
        "0,NaN,1970-01-01T00:00:00Z,h0,,{}",
        "1,Infinity,1970-01-01T00:00:00Z,h0,,{}",
        "2,-Infinity,1970-01-01T00:00:00Z,h0,,{}",
    ]
    lines = export.jsonl_lines(block, SERIES).decode().splitlines()
    assert lines[0] == (
        '{"step":0,"value":NaN,"time":"1970-01-01T00:00:00Z","host":"h0",'
        '"processIndex":null,"labels":{}}'
    )
    assert [json.loads(line)["value"] for line in lines][1:] == [math.inf, -math.inf]


def test_a_time_past_year_9999_is_refused_not_misspelled() -> None:
    block = PointBlock(
        np.array([0], np.int64),
        np.array([3], np.int64),
        np.array([YEAR_10000_US], np.int64),
        np.array([1.0]),
    )
    with pytest.raises(ValueError, match="years 1 to 9999"):
        export.jsonl_lines(block, SERIES)


def test_formats_are_parsed_strictly() -> None:
    assert export.parse_format("csv") is export.ExportFormat.CSV
    assert export.parse_format("jsonl") is export.ExportFormat.JSONL
    with pytest.raises(export.InvalidExportFormat):
        export.parse_format("json")


def test_blocks_concatenate_in_order() -> None:
    rng = random.Random(2)
    first, second = _block(rng, 3), _block(rng, 4)
    joined = export.concatenate([first, second])
    assert joined.steps.tolist() == first.steps.tolist() + second.steps.tolist()
    assert export.concatenate([first]) is first
    assert len(export.concatenate([])) == 0
