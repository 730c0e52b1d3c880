"""The SQL of one page of a list (the repositories' half of :mod:`mldiag_training.listing`):
a repository's own query and parent clauses, narrowed by the parsed filter, started after the
keyset position and bounded, in the list's order. Values travel as parameters only.
"""

from collections.abc import Mapping, Sequence

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.listing.sql import ValueAdapter, keyset_sql, order_sql, where_sql


def page_sql(
    select: str,
    clauses: Sequence[str],
    params: list[object],
    columns: Mapping[str, str],
    where: Expr | None,
    order: Sequence[OrderKey],
    limit: int,
    after: Sequence[object] | None,
    *,
    value: ValueAdapter | None = None,
) -> str:
    """``select`` (``SELECT … FROM …``) of the rows matching ``clauses`` (whose parameters
    ``params`` holds already) and ``where``, strictly after ``after`` in ``order``, at most
    ``limit``; ``columns`` maps fields to SQL, ``value`` adapts keyset values to what the
    columns hold. Appends the values it refers to to ``params``."""
    conditions = list(clauses)
    if where is not None:
        conditions.append(where_sql(where, params, columns))
    if after is not None:
        if value is None:
            conditions.append(keyset_sql(order, after, params, columns))
        else:
            conditions.append(keyset_sql(order, after, params, columns, value=value))
    params.append(limit)
    return (
        f"{select} WHERE {' AND '.join(conditions)}"
        f" ORDER BY {order_sql(order, columns)} LIMIT ${len(params)}"
    )
