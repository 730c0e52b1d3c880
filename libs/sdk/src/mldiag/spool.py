"""The disk spool: append-only segment files holding encoded batches until they are sent.

Every batch the SDK builds is appended here first (a write-ahead log), and the sender posts
records in the order they were appended. A crash therefore loses at most what was still in
the in-memory buffer, and a later process that opens the same directory replays the rest.

Layout, under ``<root>/<run id>/<writer>/``:

- ``<seq:08d>.seg``: segments. Each record is ``MAGIC (2 bytes) · length (4, big-endian) ·
  crc32 (4) · payload``; the payload is the body of one write request as it is posted: a
  columnar frame (``MLDC...``), or gzipped JSON in segments an older SDK wrote. The sender
  tells them apart by their first bytes (:func:`mldiag.encoding.content_headers`), so no
  record needs a type of its own and old segments replay unchanged. A torn tail (a crash
  mid-write) fails its length or checksum and is ignored.
- ``<seq:08d>.pos``: how far that segment has been sent (8-byte offset), replaced atomically
  after each acknowledged record. A segment whose every record is sent is deleted.
- ``lock``: held (``flock``) by the live writer, so two processes never append to one
  directory and a directory whose lock is free is an orphan another process may replay.

The lock protocol. A writer directory is shared by name: the next process with the same
host and index, a replaying process and ``mldiag sync`` all open it, and a closing writer
removes it when nothing is left in it. ``flock`` locks an open file (an inode), not a name,
so removal and acquisition must agree on which inode is *the* lock:

1. Acquire: ``mkdir -p`` the directory, open ``lock`` (creating it), ``flock`` it without
   waiting (refused: a live writer holds it, :class:`SpoolError`), then check that the name
   ``lock`` still leads to the inode just locked. If it does not (the name is gone, or names
   a newer file), a closer unlinked it between our ``open`` and our ``flock``: that inode
   guards nothing any more, so let it go and start again (the directory may be gone too:
   step 1 recreates it).
2. Only the holder of the lock deletes anything in the directory (sent segments, and on
   close the ``lock`` itself and the empty directory): it unlinks ``lock`` *before*
   releasing it, then removes the directory (which fails, harmlessly, when a newcomer has
   already created a ``lock`` of its own in it), and only then closes the lock's file.
3. The writer recreates its directory before opening each new segment, so a directory
   removed behind its back (by hand, or by a cache cleaner) costs nothing.

So whoever holds a lock that the name ``lock`` still leads to is the only writer of the
directory, and a directory is removed only by that writer, once it holds nothing.

Records are written with ``write`` + ``flush`` and not fsynced: they survive the process
dying, not the machine losing power (the cost of an fsync per batch is not worth it here).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

try:  # POSIX only; without it each writer simply uses a directory of its own.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_MAGIC = b"\x6d\x64"  # "md"
_HEADER = struct.Struct(">2sII")
_POSITION = struct.Struct(">Q")
_NOT_RUNS = frozenset({"dead-letter", "offline"})
"""Folders of the spool root that are not an online run's: rejected batches, and offline
runs (:mod:`mldiag.offline`), which only ``mldiag sync`` sends."""
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
"""A segment is closed and a new one started once it holds this many bytes."""


@dataclass(frozen=True, slots=True)
class Record:
    """One spooled batch and where it lies, so that it can be acknowledged."""

    payload: bytes
    segment: int
    end: int


class BatchQueue(Protocol):
    """What the sender needs from a spool: append, peek the oldest, acknowledge it."""

    run_id: str

    def append(self, payload: bytes) -> None:
        """Add a record at the end."""

    def peek(self) -> Record | None:
        """The oldest record not yet acknowledged, or None."""

    def ack(self, record: Record) -> None:
        """Mark ``record`` (the one :meth:`peek` returned) as done."""

    def pending_bytes(self) -> int:
        """Roughly how many bytes wait to be sent."""

    def close(self) -> None:
        """Release files and locks; what is pending stays for a later process."""


class SpoolError(OSError):
    """The spool directory cannot be used (not writable, or locked by a live writer)."""


class Spool:
    """An on-disk :class:`BatchQueue` for one writer of one run. Thread-safe."""

    def __init__(
        self, directory: Path, run_id: str, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self.run_id = run_id
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._lock = threading.RLock()  # re-entrant: see Pipeline._collect_lock
        self._lock_file = _acquire(directory / "lock")
        segments = sorted(_segments(directory))
        self._segments: list[int] = segments
        self._positions = {seq: _read_position(directory, seq) for seq in segments}
        self._sizes = {seq: (directory / _seg_name(seq)).stat().st_size for seq in segments}
        self._writer: IO[bytes] | None = None
        self._writer_seq = -1

    def append(self, payload: bytes) -> None:
        """Append one record to the newest segment, starting a new one when it is full."""
        header = _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload))
        with self._lock:
            writer = self._writer_for(len(header) + len(payload))
            writer.write(header + payload)
            writer.flush()
            self._sizes[self._writer_seq] += len(header) + len(payload)

    def peek(self) -> Record | None:
        """The oldest unsent record; segments that are fully sent are deleted on the way."""
        with self._lock:
            while self._segments:
                seq = self._segments[0]
                record = self._read(seq, self._positions[seq])
                if record is not None:
                    return record
                if seq == self._writer_seq:
                    return None  # the open segment is simply caught up
                self._drop(seq)
            return None

    def ack(self, record: Record) -> None:
        """Persist that ``record`` is sent (an atomic position file per segment)."""
        with self._lock:
            if record.segment not in self._positions:
                return
            self._positions[record.segment] = record.end
            tmp = self.directory / f"{_seg_name(record.segment)}.pos.tmp"
            tmp.write_bytes(_POSITION.pack(record.end))
            tmp.replace(self.directory / _pos_name(record.segment))
            if record.end >= self._sizes[record.segment] and record.segment != self._writer_seq:
                self._drop(record.segment)

    def records(self) -> Iterator[Record]:
        """Every record not yet acknowledged, oldest first, acknowledging none (a count)."""
        with self._lock:
            for seq in list(self._segments):
                offset = self._positions[seq]
                while (record := self._read(seq, offset)) is not None:
                    yield record
                    offset = record.end

    def pending_bytes(self) -> int:
        """Bytes appended and not yet acknowledged."""
        with self._lock:
            return sum(self._sizes[seq] - self._positions[seq] for seq in self._segments)

    def close(self) -> None:
        """Close the open segment and release the lock; delete the directory if empty.

        The lock is released last, after ``lock`` and the directory are removed (see the
        module's docstring: a process that opened ``lock`` meanwhile sees it gone and
        starts again, rather than writing into a directory being deleted).
        """
        with self._lock:
            if self._lock_file.closed:
                return
            if self._writer is not None:
                self._writer.close()
                self._writer = None
                if self._positions[self._writer_seq] >= self._sizes[self._writer_seq]:
                    self._drop(self._writer_seq)
                self._writer_seq = -1
            try:
                if not self._segments:
                    _remove_locked(self.directory)
            finally:
                self._lock_file.close()

    def _writer_for(self, size: int) -> IO[bytes]:
        if self._writer is not None and self._sizes[self._writer_seq] + size > max(
            self._segment_bytes, size
        ):
            self._writer.close()
            self._writer = None
        if self._writer is None:
            seq = (self._segments[-1] + 1) if self._segments else 1
            # Only the lock's holder removes the directory, but a person or a cache cleaner
            # may have: recreating it costs one system call a segment.
            _make_dirs(self.directory)
            self._writer = (self.directory / _seg_name(seq)).open("ab")
            self._writer_seq = seq
            self._segments.append(seq)
            self._positions[seq] = 0
            self._sizes[seq] = 0
        return self._writer

    def _read(self, seq: int, offset: int) -> Record | None:
        if offset >= self._sizes[seq]:
            return None
        with (self.directory / _seg_name(seq)).open("rb") as segment:
            segment.seek(offset)
            header = segment.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return None
            magic, length, crc = _HEADER.unpack(header)
            payload = segment.read(length)
        if magic != _MAGIC or len(payload) < length or zlib.crc32(payload) != crc:
            # A torn or corrupt tail: nothing after it in this segment can be trusted.
            self._sizes[seq] = offset
            return None
        return Record(payload=payload, segment=seq, end=offset + _HEADER.size + length)

    def _drop(self, seq: int) -> None:
        for name in (_seg_name(seq), _pos_name(seq)):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()
        self._segments.remove(seq)
        del self._positions[seq]
        del self._sizes[seq]


class MemoryQueue:
    """A bounded in-memory :class:`BatchQueue`, used when no spool directory is writable.

    When full, the oldest record is dropped (and counted): without a disk there is no
    better place for it, and a training job must never stall on telemetry.
    """

    def __init__(self, run_id: str, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.run_id = run_id
        self._max_bytes = max_bytes
        self._records: list[bytes] = []
        self._bytes = 0
        self._next = 0
        self._lock = threading.Lock()
        self.dropped = 0

    def append(self, payload: bytes) -> None:
        """Append, dropping the oldest records while over the bound."""
        with self._lock:
            self._records.append(payload)
            self._bytes += len(payload)
            while self._bytes > self._max_bytes and len(self._records) > 1:
                self._bytes -= len(self._records.pop(0))
                self._next += 1
                self.dropped += 1

    def peek(self) -> Record | None:
        """The oldest record."""
        with self._lock:
            if not self._records:
                return None
            return Record(payload=self._records[0], segment=0, end=self._next)

    def ack(self, record: Record) -> None:
        """Remove the oldest record if it is still ``record``."""
        with self._lock:
            if self._records and record.end == self._next:
                self._bytes -= len(self._records.pop(0))
                self._next += 1

    def pending_bytes(self) -> int:
        """Bytes held."""
        with self._lock:
            return self._bytes

    def close(self) -> None:
        """Nothing to release."""


def orphan_spools(
    root: Path, exclude: Path | None = None, run_id: str | None = None
) -> list[Spool]:
    """Writer directories under ``root`` with pending segments and no live writer.

    Each is returned opened (its lock held), ready to replay; directories whose lock another
    live process holds are skipped. ``run_id`` limits the search to that run.
    """
    found: list[Spool] = []
    if not root.is_dir():
        return found
    for run_dir in sorted(path for path in root.iterdir() if path.is_dir()):
        if run_dir.name in _NOT_RUNS or (run_id is not None and run_dir.name != run_id):
            continue
        try:
            writer_dirs = sorted(path for path in run_dir.iterdir() if path.is_dir())
        except FileNotFoundError:  # its last writer closed and removed it meanwhile
            continue
        for writer_dir in writer_dirs:
            if writer_dir == exclude or not any(_segments(writer_dir)):
                continue
            try:
                found.append(Spool(writer_dir, run_dir.name))
            except SpoolError:
                continue
    return found


_ACQUIRE_TRIES = 100
"""Times :func:`_acquire` starts again after losing a race with a closing writer (each loss
means that writer finished closing, so a second try nearly always succeeds)."""


def _acquire(path: Path) -> IO[bytes]:
    """Open and lock ``path`` (a directory's ``lock``) by the module's protocol, step 1."""
    for _ in range(_ACQUIRE_TRIES):
        _make_dirs(path.parent)
        try:
            handle = path.open("ab")
        except FileNotFoundError:  # the directory was removed after our mkdir
            continue
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                raise SpoolError(f"{path.parent} is in use by another process") from None
            if not _still_named(handle, path):
                handle.close()  # a closer unlinked the inode we locked: it guards nothing
                continue
        return handle
    raise SpoolError(f"{path.parent} keeps being removed by other processes")


def _make_dirs(directory: Path) -> None:
    """``mkdir -p`` that a concurrent ``rmdir`` of the same folders cannot fail.

    ``Path.mkdir(parents=True, exist_ok=True)`` raises ``FileExistsError`` (or
    ``FileNotFoundError``) when another process creates or removes a folder of the chain
    between its own steps; each such race means the other process made progress, so
    starting again ends.
    """
    for _ in range(_ACQUIRE_TRIES):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, FileNotFoundError):
            continue
        return
    directory.mkdir(parents=True, exist_ok=True)  # the last word, whatever it raises


def _still_named(handle: IO[bytes], path: Path) -> bool:
    """Whether ``path`` leads to the file ``handle`` has open."""
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _remove_locked(directory: Path) -> None:
    """Remove an empty writer directory while holding its lock (the protocol, step 2)."""
    try:
        (directory / "lock").unlink()
    except FileNotFoundError:
        pass
    except OSError:  # an open file cannot be unlinked everywhere (Windows): leave it all
        return
    with contextlib.suppress(OSError):  # not empty: a newcomer already made its own lock
        directory.rmdir()
        directory.parent.rmdir()  # the run's directory, once its last writer is gone


def _segments(directory: Path) -> list[int]:
    """The non-empty segments in ``directory``, in no order.

    Listing and ``stat`` are two steps, and a live writer may delete a fully sent segment
    between them (or its whole directory, on close): a file that vanished is simply no
    segment, never an error (it would make :func:`orphan_spools` give up on every orphan).
    """
    found: list[int] = []
    try:
        paths = list(directory.glob("*.seg"))
    except FileNotFoundError:  # the directory itself went between is_dir and scandir
        return found
    for path in paths:
        if not path.stem.isdigit():
            continue
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        if size > 0:
            found.append(int(path.stem))
    return found


def _read_position(directory: Path, seq: int) -> int:
    try:
        data = (directory / _pos_name(seq)).read_bytes()
    except FileNotFoundError:
        return 0
    if len(data) != _POSITION.size:
        return 0  # replaying from the start is safe: batch ids dedupe on the server
    position: int = _POSITION.unpack(data)[0]
    return position


def _seg_name(seq: int) -> str:
    return f"{seq:08d}.seg"


def _pos_name(seq: int) -> str:
    return f"{seq:08d}.pos"


def writer_name(host: str, process_index: int) -> str:
    """The directory name of one writer: host and process index, filesystem-safe."""
    safe = "".join(char if char.isalnum() or char in "-_." else "_" for char in host)
    return f"{safe or 'host'}-p{process_index}"


def default_root() -> Path:
    """Where spools live when ``MLDIAG_SPOOL_DIR`` is not set."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mldiag" / "spool"
