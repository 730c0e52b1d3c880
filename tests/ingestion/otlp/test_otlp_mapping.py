"""Mapping OTLP exports: metrics to points (run ids, steps, labels, histograms), configs
log records to reports and other log records to log lines (pure, no I/O)."""

import math
from datetime import UTC, datetime

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import HistogramDataPoint

from ingestion.otlp.otlp_messages import (
    T0,
    any_value,
    attrs,
    export,
    gauge,
    histogram,
    log_record,
    logs_export,
    number,
    sdk_configs_export,
    sdk_export,
    total,
)
from mldiag_ingestion.otlp.service import (
    json_value,
    log_writes,
    map_export,
    map_logs,
    python_literal,
    severity,
)
from mldiag_schemas.logs import (
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES_PER_REQUEST,
    LogLine,
    LogSeverity,
    LogStream,
)

RUN = "3f6c1a52-0b7e-4d4e-9a51-6f1f0c6a2b11"
RECEIVED = datetime(2026, 12, 3, tzinfo=UTC)


def test_the_official_sdk_shape_pairs_each_metric_with_its_training_step() -> None:
    mapped = map_export(sdk_export(RUN, 7, loss=0.25, lr=0.1))
    assert mapped.rejected == 0
    points = {point.name: point for point in mapped.points}
    assert set(points) == {"loss", "lr"}  # training_step carries the step, it is no metric
    loss = points["loss"]
    assert (loss.run_id, loss.step, loss.value, loss.time_unix_nano) == (RUN, 7, 0.25, T0)
    assert dict(loss.labels) == {"unit": "1", "location": "us-central1"}
    assert loss.host == ""  # host.name is the run id there, not a host


def test_training_step_is_matched_on_the_attribute_set() -> None:
    request = export(
        gauge(
            "loss", number(0.5, phase="train", node_id=RUN), number(0.7, phase="eval", node_id=RUN)
        ),
        gauge(
            "training_step",
            number(10, phase="train", node_id=RUN),
            number(4, phase="eval", node_id=RUN),
        ),
    )
    steps = {dict(p.labels)["phase"]: p.step for p in map_export(request).points}
    assert steps == {"train": 10, "eval": 4}


def test_the_run_id_comes_from_the_point_then_the_resource() -> None:
    request = export(
        gauge("a", number(1.0)),
        gauge("b", number(2.0, node_id="other-run")),
        **{"mldiag.run_id": RUN, "host.name": "worker-3"},
    )
    runs = {p.name: (p.run_id, p.host) for p in map_export(request).points}
    assert runs == {"a": (RUN, "worker-3"), "b": ("other-run", "worker-3")}


def test_without_a_step_the_step_is_the_time_in_seconds() -> None:
    [point] = map_export(export(gauge("temp", number(3.0)), node_id=RUN)).points
    assert point.step == T0 // 1_000_000_000
    assert datetime.fromtimestamp(point.step, UTC).year == 2026


def test_sums_monotonic_or_not_and_int_values() -> None:
    request = export(
        total("tokens", number(1200), monotonic=True),
        total("queue", number(-3.5), monotonic=False),
        node_id=RUN,
    )
    assert {p.name: p.value for p in map_export(request).points} == {
        "tokens": 1200.0,
        "queue": -3.5,
    }


def test_histograms_become_count_sum_min_max() -> None:
    point = HistogramDataPoint(
        count=4,
        sum=10.0,
        min=1.0,
        max=4.0,
        bucket_counts=[1, 3],
        explicit_bounds=[2.0],
        time_unix_nano=T0,
        attributes=attrs(op="fwd"),
    )
    mapped = map_export(export(histogram("latency", point), node_id=RUN))
    values = {p.name: p.value for p in mapped.points}
    assert values == {
        "latency.count": 4.0,
        "latency.sum": 10.0,
        "latency.min": 1.0,
        "latency.max": 4.0,
    }
    assert {dict(p.labels)["op"] for p in mapped.points} == {"fwd"}


def test_a_histogram_without_sum_min_max_gives_its_count_only() -> None:
    point = HistogramDataPoint(count=2, time_unix_nano=T0)
    assert [p.name for p in map_export(export(histogram("h", point), node_id=RUN)).points] == [
        "h.count"
    ]


def test_points_without_a_run_id_are_rejected_with_a_reason() -> None:
    mapped = map_export(export(gauge("loss", number(1.0), number(2.0, node_id="BAD ID"))))
    assert mapped.points == []
    assert mapped.rejected == 2
    assert any("no run id" in problem and "node_id" in problem for problem in mapped.problems)
    assert any("not a valid run id" in problem for problem in mapped.problems)


def test_nan_is_kept() -> None:
    [point] = map_export(export(gauge("loss", number(math.nan)), node_id=RUN)).points
    assert math.isnan(point.value)


def test_the_official_sdk_configs_record_gets_its_types_back() -> None:
    user = {
        "lr": 0.001,
        "layers": 12,
        "use_bf16": True,
        "optimizer": {"name": "adam", "betas": (0.9, 0.99)},
        "schedule": "cosine",
    }
    mapped = map_logs(sdk_configs_export(RUN, user), RECEIVED)
    [report] = mapped.reports
    assert (report.run_id, mapped.lines, mapped.rejected.rejected) == (RUN, {}, 0)
    assert report.configs.user_configs == {
        **user,
        "optimizer": {"name": "adam", "betas": [0.9, 0.99]},
    }
    assert report.occurred_at == datetime.fromtimestamp(T0 / 1e9, UTC)


def test_a_configs_record_retried_keeps_its_id_and_a_new_one_gets_another() -> None:
    first = map_logs(sdk_configs_export(RUN, {"lr": 0.1}), RECEIVED).reports[0]
    retried = map_logs(sdk_configs_export(RUN, {"lr": 0.1}), RECEIVED).reports[0]
    later = map_logs(sdk_configs_export(RUN, {"lr": 0.1}, T0 + 1), RECEIVED).reports[0]
    assert first.event_id == retried.event_id != later.event_id


def test_software_and_hardware_sections_and_the_run_from_node_id() -> None:
    body = {"softwareConfigs": {"framework": "jax"}, "hardwareConfigs": {"device_count": 8}}
    record = log_record(body, namespace="mlrun_configs", node_id=RUN)
    [report] = map_logs(logs_export(record), RECEIVED).reports
    assert report.configs.software_configs == {"framework": "jax"}
    assert report.configs.hardware_configs == {"device_count": 8}


def test_other_log_records_are_lines_and_bad_configs_rejected() -> None:
    request = logs_export(
        log_record("training started", node_id=RUN),
        log_record({"userConfigs": {"lr": 1}}, namespace="mlrun_configs"),  # no run
        log_record("not a map", namespace="mlrun_configs", node_id=RUN),
        log_record({"lr": 1}, namespace="mlrun_configs", node_id=RUN),  # no section
        log_record("a line of no run"),
    )
    mapped = map_logs(request, RECEIVED)
    assert (mapped.reports, mapped.line_count(), mapped.rejected.rejected) == ([], 1, 4)
    assert "not a valid run id" in mapped.rejected.problems[0]
    assert "userConfigs" in mapped.rejected.problems[1]
    assert "log record: '' is not a valid run id" in mapped.rejected.problems[2]


def test_a_log_record_becomes_a_line_of_its_run() -> None:
    plain = log_record("step 10 loss 0.5\n", node_id=RUN)
    plain.severity_number = 9
    structured = log_record({"event": "oom", "bytes": 12}, time=0)
    structured.observed_time_unix_nano = T0 + 5_000
    structured.severity_number = 17
    request = logs_export(
        plain, structured, **{"host.name": "worker-0", "mldiag.run_id": RUN, "process.pid": 42}
    )
    [first, second] = map_logs(request, RECEIVED).lines[RUN]
    assert first == LogLine(
        time=datetime.fromtimestamp(T0 / 1e9, UTC),
        host="worker-0",
        stream=LogStream.OTLP,
        severity=LogSeverity.INFO,
        text="step 10 loss 0.5",
        pid=42,
    )
    assert (second.text, second.severity) == ('{"event":"oom","bytes":12}', LogSeverity.ERROR)
    assert second.time == datetime.fromtimestamp((T0 + 5_000) / 1e9, UTC)  # observed time


def test_without_any_time_a_line_is_stamped_on_receipt_and_the_sdk_host_is_no_host() -> None:
    request = logs_export(log_record("hello", time=0), **{"host.name": RUN})
    [line] = map_logs(request, RECEIVED).lines[RUN]
    assert (line.time, line.host, line.severity) == (RECEIVED, "", LogSeverity.DEFAULT)


def test_long_bodies_are_cut_with_a_mark_and_nul_is_replaced() -> None:
    records = [log_record("x" * (MAX_LOG_LINE_CHARS + 10)), log_record("a\x00b")]
    long, nul = map_logs(logs_export(*records, node_id=RUN), RECEIVED).lines[RUN]
    assert len(long.text) == MAX_LOG_LINE_CHARS and long.text.endswith("x…")
    assert nul.text == "a\ufffdb"


def test_severity_numbers() -> None:
    assert [severity(n) for n in (0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24)] == [
        LogSeverity.DEFAULT,
        *[LogSeverity.DEBUG] * 4,
        *[LogSeverity.INFO] * 2,
        *[LogSeverity.WARNING] * 2,
        *[LogSeverity.ERROR] * 2,
        *[LogSeverity.CRITICAL] * 2,
    ]


def test_a_run_s_lines_split_into_writes_whose_ids_a_retry_repeats() -> None:
    lines = [LogLine(time=RECEIVED, text=f"line {i}") for i in range(MAX_LOG_LINES_PER_REQUEST + 1)]
    writes = log_writes(RUN, lines)
    assert [len(write.lines) for write in writes] == [MAX_LOG_LINES_PER_REQUEST, 1]
    assert [w.batch_id for w in log_writes(RUN, lines)] == [w.batch_id for w in writes]
    assert log_writes(RUN, lines[:1])[0].batch_id != log_writes(RUN, lines[1:2])[0].batch_id


def test_otlp_values_become_json() -> None:
    value = any_value({"a": [1, 2.5, "x", False], "b": {"c": float("inf")}})
    assert json_value(value) == {"a": [1, 2.5, "x", False], "b": {"c": math.inf}}
    assert json_value(AnyValue(bytes_value=b"\x01\xff")) == "01ff"
    assert json_value(AnyValue()) is None


def test_strings_are_read_back_as_python_literals_only_when_they_spell_one() -> None:
    assert python_literal("0.5") == 0.5
    assert python_literal("-3") == -3
    assert python_literal("None") is None
    assert python_literal("[1, (2, 3)]") == [1, [2, 3]]
    assert math.isnan(python_literal("nan"))  # type: ignore[arg-type]
    assert python_literal("-inf") == -math.inf
    assert python_literal("adam") == "adam"  # a bare word is no literal
    assert python_literal("{1, 2}") == "{1, 2}"  # a set has no JSON form
    assert python_literal("__import__('os')") == "__import__('os')"  # never evaluated
    assert python_literal(7) == 7


def test_only_the_official_sdk_has_its_strings_read_back() -> None:
    record = log_record({"userConfigs": {"lr": "0.1"}}, namespace="mlrun_configs", node_id=RUN)
    [report] = map_logs(logs_export(record, **{"service.name": "my-trainer"}), RECEIVED).reports
    assert report.configs.user_configs == {"lr": "0.1"}


def test_a_training_step_that_is_no_number_is_rejected_not_a_crash() -> None:
    request = export(
        gauge("loss", number(1.0, node_id="run-1")),
        gauge("training_step", number(math.nan, node_id="run-1")),
        gauge("training_step", number(math.inf, node_id="run-2")),
    )
    mapped = map_export(request)
    assert mapped.rejected == 2
    assert "not a number of steps" in mapped.problems[0]
    assert [(point.name, point.step) for point in mapped.points] == [("loss", T0 // 10**9)]


def test_a_configs_record_with_nul_is_rejected_not_stored() -> None:
    records = [
        log_record({"userConfigs": {"lr": "0.1\x00"}}, namespace="mlrun_configs"),
        log_record({"userConfigs": {"opt\x00": 1}}, namespace="mlrun_configs"),
        log_record({"userConfigs": {"lr": 0.1}}, namespace="mlrun_configs"),
    ]
    mapped = map_logs(logs_export(*records, node_id="run-1"), datetime.now(UTC))
    assert mapped.rejected.rejected == 2
    assert "NUL" in mapped.rejected.problems[0]
    assert [report.configs.user_configs for report in mapped.reports] == [{"lr": 0.1}]
