"""How the training service's lists are paged (custom jobs, tuning jobs, pipelines, models and
their versions): ``pageSize`` bounded, ``filter`` and ``orderBy`` parsed against a list's
fields, the resource's id appended to the order so every row has one place, and a keyset
token after a page's last row that is refused for another filter or order.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from mldiag_platform.listing.filtering import (
    Expr,
    FieldSpec,
    OrderKey,
    parse_filter,
    parse_order_by,
)
from mldiag_platform.listing.paging import keyset_position, keyset_token, page_size, query_digest

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

Row = TypeVar("Row")


@dataclass(frozen=True)
class Listing:
    """What one list may be filtered and ordered by."""

    fields: Mapping[str, FieldSpec]
    """What ``filter`` and ``orderBy`` may name."""
    default_order: Sequence[OrderKey]
    """The order without ``orderBy`` (before the id)."""
    id_field: str
    """The resource's id, last in every order (in the direction of the key before it,
    ascending when there is none)."""
    timestamps: Collection[str]
    """The fields a page token carries as times."""


@dataclass(frozen=True)
class PageQuery:
    """One page's read: its size, condition, order and the position after which it starts."""

    size: int
    where: Expr | None
    order: list[OrderKey]
    after: list[object] | None
    digest: str

    def page(
        self, rows: list[Row], order_value: Callable[[Row, str], object]
    ) -> tuple[list[Row], str]:
        """The page of ``rows`` (read with one more than :attr:`size`, to know whether more
        follow) and the token of the next page ("" after the last); ``order_value`` answers
        a row's value of an order key."""
        if len(rows) <= self.size:
            return rows, ""
        rows = rows[: self.size]
        values = [order_value(rows[-1], key.field) for key in self.order]
        return rows, keyset_token(values, self.digest)


def page_query(
    listing: Listing,
    requested_size: int | None,
    page_token: str,
    filter_text: str,
    order_by: str,
) -> PageQuery:
    """The read of the page ``page_token`` names (the first for ""), or the list's errors:
    ``invalid_page_size``, ``invalid_filter``, ``invalid_order_by``, ``invalid_page_token``."""
    size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    where = parse_filter(filter_text, listing.fields)
    order = (
        parse_order_by(order_by, listing.fields)
        if order_by.strip()
        else list(listing.default_order)
    )
    order.append(OrderKey(listing.id_field, descending=bool(order) and order[-1].descending))
    digest = query_digest(filter_text, order_by)
    after = keyset_position(page_token, order, digest, listing.timestamps) if page_token else None
    return PageQuery(size, where, order, after, digest)


class Named(Protocol):
    """A resource with a ``name`` whose last segment is its id."""

    @property
    def name(self) -> str:
        """``projects/…/locations/…/<collection>/<id>``."""
        ...


def named_value(id_field: str) -> Callable[[Named, str], object]:
    """A resource's value of an order key: its id (the name's last segment) for
    ``id_field``, the attribute of that name otherwise."""

    def value(resource: Named, field: str) -> object:
        if field == id_field:
            return resource.name.rsplit("/", 1)[-1]
        found: object = getattr(resource, field)
        return found

    return value
