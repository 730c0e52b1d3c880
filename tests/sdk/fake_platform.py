"""A tiny platform in a thread (http.server on 127.0.0.1) that the SDK's threads can reach."""

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mldiag.encoding import FRAME_CONTENT_TYPE, decode_body
from support import free_port

RUNS = "/v1/machineLearningRuns"


@dataclass
class Received:
    """What the fake platform has seen."""

    batches: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)  # batch ids, retries included
    encodings: list[str] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    creates: list[dict[str, Any]] = field(default_factory=list)
    patches: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)  # accepted ones, in order
    signal_attempts: int = 0
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    session_reports: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (run, body)
    targets: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (run, body)
    run_reads: int = 0

    def reports(self, phase: str | None = None) -> list[dict[str, Any]]:
        """Session reports received, in arrival order (of one ``phase`` when given)."""
        return [body for _, body in self.session_reports if phase is None or body["phase"] == phase]

    def points(self, metric: str | None = None) -> list[tuple[str, int, float]]:
        """(name, step, value) of every stored point, in arrival order."""
        return [
            (series["name"], step, value)
            for batch in self.batches
            for series in batch["series"]
            if metric is None or series["name"] == metric
            for step, value in zip(series["steps"], series["values"], strict=True)
        ]


class FakePlatform:
    """Run registry and ingestion on one port, with switches for failure modes."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received = Received()
        self.write_status = 202  # what metrics:write answers
        self.fail_first_writes = 0  # answer 503 to this many writes (after storing nothing)
        self.supports_patch = True
        self.signal_status = 204  # what :reportSignal answers
        self.fail_first_signals = 0  # answer 503 to this many signals
        self.artifacts_root = ""  # artifacts.gcsPath of runs created without one
        self.report_status = 200  # what profilerSessions:report answers
        self.fail_first_reports = 0  # answer 404 (run not created yet) to this many reports
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any] | None = None) -> None:
                data = b"" if status == 204 else json.dumps(body or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Type") == FRAME_CONTENT_TYPE:
                    return decode_body(raw)  # a columnar frame, gzipped or not
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                return json.loads(raw) if raw else {}

            def do_POST(self) -> None:  # noqa: PLR0911, PLR0912  # one return per route
                path = urlsplit(self.path).path
                body = self._body()
                with platform.lock:
                    if path == RUNS:
                        platform.received.creates.append(body)
                        run_id = body["runId"]
                        if run_id in platform.received.runs:
                            self._reply(409, {"error": {"code": "run_already_exists"}})
                            return
                        platform.received.runs[run_id] = {**body, "etag": "e1"}
                        self._reply(201, body)
                        return
                    if path.endswith("/metrics:write"):
                        platform.received.encodings.append(self.headers.get("Content-Encoding", ""))
                        platform.received.attempts.append(body["batchId"])
                        if platform.fail_first_writes > 0:
                            platform.fail_first_writes -= 1
                            self._reply(503, {"error": "busy"})
                            return
                        if platform.write_status >= 300:
                            self._reply(platform.write_status, {"error": "no"})
                            return
                        seen = {batch["batchId"] for batch in platform.received.batches}
                        if body["batchId"] not in seen:
                            platform.received.batches.append(body)
                        self._reply(202, {"batchId": body["batchId"]})
                        return
                    if path.endswith(":reportSignal"):
                        platform.received.signal_attempts += 1
                        if platform.fail_first_signals > 0:
                            platform.fail_first_signals -= 1
                            self._reply(503, {"error": "busy"})
                            return
                        if platform.signal_status < 300:
                            platform.received.signals.append(body)
                        self._reply(platform.signal_status)
                        return
                    if path.endswith("/profilerSessions:report"):
                        run_id = path.removeprefix(RUNS + "/").split("/")[0]
                        if platform.fail_first_reports > 0:
                            platform.fail_first_reports -= 1
                            self._reply(404, {"error": {"code": "run_not_found"}})
                            return
                        if platform.report_status < 300:
                            platform.received.session_reports.append((run_id, body))
                        self._reply(platform.report_status, {"sessionId": body["sessionId"]})
                        return
                    if path.endswith("/profilerTargets"):
                        run_id = path.removeprefix(RUNS + "/").split("/")[0]
                        platform.received.targets.append((run_id, body))
                        self._reply(200, {**body, "runId": run_id})
                        return
                    if path.endswith(":heartbeat"):
                        platform.received.heartbeats.append(body)
                        self._reply(204)
                        return
                self._reply(404)

            def do_GET(self) -> None:
                run_id = urlsplit(self.path).path.removeprefix(RUNS + "/")
                with platform.lock:
                    platform.received.run_reads += 1
                    run = platform.received.runs.get(run_id)
                    if run is not None and platform.artifacts_root and "artifacts" not in run:
                        run = {**run, "artifacts": {"gcsPath": platform.artifacts_root}}
                if run is None:
                    self._reply(404)
                else:
                    self._reply(200, run)

            def do_PATCH(self) -> None:
                parts = urlsplit(self.path)
                run_id = parts.path.removeprefix(RUNS + "/")
                body = self._body()
                with platform.lock:
                    if not platform.supports_patch:
                        self._reply(405)
                        return
                    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
                    platform.received.patches.append((run_id, query, body))
                    run = platform.received.runs.get(run_id)
                    if run is None:
                        self._reply(404)
                        return
                    run.update(runPhase=body["runPhase"], errorDetails=body["errorDetails"])
                    self._reply(200, run)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
