"""Reading scalars out of a TensorBoard log directory.

Each directory under ``LOGDIR`` that holds ``events.out.tfevents.*`` files is one run, named
after its path relative to ``LOGDIR`` (``.`` is the directory's own name). Its files are
read in name order (the writer's start time is in the name, so a restarted job's files
follow each other) and every scalar becomes a point with its step and wall time.

Why a hand-written decoder rather than ``tensorboard``'s compiled protos: the SDK installs
with ``httpx`` alone, and ``tensorboard`` would bring protobuf, grpcio, numpy and a web
server into every training image for the sake of five small messages. The framing lives in
:mod:`mldiag.imports.tfrecord`, the wire format in :mod:`mldiag.imports.protowire`; this
module knows the field numbers of the messages below, from tensorboard's
``tensorboard/compat/proto/event.proto``, ``summary.proto``, ``tensor.proto``,
``tensor_shape.proto`` and ``types.proto``
(https://github.com/tensorflow/tensorboard/tree/master/tensorboard/compat/proto):

============================  ==========================================================
message                       fields read (number: name)
============================  ==========================================================
``Event``                     1: wall_time (double), 2: step (int64), 5: summary
``Summary``                   1: value (repeated)
``Summary.Value``             1: tag, 2: simple_value (float), 9: metadata, 8: tensor;
                              3: histo (old), 4: image, 5: histo, 6: audio are counted
``SummaryMetadata``           1: plugin_data, 4: data_class (1 = scalar)
``SummaryMetadata.PluginData``  1: plugin_name
``TensorProto``               1: dtype, 2: tensor_shape, 4: tensor_content,
                              5: float_val, 6: double_val, 7: int_val, 10: int64_val,
                              13: half_val
``TensorShapeProto``          2: dim (repeated; ``Dim`` 1: size)
============================  ==========================================================

A value is a scalar when it has ``simple_value`` (TF1 and ``tensorboardX.add_scalar``), or a
tensor whose metadata names the ``scalars`` plugin or the scalar data class (TF2's
``tf.summary.scalar``, PyTorch's and tensorboardX's ``new_style``) and which holds exactly
one number. Everything else (histograms, images, audio, text, other plugins' tensors) is
counted by kind and left out.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mldiag.imports import protowire as wire
from mldiag.imports.errors import SourceUnreadable
from mldiag.imports.source import Point, SourceRun, derived_run_id, metric_name
from mldiag.imports.tfrecord import CorruptRecord, read_records

EVENT_FILE_MARKER = "tfevents"
"""Event files are named ``events.out.tfevents.<time>.<host>...``."""

_SCALAR_DATA_CLASS = 1
# TensorFlow's DataType numbers, and how each is laid out in tensor_content.
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMATS = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}
_CONTENT_FORMATS[_DT_HALF] = "<e"
_SKIPPED_KINDS = {3: "histograms", 4: "images", 5: "histograms", 6: "audio"}


@dataclass(frozen=True, slots=True)
class _Value:
    tag: str
    number: float | None
    kind: str  # "scalar", or what was skipped


def find_runs(logdir: Path) -> list[tuple[str, list[Path]]]:
    """Each directory under ``logdir`` holding event files: its relative path (``.`` for
    ``logdir`` itself) and its event files in name order, directories in path order."""
    if not logdir.is_dir():
        raise SourceUnreadable(f"{logdir} is not a directory")
    runs: list[tuple[str, list[Path]]] = []
    for directory, subdirectories, files in os.walk(logdir):
        subdirectories.sort()
        events = sorted(name for name in files if EVENT_FILE_MARKER in name)
        if events:
            relative = os.path.relpath(directory, logdir)
            runs.append((Path(relative).as_posix(), [Path(directory) / name for name in events]))
    return sorted(runs)


def read_logdir(
    logdir: Path, *, run_set: str | None = None, run_prefix: str = ""
) -> Iterator[SourceRun]:
    """Every run of ``logdir`` with its scalars, one at a time.

    The run id is ``tb-`` and a hash of the log directory's absolute path and the run's
    relative path, so importing the same directory again addresses the same runs.
    """
    root = logdir.resolve()
    for relative, files in find_runs(root):
        name = root.name if relative == "." else relative
        run = SourceRun(
            run_id=derived_run_id("tb", str(root), relative),
            display_name=(run_prefix + name)[:200],
            run_set=(run_set or root.name or "tensorboard")[:200],
            labels={"imported-from": "tensorboard"},
            software_configs={
                "importedFrom": "tensorboard",
                "tensorboard": {"logdir": str(root), "run": relative},
            },
        )
        for path in files:
            _read_file(path, run)
        yield run


def _read_file(path: Path, run: SourceRun) -> None:
    try:
        with path.open("rb") as stream:
            for record in read_records(stream):
                _read_event(record, run)
    except CorruptRecord as error:
        run.problems.append(f"{path}: {error}; the rest of the file was not read")
    except wire.WireError as error:
        run.problems.append(f"{path}: not an event file ({error}); the rest was not read")
    except OSError as error:
        raise SourceUnreadable(f"cannot read {path}: {error}") from error


def _read_event(record: bytes, run: SourceRun) -> None:
    wall_time = 0.0
    step = 0
    summaries: list[bytes] = []
    for number, wire_type, raw in wire.fields(record):
        if number == 1 and wire_type == wire.FIXED64 and isinstance(raw, int):
            wall_time = wire.as_double(raw)
        elif number == 2 and wire_type == wire.VARINT and isinstance(raw, int):
            step = wire.as_int64(raw)
        elif number == 5 and isinstance(raw, bytes):
            summaries.append(raw)
    for summary in summaries:
        for value in _summary_values(summary):
            if value.number is None:
                run.skip(value.kind)
            elif step < 0:
                run.skip("negative steps")
            else:
                points = run.metrics.setdefault(metric_name(value.tag), [])
                points.append(Point(step, value.number, wall_time))


def _summary_values(summary: bytes) -> Iterator[_Value]:
    for number, _, raw in wire.fields(summary):
        if number == 1 and isinstance(raw, bytes):
            yield _summary_value(raw)


def _summary_value(data: bytes) -> _Value:
    tag = ""
    simple: float | None = None
    tensor: bytes | None = None
    plugin = ""
    data_class = 0
    skipped = ""
    for number, wire_type, raw in wire.fields(data):
        if number == 1 and isinstance(raw, bytes):
            tag = raw.decode("utf-8", "replace")
        elif number == 2 and wire_type == wire.FIXED32 and isinstance(raw, int):
            simple = wire.as_float(raw)
        elif number == 8 and isinstance(raw, bytes):
            tensor = raw
        elif number == 9 and isinstance(raw, bytes):
            plugin, data_class = _metadata(raw)
        elif number in _SKIPPED_KINDS:
            skipped = _SKIPPED_KINDS[number]
    if simple is not None:
        return _Value(tag, simple, "scalar")
    if tensor is not None:
        if plugin == "scalars" or data_class == _SCALAR_DATA_CLASS:
            number_read = _tensor_scalar(tensor)
            return _Value(tag, number_read, "scalar" if number_read is not None else "tensors")
        return _Value(tag, None, f"{plugin or 'unnamed'} plugin tensors")
    return _Value(tag, None, skipped or "other values")


def _metadata(data: bytes) -> tuple[str, int]:
    plugin = ""
    data_class = 0
    for number, _, raw in wire.fields(data):
        if number == 1 and isinstance(raw, bytes):
            for inner, _, name in wire.fields(raw):
                if inner == 1 and isinstance(name, bytes):
                    plugin = name.decode("utf-8", "replace")
        elif number == 4 and isinstance(raw, int):
            data_class = raw
    return plugin, data_class


def _tensor_scalar(data: bytes) -> float | None:  # noqa: PLR0912  # one branch per encoding
    """The one number a scalar tensor holds, or None when it holds another count or type."""
    dtype = 0
    elements = 1
    content = b""
    numbers: list[float] = []
    for number, _, raw in wire.fields(data):
        if number == 1 and isinstance(raw, int):
            dtype = raw
        elif number == 2 and isinstance(raw, bytes):
            elements = _element_count(raw)
        elif number == 4 and isinstance(raw, bytes):
            content = raw
        elif number == 5:  # float_val: packed, or one fixed32 each
            if isinstance(raw, bytes):
                numbers.extend(value for (value,) in struct.iter_unpack("<f", raw))
            else:
                numbers.append(wire.as_float(raw))
        elif number == 6:  # double_val
            if isinstance(raw, bytes):
                numbers.extend(value for (value,) in struct.iter_unpack("<d", raw))
            else:
                numbers.append(wire.as_double(raw))
        elif number in (7, 10, 13):  # int_val, int64_val, half_val: varints
            values = wire.packed_varints(raw) if isinstance(raw, bytes) else [raw]
            if number == 13:  # half_val holds the 16 bits of each half
                numbers.extend(_half(value) for value in values)
            else:
                numbers.extend(float(wire.as_int64(value)) for value in values)
    if elements != 1:
        return None
    if content:
        return _from_content(dtype, content)
    return numbers[0] if len(numbers) == 1 else None


def _element_count(shape: bytes) -> int:
    count = 1
    for number, _, raw in wire.fields(shape):
        if number == 2 and isinstance(raw, bytes):
            size = 0
            for inner, _, value in wire.fields(raw):
                if inner == 1 and isinstance(value, int):
                    size = wire.as_int64(value)
            count *= size
    return count


def _from_content(dtype: int, content: bytes) -> float | None:
    if dtype == _DT_BFLOAT16 and len(content) == 2:
        return wire.as_float(int.from_bytes(content, "little") << 16)
    layout = _CONTENT_FORMATS.get(dtype)
    if layout is None or struct.calcsize(layout) != len(content):
        return None
    value: float = struct.unpack(layout, content)[0]
    return float(value)


def _half(bits: int) -> float:
    value: float = struct.unpack("<e", (bits & 0xFFFF).to_bytes(2, "little"))[0]
    return value
