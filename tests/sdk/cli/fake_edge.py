"""A scripted HTTP edge on 127.0.0.1: JSON answers per route, every request recorded.

Stands in for the run-registry and the xprof-provisioner in CLI tests that check what the
CLI sends and how it prints the answers, without the services behind them.
"""

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from support import free_port


@dataclass(frozen=True)
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class Answer:
    status: int
    body: Any
    delay: float = 0.0


@dataclass
class FakeEdge:
    """Answers ``(method, path)`` with the answers given, in order (the last one repeats);
    404 with an API error body for anything else."""

    port: int = field(default_factory=free_port)
    seen: list[Seen] = field(default_factory=list)
    _routes: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(
        self, method: str, path: str, body: Any, *, status: int = 200, delay: float = 0.0
    ) -> None:
        self._routes.setdefault((method, path), []).append(Answer(status, body, delay))

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if (s.method, s.path) == (method, path)]

    def _next(self, method: str, path: str) -> Answer:
        answers = self._routes.get((method, path))
        if not answers:
            error = {"code": "not_found", "message": f"no route {method} {path}"}
            return Answer(404, {"error": error})
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def start(self) -> None:
        edge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                edge.seen.append(
                    Seen(
                        self.command,
                        parts.path,
                        dict(parse_qsl(parts.query)),
                        json.loads(raw) if raw else None,
                        dict(self.headers.items()),
                    )
                )
                answer = edge._next(self.command, parts.path)
                time.sleep(answer.delay)
                data = json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _handle  # noqa: N815  # http.server's names

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
