"""The list filter and orderBy parser (AIP-160 / AIP-132 subset), without a database."""

from datetime import UTC, datetime

import pytest

from mldiag_platform.errors import InvalidFilter, InvalidOrderBy
from mldiag_platform.listing.filtering import (
    And,
    Comparison,
    Not,
    Or,
    OrderKey,
    parse_filter,
    parse_order_by,
)
from mldiag_run_registry.runs.service import FIELDS


def test_empty_filter_is_none() -> None:
    assert parse_filter("", FIELDS) is None
    assert parse_filter("   ", FIELDS) is None


def test_comparison_kinds_are_typed() -> None:
    assert parse_filter('displayName = "my run"', FIELDS) == Comparison(
        "displayName", "=", "my run", position=0
    )
    assert parse_filter("state = ACTIVE", FIELDS) == Comparison(
        "state", "=", "STATE_ACTIVE", position=0
    )
    assert parse_filter("runPhase != FAILED", FIELDS) == Comparison(
        "runPhase", "!=", "FAILED", position=0
    )
    created = parse_filter('createTime >= "2026-01-01T00:00:00Z"', FIELDS)
    assert created == Comparison("createTime", ">=", datetime(2026, 1, 1, tzinfo=UTC), position=0)
    assert parse_filter("run_set:'sweep'", FIELDS) == Comparison("runSet", ":", "sweep", position=0)


def test_labels_compare_and_has() -> None:
    assert parse_filter('labels.team = "ml"', FIELDS) == Comparison(
        "labels", "=", "ml", key="team", position=0
    )
    assert parse_filter("labels:team", FIELDS) == Comparison(
        "labels", ":", None, key="team", position=0
    )
    assert parse_filter("labels.team:*", FIELDS) == Comparison(
        "labels", ":", None, key="team", position=0
    )


def test_or_binds_tighter_than_and_as_in_aip_160() -> None:
    expr = parse_filter('runSet = "a" AND state = ACTIVE OR state = FAILED', FIELDS)
    assert isinstance(expr, And)
    first, second = expr.parts
    assert isinstance(first, Comparison) and first.field == "runSet"
    assert isinstance(second, Or) and len(second.parts) == 2


def test_parentheses_not_and_juxtaposition() -> None:
    expr = parse_filter('(state = ACTIVE OR state = FAILED) NOT runSet = "x"', FIELDS)
    assert isinstance(expr, And)
    assert isinstance(expr.parts[0], Or)
    assert isinstance(expr.parts[1], Not)
    assert isinstance(parse_filter('-displayName = "x"', FIELDS), Not)


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ('bogus = "x"', 0, "unknown field"),
        ("state = ", 8, "expected a value"),
        ('displayName "x"', 12, "expected an operator"),
        ('displayName = "x', 14, "unterminated string"),
        ("state < ACTIVE", 6, "only supports"),
        ("state = RUNNING", 8, "not a valid state"),
        ('createTime > "yesterday"', 13, "RFC 3339"),
        ('createTime > "2026-01-01T00:00:00"', 13, "time zone"),
        ('createTime : "2026-01-01T00:00:00Z"', 11, "does not support"),
        ("(state = ACTIVE", 15, "expected ')'"),
        ("state = ACTIVE)", 14, "unexpected"),
        ("state = ACTIVE AND", 18, "expected a field name"),
        ("displayName = x # y", 16, "unexpected character"),
        ("labels = x", 7, "labels:KEY"),
        ('labels.a.b = "x"', 7, "invalid key"),
    ],
)
def test_bad_filters_name_the_position(text: str, position: int, fragment: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_filter(text, FIELDS)
    assert caught.value.code == "invalid_filter"
    assert caught.value.details[0]["position"] == position, caught.value.message
    assert fragment in caught.value.message
    assert f"position {position}" in caught.value.message


def test_order_by() -> None:
    assert parse_order_by("displayName, createTime desc", FIELDS) == [
        OrderKey("displayName", descending=False),
        OrderKey("createTime", descending=True),
    ]
    assert parse_order_by("update_time DESC", FIELDS) == [OrderKey("updateTime", descending=True)]
    for bad in ("labels", "bogus", "createTime sideways", "createTime, createTime", "a b c", ","):
        with pytest.raises(InvalidOrderBy):
            parse_order_by(bad, FIELDS)
