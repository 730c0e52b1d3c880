# The driver polls the store on purpose: the provisioner is another process.
# ruff: noqa: ASYNC110
"""Opening a large profile: stock XProf cold vs mldiag's pre-warmed, proxied XProf.

Run: ``.venv/bin/python benchmarks/xprof_open.py [--min-mb 25] [--keep DIR]``

NATS from ``MLDIAG_BENCH_NATS_URL`` (a fresh namespace), else an embedded nats-server on
free ports. Every server runs as a real process on this machine.

0. a JAX CPU workload traced with the python tracer on, longer until its xplane is at
   about ``--min-mb`` MB (at least 95% of it; one host, one session);
(a) stock XProf (``python -m xprof.server --logdir D --port P --grpc_port G``) on a fresh
    copy: from its start to the first ``trace_viewer@`` data answer, and from ready (its
    ``runs`` answers) to that answer;
(b) mldiag: the session in a FileStore, ``python -m mldiag_xprof_provisioner`` with a
    viewer token. The session is announced on the bus (``ProfilerSessionChanged``) and
    pre-warmed by the provisioner's consumer (time until its ``prewarmed`` report);
    then the first ``trace_viewer@`` answer through the proxy with the instance already
    running (instance start = request to RUNNING), the same for a second, not pre-warmed
    copy of the session (the proxy without the warm-up), and the shareable link with the
    instance started on demand (link to first data). Instance RSS idle and after the trace.
"""

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import structlog
from _support import emit, free_port

from mldiag_platform.auth import open_token_directory, secret_hash
from mldiag_platform.bus import connect_bus
from mldiag_platform.settings import NatsSettings
from mldiag_platform.storage import FileStore
from mldiag_schemas.auth import Role, TokenGrant
from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionChanged,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    session_prefix,
)

PYTHON = sys.executable
RUN = "bench-run"
SESSION = "bench-session"
COLD_SESSION = "bench-session-cold"
HOST = "bench-host"
MB = 1024 * 1024


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- 0. the workload ------------------------------------------------------------------------


def _trace_into(logdir: str, seconds: float) -> None:
    """Child mode: a jitted loop plus python work, traced with the python tracer on."""
    import jax  # noqa: PLC0415  # only in the child
    import jax.numpy as jnp  # noqa: PLC0415

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ x.T) * 0.5 + x * 0.5

    def python_work(n: int) -> int:
        total = 0
        for i in range(n):
            total += i % 7
        return total

    x = jnp.ones((128, 128))
    step(x).block_until_ready()
    options = jax.profiler.ProfileOptions()
    options.session_id = "trace"
    options.python_tracer_level = 1
    jax.profiler.start_trace(logdir, profiler_options=options)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        x = step(x)
        x.block_until_ready()
        python_work(200)
    jax.profiler.stop_trace()


def make_xplane(work: Path, min_bytes: int) -> bytes:
    """Trace longer until the xplane is big enough; returns its bytes."""
    seconds = 2.5
    for _ in range(6):
        logdir = work / f"trace-{seconds:.2f}"
        started = time.perf_counter()
        subprocess.run(  # ourselves
            [PYTHON, __file__, "--trace-into", str(logdir), "--seconds", str(seconds)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        [path] = (logdir / "plugins" / "profile" / "trace").glob("*.xplane.pb")
        size = path.stat().st_size
        emit(
            f"  traced {seconds:5.2f} s -> xplane {size / MB:6.1f} MB"
            f" ({time.perf_counter() - started:.1f} s with JAX start and stop_trace)"
        )
        if size >= 0.95 * min_bytes:  # "about": the size grows by leaps with the duration
            data = path.read_bytes()
            shutil.rmtree(logdir)
            return data
        shutil.rmtree(logdir)
        seconds *= min_bytes / size * 1.15
    raise RuntimeError("the workload never made a big enough xplane")


# -- (a) stock XProf ------------------------------------------------------------------------


def stock_xprof(work: Path, xplane: bytes) -> dict[str, float]:
    logdir = work / "stock"
    session_dir = logdir / RUN / "plugins" / "profile" / SESSION
    session_dir.mkdir(parents=True)
    (session_dir / f"{HOST}.xplane.pb").write_bytes(xplane)
    port, grpc_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}/data/plugin/profile"
    log = (work / "stock-xprof.log").open("wb")
    started = time.perf_counter()
    process = subprocess.Popen(  # XProf, from fixed arguments
        [
            PYTHON,
            "-m",
            "xprof.server",
            "--logdir",
            str(logdir),
            "--port",
            str(port),
            "--grpc_port",
            str(grpc_port),
        ],
        stdout=log,
        stderr=log,
    )
    try:
        with httpx.Client(timeout=600) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{base}/runs").status_code == 200:
                        break
                if process.poll() is not None:
                    raise RuntimeError("stock XProf exited; see stock-xprof.log")
                time.sleep(0.02)
            ready = time.perf_counter()
            idle_rss = _rss_mb(process.pid)
            response = client.get(
                f"{base}/data",
                params={"run": f"{RUN}/{SESSION}", "tag": "trace_viewer@", "host": HOST},
            )
            response.raise_for_status()
            first_data = time.perf_counter()
            return {
                "start_to_ready": ready - started,
                "ready_to_data": first_data - ready,
                "start_to_data": first_data - started,
                "rss_idle_mb": idle_rss,
                "rss_after_mb": _rss_mb(process.pid),
                "answer_mb": len(response.content) / MB,
            }
    finally:
        process.terminate()
        process.wait(15)
        log.close()


# -- (b) mldiag -----------------------------------------------------------------------------


@contextlib.contextmanager
def _nats(work: Path) -> Iterator[str]:
    if url := os.environ.get("MLDIAG_BENCH_NATS_URL"):
        yield url
        return
    from mldiag.local.nats import EmbeddedNats  # noqa: PLC0415

    server = EmbeddedNats(work / "nats", port=free_port(), monitor_port=free_port())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def _grant(settings: NatsSettings) -> dict[Role, str]:
    """An editor token (the API: start and stop) and a viewer token (the shared link)."""
    granted = {}
    async with connect_bus(settings, "bench-tokens") as bus, open_token_directory(bus) as tokens:
        for role in (Role.EDITOR, Role.VIEWER):
            secret = "mldiag_" + secrets.token_urlsafe(32)
            grant = TokenGrant(token_id=f"bench-{role.value}", role=role)
            await tokens.grant(secret_hash(secret), grant)
            granted[role] = secret
    return granted


def _session(session_id: str) -> ProfilerSession:
    now = datetime.now(UTC)
    return ProfilerSession(
        name=f"projects/p/locations/l/machineLearningRuns/{RUN}/profilerSessions/{session_id}",
        session_id=session_id,
        run_id=RUN,
        kind=ProfilerSessionKind.PROGRAMMATIC,
        phase=ProfilerSessionPhase.SUCCEEDED,
        hosts=[
            ProfilerSessionHost(
                host=HOST, phase=ProfilerSessionPhase.SUCCEEDED, start_time=now, end_time=now
            )
        ],
        create_time=now,
        update_time=now,
    )


async def _warm_on_the_bus(settings: NatsSettings, store: FileStore) -> float:
    """Announce the session as the registry would; wait for the provisioner's marker."""
    marker = session_prefix(RUN, SESSION) + "cache_version.txt"
    async with connect_bus(settings, "bench-registry") as bus:
        started = time.perf_counter()
        await bus.publisher.publish(ProfilerSessionChanged(session=_session(SESSION)))
        while marker not in await store.list(session_prefix(RUN, SESSION)):
            await asyncio.sleep(0.05)
        return time.perf_counter() - started


def mldiag(work: Path, xplane: bytes, nats_url: str) -> dict[str, float]:
    store = FileStore(work / "storage")
    for session in (SESSION, COLD_SESSION):
        asyncio.run(store.put(f"{session_prefix(RUN, session)}{HOST}.xplane.pb", xplane))
    nats = NatsSettings(url=nats_url, namespace=f"bench{uuid.uuid4().hex[:8]}")
    tokens = asyncio.run(_grant(nats))
    port = free_port()
    env = {
        **os.environ,
        "MLDIAG_XPROF_PROVISIONER_PORT": str(port),
        "MLDIAG_XPROF_PROVISIONER_WORK_DIR": str(work / "provisioner"),
        "MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT": str(20_000 + os.getpid() % 10_000),
        "MLDIAG_XPROF_PROVISIONER_MEMORY_CHECK_SECONDS": "0.5",
        "MLDIAG_NATS_URL": nats.url,
        "MLDIAG_NATS_NAMESPACE": nats.namespace,
        "MLDIAG_STORAGE_URL": store.url,
        "MLDIAG_LOG_FORMAT": "json",
    }
    log = (work / "provisioner.log").open("wb")
    process = subprocess.Popen(  # the service, from fixed arguments
        [PYTHON, "-m", "mldiag_xprof_provisioner"], env=env, stdout=log, stderr=log
    )
    api = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(
            base_url=api, timeout=600, headers={"Authorization": f"Bearer {tokens[Role.EDITOR]}"}
        ) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/healthz").status_code == 200:
                        break
                if process.poll() is not None:
                    raise RuntimeError("the provisioner exited; see provisioner.log")
                time.sleep(0.05)
            results = {"warm": asyncio.run(_warm_on_the_bus(nats, store))}
            results.update(_running_instance(client))
        with httpx.Client(base_url=api, timeout=600) as browser:
            results.update(_open_link(browser, tokens[Role.VIEWER]))
        return results
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def _data(client: httpx.Client, base: str, session: str) -> httpx.Response:
    response = client.get(
        f"{base}data", params={"run": f"{RUN}/{session}", "tag": "trace_viewer@", "host": HOST}
    )
    response.raise_for_status()
    return response


def _running_instance(client: httpx.Client) -> dict[str, float]:
    started = time.perf_counter()
    created = client.post("/v1/xprofInstances", json={"runIds": [RUN]})
    created.raise_for_status()
    instance_start = time.perf_counter() - started
    instance = created.json()
    base = urlsplit(instance["url"]).path  # /xprof/<id>/data/plugin/profile/
    began = time.perf_counter()
    answer = _data(client, base, SESSION)
    warm_data = time.perf_counter() - began
    began = time.perf_counter()
    _data(client, base, SESSION)
    again = time.perf_counter() - began
    after_warm = _memory_after_checks(client, instance["instanceId"])
    began = time.perf_counter()
    _data(client, base, COLD_SESSION)
    cold_proxied = time.perf_counter() - began
    after_cold = _memory_after_checks(client, instance["instanceId"])
    client.delete(f"/v1/xprofInstances/{instance['instanceId']}").raise_for_status()
    return {
        "instance_start": instance_start,
        "warm_data": warm_data,
        "warm_again": again,
        "cold_proxied": cold_proxied,
        "rss_idle_mb": instance["memoryBytes"] / MB,
        "rss_after_warm_mb": after_warm / MB,
        "rss_after_cold_mb": after_cold / MB,
        "answer_mb": len(answer.content) / MB,
    }


def _memory_after_checks(client: httpx.Client, instance_id: str) -> int:
    time.sleep(1.2)  # two memory checks of the reaper
    memory: int = client.get(f"/v1/xprofInstances/{instance_id}").json()["memoryBytes"]
    return memory


def _open_link(browser: httpx.Client, token: str) -> dict[str, float]:
    started = time.perf_counter()
    opened = browser.get("/xprof/open", params={"run": RUN, "session": SESSION, "token": token})
    if opened.status_code != 303:
        raise RuntimeError(f"the open link answered {opened.status_code}: {opened.text}")
    redirected = time.perf_counter()
    base = opened.headers["location"].split("?")[0]
    _data(browser, base, SESSION)  # with the cookie the link set
    done = time.perf_counter()
    return {"link_to_redirect": redirected - started, "link_to_data": done - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-mb", type=float, default=25.0)
    parser.add_argument("--keep", type=Path, default=None, help="Keep files in this directory.")
    parser.add_argument("--trace-into", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace_into:
        _trace_into(args.trace_into, args.seconds)
        return
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    work = args.keep or Path(tempfile.mkdtemp(prefix="mldiag-bench-xprof-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        emit(f"xprof_open: {os.cpu_count()} CPUs, work dir {work}")
        emit("0. workload (JAX on CPU, python tracer on)")
        xplane = make_xplane(work, int(args.min_mb * MB))
        emit(f"   xplane: {len(xplane) / MB:.1f} MB")
        emit("(a) stock XProf, cold")
        stock = stock_xprof(work, xplane)
        emit(f"   start -> ready            {stock['start_to_ready']:7.2f} s")
        emit(f"   ready -> first trace data {stock['ready_to_data']:7.2f} s")
        emit(f"   start -> first trace data {stock['start_to_data']:7.2f} s")
        emit(
            f"   RSS idle {stock['rss_idle_mb']:.0f} MB, after the trace"
            f" {stock['rss_after_mb']:.0f} MB (answer {stock['answer_mb']:.1f} MB)"
        )
        emit("(b) mldiag: pre-warmed on the bus, through the proxy")
        with _nats(work) as nats_url:
            ours = mldiag(work, xplane, nats_url)
        emit(f"   pre-warm (announce -> caches stored)       {ours['warm']:7.2f} s")
        emit(f"   instance start (request -> RUNNING)        {ours['instance_start']:7.2f} s")
        emit(f"   first trace data, pre-warmed, running      {ours['warm_data']:7.2f} s")
        emit(f"   second trace data, same                    {ours['warm_again']:7.2f} s")
        emit(f"   first trace data, NOT pre-warmed, running  {ours['cold_proxied']:7.2f} s")
        emit(f"   open link -> redirect (instance on demand) {ours['link_to_redirect']:7.2f} s")
        emit(f"   open link -> first trace data              {ours['link_to_data']:7.2f} s")
        emit(
            f"   instance RSS idle {ours['rss_idle_mb']:.0f} MB, after the pre-warmed trace"
            f" {ours['rss_after_warm_mb']:.0f} MB, after the not pre-warmed one"
            f" {ours['rss_after_cold_mb']:.0f} MB (answer {ours['answer_mb']:.1f} MB)"
        )
        emit("speed-up (first trace data)")
        emit(
            f"   pre-warmed + running vs stock cold (ready -> data): "
            f"{stock['ready_to_data'] / ours['warm_data']:5.1f}x  (goal >= 5x)"
        )
        emit(
            f"   open link on demand vs stock cold (start -> data):  "
            f"{stock['start_to_data'] / ours['link_to_data']:5.1f}x"
        )
        emit(
            f"   proxy alone, not pre-warmed vs stock cold:          "
            f"{stock['ready_to_data'] / ours['cold_proxied']:5.1f}x"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
