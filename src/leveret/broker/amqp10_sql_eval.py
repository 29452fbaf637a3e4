"""SQL filter expressions evaluated per message as RabbitMQ 4.2 does
(rabbit_amqp_filter_sql:eval at v4.2.9), with the three-valued logic of Jakarta
Messaging (tables 3-4 to 3-6): a message passes only when its expression is TRUE.

- An identifier of a field or application property the message lacks is unknown (NULL);
  ``header.priority`` is 4 when the message has none; ``properties.creation_time`` the
  creation-time in ms.
- A comparison or arithmetic with an unknown operand is unknown. ``=`` and ``<>`` compare
  any values (numbers across integer and float; of different types: not equal); ``<``,
  ``>``, ``<=``, ``>=`` compare two numbers or two strings (byte for byte), and are false
  for any other pair. ``/`` divides as floats, ``%`` is the integer remainder (sign of
  the dividend); dividing by zero is unknown.
- ``LIKE``: ``%`` any characters (as few as possible), ``_`` one character, the ESCAPE
  character makes the next one literal; a pattern with a control character, or ending in
  the escape character, is refused at attach. Of a value that is not a string it is
  unknown; a pattern with ``_`` or two ``%`` does not match bytes that are not UTF-8
  (unknown).
- ``IN`` of an unknown value is unknown; ``IS NULL`` is true of an unknown value."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leveret.broker.amqp10_filter_msg import FilterMessage, erl_eq, is_number
from leveret.broker.amqp10_sql import (
    FILTER_NAME,
    SQL_FILTER,
    SQL_FILTER_CODE,
    Node,
    SqlError,
    is_control_char,
    parse_sql,
)
from leveret.broker.clock import wall_ms
from leveret.protocol.amqp10.types import Value

__all__ = ["FILTER_NAME", "SqlExpression", "parse"]

DEFAULT_PRIORITY = 4  # ?DEFAULT_MSG_PRIORITY

Matcher = Callable[[bytes], Any]  # True, False or None (unknown)


def _check(c: str) -> str:
    if is_control_char(c):
        raise SqlError(f"illegal control character {ord(c)} in LIKE pattern")
    return c


def compile_pattern(pattern: str, escape: str | None) -> Matcher:
    """transform_pattern: a pattern without wildcards is an exact match, with one ``%``
    a prefix, suffix or both, else a regular expression."""
    chars: list[str] = []
    percent = -1
    i = 0
    regex = False
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 == len(pattern):
                raise SqlError("invalid escape at end")
            chars.append(_check(pattern[i + 1]))
            i += 2
            continue
        if c == "_" or (c == "%" and percent >= 0):
            regex = True
            break
        if c == "%":
            percent = len(chars)
        else:
            chars.append(_check(c))
        i += 1
    if not regex:
        if percent < 0:
            exact = "".join(chars).encode()
            return lambda s: s == exact
        prefix = "".join(chars[:percent]).encode()
        suffix = "".join(chars[percent:]).encode()
        if not prefix:
            return lambda s: s.endswith(suffix)
        if not suffix:
            return lambda s: s.startswith(prefix)
        least = len(prefix) + len(suffix)
        return lambda s: len(s) >= least and s.startswith(prefix) and s.endswith(suffix)
    compiled = re.compile("^" + _regex(pattern, escape) + "$")

    def match(s: bytes) -> Any:
        try:
            text = s.decode()
        except UnicodeDecodeError:
            return None  # rabbit_re:run's badarg: unknown
        return compiled.match(text) is not None

    return match


def _regex(pattern: str, escape: str | None) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 == len(pattern):
                raise SqlError("invalid escape at end")
            out.append(re.escape(_check(pattern[i + 1])))
            i += 2
            continue
        if c == "%":
            out.append(".*?")
        elif c == "_":
            out.append(".")
        else:
            out.append(re.escape(_check(c)))
        i += 1
    return "".join(out)


def _compile(node: Node) -> Node:
    """The tree with each LIKE's pattern compiled (raises SqlError as 4.2 refuses one)."""
    kind = node[0]
    if kind == "like":
        return ("like", _compile(node[1]), compile_pattern(node[2], node[3]))
    if kind == "in":
        return ("in", _compile(node[1]), [_compile(n) for n in node[2]])
    if kind in ("identifier", "integer", "float", "string", "binary", "boolean", "utc"):
        return node
    return (kind, *(_compile(n) for n in node[1:]))


def _reads_application_properties(node: Node) -> bool:
    if node[0] == "identifier":
        return isinstance(node[1], bytes)
    if node[0] == "in":
        return _reads_application_properties(node[1]) or any(
            _reads_application_properties(n) for n in node[2]
        )
    return any(isinstance(n, tuple) and _reads_application_properties(n) for n in node[1:])


@dataclass(frozen=True, slots=True)
class SqlExpression:
    """A parsed SQL filter expression; :meth:`matches` a stored message."""

    sql: str
    tree: Node
    application_properties: bool

    def matches(self, message: FilterMessage) -> bool:
        return _eval(self.tree, message) is True


def parse(value: Value) -> SqlExpression | None:
    """The value of a ``sql-filter`` (tagged) as an expression; None where 4.2 refuses
    it (another descriptor, not a string, or an expression it does not take)."""
    if value[0] != "described":
        return None
    descriptor, inner = value[1]
    if descriptor not in (("symbol", SQL_FILTER), ("ulong", SQL_FILTER_CODE)):
        return None
    if inner[0] != "string":
        return None
    try:
        tree = _compile(parse_sql(inner[1]))
    except SqlError:
        return None
    return SqlExpression(inner[1], tree, _reads_application_properties(tree))


# ---------------------------------------------------------------- evaluation
def _field(name: str, m: FilterMessage) -> Any:
    if name == "priority":
        p = m.priority()
        return DEFAULT_PRIORITY if p is None else p
    if name == "creation_time":
        return m.creation_time()
    return m.property(name)


def _eval(node: Node, m: FilterMessage) -> Any:
    kind = node[0]
    if kind in ("integer", "float", "string", "binary", "boolean"):
        return node[1]
    if kind == "identifier":
        key = node[1]
        if isinstance(key, bytes):
            return m.application_properties().get(key)
        return _field(key, m)
    if kind == "utc":
        return wall_ms()
    if kind in ("and", "or"):
        # three-valued (None: unknown), each the other's dual: one side ``decisive``
        # (False for AND, True for OR) decides, the other side unevaluated when it is first
        decisive = kind == "or"
        a = _eval(node[1], m)
        if a is decisive:
            return decisive
        b = _eval(node[2], m)
        if a is (not decisive):
            return b if isinstance(b, bool) else None
        return decisive if b is decisive else None
    if kind == "not":
        a = _eval(node[1], m)
        return (not a) if isinstance(a, bool) else None
    if kind in ("=", "<>", ">", "<", ">=", "<="):
        return _compare(kind, _eval(node[1], m), _eval(node[2], m))
    if kind in ("+", "-", "*", "/", "%"):
        return _arithmetic(kind, _eval(node[1], m), _eval(node[2], m))
    if kind in ("plus", "minus"):
        v = _eval(node[1], m)
        if not is_number(v):
            return None
        return -v if kind == "minus" else v
    if kind == "in":
        v = _eval(node[1], m)
        if v is None:
            return None
        return any(erl_eq(_eval(n, m), v) for n in node[2])
    if kind == "is_null":
        return _eval(node[1], m) is None
    if kind == "like":
        subject = _eval(node[1], m)
        if not isinstance(subject, bytes):
            return None
        return node[2](subject)
    raise AssertionError(kind)


def _compare(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if op == "=":
        return erl_eq(a, b)
    if op == "<>":
        return not erl_eq(a, b)
    if not (is_number(a) and is_number(b)) and not (isinstance(a, bytes) and isinstance(b, bytes)):
        return False
    if op == ">":
        return a > b
    if op == "<":
        return a < b
    if op == ">=":
        return a >= b
    return a <= b


def _arithmetic(op: str, a: Any, b: Any) -> Any:
    if not (is_number(a) and is_number(b)):
        return None
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return None if b == 0 else a / b
        if isinstance(a, float) or isinstance(b, float) or b == 0:
            return None  # rem takes integers only
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    except OverflowError:  # Erlang's badarith
        return None
