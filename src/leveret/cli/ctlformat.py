"""How rabbitmqctl 3.10 prints values: Erlang-flavoured terms in tables, typed field
tables in JSON, and the framing of both formats."""

from __future__ import annotations

import json
import zlib
from typing import Any

from leveret.broker.errors import type_name


def erlang(value: Any) -> str:
    """A value inside an Erlang term: strings quoted, tables as lists of pairs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "undefined"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "[" + ",".join(f"{{{erlang(k)},{erlang(v)}}}" for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join(erlang(v) for v in value) + "]"
    return str(value)


def cell(value: Any) -> str:
    """A table cell as rabbitmqctl prints it: booleans and tables as Erlang terms."""
    if value is None:
        return ""
    if isinstance(value, bool | dict):
        return erlang(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def typed(value: Any) -> Any:
    """An AMQP table in rabbitmqctl's JSON: ``[[key, type, value], ...]``."""
    if isinstance(value, dict):
        return [[k, type_name(v), typed(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [[type_name(v), typed(v)] for v in value]
    return value


def json_rows(rows: list[dict[str, Any]]) -> str:
    """rabbitmqctl's streaming JSON list: one object a line, commas leading."""
    lines = ["["]
    for i, row in enumerate(rows):
        text = json.dumps(row, separators=(",", ":"), ensure_ascii=False)
        lines.append(text if i == 0 else "," + text)
    lines.append("]")
    return "\n".join(lines) + "\n"


def local_pid(name: str) -> str:
    """A connection's pid as Erlang prints one (pretty_table shows no node)."""
    return f"<0.{zlib.crc32(name.encode())}.0>"


def pid(node: str, name: str, number: int = 0) -> str:
    """An Erlang-style pid standing for a connection (number 0) or one of its channels."""
    return f"<{node}.{zlib.crc32(name.encode())}.{number}.0>"


# ------------------------------------------------------------------ pretty_table
# rabbitmqctl's pretty_table (the stdout_formatter library): a box in the VT100 line
# drawing set, the header in bold, a rule between rows.
_LINES_ON, _LINES_OFF = "\x1b(0", "\x1b(B"
_BOLD, _PLAIN = "\x1b[1m", "\x1b[0m"


def _rule(widths: list[int], left: str, middle: str, right: str) -> str:
    inner = middle.join("q" * (w + 2) for w in widths)
    return f"{_LINES_ON}{left}{inner}{right}{_LINES_OFF}"


def _row(cells: list[str], widths: list[int], title: bool = False) -> str:
    bar = f"{_LINES_ON}x{_LINES_OFF}"
    parts = []
    for text, width in zip(cells, widths, strict=True):
        pad = " " * (width - len(text))
        shown = f"{_BOLD}{text}{_PLAIN}" if title else text
        parts.append(f"{bar} {shown}{pad} ")
    return "".join(parts) + bar


def pretty_table(columns: list[str], rows: list[list[str]]) -> str:
    """The table of ``rows`` under ``columns``; nothing at all without rows."""
    if not rows:
        return ""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [_rule(widths, "l", "w", "k"), _row(columns, widths, title=True)]
    for row in rows:
        lines.append(_rule(widths, "t", "n", "u"))
        lines.append(_row(row, widths))
    lines.append(_rule(widths, "m", "v", "j"))
    return "\n".join(lines) + "\n"


def erlang_binary(text: str) -> str:
    """A string as Erlang prints a binary: ``<<"text">>``."""
    return "<<" + json.dumps(text, ensure_ascii=False) + ">>"


def ip_tuple(address: str) -> list[int] | None:
    """An IP address as the integers of Erlang's tuple for it (None if it is not one)."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if ip.version == 4:
        return list(ip.packed)
    packed = ip.packed
    return [int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2)]
