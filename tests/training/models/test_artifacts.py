"""Whether an artifactUri holds files, on file storage and on GCS (the emulator): the
registry's one look into object storage."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from mldiag_platform.errors import InvalidArgument
from mldiag_platform.storage import GcsStore
from mldiag_training.models.artifacts import ArtifactFiles
from support import free_port

pytestmark = pytest.mark.connected

BUCKET = "mldiag-models-test"


@pytest.fixture
def gcs_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A GCS emulator with an empty bucket; ``STORAGE_EMULATOR_HOST`` points at it."""
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield f"gs://{BUCKET}/artifacts"
    finally:
        server.stop()


async def test_file_storage_maps_gs_under_its_root_and_file_uris_as_paths(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    files = ArtifactFiles(f"file://{root}")
    (root / "gs" / "b" / "run" / "model" / "deep").mkdir(parents=True)
    (root / "gs" / "b" / "run" / "model" / "deep" / "saved_model.pb").write_bytes(b"x")
    (root / "gs" / "b" / "empty" / "sub").mkdir(parents=True)
    assert await files.holds_files("gs://b/run/model")  # a file at any depth counts
    assert await files.holds_files("gs://b/run/model/deep/saved_model.pb")  # a file itself
    assert not await files.holds_files("gs://b/empty")  # folders alone hold nothing
    assert not await files.holds_files("gs://b/missing")
    local = tmp_path / "exported"
    local.mkdir()
    assert not await files.holds_files(f"file://{local}")
    (local / "model.pkl").write_bytes(b"x")
    assert await files.holds_files(f"file://{local}")
    with pytest.raises(InvalidArgument):
        await files.holds_files("gs://b/run/../../etc")
    with pytest.raises(InvalidArgument):
        await files.holds_files("s3://b/run")


async def test_gcs_storage_lists_the_prefix_through_the_bucket(gcs_emulator: str) -> None:
    await GcsStore(BUCKET).put("runs/7/model/model.joblib", b"weights")
    files = ArtifactFiles(gcs_emulator)
    assert await files.holds_files(f"gs://{BUCKET}/runs/7/model")
    assert await files.holds_files(f"gs://{BUCKET}/runs/7/model/")
    # A prefix is a folder: runs/7/mod is not runs/7/model.
    assert not await files.holds_files(f"gs://{BUCKET}/runs/7/mod")
    assert not await files.holds_files(f"gs://{BUCKET}/runs/8/model")
    # A bucket that does not exist holds nothing (no 5xx for the caller).
    assert not await files.holds_files("gs://no-such-bucket/model")
