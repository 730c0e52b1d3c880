"""Page sizes and keyset page tokens (no database)."""

from datetime import UTC, datetime

import pytest

from mldiag_platform.errors import InvalidPageSize, InvalidPageToken
from mldiag_platform.listing.filtering import OrderKey
from mldiag_platform.listing.paging import (
    encode_token,
    keyset_position,
    keyset_token,
    page_size,
    query_digest,
)

ORDER = [OrderKey("createTime", descending=True), OrderKey("id", descending=True)]
TIMES = {"createTime"}


def test_page_size_defaults_caps_and_refuses_negatives() -> None:
    assert page_size(None, 50, 1000) == 50
    assert page_size(0, 50, 1000) == 50
    assert page_size(5000, 50, 1000) == 1000
    with pytest.raises(InvalidPageSize) as caught:
        page_size(-1, 50, 1000)
    assert caught.value.details == [{"field": "pageSize", "problem": "must be positive"}]


def test_a_keyset_token_gives_back_its_typed_position() -> None:
    query = query_digest('state = "x"', "createTime desc")
    created = datetime(2026, 12, 4, 19, 0, tzinfo=UTC)
    token = keyset_token([created, "run-1"], query)
    assert keyset_position(token, ORDER, query, TIMES) == [created, "run-1"]


def test_a_token_of_another_query_or_shape_is_refused() -> None:
    query = query_digest("", "")
    token = keyset_token([datetime(2026, 1, 1, tzinfo=UTC), "a"], query)
    other = query_digest('state = "x"', "")
    assert other != query
    bad = [
        token,  # listed with another filter (below)
        keyset_token([datetime(2026, 1, 1, tzinfo=UTC)], query),  # one key short
        keyset_token(["not a time", "a"], query),
        encode_token({"k": ["2026-01-01T00:00:00", "a"], "q": query}),  # no time zone
        encode_token({"k": ["2026-01-01T00:00:00Z", "a\x00"], "q": query}),
        "not base64!",
    ]
    with pytest.raises(InvalidPageToken):
        keyset_position(bad[0], ORDER, other, TIMES)
    for token_text in bad[1:]:
        with pytest.raises(InvalidPageToken):
            keyset_position(token_text, ORDER, query, TIMES)
