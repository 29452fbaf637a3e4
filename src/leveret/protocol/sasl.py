"""The SASL responses a client sends in connection.start-ok, decoded. What they mean
(who may log in) is the broker's business."""

from __future__ import annotations

import struct
from typing import Any

from pamqp import decode

# The mechanisms Leveret knows; which are offered depends on the listener and the config.
MECHANISMS = ("AMQPLAIN", "ANONYMOUS", "EXTERNAL", "PLAIN")


class BadResponse(ValueError):
    """A response that does not follow its mechanism's format."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def plain(response: bytes) -> tuple[str, str]:
    """PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``; the user and password."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise BadResponse("PLAIN response needs three parts")
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError as exc:
        raise BadResponse("PLAIN response is not UTF-8") from exc


def amqplain(response: bytes) -> tuple[str, str]:
    """AMQPLAIN: a field table without its leading length, with LOGIN and PASSWORD."""
    try:
        table: dict[str, Any] = decode.field_table(len(response).to_bytes(4, "big") + response)[1]
        return _text(table.get("LOGIN", "")), _text(table.get("PASSWORD", ""))
    except (ValueError, IndexError, KeyError, TypeError, struct.error) as exc:
        raise BadResponse("AMQPLAIN response is not a field table") from exc
