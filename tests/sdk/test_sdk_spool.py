"""The disk spool under concurrency: files that vanish while listed."""

import os
from pathlib import Path
from typing import Any

import pytest

from mldiag import spool as spool_module
from mldiag.spool import Spool, orphan_spools


def orphan(root: Path, run: str, writer: str, payload: bytes) -> Path:
    """A writer directory with one pending record and no live writer."""
    spool = Spool(root / run / writer, run)
    spool.append(payload)
    spool.close()
    return root / run / writer


def test_a_segment_deleted_while_listed_is_skipped_and_other_orphans_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = orphan(tmp_path, "run-a", "w0", b"sent meanwhile")
    orphan(tmp_path, "run-a", "w1", b"kept")
    orphan(tmp_path, "run-b", "w0", b"also kept")
    vanishing = next(gone.glob("*.seg"))
    real_stat = Path.stat

    def stat(path: Path, **kwargs: Any) -> os.stat_result:
        # The edge: the live writer deletes its sent segment between our listing and stat.
        if path == vanishing and os.path.exists(path):
            os.unlink(path)
        return real_stat(path, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    found = orphan_spools(tmp_path)
    try:
        payloads = sorted(record.payload for spool in found for record in spool.records())
        assert payloads == [b"also kept", b"kept"]
    finally:
        for spool in found:
            spool.close()


def test_a_run_directory_removed_while_listed_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orphan(tmp_path, "run-a", "w0", b"kept")
    (tmp_path / "run-gone").mkdir()
    real_iterdir = Path.iterdir

    def iterdir(path: Path) -> Any:
        if path.name == "run-gone":  # its last writer closed and removed it meanwhile
            path.rmdir()
        return real_iterdir(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    found = orphan_spools(tmp_path)
    try:
        assert [record.payload for spool in found for record in spool.records()] == [b"kept"]
    finally:
        for spool in found:
            spool.close()


def test_segments_skips_files_that_vanish(tmp_path: Path) -> None:
    assert spool_module._segments(tmp_path / "missing") == []
