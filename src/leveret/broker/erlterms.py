"""Values as Erlang's ``~p`` prints them, where RabbitMQ shows its terms: JSON values in its
messages (what ``rabbit_json`` decoded: strings are binaries (``<<"x">>``), objects are
maps, ``null`` is the atom ``null``; its validation errors quote the values they refuse
this way), and the binaries, atoms, IP address tuples and field tables its event exchange
prints."""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any

from leveret.broker.errors import type_name
from leveret.protocol.spec import type_of

# Where io_lib's pretty printer breaks a line.
LINE_WIDTH = 80


def term(value: Any) -> str:
    """``~p`` of a JSON value."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        if value.isascii():
            return '<<"' + value.replace("\\", "\\\\").replace('"', '\\"') + '">>'
        return '<<"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"/utf8>>'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return erlang_float(value)
    if isinstance(value, dict):
        return "#{" + ",".join(f"{term(k)} => {term(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(term(v) for v in value) + "]"
    return str(value)


def pairs(items: list[tuple[str, Any]]) -> str:
    """``~p`` of a proplist: ``[{<<"key">>,value}]``."""
    return "[" + ",".join(f"{{{term(k)},{term(v)}}}" for k, v in items) + "]"


def erlang_float(value: float) -> str:
    """A float as Erlang prints it: always a fraction, exponents without '+'."""
    if math.isinf(value) or math.isnan(value):
        return repr(value)
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent:
        return f"{mantissa}e{int(exponent)}"
    return mantissa


def tuple_term(prefix: str, items: list[str]) -> str:
    """``prefix`` then a tuple of already-printed items, broken as io_lib breaks a tuple
    that does not fit on the line: one item a line, under the first."""
    flat = "{" + ",".join(items) + "}"
    if len(prefix) + len(flat) < LINE_WIDTH:
        return prefix + flat
    indent = "\n" + " " * (len(prefix) + 1)
    return prefix + "{" + ("," + indent).join(items) + "}"


# What io_lib prints of a printable binary, escaped (latin1 printing, RabbitMQ's default).
_STRING_ESCAPES = {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord("\v"): "\\v",
    ord("\b"): "\\b",
    ord("\f"): "\\f",
    0x1B: "\\e",
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


def binary_term(data: bytes, column: int = 0) -> str:
    """``~p`` of an Erlang binary printed from ``column``: ``<<"text">>`` when every byte
    is printable (latin1), else its bytes, ``<<0,103,117>>``, filled into lines as io_lib
    fills them (each line to column 79 at most, the next ones under the first byte);
    ``<<>>`` when empty."""
    if not data:
        return "<<>>"
    if all(32 <= b <= 126 or b >= 160 or b in _STRING_ESCAPES for b in data):
        return '<<"' + "".join(_STRING_ESCAPES.get(b) or chr(b) for b in data) + '">>'
    numbers = [str(b) for b in data]
    pieces = [n + "," for n in numbers[:-1]] + [numbers[-1]]
    indent = " " * (column + 2)
    lines = [" " * column + "<<" + pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + len(piece) <= LINE_WIDTH - 1:
            lines[-1] += piece
        else:
            lines.append(indent + piece)
    return "\n".join(lines)[column:] + ">>"


# --------------------------------------------------------------- the event exchange's
class Term(str):
    """An Erlang term already printed (a pid, an IP address tuple): a longstr."""


def binary(text: str) -> str:
    """A binary as Erlang's ~p prints it: ``<<"abc">>``, ``<<>>`` when empty."""
    if not text:
        return "<<>>"
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'<<"{escaped}">>' if text.isascii() else f'<<"{escaped}"/utf8>>'


_BARE_ATOM = re.compile(r"[a-z][A-Za-z0-9_@]*")


def atom(text: str) -> str:
    """An atom as Erlang's ~p prints it: bare, or quoted when it must be."""
    if _BARE_ATOM.fullmatch(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ip_term(address: str) -> Term:
    """An IP address as Erlang prints its tuple: ``{127,0,0,1}``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return Term(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        else:
            parts = [int.from_bytes(ip.packed[i : i + 2], "big") for i in range(0, 16, 2)]
            return Term("{" + ",".join(map(str, parts)) + "}")
    return Term("{" + ",".join(str(b) for b in ip.packed) + "}")


def _typed_term(key: str, value: Any, kind: str) -> str:
    """``{<<"key">>,type,value}`` as ``~p`` prints a field of a table."""
    return "{" + f"{binary(key)},{kind},{_value_term(value, kind)}" + "}"


def _value_term(value: Any, kind: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return binary(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, str):
        return binary(value)
    if isinstance(value, dict):
        types = getattr(value, "types", {})
        inner = [_typed_term(k, v, types.get(k) or type_name(v)) for k, v in value.items()]
        return "[" + ",".join(inner) + "]"
    if isinstance(value, list):
        return (
            "["
            + ",".join("{" + f"{type_name(v)},{_value_term(v, type_name(v))}" + "}" for v in value)
            + "]"
        )
    if value is None:
        return "undefined"
    return str(value)


def table_terms(values: dict[str, Any]) -> list[Term]:
    """A field table (arguments, client properties) as the plugin shows one: an array of
    its fields, each printed as an Erlang tuple."""
    return [Term(_typed_term(k, v, type_of(values, k) or type_name(v))) for k, v in values.items()]
