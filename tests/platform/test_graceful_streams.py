"""A served app stops promptly on SIGTERM even with a live stream open: the stream ends on
the stopping event instead of holding uvicorn for its whole graceful timeout (10 s)."""

import signal
import subprocess
import sys
import time

import httpx
import pytest

from support import free_port

pytestmark = pytest.mark.unit

_APP = """
import asyncio
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from mldiag_platform.http import create_http_app, serve, stopping_event

async def lines(request: Request):
    yield "event: ready\\ndata: {}\\n\\n"
    await stopping_event(request.app).wait()

app = create_http_app("stream-test", None, {})

@app.get("/stream")
async def stream(request: Request):
    return StreamingResponse(lines(request), media_type="text/event-stream")

serve(app, "127.0.0.1", PORT)
"""


def test_sigterm_ends_open_streams_and_the_server_promptly() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", _APP.replace("PORT", str(port))])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        with httpx.stream("GET", url + "/stream", timeout=30) as response:
            lines = response.iter_lines()
            assert next(lines) == "event: ready"
            started = time.monotonic()
            server.send_signal(signal.SIGTERM)
            assert list(lines)[-1] == ""  # the stream ended cleanly
        # uvicorn re-raises the signal once it has shut down gracefully
        assert server.wait(timeout=8) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 5
    finally:
        server.kill()
        server.wait()
