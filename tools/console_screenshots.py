"""The console's screenshots in ``docs/console/``, taken from a realistic run rather than test data.

Run: ``.venv/bin/python tools/console_screenshots.py [--out docs/console]`` (``make console``
first; NATS with JetStream and PostgreSQL as the tests use them, ``MLDIAG_SHOTS_NATS_URL`` and
``MLDIAG_SHOTS_DATABASE_URL`` to point elsewhere; Debian's chromium at ``/usr/bin/chromium``).

A tool, not a test or a benchmark: it asserts nothing beyond "every page drew", and its output
is committed pictures. It serves the platform as an operator does, each service its own
process (``python -m mldiag_run_registry``, ingestion, event-detector, analyzer) on a fresh bus
namespace and fresh database schemas, all removed at the end. Two runs are recorded through the
real SDK (``mldiag.init``, ``run.log``, ``run.checkpoint``), each a numpy training loop: a small
MLP fitted by minibatch SGD on a synthetic regression, 300 steps with its loss, learning rate,
gradient norm and step time, a checkpoint saved every 100 steps, and its configs. The
baseline warms up and decays its learning rate; the other's keeps growing until the weights
overflow and the loss becomes NaN (a real NaN, from the arithmetic), which the event detector
turns into an event and the analyzers explain. A short sleep per step stands in for the input
pipeline, so the step times and the time axis read like a job's.

Pages, 1400x900 (each PNG well under 200 KB): the runs table; the baseline's metrics with
smoothing at 0.6; the unstable run's events with the non-finite loss event open and its
probable cause; the two runs compared on a log y axis.
"""

import argparse
import asyncio
import contextlib
import math
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import nats
import numpy as np
from playwright.sync_api import Page, ViewportSize, expect, sync_playwright

import mldiag
from mldiag_run_registry.console.handlers import BUILT_DIR

ROOT = Path(__file__).resolve().parent.parent
NATS_URL = os.environ.get("MLDIAG_SHOTS_NATS_URL", "nats://127.0.0.1:4222")
DATABASE_URL = os.environ.get(
    "MLDIAG_SHOTS_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT: ViewportSize = {"width": 1400, "height": 900}
STEPS = 300
CHECKPOINT_EVERY = 100
INPUT_WAIT_S = 0.02  # stands in for the input pipeline: a job's steps take time
MAX_PNG_BYTES = 200_000

T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(probe: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            found = probe()
            if found:
                return found
        time.sleep(0.2)
    raise RuntimeError(f"no {what} within {timeout} s")


@contextlib.contextmanager
def _service(module: str, env: dict[str, str], log: Path) -> Iterator[None]:
    """``python -m module`` with ``env``, output to ``log``; stopped (then killed) on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", module], env={**os.environ, **env}, stdout=out, stderr=out
        )
        try:
            yield
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _healthy(url: str) -> bool:
    return httpx.get(f"{url}/healthz").status_code == 200


async def _drop(namespace: str, schemas: list[str]) -> None:
    """Remove what the services made: the namespace's streams and buckets, the schemas."""
    client = await nats.connect(NATS_URL)
    try:
        js = client.jetstream()
        prefixes = (namespace.upper() + "_", f"KV_{namespace}_")
        for info in await js.streams_info():
            if (info.config.name or "").startswith(prefixes):
                await js.delete_stream(info.config.name or "")
    finally:
        await client.close()
    connection = await asyncpg.connect(DATABASE_URL)
    try:
        for schema in schemas:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()


@contextlib.contextmanager
def _platform(tmp: Path) -> Iterator[tuple[str, str, str]]:
    """The four services on a fresh namespace; yields (API URL, ingestion URL, admin token)."""
    tag = uuid.uuid4().hex[:8]
    namespace = f"shots{tag}"
    schemas = [f"shots{tag}_registry", f"shots{tag}_detector"]
    api_port, ingestion_port = _free_port(), _free_port()
    admin = "mldiag_" + secrets.token_urlsafe(32)
    env = {
        "MLDIAG_NATS_URL": NATS_URL,
        "MLDIAG_NATS_NAMESPACE": namespace,
        "MLDIAG_DATABASE_URL": DATABASE_URL,
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_PORT": str(api_port),
        "MLDIAG_RUN_REGISTRY_DB_SCHEMA": schemas[0],
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": admin,
        "MLDIAG_INGESTION_PORT": str(ingestion_port),
        "MLDIAG_INGESTION_OTLP_ENABLED": "false",  # its fixed ports may be taken
        "MLDIAG_EVENT_DETECTOR_PORT": str(_free_port()),
        "MLDIAG_EVENT_DETECTOR_DB_SCHEMA": schemas[1],
        "MLDIAG_ANALYZER_PORT": str(_free_port()),
    }
    api, ingestion = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ingestion_port}"
    try:
        with contextlib.ExitStack() as stack:
            for module in (
                "mldiag_run_registry",
                "mldiag_ingestion",
                "mldiag_event_detector",
                "mldiag_analyzer",
            ):
                stack.enter_context(_service(module, env, tmp / f"{module}.log"))
            for url in (api, ingestion):
                _wait(partial(_healthy, url), f"{url}/healthz")
            yield api, ingestion, admin
    finally:
        asyncio.run(_drop(namespace, schemas))


def _train(run: mldiag.Run, peak_lr: float, growth: float, seed: int, folder: Path) -> int:
    """A two-layer MLP (tanh) fitted by minibatch SGD; the step the loss stopped being finite
    at, or 0. The learning rate warms up over 30 steps, then decays by cosine (``growth`` 0)
    or grows by ``growth`` a step."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4096, 16)).astype(np.float32)
    y = (np.sin(x[:, :4].sum(axis=1)) + 0.1 * rng.normal(size=4096)).astype(np.float32)[:, None]
    w1 = (rng.normal(size=(16, 64)) / 4).astype(np.float32)
    w2 = (rng.normal(size=(64, 1)) / 8).astype(np.float32)
    bad = 0
    for step in range(1, STEPS + 1):
        started = time.perf_counter()
        time.sleep(INPUT_WAIT_S)
        batch = rng.integers(0, len(x), 128)
        xb, yb = x[batch], y[batch]
        warm = min(1.0, step / 30)
        decay = 0.5 * (1 + math.cos(math.pi * step / STEPS)) if growth == 0 else growth**step
        lr = peak_lr * warm * decay
        with np.errstate(all="ignore"):  # the unstable run overflows: that is the point
            hidden = np.tanh(xb @ w1)
            error = hidden @ w2 - yb
            loss = float(np.mean(error**2))
            grad_out = 2 * error / len(xb)
            grad_w2 = hidden.T @ grad_out
            grad_w1 = xb.T @ ((grad_out @ w2.T) * (1 - hidden**2))
            grad_norm = float(np.sqrt((grad_w1**2).sum() + (grad_w2**2).sum()))
            w1 -= lr * grad_w1
            w2 -= lr * grad_w2
        step_time = time.perf_counter() - started
        run.log(
            {"loss": loss, "learning_rate": lr, "gradient_norm": grad_norm, "step_time": step_time},
            step=step,
        )
        if not math.isfinite(loss):
            bad = bad or step
            if step >= bad + 5:  # a few steps of NaN, as a job logs before it is stopped
                return bad
        if step % CHECKPOINT_EVERY == 0:
            with run.checkpoint():
                np.savez(folder / f"ckpt-{step}.npz", w1=w1, w2=w2)
    return bad


def _record(api: str, ingestion: str, token: str, tmp: Path) -> tuple[str, str]:
    """The two runs through the SDK; their ids (baseline, unstable)."""
    common: dict[str, Any] = {
        "api_url": api,
        "ingestion_url": ingestion,
        "token": token,
        "spool_dir": tmp / "spool",
        "run_set": "mlp-sine",
        "labels": {"team": "research"},
        "log_system_metrics": False,  # keep the pictures about the model
    }
    configs = {"model": "mlp-16-64-1", "optimizer": "sgd", "batch_size": 128, "steps": STEPS}
    with mldiag.init(
        name="mlp baseline lr=0.3 cosine",
        configs={**configs, "peak_lr": 0.3, "schedule": "warmup+cosine"},
        **common,
    ) as baseline:
        _train(baseline, peak_lr=0.3, growth=0, seed=1, folder=tmp)
    unstable = mldiag.init(
        name="mlp lr grows 0.8%/step",
        configs={**configs, "peak_lr": 0.3, "schedule": "warmup+exponential(1.008)"},
        **common,
    )
    bad_step = _train(unstable, peak_lr=0.3, growth=1.008, seed=1, folder=tmp)
    if bad_step == 0:
        raise RuntimeError("the unstable run never went NaN: raise its growth")
    unstable.finish("FAILED", error=f"loss is NaN at step {bad_step}")
    return baseline.run_id, unstable.run_id


def _snap(page: Page, out: Path, name: str) -> None:
    page.mouse.move(0, 0)  # no hover state or chart cursor in the picture
    page.wait_for_timeout(400)  # let a last redraw land
    path = out / f"{name}.png"
    page.screenshot(path=str(path))
    size = path.stat().st_size
    print(f"{path}: {size:,} bytes")  # noqa: T201  # a tool's report
    if size > MAX_PNG_BYTES:
        raise RuntimeError(f"{path} is {size:,} bytes, over {MAX_PNG_BYTES:,}")


def _screenshots(api: str, token: str, baseline: str, unstable: str, out: Path) -> None:
    http = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"})

    def analysed_event() -> str | None:
        """The event of the loss going non-finite (not an earlier spike), once analysed."""
        events = http.get(f"/v1/machineLearningRuns/{unstable}/monitoredEvents").json()["events"]
        overflow = [e["eventId"] for e in events if e["displayName"].startswith("loss became")]
        if not overflow:
            return None
        answer = http.get(
            f"/v1/machineLearningRuns/{unstable}/analyses", params={"event": overflow[0]}
        ).json()
        return overflow[0] if any(a["reports"] for a in answer.get("analyses", [])) else None

    event = _wait(analysed_event, "analysed non-finite loss event", timeout=90)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(30_000)
        context.add_init_script(f"localStorage.setItem('mldiag.token', {token!r})")
        page = context.new_page()
        console = f"{api}/console/"

        page.goto(console + "#/runs")
        expect(page.locator(f'tr[data-run-id="{unstable}"]')).to_be_visible()
        _snap(page, out, "runs")

        page.goto(console + f"#/runs/{baseline}/metrics?smooth=0.6")
        for metric in ("loss", "learning_rate", "gradient_norm", "step_time"):
            chart = page.locator(f'[data-testid=chart][data-metric={metric}][data-ready="true"]')
            expect(chart).to_be_visible()
        _snap(page, out, "run-metrics")

        page.goto(console + f"#/runs/{unstable}/events?event={event}")
        detail = page.get_by_test_id("event-detail")
        expect(detail.locator("[data-testid=analyzer-report]").first).to_be_visible()
        page.locator(".events-tab").evaluate(
            "tab => window.scrollTo(0, tab.getBoundingClientRect().top + window.scrollY - 56)"
        )
        _snap(page, out, "run-events")

        # On a log axis: the diverged run's values would flatten the baseline's otherwise.
        page.goto(console + f"#/compare?runs={baseline},{unstable}&y=log")
        chart = page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
        expect(chart).to_be_visible()
        _snap(page, out, "compare")
        browser.close()
    http.close()


def main() -> None:
    """Serve, record, photograph, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    args = parser.parse_args()
    if not (BUILT_DIR / "index.html").is_file():
        raise SystemExit("the console is not built: run `make console`")
    with tempfile.TemporaryDirectory() as folder, _platform(Path(folder)) as (api, ing, token):
        baseline, unstable = _record(api, ing, token, Path(folder))
        _screenshots(api, token, baseline, unstable, args.out)


if __name__ == "__main__":
    main()
