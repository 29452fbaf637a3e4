"""The sections of an AMQP 1.0 message up to its body, read as RabbitMQ 4.2's parser reads
them in server mode (amqp10_binary_parser, amqp10_framing, mc_amqp:init): it stops where
the body starts, and it fails on what it cannot take, which ends the session with an
internal-error (:class:`Amqp10Error`).

What it checks: each section is described by a known descriptor (a ulong, or the
section's symbolic name); the header is a list of at most 5 fields, the properties one of
at most 13 (and come first in the bare message, once); annotations are maps whose keys are
``x-`` symbols ("reserved_annotation_key" for any other); no footer before the body. A
message without a body is a decode-error (its link is detached).

Publishers repeat their header, annotations and application properties: each section is
decoded once for each distinct bytes and kept (bounded; cleared when full).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from leveret.broker import amqp10_values as av
from leveret.protocol.amqp10 import definitions as defs
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import I64, U32

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES = 0x73, 0x74
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x75, 0x76, 0x77, 0x78
BODY = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE))
_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
NULL: Value = ("null", None)
CACHE_SIZE = 4096


class Amqp10Error(Exception):
    """What RabbitMQ 4.2 answers a message with: an AMQP 1.0 error condition and
    description. ``ends_session``: RabbitMQ ends the session (its session process fails
    on the message) rather than detaching the link; for those, ``description`` is the
    first line of what it sends (the reason; its stack trace is left out)."""

    def __init__(self, condition: str, description: str, ends_session: bool = False) -> None:
        super().__init__(description)
        self.condition = types.Symbol(condition)
        self.description = description
        self.ends_session = ends_session

    @property
    def error(self) -> defs.Error:
        return defs.Error(self.condition, self.description)


def crash(reason: str) -> Amqp10Error:
    """RabbitMQ's session failing on a message: internal-error, the session ends."""
    return Amqp10Error(defs.INTERNAL_ERROR, reason, ends_session=True)


def size_error(size: int, max_size: int) -> Amqp10Error:
    """A message over a link's max-message-size (either way): a link error."""
    return Amqp10Error(
        defs.MESSAGE_SIZE_EXCEEDED,
        f"message size ({size} bytes) > maximum message size ({max_size} bytes)",
    )


def user_id_error(user_id: bytes | None, username: str, impersonator: bool) -> Amqp10Error | None:
    """rabbit_access_control:check_user_id: a user-id other than the authenticated user's
    (unless the user is tagged impersonator) detaches the link."""
    if user_id is None or impersonator or user_id == username.encode():
        return None
    claimed = user_id.decode("utf-8", "replace")
    return Amqp10Error(
        defs.UNAUTHORIZED_ACCESS,
        f"user_id property set to '{claimed}' but authenticated user was '{username}'",
    )


def remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= CACHE_SIZE:
        cache.clear()
    cache[key] = value


@dataclass(slots=True)
class Sections:
    """Where a message's sections are: the header's, properties' and application
    properties' values (their bytes), the message annotations' whole section, where the
    bare message starts, where the body starts (-1: none) and its first section's code.
    ``properties``: the properties' fields; :attr:`header` and :attr:`annotations`
    decode theirs."""

    header_raw: bytes | None = None
    annotations_raw: bytes = b""
    properties_raw: bytes | None = None
    properties: list[Value] | None = None
    application_raw: bytes | None = None
    bare_at: int = -1
    body_at: int = -1
    body_code: int = 0

    @property
    def header(self) -> list[Value] | None:
        return None if self.header_raw is None else decode_header(self.header_raw)

    @property
    def annotations(self) -> list[tuple[str, Value]]:
        return decode_annotations(self.annotations_raw) if self.annotations_raw else []


def read_sections(payload: bytes) -> Sections:
    """A message's sections up to its body (see :class:`Sections`), each checked; raises
    :class:`Amqp10Error` for one RabbitMQ cannot take."""
    if type(payload) is not bytes:  # a bytearray or memoryview: keys of caches are bytes
        payload = bytes(payload)
    s = Sections()
    pos = 0
    n = len(payload)
    try:
        while pos < n:
            start = pos
            if payload[pos] != 0x00:
                raise crash("function_clause")
            if payload[pos + 1] == 0x53:
                code = payload[pos + 2]
                pos += 3
            else:
                code, pos = _descriptor(payload, pos + 1)
            if code in BODY:
                s.body_at = start
                s.body_code = code
                break
            end = _compound_end(payload, pos)
            if end < 0 or end > n:
                raise crash("function_clause")
            raw = payload[pos:end]
            if code == HEADER:
                decode_header(raw)
                s.header_raw = raw
            elif code == MESSAGE_ANNOTATIONS:
                s.annotations_raw = payload[start:end]
                decode_annotations(s.annotations_raw)
            elif code == DELIVERY_ANNOTATIONS:
                _delivery_annotations(raw)
            elif code == PROPERTIES:
                if s.bare_at >= 0:
                    raise crash("badarg")
                s.properties = decode_properties(raw)
                s.properties_raw = raw
                s.bare_at = start
            elif code == APPLICATION_PROPERTIES:
                decode_application(raw)
                s.application_raw = raw
                if s.bare_at < 0:
                    s.bare_at = start
            else:  # a footer before the body, or a section RabbitMQ does not know
                raise crash("function_clause")
            pos = end
    except (IndexError, struct.error, types.DecodeError):
        raise crash("function_clause") from None
    if s.bare_at < 0:
        s.bare_at = s.body_at
    return s


def _descriptor(payload: bytes, pos: int) -> tuple[int, int]:
    """A section's descriptor code (a ulong, or a symbolic name) and where its value
    starts."""
    value, after = types.decode(payload, pos)
    kind, v = value
    if kind == "ulong":
        return int(v), after
    if kind == "symbol" and v in _NAMES:
        return _NAMES[v], after
    raise crash("function_clause")


def _compound_end(payload: bytes, pos: int) -> int:
    """Where the list or map at ``pos`` ends, by its size; -1 for another type."""
    code = payload[pos]
    if code in (0xC0, 0xC1):
        return pos + 2 + payload[pos + 1]
    if code in (0xD0, 0xD1):
        return pos + 5 + int(U32.unpack_from(payload, pos + 1)[0])
    if code == 0x45:
        return pos + 1
    return -1


def _whole(raw: bytes, kind: str) -> list[Any]:
    """A list or map that fills ``raw`` exactly (RabbitMQ parses what its size says)."""
    value, end = types.decode(raw, 0)
    if value[0] != kind or end != len(raw):
        raise crash("function_clause")
    items: list[Any] = value[1]
    return items


_HEADERS: dict[bytes, list[Value]] = {}
_ANNOTATIONS: dict[bytes, list[tuple[str, Value]]] = {}
_APPLICATION: dict[bytes, list[tuple[Value, Value]]] = {}


def decode_header(raw: bytes) -> list[Value]:
    """The header's fields (at most 5)."""
    got = _HEADERS.get(raw)
    if got is None:
        got = _whole(raw, "list")
        if len(got) > 5:
            raise crash("function_clause")
        remember(_HEADERS, raw, got)
    return got


def decode_annotations(section: bytes) -> list[tuple[str, Value]]:
    """Message annotations (the whole section's bytes) as ``(key, value)``."""
    got = _ANNOTATIONS.get(section)
    if got is None:
        pos = 3 if section[1] == 0x53 else _descriptor(section, 1)[1]
        got = _checked_annotations(_whole(section[pos:], "map"))
        remember(_ANNOTATIONS, section, got)
    return got


def _delivery_annotations(raw: bytes) -> None:
    _checked_annotations(_whole(raw, "map"))


def _checked_annotations(pairs: list[tuple[Value, Value]]) -> list[tuple[str, Value]]:
    """amqp10_framing:decode_annotations: every key an ``x-`` symbol."""
    out = []
    for key, value in pairs:
        if key[0] != "symbol" or not key[1].startswith("x-"):
            raise crash(f"{{reserved_annotation_key,{av.term(key)}}}")
        out.append((key[1], value))
    return out


def decode_application(raw: bytes) -> list[tuple[Value, Value]]:
    """Application properties as ``(key, value)`` (keys of any type: unchecked)."""
    got = _APPLICATION.get(raw)
    if got is None:
        got = _whole(raw, "map")
        remember(_APPLICATION, raw, got)
    return got


_STRING = {0xA1: "string", 0xA3: "symbol", 0xA0: "binary"}


def decode_properties(raw: bytes) -> list[Value]:
    """The properties' fields (at most 13), the common types read in place (not kept:
    message-ids make every one different)."""
    code = raw[0]
    if code == 0x45:
        return []
    if code == 0xC0:
        count, pos = raw[2], 3
    elif code == 0xD0:
        count, pos = int(U32.unpack_from(raw, 5)[0]), 9
    else:
        raise crash("function_clause")
    if count > 13:
        raise crash("function_clause")
    out: list[Value] = []
    append = out.append
    try:
        for _ in range(count):
            c = raw[pos]
            if c == 0x40:
                append(NULL)
                pos += 1
            elif c in _STRING:
                n = raw[pos + 1]
                chunk = raw[pos + 2 : pos + 2 + n]
                kind = _STRING[c]
                append((kind, chunk if c == 0xA0 else chunk.decode()))
                pos += 2 + n
            elif c == 0x83:
                append(("timestamp", I64.unpack_from(raw, pos + 1)[0]))
                pos += 9
            else:
                value, pos = types.decode(raw, pos)
                append(value)
    except (IndexError, struct.error, UnicodeDecodeError):
        raise crash("function_clause") from None
    if pos != len(raw):
        raise crash("function_clause")
    return out
