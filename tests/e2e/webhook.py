"""A webhook receiver for the alerts tests and benchmark: a real HTTP server in a thread that
checks each notification's signature as a receiver should and keeps what arrived."""

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mldiag_schemas.alerts import DELIVERY_HEADER, SIGNATURE_HEADER


def signature_valid(secret: str, header: str, body: bytes, max_age: float = 300.0) -> bool:
    """Whether ``header`` (``t=<unix>,v1=<hex>``) signs ``body`` with ``secret``, recently."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        stamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(time.time() - stamp) <= max_age and hmac.compare_digest(
        expected, parts.get("v1", "")
    )


@dataclass
class Received:
    """One notification as it arrived."""

    body: dict[str, Any]
    delivery: str
    signed: bool
    at: float
    """``time.time()`` when it arrived."""


@dataclass
class Receiver:
    """Where the receiver listens and what it got."""

    url: str
    secret: str
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(
        self, match: Callable[[Received], bool], what: str, timeout: float = 30.0
    ) -> Received:
        """The first notification ``match`` accepts, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [item for item in self.received if match(item)]
            if found:
                return found[0]
            time.sleep(0.02)
        with self.lock:
            got = [(item.body.get("kind"), item.body.get("summary")) for item in self.received]
        raise AssertionError(f"no {what} within {timeout} s; received {got}")


@contextmanager
def webhook_receiver(secret: str) -> Iterator[Receiver]:
    """A receiver on a free port of 127.0.0.1, answering 204 to every POST."""
    receiver = Receiver(url="", secret=secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            arrived = time.time()
            signed = signature_valid(secret, self.headers.get(SIGNATURE_HEADER, ""), body)
            item = Received(
                json.loads(body), self.headers.get(DELIVERY_HEADER, ""), signed, arrived
            )
            with receiver.lock:
                receiver.received.append(item)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # the base class names it format
            """Quiet: the test reads what arrived, not an access log."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
