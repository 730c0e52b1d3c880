"""The runbooks the console serves (console/handlers.py): the markdown of a runbook packaged
with the build, and a 404 in the platform's error body for any other name.

Proves: ``/console/runbooks/<name>`` answers the build's ``runbooks/<name>.md`` (with or without
``.md``) as markdown, without a token, beside the mounted app; an unknown name, a path that
tries to leave the folder, or a registry without a build answers 404 ``not_found``.
"""

from pathlib import Path

import httpx
import pytest

from mldiag_platform.http import create_http_app
from mldiag_run_registry.console.handlers import RUNBOOKS, mount_console

pytestmark = pytest.mark.unit

HANG = "# Runbook: hang\n\nThe run stopped stepping.\n"


def _build(root: Path) -> Path:
    """A console build as ``console/build.mjs`` leaves it: the app and its runbooks."""
    (root / RUNBOOKS).mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>mldiag</title>")
    (root / RUNBOOKS / "hang.md").write_text(HANG)
    (root / "secret.md").write_text("outside the runbooks")
    return root


async def _get(built: Path, path: str) -> httpx.Response:
    app = create_http_app("run-registry", None, {})
    mount_console(app, built)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(path)


@pytest.mark.parametrize("name", ["hang", "hang.md"])
async def test_a_runbook_is_served_as_markdown(tmp_path: Path, name: str) -> None:
    response = await _get(_build(tmp_path), f"/console/runbooks/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    assert response.text == HANG


async def test_the_app_is_still_served_beside_the_runbooks(tmp_path: Path) -> None:
    response = await _get(_build(tmp_path), "/console/")
    assert response.status_code == 200
    assert "<title>mldiag</title>" in response.text


@pytest.mark.parametrize(
    "name", ["nope", "..%2Fsecret.md", "..%2F..%2Fsecret", "a/hang", ".hidden", "hang.txt"]
)
async def test_an_unknown_runbook_is_a_404_with_the_platform_error_body(
    tmp_path: Path, name: str
) -> None:
    response = await _get(_build(tmp_path), f"/console/runbooks/{name}")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert "runbook" in error["message"]


async def test_a_registry_without_a_build_has_no_runbooks(tmp_path: Path) -> None:
    response = await _get(tmp_path, "/console/runbooks/hang")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
