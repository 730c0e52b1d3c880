"""The console's screenshots in ``docs/console/``, taken from a realistic run rather than test data.

Run: ``.venv/bin/python tools/console_screenshots [--out docs/console]`` (``make console``
first; Debian's chromium at ``/usr/bin/chromium``). About a minute on two CPUs. The folder's
modules import each other by bare name: Python puts the folder it runs first on the path.
Type-check: ``MYPYPATH=tools/console_screenshots:tests .venv/bin/mypy
tools/console_screenshots/__main__.py``.

A tool, not a test or a benchmark: it asserts nothing beyond "every page drew", and its output
is committed pictures. It serves the platform as an operator does, ``mldiag up --detach`` in
a temporary home on free ports (embedded NATS and PostgreSQL, every service its own process,
the edge, the local executor with this interpreter as its ``python`` image), and removes it
at the end. On it:

- two runs recorded through the real SDK (``monitored.py``): numpy training loops, the
  second diverging to a real NaN that the event detector and analyzers explain;
- a study of 6 trials, 2 at a time, over learning rate and width (``training.py``): each
  trial a numpy script on the executor reporting its loss in the ``cloudml-hypertune`` file;
  then a second, of 12 with median stopping, still running when the Tuning page is drawn;
- two training pipelines, each a custom job (a numpy script printing its progress and
  saving its weights to ``AIP_MODEL_DIR``) whose model is imported: version 1 of
  ``mlp-sine``, then version 2, aliased ``baseline`` and ``prod``;
- a JAX custom job serving XProf's profiler, captured on demand from the console's form;
- share links to the diverged run and to its non-finite loss event.

Pages, 1400x900 (each PNG under 200 KB): runs (run set ``mlp-sine``: the SDK's runs and the
jobs'), run-metrics, run-events, compare, jobs, job (the second pipeline's job while it
runs), tuning, study, models, model, run-profiles, shared-run, shared-event.
"""

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import httpx
import pages
from monitored import record_runs
from playwright.sync_api import ViewportSize, sync_playwright

import training
from mldiag_run_registry.console.handlers import BUILT_DIR

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.append(str(ROOT / "tests"))  # the stack harness the tests and benchmarks share
from stacks import running_stack  # noqa: E402  # found through the path set above

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT: ViewportSize = {"width": 1400, "height": 900}

T = TypeVar("T")


def _wait(probe: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            found = probe()
            if found:
                return found
        time.sleep(0.3)
    raise RuntimeError(f"no {what} within {timeout} s")


def _analysed_event(http: httpx.Client, unstable: str) -> str | None:
    """The event of the loss going non-finite (not an earlier spike), once analysed."""
    events = http.get(f"/v1/machineLearningRuns/{unstable}/monitoredEvents").json()["events"]
    overflow = [e["eventId"] for e in events if e["displayName"].startswith("loss became")]
    if not overflow:
        return None
    answer = http.get(
        f"/v1/machineLearningRuns/{unstable}/analyses", params={"event": overflow[0]}
    ).json()
    return overflow[0] if any(a["reports"] for a in answer.get("analyses", [])) else None


def _profiler_target(http: httpx.Client, run_id: str) -> bool:
    """Whether the run's profiler server has registered itself."""
    answer = http.get(f"/v1/machineLearningRuns/{run_id}/profilerTargets")
    return answer.status_code == 200 and bool(answer.json().get("profilerTargets"))


def _share(http: httpx.Client, resource: str) -> str:
    """A share link's token, made through the API as the console's dialog makes them."""
    answer = http.post("/v1/shareLinks", json={"resource": resource, "ttlSeconds": 3600})
    answer.raise_for_status()
    token: str = answer.json()["token"]
    return token


def _photograph(api: str, token: str, scratch: Path, out: Path) -> None:
    http = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    train, trial, profiled = training.write_scripts(scratch)
    # The study's trials run while the runs record.
    study = training.start_study(http, trial, "mlp lr x width sweep", 6)
    baseline, unstable = record_runs(api, token, scratch)
    first = training.start_pipeline(http, train, "mlp-sine-lr0.1", 0.1, parent_model=None)
    model: str = training.wait_ended(http, first)["modelToUpload"]["name"]
    training.wait_ended(http, study, timeout=300)
    second = training.start_pipeline(http, train, "mlp-sine-lr0.3", 0.3, parent_model=model)
    job_id = training.backing_job(http, second)
    # Still running when the Tuning page is drawn.
    training.start_study(http, trial, "mlp lr sweep, median stopping", 12, stopping=True)

    camera = pages.Camera(out)
    console = f"{api}/console/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        signed_in = browser.new_context(viewport=VIEWPORT)
        signed_in.set_default_timeout(60_000)
        signed_in.add_init_script(f"localStorage.setItem('mldiag.token', {json.dumps(token)})")
        page = signed_in.new_page()
        pages.job(camera, page, console, job_id)  # while it runs
        training.wait_ended(http, second)
        training.alias(http, model, "1", ["baseline"])
        training.alias(http, model, "2", ["prod"])
        pages.models(camera, page, console, model.rsplit("/", 1)[-1])
        stop = scratch / "stop-profiled-job"
        profiled_job = training.start_profiled_job(http, profiled, stop)
        _wait(partial(_profiler_target, http, profiled_job), "the JAX job's profiler", 120)
        pages.profiles(camera, page, console, profiled_job)
        stop.touch()
        pages.study(camera, page, console, study.rsplit("/", 1)[-1])
        pages.runs(camera, page, console, baseline, unstable)
        event = _wait(
            partial(_analysed_event, http, unstable), "analysed non-finite loss event", 90
        )
        pages.event(camera, page, console, unstable, event)

        signed_out = browser.new_context(viewport=VIEWPORT)
        signed_out.set_default_timeout(60_000)
        run_link = _share(http, f"machineLearningRuns/{unstable}")
        event_link = _share(http, f"machineLearningRuns/{unstable}/monitoredEvents/{event}")
        pages.shared(camera, signed_out, console, run_link, event_link)
        browser.close()
    http.close()


def main() -> None:
    """Serve, record, train, photograph, clean up."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    args = parser.parse_args()
    if not (BUILT_DIR / "index.html").is_file():
        raise SystemExit("the console is not built: run `make console`")
    started = time.monotonic()
    env = {
        "MLDIAG_EXECUTOR_IMAGES": json.dumps({"python": sys.executable}),
        "MLDIAG_LOG_LEVEL": "WARNING",
    }
    with (
        tempfile.TemporaryDirectory(prefix="mldiag-shots-") as folder,
        running_stack("mldiag-shots-", env) as stack,
    ):
        scratch = Path(folder)
        scratch.chmod(0o755)  # the executor's replicas read the scripts here
        _photograph(stack.api, stack.token, scratch, args.out.resolve())
    print(f"done in {time.monotonic() - started:.0f} s")  # noqa: T201  # a tool's report


if __name__ == "__main__":
    main()
