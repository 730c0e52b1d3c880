"""PostgreSQL fragments of a list query: a parsed filter, an ordering and a keyset position,
over a repository's own columns.

Each repository keeps its query and names its columns (filter field to SQL expression); these
write the pieces every list writes the same way. Values always travel as parameters
(appended to ``params`` and referred to as ``$n``), never inside the SQL text.
"""

from collections.abc import Callable, Mapping, Sequence

from mldiag_platform.listing.filtering import Comparison, Expr, OrderKey, render_where

ValueAdapter = Callable[[str, object], object]
"""``(field, value)`` to the value the column holds (e.g. a phase to its stored state)."""


def _as_is(_field: str, value: object) -> object:
    return value


def comparison_sql(
    expr: Comparison,
    params: list[object],
    columns: Mapping[str, str],
    *,
    empty_is_unset: bool = False,
    value: ValueAdapter = _as_is,
) -> str:
    """One comparison. A map field's (``labels.KEY``) column is a JSONB object; ``field:*``
    tests that a column is set: not NULL, or not empty with ``empty_is_unset`` (text
    columns that hold ``''`` for unset)."""
    if expr.key is not None:
        params.append(expr.key)
        key = f"${len(params)}"
        if expr.op == ":" and expr.value is None:
            return f"({columns[expr.field]} ? {key})"
        column = f"({columns[expr.field]} ->> {key})"
    else:
        column = columns[expr.field]
        if expr.op == ":" and expr.value is None:
            return f"({column} <> '')" if empty_is_unset else f"({column} IS NOT NULL)"
    params.append(value(expr.field, expr.value))
    placeholder = f"${len(params)}"
    if expr.op == ":":
        return f"(strpos({column}, {placeholder}) > 0)"
    if expr.op == "!=":
        # A missing label (or time) differs from any value.
        return f"({column} IS DISTINCT FROM {placeholder})"
    return f"({column} {expr.op} {placeholder})"


def where_sql(
    expr: Expr,
    params: list[object],
    columns: Mapping[str, str],
    *,
    empty_is_unset: bool = False,
    value: ValueAdapter = _as_is,
) -> str:
    """A parsed filter as one condition, each comparison by :func:`comparison_sql`."""
    return render_where(
        expr,
        lambda comparison: comparison_sql(
            comparison, params, columns, empty_is_unset=empty_is_unset, value=value
        ),
    )


def order_sql(order: Sequence[OrderKey], columns: Mapping[str, str]) -> str:
    """An ``ORDER BY`` list (without the keywords)."""
    return ", ".join(f"{columns[key.field]} {'DESC' if key.descending else 'ASC'}" for key in order)


def keyset_sql(
    order: Sequence[OrderKey],
    after: Sequence[object],
    params: list[object],
    columns: Mapping[str, str],
    *,
    value: ValueAdapter = _as_is,
) -> str:
    """Rows strictly after ``after`` (one value per key) in ``order``:
    ``(a > x) OR (a = x AND b > y) OR ...``, ``<`` for a descending key."""
    ors = []
    for depth, key in enumerate(order):
        ands = []
        for previous, earlier in zip(order[:depth], after[:depth], strict=True):
            params.append(value(previous.field, earlier))
            ands.append(f"{columns[previous.field]} = ${len(params)}")
        params.append(value(key.field, after[depth]))
        ands.append(f"{columns[key.field]} {'<' if key.descending else '>'} ${len(params)}")
        ors.append("(" + " AND ".join(ands) + ")")
    return "(" + " OR ".join(ors) + ")"
