"""How the CLI writes answers: aligned tables for people; JSON, YAML, CSV or gcloud's
``value(...)`` projection for programs.

JSON is the API's body unchanged (NaN and ±Inf as the API writes them); YAML is the same
data through a small emitter for JSON-like values, so the SDK needs no YAML library. ``csv``
and ``value(...)`` print one line per resource (each item of a list, else the one resource),
fields picked by dotted paths as gcloud's projections do.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Format = str
"""An output format of ``--format``, as :func:`parse_format` answers it: ``table``,
``json``, ``yaml``, ``csv``, ``csv(FIELD,...)`` or ``value(FIELD,...)``."""

FORMATS: tuple[str, ...] = ("table", "json", "yaml", "csv")
"""The formats without fields, the default first (``csv(...)`` and ``value(...)`` add
fields)."""

FORMAT_HELP = (
    "table (for people), json, yaml, csv, csv(FIELD,...) or value(FIELD,...): one line per"
    " resource, FIELDs as dotted paths (e.g. 'value(name,metadata.verb)') [table]"
)
"""The help of ``--format``."""

_PROJECTION = re.compile(r"^(csv|value)\((.*)\)$", re.DOTALL)
_FIELD = re.compile(r"^~?[A-Za-z_@][A-Za-z0-9_@-]*(\.[A-Za-z_@][A-Za-z0-9_@-]*)*$")


def parse_format(text: str) -> Format:
    """An argparse type: ``--format``'s value checked and normalised (spaces around fields
    dropped); anything else is a usage error (exit status 2)."""
    value = text.strip()
    if value in FORMATS:
        return value
    match = _PROJECTION.match(value)
    if not match:
        raise argparse.ArgumentTypeError(
            f"unknown format {text!r}: expected one of {', '.join(FORMATS)}, csv(FIELD,...)"
            " or value(FIELD,...)"
        )
    fields = [field.strip() for field in match.group(2).split(",")]
    if not any(fields) or not all(_FIELD.match(field) for field in fields):
        raise argparse.ArgumentTypeError(
            f"bad fields in {text!r}: expected dotted field names separated by commas,"
            " e.g. value(name,metadata.verb)"
        )
    return f"{match.group(1)}({','.join(fields)})"


def projection(output_format: Format) -> tuple[str, list[str]] | None:
    """``("csv"|"value", fields)`` of a line-per-resource format (fields empty for plain
    ``csv``: every field); ``None`` for table, json and yaml."""
    if output_format == "csv":
        return "csv", []
    match = _PROJECTION.match(output_format)
    if not match:
        return None
    return match.group(1), match.group(2).split(",")


def field_value(resource: Any, path: str) -> Any:
    """The value at a dotted ``path`` of ``resource`` (``None`` when a part is missing)."""
    value = resource
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def render_records(records: Sequence[Any], output_format: Format) -> str:
    """``records`` one per line in a :func:`projection` format: ``value(...)`` as
    tab-separated cells, ``csv`` with a header line (every flattened field of plain ``csv``,
    in the order first seen)."""
    found = projection(output_format)
    if found is None:
        raise ValueError(f"{output_format!r} is not a csv or value format")
    kind, fields = found
    if not fields:
        fields = list(dict.fromkeys(key for record in records for key in _flat_record(record)))
    rows = [[cell(field_value(record, field)) for field in fields] for record in records]
    if kind == "value":
        return "\n".join("\t".join(row) for row in rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(fields)
    writer.writerows(rows)
    return buffer.getvalue().rstrip("\n")


def _flat_record(record: Any) -> dict[str, Any]:
    return flatten(record) if isinstance(record, Mapping) else {}


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``: print the API's body as JSON (``--format json``)."""
    parser.add_argument(
        "--json",
        dest="output_format",
        action="store_const",
        const="json",
        default=argparse.SUPPRESS,
        help="print the API's body as JSON (same as --format json)",
    )


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys; lists and scalars are leaves.

    An empty dict stays a leaf (``{}``) so that its presence is not lost.
    """
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Rows under ``headers``, columns aligned and separated by two spaces.

    Trailing spaces are trimmed; with no rows only the header line is written.
    """
    table = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


def render_fields(fields: Iterable[tuple[str, str]]) -> str:
    """``key  value`` lines, keys aligned (a resource described field by field)."""
    pairs = list(fields)
    if not pairs:
        return ""
    width = max(len(key) for key, _ in pairs)
    return "\n".join(f"{key.ljust(width)}  {value}".rstrip() for key, value in pairs)


def cell(value: Any) -> str:
    """A JSON value as one table cell: strings as they are, ``None`` empty, others JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return _number(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def short_time(value: Any) -> str:
    """An RFC 3339 time cut to seconds for a table (``2026-01-01 12:00:00``)."""
    if not isinstance(value, str) or not value:
        return ""
    return value.replace("T", " ")[:19]


def labels_cell(labels: Any) -> str:
    """Labels as ``k=v,k2=v2`` (sorted)."""
    if not isinstance(labels, dict) or not labels:
        return ""
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def to_json(data: Any) -> str:
    """``data`` as indented JSON, non-finite floats as the API's ``NaN``/``Infinity`` tokens."""
    return json.dumps(data, indent=2, ensure_ascii=False)


_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@+-]*$")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"})


_YAML_CONSTANTS = {None: "null", True: "true", False: "false"}


def _yaml_scalar(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return _YAML_CONSTANTS[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _yaml_float(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    # A JSON string is a valid YAML double-quoted scalar.
    return json.dumps(text, ensure_ascii=False)


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)


def _yaml_lines(data: Any, indent: str) -> list[str]:
    if isinstance(data, dict) and data:
        lines: list[str] = []
        for key, value in data.items():
            name = _yaml_scalar(str(key))
            if isinstance(value, dict | list) and value:
                lines.append(f"{indent}{name}:")
                child = indent if isinstance(value, list) else indent + "  "
                lines += _yaml_lines(value, child)
            else:
                lines.append(f"{indent}{name}: {_yaml_inline(value)}")
        return lines
    if isinstance(data, list) and data:
        lines = []
        for item in data:
            if isinstance(item, dict | list) and item:
                nested = _yaml_lines(item, indent + "  ")
                lines.append(f"{indent}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{indent}- {_yaml_inline(item)}")
        return lines
    return [f"{indent}{_yaml_inline(data)}"]


def _yaml_inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _yaml_scalar(value)


def to_yaml(data: Any) -> str:
    """``data`` (JSON-like: dicts, lists, strings, numbers, booleans, ``None``) as YAML."""
    return "\n".join(_yaml_lines(data, ""))


def dump(data: Any, output_format: Format) -> str:
    """``data`` in a machine format (``json``, ``yaml``, or, as one resource, ``csv`` and
    ``value(...)``)."""
    if projection(output_format) is not None:
        return render_records([data], output_format)
    return to_yaml(data) if output_format == "yaml" else to_json(data)
