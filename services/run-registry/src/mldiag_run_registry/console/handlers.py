"""Serving the built console, and a page that says how to build it when it is not there."""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

CONSOLE_PATH = "/console"
BUILT_DIR = Path(__file__).parent / "static"
"""Where ``npm run build`` (in ``console/`` at the repository root) writes the app."""

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

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse(CONSOLE_PATH + "/")

    if (directory / "index.html").is_file():
        app.mount(CONSOLE_PATH, StaticFiles(directory=directory, html=True), name="console")
        return

    @app.get(CONSOLE_PATH + "/{path:path}", include_in_schema=False)
    async def not_built() -> Response:
        return HTMLResponse(_NOT_BUILT, status_code=503)
