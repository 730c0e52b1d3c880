"""Zoomed downsampled reads (``startStep`` / ``endStep``) and bucket times (``withTimes``)
against real PostgreSQL, checked against a brute-force computation over the raw points."""

import random
from datetime import datetime, timedelta

import pytest

from mldiag_schemas.telemetry import MetricColumns, to_unix_micros
from run_registry.metrics.test_metric_storage import (
    NOW,
    RUNS,
    Agg,
    Store,
    _assert_agg,
    _brute,
    _message,
    _random_values,
    _same,
    store,
)

pytestmark = pytest.mark.connected

__all__ = ["store"]  # the fixture, shared with the storage tests

BASE_US = to_unix_micros(NOW)
# (run, host, process) → its index, which every point's time carries: time = step·10 + index
SERIES = [("run-a", "h0", None), ("run-a", "h0", 1), ("run-a", "h1", None), ("run-b", "h0", None)]
Points = dict[tuple[str, str, int | None], list[tuple[int, float]]]


def _time_us(index: int, step: int) -> int:
    return BASE_US + step * 10 + index


async def _fill(store: Store) -> Points:
    """Four series over steps 0 … 200,000 (run-b's from 50,000), stored out of order."""
    rng = random.Random(11)
    truth: Points = {}
    messages = []
    for index, (run_id, host, process) in enumerate(SERIES):
        low = 50_000 if run_id == "run-b" else 0
        steps = sorted(rng.sample(range(low, 200_000), 9_000))
        values = _random_values(rng, len(steps))
        truth[run_id, host, process] = list(zip(steps, values, strict=True))
        for start in range(0, len(steps), 2_000):
            part = slice(start, start + 2_000)
            columns = MetricColumns(
                name="loss",
                host=host,
                process_index=process,
                labels={} if process is None else {"device": str(process)},
                steps=steps[part],
                values=values[part],
                times_unix_us=[_time_us(index, step) for step in steps[part]],
            )
            messages.append(_message(run_id, columns))
    rng.shuffle(messages)
    await store.service.store(messages)
    return truth


def _members(truth: Points, line: dict[str, object], group_by: str) -> list[int]:
    """Indexes (into SERIES) of the series merged into a line."""
    return [
        index
        for index, (run_id, host, process) in enumerate(SERIES)
        if (run_id, host, process) in truth
        and run_id == line["runId"]
        and (group_by == "none" or host == line["host"])
        and (group_by != "series" or process == line["processIndex"])
    ]


def _check_lines(
    truth: Points, body: dict[str, object], group_by: str, start: int | None, end: int | None
) -> None:
    """Every line's buckets equal the brute force over the whole buckets the range touches,
    and each ``lastTime`` is the time of the very point that gave ``last``."""
    lines = body["series"]
    assert isinstance(lines, list)
    recorded = [step for points in truth.values() for step, _ in points]
    first = max(min(recorded), start or 0)
    last = min(max(recorded), max(recorded) if end is None else end)
    assert (body["startStep"], body["endStep"]) == (first, last)
    width = body["bucketWidth"]
    assert isinstance(width, int)
    for line in lines:
        members = _members(truth, line, group_by)
        assert members
        expected: dict[int, list[tuple[int, float]]] = {}
        values: dict[tuple[int, int], float] = {}
        for index in members:
            for step, value in truth[SERIES[index]]:
                values[index, step] = value
                if first // width <= step // width <= last // width:
                    expected.setdefault(step // width, []).append((step, value))
        assert [b["startStep"] // width for b in line["buckets"]] == sorted(expected)
        for bucket in line["buckets"]:
            assert bucket["startStep"] <= last and bucket["endStep"] >= first
            want = _brute(sorted(expected[bucket["startStep"] // width]))
            real = want.count - want.nan_count
            got = Agg(
                count=bucket["count"],
                nan_count=bucket["nanCount"],
                min=bucket["min"],
                max=bucket["max"],
                sum=None if bucket["mean"] is None else bucket["mean"] * real,
                first_step=bucket["firstStep"],
                last_step=bucket["lastStep"],
                last_value=want.last_value,  # merged lines: two series may share the step
            )
            _assert_agg(got, want)
            offset = datetime.fromisoformat(bucket["lastTime"]) - NOW
            micros = offset // timedelta(microseconds=1) - bucket["lastStep"] * 10
            assert micros in members, (bucket, members)
            assert _same(bucket["last"], values[micros, bucket["lastStep"]])


@pytest.mark.parametrize(
    ("buckets", "start", "end", "source"),
    [
        (40, 33_333, 151_000, "rollup"),
        (13, 120_000, None, "rollup"),
        (25, None, 90_000, "rollup"),
        (500, 70_001, 80_500, "raw"),  # 21 steps per bucket
        (10, None, 400, "raw"),
        (100, 199_000, 10**20, "raw"),  # past the last step (and bigint): cut to it
    ],
)
@pytest.mark.parametrize("group_by", ["series", "host", "none"])
async def test_a_range_matches_a_brute_force_computation_on_both_routes(
    store: Store, buckets: int, start: int | None, end: int | None, source: str, group_by: str
) -> None:
    truth = await _fill(store)
    params: dict[str, object] = {"buckets": buckets, "groupBy": group_by, "withTimes": "true"}
    if start is not None:
        params["startStep"] = start
    if end is not None:
        params["endStep"] = end
    one = await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)
    assert one.status_code == 200, one.text
    body = one.json()
    assert body["source"].startswith(source)
    assert all(len(line["buckets"]) <= buckets for line in body["series"])
    _check_lines({k: v for k, v in truth.items() if k[0] == "run-a"}, body, group_by, start, end)

    both = await store.api.get(
        f"{RUNS}:compareMetrics", params={**params, "runs": "run-a,run-b", "metric": "loss"}
    )
    assert both.status_code == 200, both.text
    _check_lines(truth, both.json(), group_by, start, end)


async def test_zooming_in_gives_finer_buckets_over_the_visible_range_only(store: Store) -> None:
    await _fill(store)
    whole = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params={"buckets": 50})).json()
    zoomed = (
        await store.api.get(
            f"{RUNS}/run-a/metrics/loss",
            params={"buckets": 50, "startStep": 40_000, "endStep": 59_999},
        )
    ).json()
    assert (whole["bucketWidth"], whole["source"]) == (4096, "rollup:4096")
    # 20,000 steps in at most 50 buckets: 400 wanted, so 2 x 256 read from level 8, 79 rows
    assert (zoomed["bucketWidth"], zoomed["source"]) == (512, "rollup:256")
    assert (zoomed["startStep"], zoomed["endStep"]) == (40_000, 59_999)
    for line in zoomed["series"]:
        starts = [bucket["startStep"] for bucket in line["buckets"]]
        assert starts[0] == 40_000 // 512 * 512 and starts[-1] == 59_999 // 512 * 512
        assert all(bucket["lastTime"] is None for bucket in line["buckets"])  # not asked for
    assert sum(b["count"] for b in zoomed["series"][0]["buckets"]) < sum(
        b["count"] for b in whole["series"][0]["buckets"]
    )


async def test_a_range_missing_the_recorded_steps_gives_empty_lines(store: Store) -> None:
    await store.service.store([_message("run-a", _point("loss", 100, 1.0, 0))])
    params = {"buckets": 10, "startStep": 200, "endStep": 300}
    missed = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)).json()
    assert (missed["startStep"], missed["endStep"]) == (None, None)
    assert [line["buckets"] for line in missed["series"]] == [[]]
    empty = (await store.api.get(f"{RUNS}/run-a/metrics/nothing", params=params)).json()
    assert (empty["startStep"], empty["endStep"], empty["series"]) == (None, None, [])


async def test_a_rewritten_step_has_the_time_of_its_latest_write(store: Store) -> None:
    await store.service.store([_message("run-a", _point("loss", 5, 1.0, 0))])
    await store.service.store([_message("run-a", _point("loss", 5, 2.0, 3))])
    body = (
        await store.api.get(
            f"{RUNS}/run-a/metrics/loss", params={"buckets": 10, "withTimes": "true"}
        )
    ).json()
    [bucket] = body["series"][0]["buckets"]
    assert (bucket["count"], bucket["last"]) == (2, 2.0)
    assert datetime.fromisoformat(bucket["lastTime"]) == NOW + timedelta(microseconds=3)


@pytest.mark.parametrize("group_by", ["series", "none"])
async def test_bucket_times_come_from_the_rollups_and_old_rows_from_the_chunks(
    store: Store, group_by: str
) -> None:
    truth = await _fill(store)
    params = {"buckets": 40, "groupBy": group_by, "withTimes": "true"}
    body = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)).json()
    assert body["source"] == "rollup:4096"
    run_a = {k: v for k, v in truth.items() if k[0] == "run-a"}
    _check_lines(run_a, body, group_by, None, None)
    # rows stored before rollups kept times (NULL): those buckets' times come from the
    # chunks, and the answer is the same
    nulled = await store.pool.execute(
        "UPDATE metric_rollups SET last_time_us = NULL WHERE width_log2 = 12 AND bucket % 3 = 0"
    )
    assert nulled != "UPDATE 0"
    again = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)).json()
    assert again == body
    _check_lines(run_a, again, group_by, None, None)
    # the others are read from the rollup rows, not from the chunks
    await store.pool.execute(
        "UPDATE metric_rollups SET last_time_us = $1 WHERE width_log2 = 12 AND bucket % 3 = 1",
        BASE_US - 1,
    )
    marked = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)).json()
    # (an output bucket of 8192 steps is two rollup rows: the one holding lastStep gives it)
    marks = [
        (
            bucket["lastStep"] >> 12,
            datetime.fromisoformat(bucket["lastTime"]) == NOW - timedelta(microseconds=1),
        )
        for line in marked["series"]
        for bucket in line["buckets"]
    ]
    assert any(marked for _, marked in marks)
    assert all(marked == (row % 3 == 1) for row, marked in marks)


async def test_a_late_or_redelivered_batch_keeps_time_and_value_of_one_point(
    store: Store,
) -> None:
    """Rollup buckets: a rewritten step's last write gives ``last`` (the merge's tie rule),
    and ``lastTime`` is that write's time even when an earlier write was timed later."""
    early = _message("run-a", _series("loss", range(3_000), 1.0, 0))
    rewrite = _message("run-a", _series("loss", [2_047, 2_999], 2.0, -5))
    late = _message("run-a", _series("loss", [1_000, 2_000], 3.0, 7))  # below the last steps
    await store.service.store([early])
    await store.service.store([rewrite])
    await store.service.store([late, early])  # a redelivery beside a late batch
    params = {"buckets": 3, "withTimes": "true"}
    body = (await store.api.get(f"{RUNS}/run-a/metrics/loss", params=params)).json()
    assert (body["source"], body["bucketWidth"]) == ("rollup:1024", 1024)
    got = [
        (b["lastStep"], b["last"], datetime.fromisoformat(b["lastTime"]) - NOW)
        for b in body["series"][0]["buckets"]
    ]
    assert got == [
        (1_023, 1.0, timedelta(microseconds=1_023 * 10)),
        (2_047, 2.0, timedelta(microseconds=2_047 * 10 - 5)),
        (2_999, 2.0, timedelta(microseconds=2_999 * 10 - 5)),
    ]
    assert [b["count"] for b in body["series"][0]["buckets"]] == [1_025, 1_026, 953]


def _series(name: str, steps: range | list[int], value: float, offset: int) -> MetricColumns:
    """One value at every step, timed step·10 + offset µs after NOW."""
    return MetricColumns(
        name=name,
        host="h0",
        steps=list(steps),
        values=[value] * len(steps),
        times_unix_us=[BASE_US + step * 10 + offset for step in steps],
    )


def _point(name: str, step: int, value: float, micros: int) -> MetricColumns:
    return MetricColumns(
        name=name, host="h0", steps=[step], values=[value], times_unix_us=[BASE_US + micros]
    )


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"startStep": -1}, "invalid_step_range"),
        ({"endStep": -5}, "invalid_step_range"),
        ({"startStep": 10, "endStep": 5}, "invalid_step_range"),
        ({"startStep": "ten"}, "invalid_argument"),
        ({"withTimes": "maybe"}, "invalid_argument"),
    ],
)
@pytest.mark.parametrize(
    ("path", "route_params"),
    [
        (f"{RUNS}/run-a/metrics/loss", {}),
        (f"{RUNS}:compareMetrics", {"runs": "run-a", "metric": "loss"}),
    ],
)
async def test_bad_ranges_get_a_stable_code(
    store: Store,
    path: str,
    route_params: dict[str, object],
    params: dict[str, object],
    code: str,
) -> None:
    response = await store.api.get(path, params={"buckets": 10, **route_params, **params})
    assert (response.status_code, response.json()["error"]["code"]) == (400, code)
