"""Object storage: the same behaviour from file:// and from gs:// (against an emulator)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mldiag_platform import storage
from mldiag_platform.errors import InvalidArgument, NotFound
from mldiag_platform.storage import FileStore, GcsStore, ObjectStore, open_store, write_atomically
from support import free_port


@pytest.fixture
def gcs_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsStore]:
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="mldiag-test")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield GcsStore("mldiag-test", "artifacts")
    finally:
        server.stop()


@pytest.fixture(params=["file", "gs"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return FileStore(tmp_path / "root")
    gcs: GcsStore = request.getfixturevalue("gcs_store")
    return gcs


async def test_put_get_list_delete(store: ObjectStore) -> None:
    await store.put("run-1/plugins/profile/s1/host-a.xplane.pb", b"\x00\x01profile")
    await store.put("run-1/plugins/profile/s1/host-b.xplane.pb", b"b")
    await store.put("run-2/other.txt", b"x")
    assert await store.get("run-1/plugins/profile/s1/host-a.xplane.pb") == b"\x00\x01profile"
    assert await store.list("run-1/") == [
        "run-1/plugins/profile/s1/host-a.xplane.pb",
        "run-1/plugins/profile/s1/host-b.xplane.pb",
    ]
    await store.put("run-2/other.txt", b"replaced")
    assert await store.get("run-2/other.txt") == b"replaced"
    await store.delete("run-2/other.txt")
    await store.delete("run-2/other.txt")  # deleting twice is fine
    with pytest.raises(NotFound):
        await store.get("run-2/other.txt")


@pytest.mark.parametrize("key", ["../escape", "/absolute", "", "dir/"])
async def test_keys_cannot_escape_the_root(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidArgument):
        await store.put(key, b"x")


def test_open_store_understands_both_schemes(tmp_path: Path, gcs_store: GcsStore) -> None:
    local = open_store(f"file://{tmp_path}")
    assert isinstance(local, FileStore)
    assert local.root == tmp_path.resolve()
    assert os.environ["STORAGE_EMULATOR_HOST"].startswith("http://")
    remote = open_store("gs://mldiag-test/some/prefix")
    assert isinstance(remote, GcsStore)
    assert remote.url == "gs://mldiag-test/some/prefix"
    with pytest.raises(InvalidArgument):
        open_store("s3://bucket")


def test_write_atomically_leaves_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.xplane.pb"
    write_atomically(target, b"one")
    write_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["b.xplane.pb"]
    assert storage._write_atomically is write_atomically  # the earlier name


async def test_download_to_and_upload_from_stream_files(store: ObjectStore, tmp_path: Path) -> None:
    # Past google-cloud-storage's 8 MiB multipart limit, so gs:// takes the resumable path.
    data = os.urandom(9 * 1024 * 1024 + 7)
    source = tmp_path / "local" / "host-a.xplane.pb"
    source.parent.mkdir()
    source.write_bytes(data)
    key = "run-1/plugins/profile/s1/host-a.xplane.pb"

    assert await store.upload_from(source, key) == len(data)
    assert await store.size(key) == len(data)
    target = tmp_path / "copy" / "deep" / "host-a.xplane.pb"
    assert await store.download_to(key, target) == len(data)
    assert target.read_bytes() == data
    assert [p.name for p in target.parent.iterdir()] == ["host-a.xplane.pb"]

    source.write_bytes(b"smaller")
    assert await store.upload_from(source, key) == len(b"smaller")
    assert await store.size(key) == len(b"smaller")
    assert await store.download_to(key, target) == len(b"smaller")
    assert target.read_bytes() == b"smaller"
    assert await store.list("run-1/") == [key]


async def test_download_to_and_size_of_a_missing_key(store: ObjectStore, tmp_path: Path) -> None:
    target = tmp_path / "copy" / "missing.pb"
    with pytest.raises(NotFound):
        await store.download_to("run-1/missing.pb", target)
    with pytest.raises(NotFound):
        await store.size("run-1/missing.pb")
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


async def test_a_failed_download_to_leaves_the_old_file_and_no_temporary(
    store: ObjectStore, tmp_path: Path
) -> None:
    target = tmp_path / "copy" / "h.pb"
    target.parent.mkdir()
    target.write_bytes(b"old")
    with pytest.raises(NotFound):
        await store.download_to("run-1/missing.pb", target)
    assert [p.name for p in target.parent.iterdir()] == ["h.pb"]
    assert target.read_bytes() == b"old"


@pytest.mark.parametrize("key", ["../escape", "/absolute", "", "dir/"])
async def test_file_operations_keys_cannot_escape_the_root(
    store: ObjectStore, tmp_path: Path, key: str
) -> None:
    local = tmp_path / "local.pb"
    local.write_bytes(b"x")
    with pytest.raises(InvalidArgument):
        await store.upload_from(local, key)
    with pytest.raises(InvalidArgument):
        await store.download_to(key, tmp_path / "out.pb")
    with pytest.raises(InvalidArgument):
        await store.size(key)
    assert not (tmp_path / "out.pb").exists()


async def test_read_range_reads_a_growing_object_piece_by_piece(store: ObjectStore) -> None:
    await store.put("jobs/1/logs/stdout.log", b"0123456789")
    assert await store.read_range("jobs/1/logs/stdout.log", 0, 4) == b"0123"
    assert await store.read_range("jobs/1/logs/stdout.log", 3, 100) == b"3456789"
    assert await store.read_range("jobs/1/logs/stdout.log", 10, 5) == b""  # at the end
    assert await store.read_range("jobs/1/logs/stdout.log", 12, 5) == b""  # past it
    assert await store.read_range("jobs/1/logs/stdout.log", 0, 0) == b""
    with pytest.raises(NotFound):
        await store.read_range("jobs/1/logs/missing.log", 0, 5)


async def test_list_by_a_deep_or_partial_prefix(store: ObjectStore) -> None:
    await store.put("jobs/12/logs/workerpool0-0/attempt-0/stdout.log", b"a")
    await store.put("jobs/123/logs/workerpool0-0/attempt-0/stdout.log", b"b")
    await store.put("runs/1/x.pb", b"c")
    assert await store.list("jobs/12/logs/") == ["jobs/12/logs/workerpool0-0/attempt-0/stdout.log"]
    assert await store.list("jobs/12") == [
        "jobs/12/logs/workerpool0-0/attempt-0/stdout.log",
        "jobs/123/logs/workerpool0-0/attempt-0/stdout.log",
    ]
    assert await store.list("jobs/9/") == []
    assert await store.list("../") == []
