"""Time to first chart in the web console on a run with 1M points per metric, headless Chromium.

Run: ``.venv/bin/python benchmarks/console_first_chart.py [--points N] [--hosts H]
[--repeat R] [--reference-repeat F] [--baseline REV]``

Stack: ingestion and run-registry as real processes (``python -m ...``) against the machine's
NATS (``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and PostgreSQL
(``MLDIAG_BENCH_DATABASE_URL``, a fresh database); the registry serves the built console at
``/console/`` (``make console`` first when it is not built). The browser is Debian's chromium
driven by Playwright (never a downloaded one).

0. load: one run, 3 metrics (``loss``, ``step_time``, ``duty_cycle``) of N points each (split
   over H hosts, every host logging the same steps), POSTed to ingestion's ``metrics:write``
   in 100k-point requests, 4 at a time; the clock stops when the registry's
   ``GET .../metrics`` counts every point.
1. mldiag: ``#/runs/<run>/metrics`` in a fresh browser context per repetition (cold HTTP
   cache, token put in localStorage before the page loads; the console rebuilt first when its
   sources are newer than the build): navigation start to the console's
   ``mldiag:first-chart`` mark, and to all 3 charts ``data-ready``. One discarded warm-up
   repetition first. Where the time goes: the page's waterfall (every request's start,
   first byte and end, and the console's own marks, p50 from navigation start) and the
   registry's time per route during the visits (its ``http.request.handled`` log lines).
   With ``--baseline REV`` the console as built from revision REV's sources is visited too,
   taking turns with the current build on the same registry and data (the served console
   directory is a link switched between visits), and the two are printed side by side: on a
   busy machine only such interleaved figures compare. Then, timed from Python (at least 30
   times), the server's downsampled read (``buckets=1000&withTimes=true``, the API's default
   grouping: a line per host) and a zoomed read (``startStep``/``endStep`` over 1% of the
   steps, at a different place each time).
2. reference, the naive chart without server downsampling: in a fresh context on the same
   origin, the page fetches every raw point of ``loss`` through the paged read API at its
   largest page size (following ``nextPageToken``), parses it, and draws the 1M points with
   the same uPlot the console bundles (its IIFE build from ``console/node_modules``).

Timings are printed, never asserted; the checks are that every point is stored and every
chart drew.
"""

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
import httpx
from _support import (
    create_run,
    drop_streams,
    emit,
    free_port,
    machine_summary,
    percentile,
    process,
    wait_http,
)
from playwright.sync_api import Browser, sync_playwright

from mldiag_run_registry.console.handlers import BUILT_DIR
from mldiag_run_registry.metrics.service import MAX_POINTS_PAGE_SIZE
from mldiag_schemas.telemetry import MAX_POINTS_PER_REQUEST

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SCHEMA = "bench_registry"
METRICS = ("loss", "step_time", "duty_cycle")
UPLOT = ROOT / "console" / "node_modules" / "uplot"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 900}  # the three charts are all in view at once
CONCURRENT_WRITES = 4
W = 62  # label column of the tables
STEP_INTERVAL = timedelta(milliseconds=10)

# Marks "bench:all-charts" once every chart has drawn (attribute mutations are seen in the
# same task as the console's own mark, so no polling delay is added), and says so on the
# console: the visit waits for that message rather than polling the page, since Playwright's
# polling injects its own script into the page (~15 ms of the page's main thread, mid-load).
ALL_CHARTS_JS = """
(() => {
  const want = %d;
  const check = () => {
    if (performance.getEntriesByName("bench:all-charts").length) return true;
    const ready = document.querySelectorAll('[data-testid="chart"][data-ready="true"]');
    if (ready.length < want) return false;
    performance.mark("bench:all-charts");
    console.debug("bench:all-charts");
    return true;
  };
  const observer = new MutationObserver(() => { if (check()) observer.disconnect(); });
  observer.observe(document, { subtree: true, attributes: true, attributeFilter: ["data-ready"] });
})();
"""

READ_MARKS_JS = """
(metric) => {
  const at = (name) => performance.getEntriesByName(name)[0]?.startTime ?? null;
  const resources = performance.getEntriesByType("resource");
  const loss = resources.find((e) => e.name.includes(`/metrics/${metric}?`));
  const app = resources.find((e) => new URL(e.name).pathname.endsWith("/app.js"));
  const list = resources.find((e) => new URL(e.name).pathname.endsWith("/metrics"));
  return {
    first: at("mldiag:first-chart"),
    all: at("bench:all-charts"),
    appLoaded: app ? app.responseEnd : null,
    listed: list ? list.responseEnd : null,
    readStart: loss ? loss.startTime : null,
    read: loss ? loss.duration : null,
    buckets: loss ? Number(new URL(loss.name).searchParams.get("buckets")) : null,
    charts: [...document.querySelectorAll('[data-testid="chart"]')].map((el) => ({
      metric: el.dataset.metric, points: Number(el.dataset.points ?? 0),
    })),
    // the page's waterfall: every request (start, first byte, end; the server's own time
    // from its Server-Timing header when it sends one) and the console's marks
    requests: [performance.getEntriesByType("navigation")[0], ...resources].map((e) => ({
      url: e.name,
      start: e.startTime,
      firstByte: e.responseStart,
      end: e.responseEnd,
      server: (e.serverTiming ?? []).reduce((sum, t) => sum + t.duration, 0) || null,
      bytes: e.transferSize,
    })),
    marks: performance.getEntriesByType("mark").map((e) => ({ name: e.name, at: e.startTime })),
  };
}
"""

# The naive chart: every raw point through the paged API, then one uPlot of all of them.
REFERENCE_JS = """
async ({ url, token, pageSize }) => {
  const headers = { Authorization: `Bearer ${token}` };
  const started = performance.now();
  let fetching = 0, parsing = 0, pages = 0, bytes = 0, pageToken = "";
  const xs = [], ys = [];
  do {
    const query = `?pageSize=${pageSize}`
      + (pageToken ? `&pageToken=${encodeURIComponent(pageToken)}` : "");
    const t0 = performance.now();
    const response = await fetch(url + query, { headers });
    if (!response.ok) throw new Error(`raw read answered ${response.status}`);
    const text = await response.text();
    const t1 = performance.now();
    const page = JSON.parse(text);
    for (const point of page.points) { xs.push(point.step); ys.push(point.value); }
    pageToken = page.nextPageToken;
    parsing += performance.now() - t1;
    fetching += t1 - t0;
    pages += 1;
    bytes += text.length;
  } while (pageToken);
  const fetched = performance.now();
  const data = [Float64Array.from(xs), Float64Array.from(ys)];
  const el = document.createElement("div");
  document.body.append(el);
  const drawn = await new Promise((resolve) => {
    new uPlot({
      width: 1200, height: 170, legend: { show: false },
      series: [{}, { stroke: "#2563eb", width: 1.5, spanGaps: true }],
      hooks: { draw: [() => resolve(performance.now())] },
    }, data, el);
  });
  return {
    points: xs.length, pages, bytes, fetching, parsing,
    fetched: fetched - started, draw: drawn - fetched, total: drawn - started,
  };
}
"""


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ensure_console() -> str:
    """Build the console when its build is missing or older than its sources (make decides);
    the version of uPlot it bundles."""
    stale = subprocess.run(
        ["make", "-q", "console"],  # noqa: S607  # the repo's make; exit 1: not up to date
        cwd=ROOT,
        check=False,
        capture_output=True,
    )
    if stale.returncode != 0 or not (UPLOT / "dist").is_dir():
        emit("# building the console (make console)")
        subprocess.run(["make", "console"], cwd=ROOT, check=True)  # noqa: S607  # the repo's make
    version: str = json.loads((UPLOT / "package.json").read_text())["version"]
    return version


def _value(metric: str, step: int, steps: int) -> float:
    """A plausible curve with a deterministic wobble (no RNG: every run draws the same)."""
    wobble = math.sin(step * 12.9898) * 0.5
    if metric == "loss":
        return round(2.5 * math.exp(-4 * step / steps) + 0.3 + 0.05 * wobble, 6)
    if metric == "step_time":
        return round(0.120 + 0.01 * wobble + (0.2 if step % 1000 == 0 else 0.0), 6)
    return round(0.85 + 0.1 * wobble, 6)


def _bodies(steps: int, hosts: int, started: datetime) -> Iterator[bytes]:
    """Write requests of at most ``MAX_POINTS_PER_REQUEST`` points, every metric and host."""
    block = MAX_POINTS_PER_REQUEST // (len(METRICS) * hosts)
    for first in range(0, steps, block):
        span = range(first, min(first + block, steps))
        times = [(started + s * STEP_INTERVAL).isoformat() for s in span]
        series = [
            {
                "name": metric,
                "host": f"host-{h}",
                "steps": list(span),
                "values": [_value(metric, s, steps) for s in span],
                "times": times,
            }
            for metric in METRICS
            for h in range(hosts)
        ]
        yield json.dumps({"series": series}).encode()


async def _load(ingestion: str, api: str, run_id: str, token: str, bodies: list[bytes]) -> int:
    """POST every body, a few at a time; return once the registry counts the points."""
    url = f"{ingestion}/v1/machineLearningRuns/{run_id}/metrics:write"
    gate = asyncio.Semaphore(CONCURRENT_WRITES)
    accepted = 0
    async with httpx.AsyncClient(timeout=300, headers=_auth(token)) as http:

        async def write(body: bytes) -> None:
            nonlocal accepted
            async with gate:
                response = await http.post(
                    url, content=body, headers={"Content-Type": "application/json"}
                )
                response.raise_for_status()
                accepted += response.json()["acceptedPoints"]

        await asyncio.gather(*(write(body) for body in bodies))
        while True:
            listed = await http.get(f"{api}/v1/machineLearningRuns/{run_id}/metrics")
            listed.raise_for_status()
            counts = {m["name"]: m["pointCount"] for m in listed.json()["metrics"]}
            if sum(counts.values()) >= accepted and set(counts) == set(METRICS):
                return accepted
            await asyncio.sleep(0.25)


async def _analyze(db: str) -> None:
    # autovacuum analyses freshly bulk-loaded tables within a minute or so; do it now so the
    # reads use their steady-state plans (as metrics_e2e does)
    conn = await asyncpg.connect(db)
    try:
        await conn.execute("ANALYZE")  # every table of the fresh database, whatever the store
    finally:
        await conn.close()


def _first_chart(browser: Browser, url: str, token: str) -> dict[str, Any]:
    """One cold visit of the metrics tab; the page's own marks."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        context.add_init_script(f"localStorage.setItem('mldiag.token', {json.dumps(token)});")
        context.add_init_script(ALL_CHARTS_JS % len(METRICS))
        page = context.new_page()
        with page.expect_console_message(
            lambda message: message.text == "bench:all-charts", timeout=120_000
        ):
            page.goto(url)
        marks: dict[str, Any] = page.evaluate(READ_MARKS_JS, METRICS[0])
    finally:
        context.close()
    drawn = {chart["metric"]: chart["points"] for chart in marks["charts"]}
    if set(drawn) != set(METRICS) or min(drawn.values()) == 0 or marks["first"] is None:
        raise RuntimeError(f"the console did not draw every chart: {drawn}")
    return marks


def _reference(browser: Browser, api: str, run_id: str, token: str) -> dict[str, Any]:
    """The raw fetch and the 1M-point uPlot, in a page on the registry's origin."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        page.goto(f"{api}/healthz")  # same origin as the API; no console code runs
        page.set_content("<!doctype html><title>reference</title><body></body>")
        page.add_script_tag(path=UPLOT / "dist" / "uPlot.iife.min.js")
        result: dict[str, Any] = page.evaluate(
            REFERENCE_JS,
            {
                "url": f"{api}/v1/machineLearningRuns/{run_id}/metrics/{METRICS[0]}",
                "token": token,
                "pageSize": MAX_POINTS_PAGE_SIZE,
            },
        )
    finally:
        context.close()
    return result


def _server_reads(api: str, run_id: str, token: str, steps: int, count: int) -> dict[str, Any]:
    """The downsampled read and a zoomed one, timed from Python (HTTP, one connection)."""
    url = f"/v1/machineLearningRuns/{run_id}/metrics/{METRICS[0]}"
    full: list[float] = []
    zoomed: list[float] = []
    width = max(1, steps // 100)
    with httpx.Client(base_url=api, timeout=60, headers=_auth(token)) as http:
        for _ in range(3):  # warm the connection and the caches
            http.get(url, params={"buckets": 1000, "withTimes": "true"}).raise_for_status()
        for i in range(count):
            started = time.perf_counter()
            answer = http.get(url, params={"buckets": 1000, "withTimes": "true"})
            answer.raise_for_status()
            full.append((time.perf_counter() - started) * 1000)
            first = int((i * 0.618033988749895) % 0.99 * steps)
            params: dict[str, str | int] = {"buckets": 1000, "withTimes": "true"}
            params.update(startStep=first, endStep=first + width - 1)
            started = time.perf_counter()
            zoom = http.get(url, params=params)
            zoom.raise_for_status()
            zoomed.append((time.perf_counter() - started) * 1000)
        body, zoom_body = answer.json(), zoom.json()
    return {
        "full": full,
        "zoomed": zoomed,
        "buckets": sum(len(s["buckets"]) for s in body["series"]),
        "source": body["source"],
        "zoom_buckets": sum(len(s["buckets"]) for s in zoom_body["series"]),
        "zoom_source": zoom_body["source"],
        "zoom_width": width,
    }


def _load_run(ingestion: str, api: str, run_id: str, token: str, steps: int, hosts: int) -> float:
    """Write the points, wait until they are stored; the seconds that took."""
    started_at = datetime.now(UTC) - steps * STEP_INTERVAL - timedelta(minutes=5)
    bodies = list(_bodies(steps, hosts, started_at))  # built before the clock starts
    started = time.perf_counter()
    stored = asyncio.run(_load(ingestion, api, run_id, token, bodies))
    load_s = time.perf_counter() - started
    written = steps * hosts * len(METRICS)
    if stored != written:
        raise RuntimeError(f"{stored} points stored, {written} written")
    emit()
    emit("## load: HTTP → ingestion → JetStream → registry → PostgreSQL, until counted")
    emit(
        f"{len(METRICS)} metrics x {steps * hosts:,} points ({hosts} host(s) x {steps:,}"
        f" steps) = {stored:,} points in {load_s:.1f} s ({stored / load_s:,.0f} points/s,"
        f" {CONCURRENT_WRITES} writes of {MAX_POINTS_PER_REQUEST:,} in flight)"
    )
    return load_s


def _p(samples: list[float], digits: int = 1) -> str:
    p50, p95 = percentile(samples, 50), percentile(samples, 95)
    return f"p50 {p50:8.{digits}f}  p95 {p95:8.{digits}f}"


def _print_visits(visits: list[dict[str, Any]], label: str = "current") -> None:
    def of(key: str) -> list[float]:
        return [v[key] for v in visits if v[key] is not None]

    drawn = {c["metric"]: c["points"] for c in visits[-1]["charts"]}
    emit()
    emit(
        f"## mldiag console ({label} build), #/runs/<run>/metrics, a fresh context each,"
        f" x {len(visits)} (ms)"
    )
    emit(f"{'navigation start → mldiag:first-chart':<{W}}{_p(of('first'))}")
    emit(f"{'navigation start → all 3 charts ready':<{W}}{_p(of('all'))}")
    emit(f"{'  app.js loaded':<{W}}{_p(of('appLoaded'))}")
    emit(f"{'  metric list answered':<{W}}{_p(of('listed'))}")
    emit(f"{f'  {METRICS[0]} downsampled read sent':<{W}}{_p(of('readStart'))}")
    emit(f"{f'  {METRICS[0]} downsampled read, request → response end':<{W}}{_p(of('read'))}")
    emit(
        f"buckets asked (the chart's width): {visits[-1]['buckets']}; x values drawn: "
        + ", ".join(f"{m} {n}" for m, n in sorted(drawn.items()))
    )


def _request_label(url: str, run_id: str) -> str:
    """A request's path without its origin and query, the run's id as ``<run>``."""
    parsed = urlsplit(url)
    path = unquote(parsed.path).replace(run_id, "<run>")
    return path + ("?…" if parsed.query else "")


def _print_waterfall(visits: list[dict[str, Any]], run_id: str) -> None:
    """Per request (its first occurrence in a visit) and per console mark, the p50 of when it
    happened, from navigation start: where the time to the first chart goes."""
    rows: dict[str, dict[str, list[float]]] = {}
    for visit in visits:
        seen: set[str] = set()
        for request in visit["requests"]:
            label = _request_label(request["url"], run_id)
            if label in seen:
                continue
            seen.add(label)
            row = rows.setdefault(label, {"start": [], "firstByte": [], "end": [], "server": []})
            for key in ("start", "firstByte", "end", "server"):
                if request[key] is not None:
                    row[key].append(request[key])
        for mark in visit["marks"]:
            label = f"mark {mark['name']}"
            if label not in seen:
                seen.add(label)
                rows.setdefault(label, {"start": [], "firstByte": [], "end": [], "server": []})
                rows[label]["start"].append(mark["at"])

    def p50(values: list[float]) -> str:
        return f"{percentile(values, 50):7.1f}" if values else f"{'—':>7}"

    emit()
    emit("## the page's waterfall, p50 ms from navigation start (server: its Server-Timing)")
    emit(f"{'request or mark':<{W}}{'start':>7} {'1st byte':>8} {'end':>7} {'server':>7}")
    for label, row in sorted(rows.items(), key=lambda item: percentile(item[1]["start"], 50)):
        emit(
            f"{label[: W - 1]:<{W}}{p50(row['start'])} {p50(row['firstByte']):>8}"
            f" {p50(row['end'])} {p50(row['server'])}"
        )


def _print_server_side(log: Path, visits: list[dict[str, Any]]) -> None:
    """The registry's own time per route during the visits (its http.request.handled lines)."""
    durations: dict[str, list[float]] = {}
    with log.open("rb") as lines:
        for visit in visits:
            start, end = visit["log"]
            lines.seek(start)
            for line in lines.read(end - start).splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("event") == "http.request.handled":
                    durations.setdefault(entry["route"], []).append(entry["duration_ms"])
    emit()
    emit(f"## the registry's time per route during these {len(visits)} visits (ms, from its log)")
    for route, samples in sorted(durations.items(), key=lambda item: -sum(item[1])):
        label = f"{route} (x {len(samples)})"
        emit(f"{label[: W - 1]:<{W}}{_p(samples)}")


def _print_reads(reads: dict[str, Any]) -> None:
    emit()
    emit(f"## server reads of {METRICS[0]}, timed from Python, x {len(reads['full'])} (ms)")
    label = f"buckets=1000&withTimes=true ({reads['buckets']} buckets, {reads['source']})"
    emit(f"{label:<{W}}{_p(reads['full'])}")
    label = (
        f"zoomed to {reads['zoom_width']:,} steps ({reads['zoom_buckets']} buckets,"
        f" {reads['zoom_source']})"
    )
    emit(f"{label:<{W}}{_p(reads['zoomed'])}")


def _print_reference(references: list[dict[str, Any]]) -> None:
    def of(key: str, scale: float = 1000) -> list[float]:
        return [r[key] / scale for r in references]

    ref = references[-1]
    emit()
    emit(
        f"## reference: the page fetches all {ref['points']:,} raw points of {METRICS[0]}"
        f" ({ref['pages']} pages of ≤{MAX_POINTS_PAGE_SIZE:,}, {ref['bytes'] / 1e6:.0f} MB)"
        f" and draws them with uPlot, x {len(references)}"
    )
    emit(f"{'fetch + parse of every page (s)':<{W}}{_p(of('fetched'), 2)}")
    emit(f"{'  of which waiting for the answers (s)':<{W}}{_p(of('fetching'), 2)}")
    emit(f"{'  of which JSON.parse + arrays (s)':<{W}}{_p(of('parsing'), 2)}")
    emit(f"{'uPlot draw of all the points (ms)':<{W}}{_p(of('draw', 1))}")
    emit(f"{'first request → drawn (s)':<{W}}{_p(of('total'), 2)}")


def main() -> None:
    """Load the run, visit the console, run the reference, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="Points per metric.")
    parser.add_argument("--hosts", type=int, default=1, help="Hosts sharing those points.")
    parser.add_argument("--repeat", type=int, default=10, help="Console visits measured.")
    parser.add_argument("--reference-repeat", type=int, default=3, help="Raw fetches measured.")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="Also visit the console as built at git revision REV, visits alternating with the"
        " current build's on the same registry and data, and print both side by side.",
    )
    args = parser.parse_args()
    steps = args.points // args.hosts
    uplot_version = _ensure_console()
    tag = uuid.uuid4().hex[:8]
    namespace = f"bench{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-bench-console-"))
    builds = {"current": BUILT_DIR}
    if args.baseline:
        revision = subprocess.run(
            ["git", "rev-parse", "--short", args.baseline],  # noqa: S607  # the repo's git
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        builds = {f"baseline {revision}": _build_console_at(revision, tmp), **builds}
    served = tmp / "served"  # the registry's console: a link to the build being visited
    served.symlink_to(BUILT_DIR, target_is_directory=True)
    db_name = f"mldiag_bench_{tag}"
    db = f"{SERVER.rpartition('/')[0]}/{db_name}"
    token = "mldiag_" + secrets.token_urlsafe(32)
    api_port, ingest_port = free_port(), free_port()
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": namespace,
        "MLDIAG_DATABASE_URL": db,
        "MLDIAG_RUN_REGISTRY_DB_SCHEMA": SCHEMA,
        "MLDIAG_RUN_REGISTRY_PORT": str(api_port),
        "MLDIAG_INGESTION_PORT": str(ingest_port),
        "MLDIAG_INGESTION_OTLP_ENABLED": "false",  # its fixed ports may be taken here
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": token,
        "MLDIAG_RUN_REGISTRY_CONSOLE_DIR": str(served),
    }
    api, ingestion = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ingest_port}"
    emit(
        f"# mldiag console benchmark {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {os.cpu_count()} CPUs"
        f" (load {os.getloadavg()[0]:.1f}), PostgreSQL {SERVER}, NATS {NATS}, {CHROMIUM}"
        f" (headless), uPlot {uplot_version}"
    )
    emit(f"# machine: {machine_summary()}")
    emit(
        "# command: .venv/bin/python benchmarks/console_first_chart.py"
        f" --points {args.points} --hosts {args.hosts} --repeat {args.repeat}"
        f" --reference-repeat {args.reference_repeat}"
        + (f" --baseline {args.baseline}" if args.baseline else "")
    )
    asyncio.run(_create_database(db_name))
    try:
        # the registry logs every request it handles (http.request.handled, with its
        # duration): the server's side of the page's waterfall
        registry_env = {**env, "MLDIAG_LOG_LEVEL": "INFO"}
        with (
            process([PYTHON, "-m", "mldiag_run_registry"], registry_env, tmp / "registry.log"),
            process([PYTHON, "-m", "mldiag_ingestion"], env, tmp / "ingestion.log"),
        ):
            wait_http(f"{api}/healthz")
            wait_http(f"{ingestion}/healthz")
            run_id = f"bench-{tag}"
            create_run(api, run_id, _auth(token))
            load_s = _load_run(ingestion, api, run_id, token, steps, args.hosts)
            asyncio.run(_analyze(db))

            site = Site(api, run_id, token, tmp / "registry.log", served, builds)
            figures = _measure(site, steps, args.repeat, args.reference_repeat)
    finally:
        asyncio.run(_drop_database(db_name))
        asyncio.run(drop_streams(NATS, namespace))
        shutil.rmtree(tmp, ignore_errors=True)
    _print_summary(steps * args.hosts, load_s, *figures)


@dataclass(frozen=True)
class Site:
    """The registry under test and the console builds it can serve."""

    api: str
    run_id: str
    token: str
    registry_log: Path
    served: Path
    """The console directory the registry serves: a link, pointed at the build visited."""
    builds: dict[str, Path]
    """By label, the builds visited (the current one last)."""

    def serve(self, label: str) -> None:
        """Point the served console at build ``label`` (a rename: never half of each)."""
        link = self.served.with_name(self.served.name + ".next")
        link.unlink(missing_ok=True)
        link.symlink_to(self.builds[label], target_is_directory=True)
        link.replace(self.served)


def _visits(site: Site, browser: Browser, repeat: int) -> dict[str, list[dict[str, Any]]]:
    """``repeat`` cold visits per build, the builds taking turns (which goes first alternates),
    so a busy machine weighs on each alike. Each visit carries its registry log lines."""
    console = f"{site.api}/console/#/runs/{site.run_id}/metrics"
    labels = list(site.builds)
    visits: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for label in labels:  # warm-up: browser start, JIT, the registry's first requests
        site.serve(label)
        _first_chart(browser, console, site.token)
    for round_ in range(repeat):
        for label in labels if round_ % 2 == 0 else labels[::-1]:
            site.serve(label)
            logged = site.registry_log.stat().st_size
            visit = _first_chart(browser, console, site.token)
            visit["log"] = (logged, site.registry_log.stat().st_size)
            visits[label].append(visit)
    return visits


def _measure(
    site: Site, steps: int, repeat: int, reference_repeat: int
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The console visits, the server reads and the reference, each printed when done; the
    current build's visits are returned."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            by_build = _visits(site, browser, repeat)
            for label, visits in by_build.items():
                _print_visits(visits, label)
                _print_waterfall(visits, site.run_id)
                _print_server_side(site.registry_log, visits)
            if len(by_build) > 1:
                _print_side_by_side(by_build)
            reads = _server_reads(site.api, site.run_id, site.token, steps, max(30, repeat))
            _print_reads(reads)
            references = [
                _reference(browser, site.api, site.run_id, site.token)
                for _ in range(reference_repeat)
            ]
            if references:
                _print_reference(references)
        finally:
            browser.close()
    return by_build["current"], reads, references


def _print_side_by_side(by_build: dict[str, list[dict[str, Any]]]) -> None:
    """The builds' figures in columns (p50 / p95, ms)."""
    labels = list(by_build)
    emit()
    emit("## side by side, the same registry and data, visits taking turns (p50 / p95, ms)")
    emit(f"{'':<{W}}" + "".join(f"{label[:24]:>26}" for label in labels))
    for key, name in (
        ("first", "navigation start → mldiag:first-chart"),
        ("all", "navigation start → all 3 charts ready"),
        ("listed", "  metric list answered"),
        ("readStart", f"  {METRICS[0]} downsampled read sent"),
        ("read", f"  {METRICS[0]} downsampled read, request → response end"),
    ):
        cells = []
        for label in labels:
            samples = [v[key] for v in by_build[label] if v[key] is not None]
            cells.append(
                f"{percentile(samples, 50):.0f} / {percentile(samples, 95):.0f}" if samples else "—"
            )
        emit(f"{name:<{W}}" + "".join(f"{cell:>26}" for cell in cells))


def _build_console_at(revision: str, tmp: Path) -> Path:
    """The console as built from ``revision``'s sources (with this checkout's node_modules)."""
    source = tmp / "baseline"
    source.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision, "console", "docs/runbooks"],  # noqa: S607  # the repo's git
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)  # noqa: S607
    (source / "console" / "node_modules").symlink_to(ROOT / "console" / "node_modules")
    subprocess.run(
        ["node", "build.mjs"],  # noqa: S607  # the machine's node, as `make console`
        cwd=source / "console",
        check=True,
        capture_output=True,
    )
    built = source / BUILT_DIR.relative_to(ROOT)
    if not (built / "index.html").is_file():
        raise RuntimeError(f"the console at {revision} did not build into {built}")
    emit(f"# baseline: the console at {revision} built into {built}")
    return built


FIRST_CHART_GOAL_MS = 200
"""Issue 19's goal for the first chart (p50), printed beside the figure."""
FIRST_CHART_BEFORE_MS = 363
"""The first chart's p50 when issue 19 was filed (2 CPUs), printed beside the figure."""


def _print_summary(
    points: int,
    load_s: float,
    visits: list[dict[str, Any]],
    reads: dict[str, Any],
    references: list[dict[str, Any]],
) -> None:
    first = [v["first"] for v in visits]
    first_p50 = percentile(first, 50)
    emit()
    if references:
        ref_p50 = percentile([r["total"] / 1000 for r in references], 50)
        raw_points = references[-1]["points"]
        emit(
            f"mldiag downsampled: first chart p50 {first_p50:.0f} ms | reference raw fetch of"
            f" {raw_points:,} points: {ref_p50:.1f} s (with the uPlot draw)"
        )
        raw = (
            f"; raw fetch + draw of {raw_points:,} points p50 {ref_p50:.1f} s"
            f" ({ref_p50 * 1000 / first_p50:.0f}x the first chart)"
        )
    else:
        raw = "; no reference run (--reference-repeat 0)"
    emit(
        f"first chart p50 {first_p50:.0f} ms | goal ≤ {FIRST_CHART_GOAL_MS} ms"
        f" ({FIRST_CHART_BEFORE_MS} ms when issue 19 was filed)"
    )
    emit(
        f"summary: {len(METRICS)} metrics x {points:,} points loaded in {load_s:.0f} s; first"
        f" chart p50 {first_p50:.0f} ms (p95 {percentile(first, 95):.0f}), all 3 charts p50"
        f" {percentile([v['all'] for v in visits], 50):.0f} ms; server read p50"
        f" {percentile(reads['full'], 50):.0f} ms, zoomed {percentile(reads['zoomed'], 50):.0f}"
        f" ms{raw}"
    )


async def _create_database(name: str) -> None:
    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def _drop_database(name: str) -> None:
    admin = await asyncpg.connect(SERVER)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


if __name__ == "__main__":
    main()
