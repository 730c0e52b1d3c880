"""The disk spool under concurrency: files that vanish while listed, and two processes
opening and closing one writer directory at the same time."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mldiag import spool as spool_module
from mldiag.spool import Spool, SpoolError, orphan_spools


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


def test_close_removes_an_empty_directory_and_keeps_one_with_pending_records(
    tmp_path: Path,
) -> None:
    empty = Spool(tmp_path / "run" / "w0", "run")
    empty.close()
    empty.close()  # twice is harmless (and must not unlink a newcomer's lock)
    assert not (tmp_path / "run").exists()
    pending = Spool(tmp_path / "run" / "w1", "run")
    pending.append(b"x")
    pending.close()
    assert (tmp_path / "run" / "w1" / "lock").exists()
    assert list((tmp_path / "run" / "w1").glob("*.seg"))


def test_a_lock_unlinked_by_a_closer_is_not_taken_for_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "w0"
    first = Spool(directory, "run")
    stale = (directory / "lock").open("ab")  # a newcomer opened `lock` ...
    first.close()  # ... and the closer unlinked it and removed the directory
    second = Spool(directory, "run")  # a fresh directory and lock, not the stale inode
    try:
        second.append(b"written")
        assert (directory / "lock").stat().st_ino == os.fstat(second._lock_file.fileno()).st_ino
        with pytest.raises(SpoolError):
            Spool(directory, "run")
    finally:
        stale.close()
        second.close()


# One process's tight loop: take the writer directory, write one record, close. A script of
# its own (not a function of this module under multiprocessing's spawn, which must import the
# test module by a name the child may not resolve).
_OPEN_WRITE_CLOSE = """
import os, sys
from pathlib import Path
from mldiag.spool import Spool, SpoolError

directory, rounds = sys.argv[1], int(sys.argv[2])
for index in range(rounds):
    try:
        spool = Spool(Path(directory), "run", segment_bytes=64)
    except SpoolError:
        continue  # the other process holds it right now: the expected refusal
    try:
        spool.append(f"{os.getpid()}:{index}".encode())
        record = spool.peek()
        assert record is not None
        spool.ack(record)  # all sent: close removes the directory
    except Exception as error:
        print(f"{type(error).__name__}: {error}")
        sys.exit(1)
    finally:
        spool.close()
"""


def test_two_processes_opening_and_closing_one_directory_never_fail_to_write(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "run" / "host-p0"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_WRITE_CLOSE, str(directory), "400"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [(worker.communicate(timeout=120)[0], worker.returncode) for worker in workers]
    assert outcomes == [("", 0), ("", 0)]
    assert not (tmp_path / "run").exists()  # every round sent everything


def test_the_writer_recreates_a_directory_removed_behind_its_back(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "w0"
    spool = Spool(directory, "run", segment_bytes=8)
    spool.append(b"first")
    record = spool.peek()
    assert record is not None
    spool.ack(record)
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()  # a cache cleaner
    spool.append(b"second record, a new segment")
    assert [record.payload for record in spool.records()] == [b"second record, a new segment"]
    spool.close()


def test_segments_skips_files_that_vanish(tmp_path: Path) -> None:
    assert spool_module._segments(tmp_path / "missing") == []
