"""What the console's page tests share: the seeded ids, a client of the served platform as a
job or a user calls it, fresh browser pages that collect script errors, and the waits, series
and canvas checks the tests use (``conftest`` serves the platform and the browser).
"""

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize

from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings

VIEWPORT: ViewportSize = {"width": 1400, "height": 900}
PROFILED_JOB = Path(__file__).parents[1] / "e2e" / "profiled_job.py"

T = TypeVar("T")

# What conftest seeds (fixed ids: the session's registry has a schema of its own).
ALPHA, BETA, GAMMA = "alpha", "beta", "gamma"
UNSTABLE = "unstable"
PROFILED = "profiled"
SEED_STEPS = 200
LINE_BLUE = (0x25, 0x63, 0xEB)  # the console's first line colour (chart.ts PALETTE[0])


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """Call ``probe`` until it answers something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s (last: {result!r})")
        time.sleep(0.1)


def series(name: str, steps: range, values: list[float], host: str = "host-0") -> dict[str, Any]:
    """One series of a ``metrics:write`` body."""
    return {"name": name, "steps": list(steps), "values": values, "host": host}


def loss_curve(steps: range, offset: float = 0.0) -> list[float]:
    """A loss that falls the way training losses do, with a little wobble."""
    return [2.5 * math.exp(-s / 60) + 0.3 + 0.05 * math.sin(s / 3) + offset for s in steps]


@dataclass(frozen=True)
class ServiceSettings:
    """Where the served services live (bus namespace, database, storage), so a test can serve
    one more service beside them (the training service for the Jobs page)."""

    nats: NatsSettings
    database: DatabaseSettings
    storage: StorageSettings
    tag: str


class Platform:
    """The served platform: its URLs, a token per role, and what a job or a user calls."""

    def __init__(
        self,
        api_url: str,
        ingestion_url: str,
        admin: str,
        services: ServiceSettings | None = None,
    ) -> None:
        self.services = services
        self.api_url = api_url
        self.console_url = f"{api_url}/console/"
        headers = {"Authorization": f"Bearer {admin}"}
        self.api = httpx.Client(base_url=api_url, headers=headers, timeout=30)
        self.ingestion = httpx.Client(base_url=ingestion_url, headers=headers, timeout=30)
        self.admin = admin
        self.viewer = self.token("viewer")
        self.editor = self.token("editor")
        self.processes: list[subprocess.Popen[bytes]] = []

    def token(self, role: str) -> str:
        """A new API token of ``role`` (through the API), once the registry accepts it."""
        created = self.api.post("/v1/apiTokens", json={"role": role, "displayName": role})
        assert created.status_code == 200, created.text
        secret: str = created.json()["secret"]
        with self.as_bearer(secret) as client:
            wait_for(lambda: client.get("/v1/caller").status_code == 200, f"{role} token")
        return secret

    def as_bearer(self, token: str) -> httpx.Client:
        """A client of the registry that sends ``token`` (an API token or a share token)."""
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def create_run(self, run_id: str, display_name: str, **fields: Any) -> None:
        body = {"runId": run_id, "displayName": display_name, **fields}
        created = self.api.post("/v1/machineLearningRuns", json=body)
        assert created.status_code == 200, created.text

    def write(self, run_id: str, *written: dict[str, Any]) -> None:
        """Points through ingestion's write route (a NaN goes as the JSON token ``NaN``)."""
        response = self.ingestion.post(
            f"/v1/machineLearningRuns/{run_id}/metrics:write",
            content=json.dumps({"series": list(written)}),  # httpx's json= refuses NaN
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 202, response.text

    def get(self, path: str, **params: Any) -> Any:
        response = self.api.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def point_count(self, run_id: str, metric: str) -> int:
        listed = self.get(f"/v1/machineLearningRuns/{run_id}/metrics")["metrics"]
        return sum(int(m["pointCount"]) for m in listed if m["name"] == metric)

    def share(self, resource: str, ttl_seconds: int = 3600) -> dict[str, Any]:
        """A share link made through the API (the console's dialog makes them the same way)."""
        created = self.api.post(
            "/v1/shareLinks", json={"resource": resource, "ttlSeconds": ttl_seconds}
        )
        assert created.status_code == 200, created.text
        link: dict[str, Any] = created.json()
        return link

    def start_profiled_job(self, run_id: str, stop: Path, env: dict[str, str]) -> None:
        """The JAX job of tests/e2e serving its profiler (registered as the run's target)."""
        process = subprocess.Popen(
            [sys.executable, str(PROFILED_JOB), "serve"],
            env={
                **os.environ,
                **env,
                "MLDIAG_RUN_ID": run_id,
                "MLDIAG_HOST": "host-0",
                "MLDIAG_PROCESS_INDEX": "0",
                "STOP_FILE": str(stop),
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.processes.append(process)

    def close(self) -> None:
        self.api.close()
        self.ingestion.close()

    def targets(self, run_id: str) -> list[dict[str, Any]]:
        for process in self.processes:
            if process.poll() not in (None, 0):
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise AssertionError(f"the profiled job failed ({process.returncode}):\n{stderr}")
        response = self.api.get(f"/v1/machineLearningRuns/{run_id}/profilerTargets")
        if response.status_code == 404:
            return []  # the job has not created its run yet
        response.raise_for_status()
        targets: list[dict[str, Any]] = response.json().get("profilerTargets", [])
        return targets


def wait_for_analysis(platform: Platform, run_id: str, event_id: str) -> dict[str, Any]:
    def analysis() -> dict[str, Any] | None:
        answer = platform.get(f"/v1/machineLearningRuns/{run_id}/analyses", event=event_id)
        found = [a for a in answer["analyses"] if a["eventId"] == event_id and a["reports"]]
        return found[0] if found else None

    result: dict[str, Any] = wait_for(analysis, f"analysis of event {event_id}")
    return result


class Pages:
    """Fresh browser contexts for one test (each a separate user: own storage, no token
    unless given), and every uncaught script error their pages raise."""

    def __init__(self, browser: Browser, platform: Platform) -> None:
        self._browser = browser
        self._platform = platform
        self.contexts: list[BrowserContext] = []
        self.errors: list[str] = []

    def open(self, token: str | None = None, hash_route: str = "", url: str = "") -> Page:
        """A page in a fresh context, signed in with ``token`` (localStorage, as after a
        sign-in) when given, at ``url`` or the console's ``hash_route``."""
        context = self._browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(15_000)
        self.contexts.append(context)
        if token:
            context.add_init_script(f"localStorage.setItem('mldiag.token', {token!r})")
        page = context.new_page()
        page.on("pageerror", lambda error: self.errors.append(f"{page.url}: {error}"))
        page.goto(url or self._platform.console_url + hash_route)
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


def mark_page(page: Page) -> None:
    """Tag the loaded document: a reload would drop the tag (see ``not_reloaded``)."""
    page.evaluate("window.__mldiagTestMark = true")


def not_reloaded(page: Page) -> bool:
    return bool(page.evaluate("window.__mldiagTestMark === true"))


CANVAS_COLOURS = """(metric) => {
  const canvas = document.querySelector(`[data-testid=chart][data-metric="${metric}"] canvas`);
  const { width, height } = canvas;
  const data = canvas.getContext("2d").getImageData(0, 0, width, height).data;
  const colours = new Map();
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] === 0) continue;  // transparent: nothing drawn there
    const key = [data[i] >> 4, data[i + 1] >> 4, data[i + 2] >> 4, data[i + 3] >> 6].join(",");
    colours.set(key, (colours.get(key) ?? 0) + 1);
  }
  return { width, height, colours: Object.fromEntries(colours) };
}"""


def near(key: str, rgb: tuple[int, int, int]) -> bool:
    r, g, b, a = (int(part) for part in key.split(","))
    return a == 3 and all(abs(c - (want >> 4)) <= 1 for c, want in zip((r, g, b), rgb, strict=True))
