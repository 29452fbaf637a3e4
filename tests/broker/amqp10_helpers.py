"""Helpers for the AMQP 1.0 message tests: sections built and read with the project's
codec, AMQP 0-9-1 property bytes read with their field types."""

from __future__ import annotations

from typing import Any

from leveret.protocol import table
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.spec import TYPE_NAMES

NULL: Value = ("null", None)


def header(
    durable: bool | None = None, priority: int | None = None, ttl: int | None = None
) -> bytes:
    fields: list[Value] = [
        NULL if durable is None else ("bool", durable),
        NULL if priority is None else ("ubyte", priority),
        NULL if ttl is None else ("uint", ttl),
    ]
    while fields and fields[-1] == NULL:
        fields.pop()
    return types.section(0x70, ("list", fields))


_PROPERTY_INDEX = {
    name: i
    for i, name in enumerate(
        (
            "message_id",
            "user_id",
            "to",
            "subject",
            "reply_to",
            "correlation_id",
            "content_type",
            "content_encoding",
            "absolute_expiry_time",
            "creation_time",
            "group_id",
            "group_sequence",
            "reply_to_group_id",
        )
    )
}


def properties(**fields: Value) -> bytes:
    """A properties section with the named fields (tagged values)."""
    values: list[Value] = [NULL] * 13
    for name, value in fields.items():
        values[_PROPERTY_INDEX[name]] = value
    while values and values[-1] == NULL:
        values.pop()
    return types.section(0x73, ("list", values))


def annotations(pairs: list[tuple[str, Value]]) -> bytes:
    return types.section(0x72, ("map", [(("symbol", k), v) for k, v in pairs]))


def application(pairs: list[tuple[str, Value]]) -> bytes:
    return types.section(0x74, ("map", [(("string", k), v) for k, v in pairs]))


def data(body: bytes) -> bytes:
    return types.section(0x75, ("binary", body))


def sections(payload: bytes) -> dict[int, Value]:
    """A message's sections by descriptor code (the body sections: a list under 0x75)."""
    out: dict[int, Any] = {}
    for code, value in types.sections(payload):
        if code in (0x75, 0x76, 0x77):
            out.setdefault("body", []).append((code, value))
        else:
            out[code] = value
    return out


def field_list(section: Value) -> list[Value]:
    return list(section[1])


def amap(section: Value) -> dict[Any, Value]:
    """A map section's entries by key value."""
    return {k[1]: v for k, v in section[1]}


def typed_headers(props: bytes) -> dict[str, tuple[str, Any]]:
    """Headers of property bytes: key -> (RabbitMQ's type name, Python value)."""
    out = {}
    for key, value in table.headers(props) or []:
        out[key] = (TYPE_NAMES.get(chr(value[0]), chr(value[0])), table.decode(value))
    return out


def header_keys(props: bytes) -> list[str]:
    return [k for k, _v in table.headers(props) or []]
