"""How the registry serves the console's files (console/handlers.py): what browsers may keep.

Proves: an asset asked for with its content's version (``app.js?v=<16 hex of SHA-256>``, as
``console/build.mjs`` writes index.html) is ``immutable`` for a year; the page itself, an asset
without a version or with a stale one, and a rebuilt file are ``no-cache`` (revalidated, 304 on
a matching ETag, the 304 keeping Cache-Control); a gzipped copy from the build is sent to a
browser that takes gzip (with the original's type and ``Vary``), never one older than the file.
"""

import gzip
import hashlib
import os
from pathlib import Path

import httpx
import pytest

from mldiag_platform.http import create_http_app
from mldiag_run_registry.console.handlers import IMMUTABLE, REVALIDATE, mount_console

pytestmark = pytest.mark.unit

SCRIPT = b"console.log('mldiag');\n" * 100


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _build(root: Path) -> Path:
    """A console build: index.html naming app.js by version, app.js and its gzipped copy."""
    (root / "app.js").write_bytes(SCRIPT)
    (root / "app.js.gz").write_bytes(gzip.compress(SCRIPT))
    (root / "index.html").write_text(
        f'<!doctype html><title>mldiag</title><script src="app.js?v={_version(SCRIPT)}">'
    )
    return root


async def _get(built: Path, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    app = create_http_app("run-registry", None, {})
    mount_console(app, built)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(path, headers={"Accept-Encoding": "identity", **(headers or {})})


async def test_an_asset_asked_for_with_its_version_is_kept_for_good(tmp_path: Path) -> None:
    response = await _get(_build(tmp_path), f"/console/app.js?v={_version(SCRIPT)}")
    assert response.status_code == 200
    assert response.headers["cache-control"] == IMMUTABLE == "public, max-age=31536000, immutable"
    assert response.content == SCRIPT
    assert "javascript" in response.headers["content-type"]


@pytest.mark.parametrize("path", ["/console/", "/console/index.html", "/console/app.js"])
async def test_the_page_and_unversioned_assets_are_revalidated(tmp_path: Path, path: str) -> None:
    response = await _get(_build(tmp_path), path)
    assert response.status_code == 200
    assert response.headers["cache-control"] == REVALIDATE == "no-cache"
    assert response.headers["etag"]


async def test_a_stale_version_is_revalidated_not_kept(tmp_path: Path) -> None:
    built = _build(tmp_path)
    stale = _version(SCRIPT)
    (built / "app.js").write_bytes(b"console.log('rebuilt');\n")
    response = await _get(built, f"/console/app.js?v={stale}")
    assert response.headers["cache-control"] == REVALIDATE
    assert response.content == b"console.log('rebuilt');\n"  # the copy is older: not sent
    response = await _get(built, "/console/app.js?v=0123456789abcdef")
    assert response.headers["cache-control"] == REVALIDATE


async def test_a_matching_etag_answers_304_with_its_cache_control(tmp_path: Path) -> None:
    built = _build(tmp_path)
    first = await _get(built, "/console/")
    again = await _get(built, "/console/", {"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert again.headers["cache-control"] == REVALIDATE


async def test_a_browser_taking_gzip_gets_the_builds_gzipped_copy(tmp_path: Path) -> None:
    built = _build(tmp_path)
    path = f"/console/app.js?v={_version(SCRIPT)}"
    response = await _get(built, path, {"Accept-Encoding": "gzip, deflate, br"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["vary"] == "Accept-Encoding"
    assert "javascript" in response.headers["content-type"]
    assert response.headers["cache-control"] == IMMUTABLE
    assert response.content == SCRIPT  # httpx decodes it
    assert int(response.headers["content-length"]) == (built / "app.js.gz").stat().st_size
    again = await _get(
        built, path, {"Accept-Encoding": "gzip", "If-None-Match": response.headers["etag"]}
    )
    assert again.status_code == 304
    assert again.headers["vary"] == "Accept-Encoding"


async def test_a_gzipped_copy_older_than_its_file_is_never_sent(tmp_path: Path) -> None:
    built = _build(tmp_path)
    copy = built / "app.js.gz"
    older = (built / "app.js").stat().st_mtime_ns - 10**9
    os.utime(copy, ns=(older, older))
    response = await _get(built, "/console/app.js", {"Accept-Encoding": "gzip"})
    assert "content-encoding" not in response.headers
    assert response.content == SCRIPT
