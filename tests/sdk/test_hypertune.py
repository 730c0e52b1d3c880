"""cloudml-hypertune's file: parsing, the stateful reader the launcher polls, the forwarder,
and the SDK's ``report_hyperparameter_tuning_metric`` (with a run, and without one)."""

import collections
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import mldiag
from mldiag import hypertune
from mldiag.hypertune import (
    BadLineError,
    Entry,
    MetricFileForwarder,
    MetricFileReader,
    Report,
    parse,
    parse_line,
)
from sdk.fake_platform import FakePlatform


class LibraryWriter:
    """What ``hypertune.HyperTune`` does on each report (its code, minus the environment):
    append to a deque of 100 and rewrite the whole file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=100)
        self.clock = 1_700_000_000.0

    def body(self, tag: str, value: float, global_step: int | None) -> dict[str, Any]:
        self.clock += 0.001  # time.time() moves on between two reports
        return {
            "timestamp": self.clock,
            "trial": "0",
            tag: str(float(value)),
            "global_step": str(int(global_step) if global_step else 0),
            "checkpoint_path": "",
        }

    def report(self, tag: str, value: float, global_step: int | None = None) -> None:
        self.queue.append(self.body(tag, value, global_step))
        self.path.write_text(self.text())

    def text(self) -> str:
        return "".join(json.dumps(metric, sort_keys=True) + "\n" for metric in self.queue)


# --- parsing --------------------------------------------------------------------------------


def test_a_line_as_the_library_writes_it() -> None:
    line = (
        '{"accuracy": "0.93", "checkpoint_path": "", "global_step": "1000", '
        '"timestamp": 1638422847.28721, "trial": "0"}'
    )
    assert parse_line(line) == Entry(1638422847.28721, {"accuracy": 0.93}, 1000)
    # numbers instead of strings, several metrics, no step, unknown text keys: still a report
    assert parse_line('{"timestamp": 5, "a": 1, "b": "2.5", "note": "x"}') == Entry(
        5.0, {"a": 1.0, "b": 2.5}, None
    )
    # and the SDK's own lines read back the same
    written = hypertune.format_entry("loss", 0.5, 7, timestamp=3.0, trial="2")
    assert json.loads(written) == {
        "checkpoint_path": "",
        "global_step": "7",
        "loss": "0.5",
        "timestamp": 3.0,
        "trial": "2",
    }
    assert list(json.loads(written)) == sorted(json.loads(written))
    assert parse_line(written) == Entry(3.0, {"loss": 0.5}, 7)


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "[1, 2]",
        '{"accuracy": "0.9"}',  # no timestamp
        '{"timestamp": "soon", "accuracy": "0.9"}',
        '{"timestamp": NaN, "accuracy": "0.9"}',
        '{"timestamp": 1, "trial": "0", "global_step": "3"}',  # no metric
        '{"timestamp": 1, "accuracy": "0.9", "global_step": "-1"}',
        '{"timestamp": 1, "accuracy": "0.9", "global_step": "1.5"}',
        '{"timestamp": 1, "accuracy": true}',
    ],
)
def test_lines_that_are_not_reports(line: str) -> None:
    with pytest.raises(BadLineError):
        parse_line(line)


def test_garbage_is_skipped_and_an_unfinished_last_line_waits() -> None:
    good = '{"a": "1", "timestamp": 1}'
    parsed = parse(f"{good}\ngarbage\n\n{good.replace('1}', '2}')}\n" + '{"a": "3", "time')
    assert [entry.timestamp for entry in parsed.entries] == [1.0, 2.0]
    assert parsed.bad_lines == ["garbage"]
    assert parsed.complete is False
    # the writer is gone: the cut line is garbage now
    final = parse(good + "\n" + '{"a": "3", "time', final=True)
    assert (len(final.entries), final.bad_lines, final.complete) == (1, ['{"a": "3", "time'], True)
    # a whole last line without its newline is a report, not a cut one
    assert parse(good).entries == [Entry(1.0, {"a": 1.0}, None)]
    assert parse("") == parse("\n\n") == hypertune.Parsed([], [], True)


# --- the reader -----------------------------------------------------------------------------


def test_each_report_is_read_once_across_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    reader = MetricFileReader(path)
    assert reader.read() == []  # no file yet
    writer = LibraryWriter(path)
    for step in (1, 2, 3):
        writer.report("accuracy", step / 10, step)
    assert reader.read() == [Report("accuracy", s / 10, s) for s in (1, 2, 3)]
    assert reader.read() == []  # unchanged
    writer.report("accuracy", 0.4, 4)
    writer.report("loss", 2.0, 4)
    assert reader.read() == [Report("accuracy", 0.4, 4), Report("loss", 2.0, 4)]
    # the same value at the same step reported again is a new report (a new timestamp)
    writer.report("accuracy", 0.4, 4)
    assert reader.read() == [Report("accuracy", 0.4, 4)]
    assert reader.read(final=True) == []  # forced: read again, nothing new


def test_more_than_the_window_between_reads_and_in_all(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    reader = MetricFileReader(path)
    writer = LibraryWriter(path)
    forwarded: list[Report] = []
    for step in range(1, 351):
        writer.report("accuracy", step, step)
        if step % 37 == 0:  # reads far apart, but fewer than 100 reports between two
            forwarded += reader.read()
    forwarded += reader.read(final=True)
    assert forwarded == [Report("accuracy", float(s), s) for s in range(1, 351)]
    # what left the window is forgotten: the memory stays that of the file
    assert len(reader._seen) <= hypertune.MAX_ENTRIES  # the bound is the point
    # more than 100 reports between two reads: the file only holds the last 100
    for step in range(351, 601):
        writer.report("accuracy", step, step)
    assert [r.step for r in reader.read()] == list(range(501, 601))


def test_a_half_written_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    reader = MetricFileReader(path)
    writer = LibraryWriter(path)
    for step in range(1, 6):
        writer.queue.append(writer.body("accuracy", step, step))
    text = writer.text()
    cut = text.index("\n", text.index("\n") + 1) + 20  # two lines and a piece of the third
    path.write_text(text[:cut])
    assert [r.step for r in reader.read()] == [1, 2]
    path.write_text("")  # the library truncates before it writes
    assert reader.read() == []
    path.write_text(text[: text.index("\n") + 1])  # only the first line, so far
    assert reader.read() == []
    path.write_text(text)
    assert [r.step for r in reader.read()] == [3, 4, 5]


def test_garbage_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    path.write_text('garbage\n{"a": "1", "timestamp": 1, "global_step": "3"}\n[]\n')
    reader = MetricFileReader(path)
    assert reader.read() == [Report("a", 1.0, 3)]
    assert reader.bad_lines == 2


def test_of_a_file_that_only_grows_the_end_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hypertune, "MAX_READ_BYTES", 1000)
    path = tmp_path / "output.metrics"
    lines = [
        hypertune.format_entry("a", float(step), step, timestamp=float(step), trial="0")
        for step in range(100)
    ]
    path.write_text("".join(f"{line}\n" for line in lines))
    reader = MetricFileReader(path)
    steps = [report.step for report in reader.read()]
    assert steps == list(range(100 - len(steps), 100))
    assert 0 < len(steps) < 100
    assert reader.bad_lines == 0  # the line cut by the start of the read is not garbage


def test_reports_without_a_step_are_numbered_per_tag(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    reader = MetricFileReader(path)
    lines = [
        hypertune.format_entry("a", 1.0, None, timestamp=1.0, trial="0"),
        hypertune.format_entry("b", 5.0, None, timestamp=2.0, trial="0"),
        hypertune.format_entry("a", 2.0, None, timestamp=3.0, trial="0"),
    ]
    path.write_text("\n".join(lines[:2]) + "\n")
    assert reader.read() == [Report("a", 1.0, 0), Report("b", 5.0, 0)]
    path.write_text("\n".join(lines) + "\n")
    assert reader.read() == [Report("a", 2.0, 1)]


def test_reports_older_than_the_attempt_are_not_its_own(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    path.write_text(
        hypertune.format_entry("a", 1.0, 1, timestamp=100.0, trial="0")
        + "\n"
        + hypertune.format_entry("a", 2.0, 2, timestamp=200.0, trial="0")
        + "\n"
    )
    assert MetricFileReader(path, since=150.0).read() == [Report("a", 2.0, 2)]


# --- the forwarder ----------------------------------------------------------------------------


def test_the_chief_forwards_at_its_pace_and_once_more_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "output.metrics"
    recorded: list[tuple[str, float, int]] = []
    forwarder = MetricFileForwarder(
        path, lambda *point: recorded.append(point), replica="workerpool0-0", interval=3600
    )
    writer = LibraryWriter(path)
    writer.report("accuracy", 0.1, 1)
    assert forwarder.poll() == 1
    writer.report("accuracy", 0.2, 2)
    assert forwarder.poll() == 0  # not yet: the interval has not passed
    assert forwarder.poll(final=True) == 1  # the program ended: read now
    assert recorded == [("accuracy", 0.1, 1), ("accuracy", 0.2, 2)]
    assert forwarder.forwarded == 2


def test_another_replica_ignores_the_file_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "output.metrics"
    recorded: list[tuple[str, float, int]] = []
    forwarder = MetricFileForwarder(
        path, lambda *point: recorded.append(point), replica="workerpool1-0", interval=0
    )
    assert forwarder.poll() == 0  # no file: nothing to say
    LibraryWriter(path).report("accuracy", 0.1, 1)
    with caplog.at_level(logging.WARNING, logger="mldiag"):
        for _ in range(3):
            assert forwarder.poll(final=True) == 0
    assert recorded == []
    assert [r.message for r in caplog.records].count(
        f"mldiag.hypertune.ignored replica=workerpool1-0 path={path} "
        "(only workerpool0-0's reports count)"
    ) == 1


def test_bad_lines_are_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "output.metrics"
    recorded: list[tuple[str, float, int]] = []
    forwarder = MetricFileForwarder(
        path, lambda *point: recorded.append(point), replica="workerpool0-0", interval=0
    )
    with caplog.at_level(logging.WARNING, logger="mldiag"):
        for step in range(3):
            with path.open("a") as handle:
                handle.write(f'oops\n{{"a": "1", "timestamp": {step}, "global_step": "{step}"}}\n')
            forwarder.poll()
    assert recorded == [("a", 1.0, 0), ("a", 1.0, 1), ("a", 1.0, 2)]
    assert sum("mldiag.hypertune.bad_lines" in r.message for r in caplog.records) == 1


def test_the_attempts_file_is_beside_its_exit_file(tmp_path: Path) -> None:
    exit_file = tmp_path / "attempts" / "j-p0-i0-a1" / "exit.json"
    assert hypertune.attempt_metric_file(exit_file) == (
        exit_file.parent / "hypertune" / "output.metrics"
    )
    assert hypertune.attempt_metric_file(None).name == "output.metrics"


# --- the SDK's call ---------------------------------------------------------------------------


@pytest.fixture
def no_run() -> None:
    assert mldiag.current_run() is None


@pytest.mark.usefixtures("no_run")
def test_without_a_run_the_call_writes_the_librarys_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trial" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "4")
    reader = MetricFileReader(path)
    before = time.time()
    mldiag.report_hyperparameter_tuning_metric("accuracy", 0.5, global_step=10)
    [line] = path.read_text().splitlines()
    record = json.loads(line)
    assert record == {
        "accuracy": "0.5",
        "checkpoint_path": "",
        "global_step": "10",
        "timestamp": record["timestamp"],
        "trial": "4",
    }
    assert before <= record["timestamp"] <= time.time()
    assert reader.read() == [Report("accuracy", 0.5, 10)]
    for step in range(11, 131):
        mldiag.report_hyperparameter_tuning_metric("accuracy", step, global_step=step)
    mldiag.report_hyperparameter_tuning_metric("", 1.0)  # the library's default tag, no step
    mldiag.report_hyperparameter_tuning_metric("accuracy", "not a number")  # type: ignore[arg-type]
    lines = path.read_text().splitlines()
    assert len(lines) == hypertune.MAX_ENTRIES
    assert [r.step for r in reader.read()][:3] == [32, 33, 34]  # 100 kept: 32..130 + default
    assert parse_line(lines[-1]) == Entry(
        json.loads(lines[-1])["timestamp"], {"training/hptuning/metric": 1.0}, None
    )
    assert not list(path.parent.glob(".tmp-*"))


def _start(platform: FakePlatform, tmp_path: Path) -> mldiag.Run:
    return mldiag.init(
        name="trial",
        api_url=platform.url,
        ingestion_url=platform.url,
        spool_dir=tmp_path / "spool",
        handle_exit=False,
        flush_interval=0.05,
        heartbeat_interval=0,
        log_system_metrics=False,
    )


def test_with_a_run_the_call_and_the_plain_sdk_record_the_objective_by_its_name(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("MLDIAG_REPLICA", "workerpool0-0")
    run = _start(platform, tmp_path)
    try:
        mldiag.report_hyperparameter_tuning_metric("val/accuracy", 0.25, global_step=3)
        run.log({"loss": 1.0}, step=7)
        mldiag.report_hyperparameter_tuning_metric("val/accuracy", 0.5)  # the current step
        run.log({"val/accuracy": 0.75}, step=9)
        mldiag.metrics.record("val/accuracy", 0.875, step=12)
    finally:
        assert run.finish() is True
    points = [(step, value) for _, step, value in platform.received.points("val/accuracy")]
    assert sorted(points) == [(3, 0.25), (7, 0.5), (9, 0.75), (12, 0.875)]
    assert not path.exists()  # with a run, no file


def test_on_another_replica_the_call_records_nothing(
    platform: FakePlatform,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MLDIAG_REPLICA", "workerpool1-0")
    monkeypatch.setattr(hypertune, "_warned_replica", False)
    run = _start(platform, tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="mldiag"):
            mldiag.report_hyperparameter_tuning_metric("accuracy", 0.5, global_step=1)
            mldiag.report_hyperparameter_tuning_metric("accuracy", 0.6, global_step=2)
        run.log({"loss": 1.0}, step=2)
    finally:
        assert run.finish() is True
    assert platform.received.points("loss") == [("loss", 2, 1.0)]
    assert platform.received.points("accuracy") == []
    assert sum("mldiag.hypertune.ignored" in r.message for r in caplog.records) == 1
