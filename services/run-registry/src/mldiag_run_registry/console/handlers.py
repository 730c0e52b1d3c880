"""Serving the built console, and a page that says how to build it when it is not there; the
runbooks (``docs/runbooks/*.md``, copied into the build) as markdown for its runbook page.

Caching: ``index.html`` names its assets with their content's version (``app.js?v=<16 hex
digits of its SHA-256>``, written by ``console/build.mjs``). A request whose ``v`` is the
served file's version may be kept for good (``immutable``); anything else, the page itself
included, is revalidated on every use (``no-cache``, answered 304 from its ETag), so a new build
is seen at once and an unchanged one is not downloaded again. Where the build left a gzipped
copy (``app.js.gz``) and the browser accepts gzip, that copy is sent.
"""

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers, QueryParams
from starlette.staticfiles import NotModifiedResponse
from starlette.types import Scope

from mldiag_platform.errors import NotFound

CONSOLE_PATH = "/console"
BUILT_DIR = Path(__file__).parent / "static"
"""Where ``npm run build`` (in ``console/`` at the repository root) writes the app."""

RUNBOOKS = "runbooks"
"""The build's folder of runbooks: ``console/build.mjs`` copies ``docs/runbooks/*.md`` there, so
an installed registry serves the runbooks of its own version, never a source checkout's."""

_RUNBOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")

IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of an asset asked for with its current version: the URL never changes meaning."""
REVALIDATE = "no-cache"
"""Cache-Control of everything else: kept, but checked (ETag) before each use."""
VERSION_DIGITS = 16
"""Hex digits of the SHA-256 in an asset's ``?v=`` (as ``console/build.mjs`` writes them)."""

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
        app.mount(CONSOLE_PATH, ConsoleFiles(directory=directory, html=True), name="console")
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


class ConsoleFiles(StaticFiles):
    """The build's files with the caching headers above, and their gzipped copies."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        """The file (or its ``.gz`` copy) with its Cache-Control; 304 when the ETag matches."""
        path = Path(full_path)
        version = QueryParams(scope.get("query_string", b"")).get("v")
        current = version is not None and version == content_version(
            str(path), stat_result.st_mtime_ns, stat_result.st_size
        )
        gzipped = _gzipped_copy(path, stat_result, Headers(scope=scope))
        if gzipped is None:
            response = super().file_response(full_path, stat_result, scope, status_code)
        else:
            response = self._gzip_response(path, gzipped, scope, status_code)
        response.headers["Cache-Control"] = IMMUTABLE if current else REVALIDATE
        return response

    def _gzip_response(
        self, path: Path, gzipped: tuple[Path, os.stat_result], scope: Scope, status_code: int
    ) -> Response:
        copy, copy_stat = gzipped
        response = FileResponse(
            copy,
            status_code=status_code,
            stat_result=copy_stat,
            # the original's type (the copy's name would say gzip); `filename` unset keeps
            # Content-Disposition out
            media_type=FileResponse(path).media_type,
            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
        )
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def _gzipped_copy(
    path: Path, stat_result: os.stat_result, request: Headers
) -> tuple[Path, os.stat_result] | None:
    """The build's ``<file>.gz`` beside ``path`` when the browser takes gzip and the copy is
    not older than the file (a copy left from an older build is never sent)."""
    if "gzip" not in request.get("accept-encoding", "").lower():
        return None
    copy = path.with_name(path.name + ".gz")
    try:
        copy_stat = copy.stat()
    except OSError:
        return None
    if copy_stat.st_mtime_ns < stat_result.st_mtime_ns:
        return None
    return copy, copy_stat


@lru_cache(maxsize=256)
def content_version(path: str, mtime_ns: int, size: int) -> str:
    """The ``?v=`` of the file at ``path`` as it is now (``mtime_ns`` and ``size`` key the
    cache, so a rebuilt file is read again): the first hex digits of its SHA-256."""
    del mtime_ns, size  # the cache key only
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return digest[:VERSION_DIGITS]
