"""Serving the built console, and a page that says how to build it when it is not there; the
runbooks (``docs/runbooks/*.md``, copied into the build) as markdown for its runbook page."""

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from mldiag_platform.errors import NotFound

CONSOLE_PATH = "/console"
BUILT_DIR = Path(__file__).parent / "static"
"""Where ``npm run build`` (in ``console/`` at the repository root) writes the app."""

RUNBOOKS = "runbooks"
"""The build's folder of runbooks: ``console/build.mjs`` copies ``docs/runbooks/*.md`` there, so
an installed registry serves the runbooks of its own version, never a source checkout's."""

_RUNBOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")

_NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>mldiag console</title>
<body style="font: 15px system-ui; margin: 3em; max-width: 40em">
<h1>The console is not built</h1>
<p>The API is up; only the web pages are missing. From the repository, run
<code>make console</code> (it needs Node.js and npm), or <code>make up</code>, which builds it.
<p>Serving a build from elsewhere: set <code>MLDIAG_RUN_REGISTRY_CONSOLE_DIR</code>.
</body>"""


def mount_console(app: FastAPI, built: Path | None) -> None:
    """Serve the console at ``/console/`` and send ``/`` there."""
    directory = built or BUILT_DIR

    # Registered before the mount below: the mount would answer every /console/ path.
    @app.get(CONSOLE_PATH + "/" + RUNBOOKS + "/{name:path}", include_in_schema=False)
    async def runbook(name: str) -> Response:
        return Response(read_runbook(directory, name), media_type="text/markdown; charset=utf-8")

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse(CONSOLE_PATH + "/")

    if (directory / "index.html").is_file():
        app.mount(CONSOLE_PATH, StaticFiles(directory=directory, html=True), name="console")
        return

    @app.get(CONSOLE_PATH + "/{path:path}", include_in_schema=False)
    async def not_built() -> Response:
        return HTMLResponse(_NOT_BUILT, status_code=503)


def read_runbook(directory: Path, name: str) -> bytes:
    """The markdown of runbook ``name`` (``numerical-instability``, ``.md`` optional) in the
    build at ``directory``, or ``NotFound`` (also for a name that is not a plain file name)."""
    stem = name.removesuffix(".md")
    path = directory / RUNBOOKS / f"{stem}.md"
    if not _RUNBOOK_NAME.fullmatch(stem) or not path.is_file():
        raise NotFound(f"no runbook named {name!r}")
    return path.read_bytes()
