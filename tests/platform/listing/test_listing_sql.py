"""The SQL fragments of a list query, from parsed filters (no database: the services' list
tests run them against PostgreSQL)."""

from datetime import UTC, datetime

from mldiag_platform.listing.filtering import (
    FieldSpec,
    Kind,
    OrderKey,
    field_table,
    parse_filter,
)
from mldiag_platform.listing.sql import keyset_sql, order_sql, where_sql

FIELDS = field_table(
    (
        FieldSpec("name", Kind.STRING),
        FieldSpec("createTime", Kind.TIMESTAMP),
        FieldSpec("labels", Kind.MAP),
    )
)
COLUMNS = {"name": "t.name", "createTime": "t.create_time", "labels": "t.labels"}


def _where(text: str, *, empty_is_unset: bool = False) -> tuple[str, list[object]]:
    expr = parse_filter(text, FIELDS)
    assert expr is not None
    params: list[object] = ["project"]
    return where_sql(expr, params, COLUMNS, empty_is_unset=empty_is_unset), params


def test_comparisons_number_their_parameters_after_the_callers() -> None:
    sql, params = _where('name = "a" AND (createTime > "2026-01-01T00:00:00Z" OR name != "b")')
    assert sql == "((t.name = $2) AND ((t.create_time > $3) OR (t.name IS DISTINCT FROM $4)))"
    assert params == ["project", "a", datetime(2026, 1, 1, tzinfo=UTC), "b"]


def test_contains_and_is_set() -> None:
    assert _where('name:"x"') == ("(strpos(t.name, $2) > 0)", ["project", "x"])
    assert _where("name:*") == ("(t.name IS NOT NULL)", ["project"])
    assert _where("name:*", empty_is_unset=True) == ("(t.name <> '')", ["project"])
    assert _where("NOT name:*") == ("(NOT (t.name IS NOT NULL))", ["project"])


def test_a_map_field_compares_one_key() -> None:
    assert _where("labels:team") == ("(t.labels ? $2)", ["project", "team"])
    assert _where('labels.team = "ml"') == ("((t.labels ->> $2) = $3)", ["project", "team", "ml"])


def test_the_value_adapter_sees_field_and_value() -> None:
    expr = parse_filter('name = "a/b/c"', FIELDS)
    assert expr is not None
    params: list[object] = []
    sql = where_sql(expr, params, COLUMNS, value=lambda field, v: f"{field}:{v}")
    assert (sql, params) == ("(t.name = $1)", ["name:a/b/c"])


def test_order_and_keyset_follow_the_keys() -> None:
    order = [OrderKey("createTime", descending=True), OrderKey("name", descending=False)]
    assert order_sql(order, COLUMNS) == "t.create_time DESC, t.name ASC"
    params: list[object] = ["project"]
    sql = keyset_sql(order, ["T", "N"], params, COLUMNS, value=lambda _f, v: str(v).lower())
    assert sql == "((t.create_time < $2) OR (t.create_time = $3 AND t.name > $4))"
    assert params == ["project", "t", "t", "n"]
