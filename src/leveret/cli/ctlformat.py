"""How rabbitmqctl 3.10 prints values: Erlang-flavoured terms in tables, typed field
tables in JSON, and the framing of both formats."""

from __future__ import annotations

import json
import zlib
from typing import Any


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
    """A table cell as rabbitmqctl prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict):
        return erlang(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def table_cell(value: Any) -> str:
    """Cells that hold AMQP tables (arguments, client properties)."""
    if isinstance(value, dict):
        return erlang(value)
    return cell(value)


def amqp_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "void"
    return "longstr"


def typed(value: Any) -> Any:
    """An AMQP table in rabbitmqctl's JSON: ``[[key, type, value], ...]``."""
    if isinstance(value, dict):
        return [[k, amqp_type(v), typed(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [[amqp_type(v), typed(v)] for v in value]
    return value


def json_rows(rows: list[dict[str, Any]]) -> str:
    """rabbitmqctl's streaming JSON list: one object a line, commas leading."""
    lines = ["["]
    for i, row in enumerate(rows):
        text = json.dumps(row, separators=(",", ":"), ensure_ascii=False)
        lines.append(text if i == 0 else "," + text)
    lines.append("]")
    return "\n".join(lines) + "\n"


def pid(node: str, name: str, number: int = 0) -> str:
    """An Erlang-style pid standing for a connection (number 0) or one of its channels."""
    return f"<{node}.{zlib.crc32(name.encode())}.{number}.0>"
