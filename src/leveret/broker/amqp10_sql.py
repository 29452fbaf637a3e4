"""SQL filter expressions (AMQP Filter Expressions 1.0, §6) as RabbitMQ 4.2 parses them
(rabbit_amqp_filter_sql:parse, rabbit_amqp_sql_lexer.xrl, rabbit_amqp_sql_parser.yrl at
v4.2.9): the subset it accepts, to a tree :mod:`leveret.broker.amqp10_sql_eval`
evaluates per message.

The filter is named ``sql-filter`` in the source's filter map; its value is a string
described by ``amqp:sql-filter`` (or 0x120). An expression is refused (:func:`parse`
returns None; the broker leaves the filter out of its attach) when it is longer than
4096 characters, has more than 200 tokens, does not scan or does not parse, or has a LIKE
pattern 4.2 refuses. What it accepts:

- literals: integers, decimals ``1.5`` with an optional exponent ``1.5E3``, strings in
  single or double quotes (the quote doubled inside), binaries ``0xAB12`` (upper-case
  hex), ``TRUE``, ``FALSE``; keywords only in upper case, and no identifier that is a
  keyword in any case (``and``, ``null``, ``exists``, ``lower``, ``utc`` ...);
- identifiers: ``header.priority`` (``h.``), the properties' fields ``properties.subject``
  (``p.``; message_id, user_id, to, subject, reply_to, correlation_id, content_type,
  content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
  reply_to_group_id), application properties by name, ``application_properties.name``
  (``a.``) or in brackets ``[any name]`` (``[[`` and ``]]`` for brackets);
- ``AND``, ``OR``, ``NOT``; ``= <> != > < >= <=``; ``+ - * / %`` and unary ``+ -``;
  ``x [NOT] LIKE 'pattern' [ESCAPE 'c']``, ``x [NOT] IN (a, b ...)``,
  ``identifier IS [NOT] NULL``; ``UTC()``; parentheses.

NOT binds tighter than AND, AND tighter than OR; comparisons do not chain."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from leveret.broker.amqp10_filter_msg import PROPERTY_FIELDS

SQL_FILTER = "amqp:sql-filter"
SQL_FILTER_CODE = 0x120
FILTER_NAME = "sql-filter"
MAX_LENGTH = 4096
MAX_TOKENS = 200

_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "not",
        "like",
        "in",
        "is",
        "null",
        "escape",
        "true",
        "false",
        "exists",
        "nan",
        "inf",
        "lower",
        "upper",
        "left",
        "right",
        "substring",
        "utc",
        "date",
    ]
)
_HEADER_FIELDS = {"priority": "priority"}
_PROPERTY_FIELDS = frozenset(PROPERTY_FIELDS)  # the properties' fields, by 4.2's names

# The lexer's rules in leex's order: the longest match wins, the first rule of equal ones.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ws", re.compile(r"[ \t\f\n\r]+")),
    *((word, re.compile(word)) for word in
      ("AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE", "UTC")),
    *((op, re.compile(re.escape(op))) for op in
      ("<>", "!=", "=", ">=", "<=", ">", "<", "+", "-", "*", "/", "%", "(", ")", ",")),
    ("integer", re.compile(r"[0-9]+")),
    ("float", re.compile(r"[0-9]+\.[0-9]+(?:E[+\-]?[0-9]+)?")),
    ("string", re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")),
    ("binary", re.compile(r"0x(?:[0-9A-F][0-9A-F])+")),
    ("section", re.compile(r"[a-zA-Z][a-zA-Z_-]*\.[a-zA-Z][a-zA-Z0-9_]*")),
    ("delimited", re.compile(r"\[(?:[^\[\]]|\[\[|\]\])*\]")),
    ("regular", re.compile(r"[a-zA-Z][a-zA-Z0-9_]*")),
)  # fmt: skip


class SqlError(Exception):
    """An expression RabbitMQ 4.2 refuses (why, for the log)."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # a keyword or operator itself, or integer float string binary boolean identifier
    value: Any = None


def is_control_char(c: str) -> bool:
    return ord(c) < 32 or ord(c) == 127


def _section_field(text: str) -> Any:
    """rabbit_amqp_util:section_field_name_to_atom: a field's name (str) or an
    application property's (bytes)."""
    section, _, name = text.partition(".")
    if section in ("header", "h") and name in _HEADER_FIELDS:
        return _HEADER_FIELDS[name]
    if section in ("properties", "p") and name in _PROPERTY_FIELDS:
        return name
    if section in ("application_properties", "a"):
        return name.encode()
    raise SqlError(f"unsupported field name {text}")


def tokenize(sql: str) -> list[Token]:
    """The expression's tokens (rabbit_amqp_sql_lexer); raises SqlError."""
    tokens: list[Token] = []
    pos = 0
    n = len(sql)
    while pos < n:
        best, length = "", 0
        for kind, pattern in _RULES:
            m = pattern.match(sql, pos)
            if m is not None and m.end() - pos > length:
                best, length = kind, m.end() - pos
        if not length:
            raise SqlError(f"illegal character {sql[pos]!r}")
        text = sql[pos : pos + length]
        pos += length
        if best != "ws":
            tokens.append(_token(best, text))
    return tokens


def _token(kind: str, text: str) -> Token:
    if kind in ("TRUE", "FALSE"):
        return Token("boolean", kind == "TRUE")
    if kind == "!=":
        return Token("<>")
    if kind == "integer":
        return Token("integer", int(text))
    if kind == "float":
        return Token("float", float(text))
    if kind == "string":
        quote = text[0]
        return Token("string", text[1:-1].replace(quote * 2, quote).encode())
    if kind == "binary":
        return Token("binary", bytes.fromhex(text[2:]))
    if kind == "section":
        return Token("identifier", _section_field(text))
    if kind == "delimited":
        inner = text[1:-1]
        if any(is_control_char(c) for c in inner):
            raise SqlError(f"illegal control character in identifier {text!r}")
        return Token("identifier", inner.replace("[[", "[").replace("]]", "]").encode())
    if kind == "regular":
        if text.lower() in _KEYWORDS:
            raise SqlError(f"unsupported identifier {text}")
        return Token("identifier", text.encode())
    return Token(kind)


# ------------------------------------------------------------------ the parser
# The tree, as tuples: ("integer"|"float"|"string"|"binary"|"boolean", value),
# ("identifier", field name str | application property bytes), ("utc",),
# ("and"|"or"|"="|"<>"|">"|"<"|">="|"<="|"+"|"-"|"*"|"/"|"%", a, b),
# ("not"|"plus"|"minus"|"is_null", a), ("in", a, [b ...]), ("like", a, pattern, escape)
# with pattern a str and escape a one-character str or None.
Node = tuple[Any, ...]
_COMPARISONS = frozenset(("=", "<>", ">", "<", ">=", "<="))
_LITERALS = frozenset(("integer", "float", "string", "binary", "boolean"))


class _Parser:
    """Recursive descent over the yecc grammar's precedences (OR < AND < NOT)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.tokens[i].kind if i < len(self.tokens) else "$end"

    def take(self, kind: str | None = None) -> Token:
        if self.pos >= len(self.tokens) or (kind is not None and self.peek() != kind):
            raise SqlError(f"syntax error before {self.peek()}")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def selector(self) -> Node:
        node = self.conditional()
        if self.pos != len(self.tokens):
            raise SqlError(f"syntax error before {self.peek()}")
        return node

    def _chain(self, operators: Mapping[str, str], operand: Callable[[], Node]) -> Node:
        """``operand (operator operand)*``, left-associative: each operator's node kind by
        its token's."""
        node = operand()
        while (kind := operators.get(self.peek())) is not None:
            self.take()
            node = (kind, node, operand())
        return node

    def conditional(self) -> Node:
        return self._chain({"OR": "or"}, self.conjunction)

    def conjunction(self) -> Node:
        return self._chain({"AND": "and"}, self.negation)

    def negation(self) -> Node:
        if self.peek() == "NOT":
            self.take()
            return ("not", self.negation())
        return self.comparison()

    def comparison(self) -> Node:
        if self.peek() == "identifier" and self.peek(1) == "IS":
            ident = ("identifier", self.take().value)
            self.take("IS")
            negated = self.peek() == "NOT"
            if negated:
                self.take()
            self.take("NULL")
            node: Node = ("is_null", ident)
            return ("not", node) if negated else node
        left = self.additive()
        kind = self.peek()
        if kind in _COMPARISONS:
            self.take()
            return (kind, left, self.additive())
        negated = kind == "NOT"
        if negated:
            self.take()
            kind = self.peek()
            if kind not in ("LIKE", "IN"):
                raise SqlError(f"syntax error before {kind}")
        if kind == "LIKE":
            self.take()
            pattern = self.take("string").value
            escape = None
            if self.peek() == "ESCAPE":
                self.take()
                escape = self.take("string").value.decode()
                if len(escape) != 1:
                    raise SqlError("ESCAPE must be a single-character string literal")
            node = ("like", left, pattern.decode(), escape)
            return ("not", node) if negated else node
        if kind == "IN":
            self.take()
            self.take("(")
            items = [self.additive()]
            while self.peek() == ",":
                self.take()
                items.append(self.additive())
            self.take(")")
            node = ("in", left, items)
            return ("not", node) if negated else node
        return left

    def additive(self) -> Node:
        return self._chain({"+": "+", "-": "-"}, self.multiplicative)

    def multiplicative(self) -> Node:
        return self._chain({"*": "*", "/": "/", "%": "%"}, self.unary)

    def unary(self) -> Node:
        if self.peek() == "+":
            self.take()
            return ("plus", self.primary())
        if self.peek() == "-":
            self.take()
            return ("minus", self.primary())
        return self.primary()

    def primary(self) -> Node:
        kind = self.peek()
        if kind == "(":
            self.take()
            node = self.conditional()
            self.take(")")
            return node
        if kind in _LITERALS:
            return (kind, self.take().value)
        if kind == "identifier":
            return ("identifier", self.take().value)
        if kind == "UTC":
            self.take()
            self.take("(")
            self.take(")")
            return ("utc",)
        raise SqlError(f"syntax error before {kind}")


def parse_sql(sql: str) -> Node:
    """An expression's tree; raises SqlError where 4.2 refuses it (but for its LIKE
    patterns, which :mod:`amqp10_sql_eval` compiles)."""
    if len(sql) > MAX_LENGTH:
        raise SqlError(f"SQL expression length {len(sql)} exceeds maximum length {MAX_LENGTH}")
    tokens = tokenize(sql)
    if len(tokens) > MAX_TOKENS:
        raise SqlError(f"SQL expression with {len(tokens)} tokens exceeds token limit")
    return _Parser(tokens).selector()
