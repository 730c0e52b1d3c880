"""List filters and orderings (a subset of AIP-160 and AIP-132), parsed into a small tree.

No SQL here: each repository compiles the tree for its own columns (``render_where`` joins
the boolean structure around the repository's own leaf); each list names its fields with a
table of :class:`FieldSpec`.

Grammar, with AIP-160's precedence (``OR`` binds tighter than ``AND``, so
``a AND b OR c`` means ``a AND (b OR c)``; use parentheses when in doubt)::

    expression := sequence { "AND" sequence }
    sequence   := factor { factor }            # juxtaposition is AND too
    factor     := term { "OR" term }
    term       := [ "NOT" | "-" ] ( "(" expression ")" | comparison )
    comparison := FIELD ( "=" | "!=" | "<" | "<=" | ">" | ">=" | ":" ) VALUE

Values are quoted strings (``"..."`` or ``'...'``) or bare words; timestamps are RFC 3339
and must be quoted (they contain ``:``). ``labels.KEY = "v"`` compares one label,
``labels:KEY`` or ``labels.KEY:*`` tests that it is set, and ``field:"text"`` on a string
means "contains".
"""

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from mldiag_platform.errors import InvalidFilter, InvalidOrderBy

MAX_FILTER_LENGTH = 4000
MAX_DEPTH = 32


class Kind(enum.Enum):
    """How a field's values are read and compared."""

    STRING = "string"
    ENUM = "enum"
    TIMESTAMP = "timestamp"
    BOOL = "bool"
    MAP = "map"


Value = str | datetime | bool | None
"""A comparison's operand; ``None`` is the ``*`` of a has-test."""


@dataclass(frozen=True)
class FieldSpec:
    """A filterable field: its canonical name, how to read values, the names it answers to."""

    name: str
    kind: Kind
    aliases: tuple[str, ...] = ()
    normalise: Callable[[str], str | None] | None = None
    """For ENUM fields: the canonical value, or ``None`` when the value is not allowed."""
    orderable: bool = True


@dataclass(frozen=True)
class Comparison:
    """``field[.key] op value``."""

    field: str
    op: str
    value: Value
    key: str | None = None
    position: int = 0


@dataclass(frozen=True)
class And:
    """All of ``parts``."""

    parts: tuple["Expr", ...]


@dataclass(frozen=True)
class Or:
    """Any of ``parts``."""

    parts: tuple["Expr", ...]


@dataclass(frozen=True)
class Not:
    """Not ``part``."""

    part: "Expr"


Expr = Comparison | And | Or | Not
"""A parsed filter."""


@dataclass(frozen=True)
class OrderKey:
    """One ``orderBy`` term."""

    field: str
    descending: bool


_OPERATORS = ("<=", ">=", "!=", "=", "<", ">", ":")
_WORD = re.compile(r"[A-Za-z0-9_.*\-+]+")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9_\-]{1,63}$")


@dataclass(frozen=True)
class _Token:
    kind: str  # "(", ")", "op", "str", "word", "end"
    text: str
    position: int


def _fail(position: int, problem: str) -> InvalidFilter:
    return InvalidFilter(
        f"invalid filter at position {position}: {problem}",
        details=[{"position": position, "problem": problem}],
    )


def _tokenise(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char in "()":
            tokens.append(_Token(char, char, index))
            index += 1
        elif char in "\"'":
            start, index, chars = index, index + 1, []
            while True:
                if index >= len(text):
                    raise _fail(start, "unterminated string")
                if text[index] == "\\" and index + 1 < len(text):
                    chars.append(text[index + 1])
                    index += 2
                elif text[index] == char:
                    index += 1
                    break
                else:
                    chars.append(text[index])
                    index += 1
            tokens.append(_Token("str", "".join(chars), start))
        elif operator := next((op for op in _OPERATORS if text.startswith(op, index)), None):
            tokens.append(_Token("op", operator, index))
            index += len(operator)
        elif match := _WORD.match(text, index):
            tokens.append(_Token("word", match.group(), index))
            index = match.end()
        else:
            raise _fail(index, f"unexpected character {char!r}")
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str, fields: Mapping[str, FieldSpec]) -> None:
        self._tokens = _tokenise(text)
        self._index = 0
        self._fields = fields
        self._depth = 0

    def _peek(self) -> _Token:
        return self._tokens[self._index]

    def _next(self) -> _Token:
        token = self._tokens[self._index]
        self._index += 1
        return token

    def _is_keyword(self, word: str) -> bool:
        token = self._peek()
        return token.kind == "word" and token.text == word

    def parse(self) -> Expr:
        expr = self._expression()
        token = self._peek()
        if token.kind != "end":
            raise _fail(token.position, f"unexpected {token.text!r}")
        return expr

    def _expression(self) -> Expr:
        parts = [self._sequence()]
        while self._is_keyword("AND"):
            self._next()
            parts.append(self._sequence())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def _sequence(self) -> Expr:
        parts = [self._factor()]
        while self._peek().kind in ("(", "word") and not self._is_keyword("AND"):
            parts.append(self._factor())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def _factor(self) -> Expr:
        parts = [self._term()]
        while self._is_keyword("OR"):
            self._next()
            parts.append(self._term())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def _term(self) -> Expr:
        token = self._peek()
        if token.kind == "word" and token.text in ("NOT", "-"):
            self._next()
            return Not(self._simple())
        if token.kind == "word" and token.text.startswith("-") and len(token.text) > 1:
            # "-field" is AIP-160's short NOT: split the word.
            self._tokens[self._index] = _Token("word", token.text[1:], token.position + 1)
            return Not(self._simple())
        return self._simple()

    def _simple(self) -> Expr:
        token = self._peek()
        if token.kind == "(":
            self._next()
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _fail(token.position, "too deeply nested")
            expr = self._expression()
            closing = self._next()
            if closing.kind != ")":
                raise _fail(closing.position, "expected ')'")
            self._depth -= 1
            return expr
        return self._comparison()

    def _comparison(self) -> Comparison:
        token = self._next()
        if token.kind != "word" or token.text in ("AND", "OR", "NOT"):
            what = "the end of the filter" if token.kind == "end" else repr(token.text)
            raise _fail(token.position, f"expected a field name, got {what}")
        field_text, key = token.text, None
        spec = self._fields.get(field_text)
        if spec is None and "." in field_text:
            head, _, key = field_text.partition(".")
            spec = self._fields.get(head)
            if spec is None or spec.kind is not Kind.MAP:
                spec = None
            elif not _LABEL_KEY.fullmatch(key):
                raise _fail(token.position + len(head) + 1, f"invalid key {key!r}")
        if spec is None:
            known = ", ".join(sorted({s.name for s in self._fields.values()}))
            raise _fail(token.position, f"unknown field {field_text!r} (known: {known})")
        operator = self._next()
        if operator.kind != "op":
            raise _fail(operator.position, f"expected an operator after {field_text!r}")
        value_token = self._next()
        if value_token.kind not in ("str", "word"):
            raise _fail(value_token.position, f"expected a value after {operator.text!r}")
        return self._typed(spec, key, operator, value_token, token.position)

    def _typed(
        self, spec: FieldSpec, key: str | None, op: _Token, token: _Token, position: int
    ) -> Comparison:
        raw = token.text
        if spec.kind is Kind.MAP and key is None:
            # "labels:KEY" tests that the key is set.
            if op.text != ":" or not _LABEL_KEY.fullmatch(raw):
                raise _fail(op.position, f"use {spec.name}:KEY or {spec.name}.KEY = VALUE")
            return Comparison(spec.name, ":", None, key=raw, position=position)
        if op.text == ":" and raw == "*" and token.kind == "word":
            return Comparison(spec.name, ":", None, key=key, position=position)
        if spec.kind in (Kind.STRING, Kind.MAP):
            return Comparison(spec.name, op.text, raw, key=key, position=position)
        if spec.kind is Kind.ENUM:
            if op.text not in ("=", "!=", ":"):
                raise _fail(op.position, f"{spec.name} only supports =, != and :")
            value = spec.normalise(raw) if spec.normalise else raw
            if value is None:
                raise _fail(token.position, f"{raw!r} is not a valid {spec.name}")
            return Comparison(
                spec.name, "=" if op.text == ":" else op.text, value, position=position
            )
        if spec.kind is Kind.BOOL:
            if op.text not in ("=", "!=") or raw.lower() not in ("true", "false"):
                raise _fail(op.position, f"{spec.name} takes = true or = false")
            return Comparison(spec.name, op.text, raw.lower() == "true", position=position)
        if op.text == ":":
            raise _fail(op.position, f"{spec.name} does not support ':'")
        return Comparison(spec.name, op.text, _timestamp(raw, token.position), position=position)


def _timestamp(raw: str, position: int) -> datetime:
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _fail(position, f"{raw!r} is not an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise _fail(position, f"{raw!r} needs a time zone (e.g. Z)")
    try:
        # In UTC, as the driver sends it: `0001-01-01T00:00:00+14:00` has no UTC time.
        return value.astimezone(UTC)
    except OverflowError:
        raise _fail(position, f"{raw!r} is out of range (years 1 to 9999, in UTC)") from None


def field_table(specs: tuple[FieldSpec, ...]) -> dict[str, FieldSpec]:
    """Every name (canonical and aliases) a filter may use, to its spec."""
    table: dict[str, FieldSpec] = {}
    for spec in specs:
        for name in (spec.name, *spec.aliases):
            table[name] = spec
    return table


def parse_filter(text: str, fields: Mapping[str, FieldSpec]) -> Expr | None:
    """The parsed filter, ``None`` for an empty one, or :class:`InvalidFilter`."""
    if not text.strip():
        return None
    if len(text) > MAX_FILTER_LENGTH:
        raise _fail(MAX_FILTER_LENGTH, f"longer than {MAX_FILTER_LENGTH} characters")
    return _Parser(text, fields).parse()


def parse_order_by(text: str, fields: Mapping[str, FieldSpec]) -> list[OrderKey]:
    """``field [asc|desc], ...`` into keys, or :class:`InvalidOrderBy`."""
    keys: list[OrderKey] = []
    for term in text.split(","):
        words = term.split()
        if not words:
            if text.strip():
                raise InvalidOrderBy(f"invalid orderBy {text!r}: empty term")
            continue
        spec = fields.get(words[0])
        if spec is None or not spec.orderable or spec.kind is Kind.MAP:
            allowed = ", ".join(sorted({s.name for s in fields.values() if s.orderable}))
            raise InvalidOrderBy(f"cannot order by {words[0]!r} (allowed: {allowed})")
        if len(words) > 2 or (len(words) == 2 and words[1].lower() not in ("asc", "desc")):
            raise InvalidOrderBy(f"invalid orderBy term {term.strip()!r}: use 'field [desc]'")
        if any(key.field == spec.name for key in keys):
            raise InvalidOrderBy(f"{spec.name} appears twice in orderBy")
        keys.append(OrderKey(spec.name, len(words) == 2 and words[1].lower() == "desc"))
    return keys


def render_where(expr: Expr, leaf: Callable[[Comparison], str]) -> str:
    """Join a parsed filter's boolean structure (AND, OR, NOT) around ``leaf``, which
    renders one comparison; each repository supplies the leaf for its own columns."""
    if isinstance(expr, And):
        return "(" + " AND ".join(render_where(part, leaf) for part in expr.parts) + ")"
    if isinstance(expr, Or):
        return "(" + " OR ".join(render_where(part, leaf) for part in expr.parts) + ")"
    if isinstance(expr, Not):
        return f"(NOT {render_where(expr.part, leaf)})"
    return leaf(expr)
