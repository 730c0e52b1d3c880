"""What the edge (the one base URL) adds to a request: direct vs through the edge, side by side.

Run: ``.venv/bin/python benchmarks/edge.py [REQUESTS]``. Starts a stand-in service (uvicorn
and FastAPI, as the services run) and the real edge (``python -m mldiag_platform.edge``) in
front of it, then times the same requests both ways on a keep-alive client, as the SDK and
CLI send them: a small GET (a run read), a 64 KiB POST (a metrics batch, routed to
ingestion) and the first byte of a server-sent event stream. Prints p50/p95 in ms.
"""

import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import _support
import httpx

RUN = "/v1/projects/p/locations/l/machineLearningRuns/r1"
WRITE = "/v1/machineLearningRuns/r1/metrics:write"
STREAM = "/v1/machineLearningRuns/r1:watch"
BODY = b"x" * (64 * 1024)
ROUNDS = 10
READ_BODY: dict[str, object] = {
    "name": RUN,
    "displayName": "bench",
    "labels": {f"k{i}": "v" * 40 for i in range(30)},
}


def _upstream(port: int) -> None:
    """The stand-in service: a run read, a metrics write, an event stream."""
    import uvicorn  # noqa: PLC0415  # only the child process serves
    from fastapi import FastAPI, Request  # noqa: PLC0415
    from fastapi.responses import StreamingResponse  # noqa: PLC0415

    app = FastAPI()

    @app.get(RUN)
    async def read() -> dict[str, object]:
        return READ_BODY

    @app.post(WRITE, status_code=202)
    async def write(request: Request) -> dict[str, int]:
        return {"acceptedPoints": len(await request.body())}

    @app.get(STREAM)
    async def watch() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: {}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _time(call: Callable[[], None], requests: int) -> list[float]:
    for _ in range(min(20, requests)):
        call()
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _cases(client: httpx.Client, base: str) -> dict[str, Callable[[], None]]:
    def read() -> None:
        client.get(base + RUN).raise_for_status()

    def write() -> None:
        client.post(base + WRITE, content=BODY).raise_for_status()

    def stream() -> None:
        with client.stream("GET", base + STREAM) as response:
            next(response.iter_raw())

    return {
        "GET run (1.6 KB)": read,
        "POST metrics:write (64 KiB)": write,
        "SSE first event": stream,
    }


def main() -> None:
    """Start the stand-in and the edge, time both ways, print the table."""
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    service_port, edge_port = _support.free_port(), _support.free_port()
    logs = Path(tempfile.mkdtemp(prefix="mldiag-bench-edge-"))
    upstream = f"http://127.0.0.1:{service_port}"
    edge_env = {
        "MLDIAG_EDGE_PORT": str(edge_port),
        "MLDIAG_EDGE_RUN_REGISTRY_URL": upstream,
        "MLDIAG_EDGE_INGESTION_URL": upstream,
        "MLDIAG_LOG_LEVEL": "WARNING",
    }
    service_cmd = [sys.executable, __file__, "upstream", str(service_port)]
    edge_cmd = [sys.executable, "-m", "mldiag_platform.edge"]
    with (
        _support.process(service_cmd, {}, logs / "service.log"),
        _support.process(edge_cmd, edge_env, logs / "edge.log"),
    ):
        _support.wait_http(f"{upstream}/healthz")
        _support.wait_http(f"http://127.0.0.1:{edge_port}/_edge/healthz")
        _support.emit(f"edge latency, {requests} sequential requests per row, keep-alive client")
        _support.emit(
            f"{'request':<30} {'direct p50':>10} {'p95':>7} {'edge p50':>10} {'p95':>7} "
            f"{'added p50':>10}"
        )
        with httpx.Client(trust_env=False, timeout=10) as client:
            direct = _cases(client, upstream)
            edged = _cases(client, f"http://127.0.0.1:{edge_port}")
            for name in direct:
                # Interleaved in rounds, so a neighbour's load on a shared machine falls on
                # both columns alike.
                plain: list[float] = []
                routed: list[float] = []
                for _ in range(ROUNDS):
                    plain += _time(direct[name], requests // ROUNDS)
                    routed += _time(edged[name], requests // ROUNDS)
                p50, e50 = statistics.median(plain), statistics.median(routed)
                _support.emit(
                    f"{name:<30} {p50:>10.3f} {_support.percentile(plain, 95):>7.3f} "
                    f"{e50:>10.3f} {_support.percentile(routed, 95):>7.3f} {e50 - p50:>10.3f}"
                )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "upstream":
        _upstream(int(sys.argv[2]))
    else:
        main()
