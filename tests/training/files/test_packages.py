"""Package uploads over HTTP against real storage (file:// and the GCS emulator): stored by
content where the executor installs from, streamed in, refused with 4xx when bad."""

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from mldiag_schemas.auth import Role
from training.files.conftest import BOTH_STORAGES, FilesApi

pytestmark = pytest.mark.connected

UPLOAD = "/upload/v1/projects/default/locations/us-central1/packages"


@BOTH_STORAGES
async def test_a_package_is_stored_by_content_where_its_uri_says(files_api: FilesApi) -> None:
    data = b"PK\x03\x04 a wheel" * 1000
    digest = hashlib.sha256(data).hexdigest()
    response = await files_api.client.post(
        UPLOAD, params={"name": "trainer-0.1-py3-none-any.whl"}, content=data
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    key = f"packages/{digest}/trainer-0.1-py3-none-any.whl"
    assert answer == {
        "uri": f"{files_api.store.url}/{key}",
        "sha256": digest,
        "sizeBytes": str(len(data)),
    }
    assert await files_api.store.get(key) == data
    if answer["uri"].startswith("file://"):
        stored = Path(urlparse(answer["uri"]).path)
        assert await asyncio.to_thread(stored.read_bytes) == data
    else:
        assert answer["uri"].startswith("gs://mldiag-test/artifacts/packages/")

    # the same bytes again (short form, streamed in chunks): the same package, stored once
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 4096):
            yield data[start : start + 4096]

    again = await files_api.client.post(
        "/upload/v1/packages", params={"name": "trainer-0.1-py3-none-any.whl"}, content=chunks()
    )
    assert again.status_code == 200, again.text
    assert again.json() == answer
    assert await files_api.store.list("packages/") == [key]


async def test_bad_uploads_are_refused_and_nothing_is_stored(files_api: FilesApi) -> None:
    cases = [
        ({"name": "../evil.whl"}, b"x", 400, "invalid_package_name"),
        ({"name": "trainer.exe"}, b"x", 400, "invalid_package_name"),
        ({"name": "dir/trainer.tar.gz"}, b"x", 400, "invalid_package_name"),
        ({}, b"x", 400, "invalid_argument"),  # no name at all
        ({"name": "trainer-0.1.tar.gz"}, b"", 400, "empty_package"),
    ]
    for params, body, status, reason in cases:
        response = await files_api.client.post(UPLOAD, params=params, content=body)
        assert response.status_code == status, (params, response.text)
        assert response.json()["error"]["details"][0]["reason"] == reason, params
    assert await files_api.store.list("packages/") == []


async def test_an_upload_over_the_limit_is_refused(files_api: FilesApi) -> None:
    too_big = b"x" * (1024 * 1024 + 1)  # the fixture's limit is 1 MiB
    declared = await files_api.client.post(
        UPLOAD, params={"name": "big-1.0.tar.gz"}, content=too_big
    )
    assert declared.status_code == 413, declared.text

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as read
        for _ in range(5):
            yield b"x" * (256 * 1024)

    streamed = await files_api.client.post(
        UPLOAD, params={"name": "big-1.0.tar.gz"}, content=chunked()
    )
    assert streamed.status_code == 413, streamed.text
    assert await files_api.store.list("packages/") == []

    # the JSON routes keep their own (smaller) limit: the upload's does not raise theirs
    fits = await files_api.client.post(
        UPLOAD, params={"name": "ok-1.0.tar.gz"}, content=b"y" * 1000
    )
    assert fits.status_code == 200


async def test_uploading_takes_an_editor(files_api: FilesApi) -> None:
    viewer = await files_api.client.post(
        UPLOAD,
        params={"name": "t-1.0.tar.gz"},
        content=b"x",
        headers=files_api.tokens.headers(Role.VIEWER),
    )
    assert viewer.status_code == 403
    assert viewer.json()["error"]["status"] == "PERMISSION_DENIED"
    bad_parent = await files_api.client.post(
        "/upload/v1/projects/Bad_Project/locations/local/packages",
        params={"name": "t-1.0.tar.gz"},
        content=b"x",
    )
    assert bad_parent.status_code == 400
