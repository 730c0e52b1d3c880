"""The SDK's wire format: batches as columnar frames (read back by the platform's own
codec), bodies sniffed for their content type (new frames, old spools' gzipped JSON), and
an offline spool mixing both synced to the real platform."""

import gzip
import json
import math
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

import mldiag
from mldiag.config import Settings
from mldiag.encoding import (
    FRAME_CONTENT_TYPE,
    Encoder,
    Entry,
    content_headers,
    decode_body,
    points_in,
)
from mldiag.offline import offline_root, sync_run
from mldiag.spool import Spool
from mldiag.transport import MetricsWriter, Outcome
from mldiag_schemas.columnar import decode_frame
from sdk.fake_platform import FakePlatform

WHEN = 1_767_225_600.25  # 2026-01-01T00:00:00.25Z


def _bits(values: Any) -> list[int]:
    return [struct.unpack("<q", struct.pack("<d", value))[0] for value in values]


def test_a_batch_is_a_frame_the_platform_reads_bit_exact() -> None:
    special = [math.nan, math.inf, -math.inf, -0.0, 5e-324]
    entries: list[Entry] = [
        (step, WHEN + step, {"loss": value, "acc": 0.5}, None) for step, value in enumerate(special)
    ]
    entries.append((9, WHEN, {"loss": 1.0}, {"device": "3"}))
    batch = Encoder("host-a", 2).encode(entries)
    assert batch is not None
    assert batch.points == 11
    assert batch.body.startswith(b"MLDC")
    header, columns = decode_frame(batch.body)
    assert header["batchId"] == str(batch.batch_id)
    assert [
        (s["name"], s["host"], s["processIndex"], s.get("labels")) for s in header["series"]
    ] == [
        ("loss", "host-a", 2, None),
        ("acc", "host-a", 2, None),
        ("loss", "host-a", 2, {"device": "3"}),
    ]
    loss, acc, labelled = columns
    assert list(loss.steps) == [0, 1, 2, 3, 4]
    assert _bits(loss.values) == _bits(special)
    assert list(loss.times or []) == [int((WHEN + step) * 1_000_000) for step in range(5)]
    assert list(acc.values) == [0.5] * 5
    assert (list(labelled.steps), list(labelled.values)) == ([9], [1.0])


def test_without_a_process_index_the_header_leaves_it_out() -> None:
    batch = Encoder("h").encode([(1, WHEN, {"loss": 1}, None)])
    assert batch is not None
    header, _ = decode_frame(batch.body)
    assert "processIndex" not in header["series"][0]
    assert "labels" not in header["series"][0]


def test_series_keep_their_first_appearance_order_across_interleaved_labels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    encoder = Encoder("h", 0)
    entries: list[Entry] = [
        (0, WHEN, {"loss": 1.0, "bad name": 1.0}, {"thread": "b"}),
        (0, WHEN, {"loss": 2, "lr": 0.1}, {"thread": "a"}),
        (1, WHEN, {"loss": 3.0, "bad name": 2.0}, {"thread": "b"}),
        (1, WHEN, {"acc": 0.5}, None),
    ]
    with caplog.at_level("WARNING", logger="mldiag"):
        first = encoder.encode(entries)
        second = encoder.encode(entries)  # the names are known now: the same body
    assert first is not None
    assert second is not None
    request = decode_body(first.body)
    assert [(s["name"], s.get("labels")) for s in request["series"]] == [
        ("loss", {"thread": "b"}),
        ("loss", {"thread": "a"}),
        ("lr", {"thread": "a"}),
        ("acc", None),
    ]
    assert [s["values"] for s in request["series"]] == [[1.0, 3.0], [2.0], [0.1], [0.5]]
    assert decode_body(second.body)["series"] == request["series"]
    assert sum("bad_name" in record.message for record in caplog.records) == 1


def test_steps_that_no_store_can_keep_are_dropped_and_whole_floats_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch = Encoder("h").encode(
        [(2**63, WHEN, {"loss": 1.0}, None), (3.0, WHEN, {"loss": 2.0}, None)]  # type: ignore[list-item]
    )
    assert batch is not None
    _, [columns] = decode_frame(batch.body)
    assert (list(columns.steps), list(columns.values)) == ([3], [2.0])
    assert "mldiag.metric.bad_step" in caplog.text
    assert Encoder("h").encode([(1.5, WHEN, {"loss": 1.0}, None)]) is None  # type: ignore[list-item]


def test_compressed_frames_when_asked() -> None:
    batch = Encoder("h", compress=True).encode([(1, WHEN, {"loss": 1.0}, None)])
    assert batch is not None
    assert batch.body[:2] == b"\x1f\x8b"
    assert content_headers(batch.body) == {
        "Content-Type": FRAME_CONTENT_TYPE,
        "Content-Encoding": "gzip",
    }
    assert decode_body(batch.body)["series"][0]["steps"] == [1]


def _old_body(steps: list[int], batch_id: uuid.UUID | None = None) -> bytes:
    """A batch as SDKs before the frame wrote it: gzipped JSON."""
    series = {
        "name": "loss",
        "steps": steps,
        "values": [float(step) for step in steps],
        "times": ["2026-01-01T00:00:00+00:00"] * len(steps),
        "host": "old",
    }
    body = {"batchId": str(batch_id or uuid.uuid4()), "series": [series]}
    return gzip.compress(json.dumps(body).encode(), compresslevel=5)


def test_bodies_of_both_kinds_are_told_apart_and_read() -> None:
    old = _old_body([1, 2])
    assert content_headers(old) == {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    assert decode_body(old)["series"][0]["steps"] == [1, 2]
    assert points_in(old) == 2
    batch = Encoder("h").encode([(7, WHEN, {"loss": math.nan, "lr": 0.1}, None)])
    assert batch is not None
    assert content_headers(batch.body) == {"Content-Type": FRAME_CONTENT_TYPE}
    assert points_in(batch.body) == 2
    request = decode_body(batch.body)
    assert request["series"][0]["times"] == ["2026-01-01T00:00:00.250000+00:00"]
    assert math.isnan(request["series"][0]["values"][0])
    json.dumps(request)  # a dead letter's line: JSON (NaN as its token)
    with pytest.raises(ValueError, match=r"truncated|length"):
        decode_body(batch.body[:-1])


def test_the_writer_posts_each_body_with_its_own_content_type() -> None:
    platform = FakePlatform()
    platform.start()
    try:
        frame = Encoder("h").encode([(1, WHEN, {"loss": 1.0}, None)])
        assert frame is not None
        with httpx.Client() as http:
            writer = MetricsWriter(http, platform.url)
            assert writer.write("run-1", frame.body).outcome is Outcome.SENT
            assert writer.write("run-1", _old_body([2])).outcome is Outcome.SENT
        assert platform.received.encodings == ["", "gzip"]
        assert platform.received.points() == [("loss", 1, 1.0), ("loss", 2, 2.0)]
    finally:
        platform.stop()


@pytest.mark.connected
def test_an_offline_spool_of_old_and_new_batches_syncs_every_point(
    platform_urls: tuple[str, str], tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    with mldiag.init(
        name="mixed",
        run_id="mixed-run",
        mode="offline",
        api_url="http://127.0.0.1:9",
        spool_dir=tmp_path,
        handle_exit=False,
        log_system_metrics=False,
        flush_interval=0.05,
    ):
        for step in range(3, 6):
            mldiag.log({"loss": float(step)}, step=step)
    directory = offline_root(tmp_path) / "mixed-run"
    [writer] = [path for path in directory.iterdir() if path.is_dir()]
    spool = Spool(writer, "mixed-run")
    spool.append(_old_body([0, 1, 2]))  # as an older SDK would have spooled it
    spool.close()

    settings = Settings.resolve(api_url=api_url, ingestion_url=ingestion_url, spool_dir=tmp_path)
    result = sync_run(directory, settings)
    assert (result.points, result.rejected) == (6, 0)

    token = os.environ["MLDIAG_TOKEN"]
    url = f"{api_url}/v1/machineLearningRuns/mixed-run/metrics/loss?pageSize=100"
    deadline = time.monotonic() + 20
    points: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(points) < 6:
        response = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        points = response.json().get("points", []) if response.status_code == 200 else []
        time.sleep(0.1)
    assert sorted((point["step"], point["value"]) for point in points) == [
        (step, float(step)) for step in range(6)
    ]
