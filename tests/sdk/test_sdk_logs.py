"""The SDK's log shipper: batching, cutting, retries with one batch id, a bounded buffer, and
``mldiag.LogHandler``; against the real ingestion (real NATS) where the platform is the
point, against a small HTTP edge where its failures are."""

import asyncio
import gzip
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import mldiag
from conftest import ApiTokens
from mldiag.logs import CUT_MARK, MAX_BATCH_LINES, MAX_LINE_CHARS, LogShipper, cut
from mldiag.logs import severity_of as level_severity
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import LOGS_RECEIVED
from mldiag_schemas.logs import (
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES_PER_REQUEST,
    LogLinesReceived,
    LogSeverity,
    LogStream,
)
from support import free_port, read_messages, served_in_thread

RUN = "run-logs-1"


def test_the_sdk_s_limits_are_the_contract_s() -> None:
    assert (MAX_LINE_CHARS, MAX_BATCH_LINES) == (MAX_LOG_LINE_CHARS, MAX_LOG_LINES_PER_REQUEST)
    assert cut("short") == "short"
    assert cut("a\x00b") == "a\ufffdb"
    long = cut("x" * (MAX_LINE_CHARS + 1))
    assert len(long) == MAX_LINE_CHARS and long.endswith("x" + CUT_MARK)


def test_logging_levels_become_severities() -> None:
    levels = (0, logging.DEBUG, logging.INFO, 25, logging.WARNING, logging.ERROR, 50, 60)
    assert [level_severity(level) for level in levels] == [
        "DEFAULT",
        "DEBUG",
        "INFO",
        "INFO",
        "WARNING",
        "ERROR",
        "CRITICAL",
        "CRITICAL",
    ]


# --- against a small edge that fails on purpose ---------------------------------------------


@dataclass
class Edge:
    """An HTTP edge in a thread answering ``logs:write`` with the statuses queued."""

    url: str
    statuses: list[int] = field(default_factory=list)
    """Answers to give first (then 202)."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stored(self) -> list[dict[str, Any]]:
        """Bodies answered 202, each batch once."""
        seen: dict[str, dict[str, Any]] = {}
        for body in self.attempts:
            if body.get("status") == 202:
                seen.setdefault(body["batchId"], body)
        return list(seen.values())


@pytest.fixture
def edge() -> Iterator[Edge]:
    port = free_port()
    state = Edge(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.loads(gzip.decompress(raw))
            with state.lock:
                status = state.statuses.pop(0) if state.statuses else 202
                state.attempts.append({**body, "status": status, "path": self.path})
            data = json.dumps({"accepted": len(body["lines"])}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def test_a_batch_refused_for_a_while_is_retried_with_its_id_and_stored_once(edge: Edge) -> None:
    edge.statuses = [503, 429]
    shipper = LogShipper(edge.url, RUN, host="h1", max_backoff=0.2)
    shipper.write("one")
    shipper.write("two", "STDERR", pid=9)
    assert shipper.flush(10)
    ids = [attempt["batchId"] for attempt in edge.attempts]
    assert len(ids) == 3 and len(set(ids)) == 1
    [stored] = edge.stored()
    assert stored["path"] == f"/v1/machineLearningRuns/{RUN}/logs:write"
    assert [(line["text"], line["stream"], line["host"]) for line in stored["lines"]] == [
        ("one", "STDOUT", "h1"),
        ("two", "STDERR", "h1"),
    ]
    assert stored["lines"][1]["pid"] == 9 and "pid" not in stored["lines"][0]
    assert (shipper.sent, shipper.dropped, shipper.reachable) == (2, 0, True)
    assert shipper.close(1)


def test_a_batch_the_platform_refuses_is_dropped_not_retried(edge: Edge) -> None:
    edge.statuses = [400]
    shipper = LogShipper(edge.url, RUN)
    shipper.write("bad")
    assert shipper.flush(10)
    shipper.write("good")
    assert shipper.close(10)
    assert [attempt["status"] for attempt in edge.attempts] == [400, 202]
    assert (shipper.sent, shipper.dropped) == (1, 1)


def test_lines_wait_at_most_the_interval_and_a_full_batch_goes_at_once(edge: Edge) -> None:
    shipper = LogShipper(edge.url, RUN, flush_interval=0.3, batch_lines=5)
    shipper.write("alone")
    deadline = time.monotonic() + 5
    while not edge.attempts:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for index in range(5):
        shipper.write(f"line {index}")
    time.sleep(0.15)  # well inside the interval: the full batch went without waiting
    assert [len(attempt["lines"]) for attempt in edge.attempts] == [1, 5]
    assert shipper.close(5)


def test_a_full_buffer_drops_the_oldest_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: every batch waits
    shipper = LogShipper(nowhere, RUN, capacity=10, flush_interval=60)
    with caplog.at_level(logging.WARNING, logger="mldiag"):
        for index in range(25):
            shipper.write(f"line {index}")
    assert shipper.dropped == 15
    warnings = [record.getMessage() for record in caplog.records]
    assert sum("mldiag.logs.dropping" in message for message in warnings) == 1
    assert not shipper.close(0.3)  # unreachable: what was left is counted as lost
    assert shipper.dropped == 25 and not shipper.reachable
    shipper.write("after close")  # ignored, not an error
    assert shipper.dropped == 25


# --- against the real ingestion ---------------------------------------------------------------


@pytest.fixture
def ingestion_url(nats_settings: NatsSettings, api_tokens: ApiTokens) -> Iterator[str]:
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    with served_in_thread(ingestion) as url:
        yield url


def _lines(settings: NatsSettings, run_id: str) -> list[LogLinesReceived]:
    messages = asyncio.run(read_messages(settings, LOGS_RECEIVED, LogLinesReceived))
    return [message for message in messages if message.run_id == run_id]


@pytest.mark.connected
def test_lines_reach_the_bus_in_order_in_batches(
    ingestion_url: str, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    shipper = LogShipper(ingestion_url, RUN, api_tokens.editor, host="worker-0", process_index=2)
    shipper.write_many([f"line {index}" for index in range(2500)], pid=41, at=time.time())
    shipper.write("é" * (MAX_LINE_CHARS + 5), "STDERR")
    assert shipper.close(20)
    messages = _lines(nats_settings, RUN)
    assert all(len(message.lines) <= 5 * 1000 for message in messages)  # a backlog: 5 batches
    lines = [line for message in messages for line in message.lines]
    assert [line.text for line in lines[:2500]] == [f"line {index}" for index in range(2500)]
    first, last = lines[0], lines[-1]
    assert (first.host, first.process_index, first.pid, first.stream) == (
        "worker-0",
        2,
        41,
        LogStream.STDOUT,
    )
    assert last.stream == LogStream.STDERR and last.text.endswith("é" + CUT_MARK)
    assert len(last.text) == MAX_LOG_LINE_CHARS
    assert shipper.sent == 2501


@pytest.mark.connected
def test_the_log_handler_ships_records_of_the_current_run_with_their_severity(
    ingestion_url: str, nats_settings: NatsSettings, api_tokens: ApiTokens, tmp_path: Path
) -> None:
    handler = mldiag.LogHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    program = logging.getLogger("a-training-program")
    program.addHandler(handler)
    program.setLevel(logging.DEBUG)
    try:
        program.info("before any run: not shipped")
        run = mldiag.init(
            run_id="run-logs-2",
            create_run=False,
            ingestion_url=ingestion_url,
            token=api_tokens.editor,
            handle_exit=False,
            log_system_metrics=False,
            spool_dir=tmp_path,
        )
        program.warning("loss is rising\nsecond line")
        program.error("diverged")
        logging.getLogger("mldiag").warning("the SDK's own: not shipped")
        handler.flush()
        run.finish(timeout=5)
    finally:
        program.removeHandler(handler)
        handler.close()
    lines = [line for message in _lines(nats_settings, "run-logs-2") for line in message.lines]
    assert [(line.severity, line.text) for line in lines] == [
        (LogSeverity.WARNING, "WARNING loss is rising"),
        (LogSeverity.WARNING, "second line"),
        (LogSeverity.ERROR, "ERROR diverged"),
    ]
