"""A stream's entry as RabbitMQ 4.2's filter expressions read it (mc_amqp:init_from_stream,
then mc:property, mc:routing_headers, mc:priority and mc:timestamp): the values they
compare, in the form Erlang compares them.

Values are *simple*: an AMQP string, symbol, binary or uuid is its bytes (Erlang binaries:
compared byte for byte, whatever their AMQP type), an integer of any width, a timestamp
or a char is an ``int``, a float or double a ``float``, a boolean a ``bool``; null is
``None`` (Erlang's ``undefined``). A list, map, array or described value is none of
these (:data:`COMPOUND`): nothing equals it.

:func:`erl_eq` is Erlang's ``==`` on them: numbers equal across integer and float
(``1 == 1.0``), a boolean only a boolean (``true == 1`` is false, unlike Python), bytes
only bytes."""

from __future__ import annotations

from typing import Any

from leveret.broker.amqp10_sections import (
    Amqp10Error,
    Sections,
    decode_application,
    read_sections,
)
from leveret.protocol.amqp10.types import Value

#: a value that is not simple (a list, map, array or described value)
COMPOUND = object()

#: the properties' fields by position (AMQP 1.0 §3.2.4), as 4.2's field names
PROPERTY_FIELDS = (
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
_INDEX = {name: i for i, name in enumerate(PROPERTY_FIELDS)}
_BYTES = frozenset(("string", "symbol", "binary", "uuid", "decimal32", "decimal64", "decimal128"))
_COMPOUND = frozenset(("list", "map", "array", "described"))


def simple(value: Value) -> Any:
    """A tagged value as Erlang's ``unwrap`` leaves it (see the module's docstring)."""
    kind, v = value
    if kind in _BYTES:
        return v.encode() if isinstance(v, str) else bytes(v)
    if kind in _COMPOUND:
        return COMPOUND
    if kind == "null":
        return None
    return v  # bool, integers, timestamp, char (an int), float, double


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def erl_eq(a: Any, b: Any) -> bool:
    """Erlang's ``==`` of two simple values."""
    if is_number(a) and is_number(b):
        return bool(a == b)
    if type(a) is not type(b) or a is COMPOUND or b is COMPOUND:
        return False
    return bool(a == b)


class FilterMessage:
    """One stored entry, its sections read once, what a filter asks of it decoded on first
    use. ``ok`` is False for bytes that are no AMQP 1.0 message RabbitMQ reads (no filter
    matches them)."""

    __slots__ = ("_app", "_sections", "ok")

    def __init__(self, entry: bytes) -> None:
        self._app: dict[bytes, Any] | None = None
        self._sections: Sections | None = None
        try:
            self._sections = read_sections(entry)
            self.ok = True
        except Amqp10Error:
            self.ok = False

    def property(self, name: str) -> Any:
        """mc:property, unwrapped: the properties' field (``None``: absent or null)."""
        s = self._sections
        fields = s.properties if s is not None else None
        i = _INDEX[name]
        if not fields or i >= len(fields):
            return None
        return simple(fields[i])

    def application_properties(self) -> dict[bytes, Any]:
        """mc:routing_headers(Msg, []): the application properties with string keys and
        simple values (null kept, as ``None``; others left out); of equal keys the first."""
        got = self._app
        if got is None:
            got = {}
            s = self._sections
            if s is not None and s.application_raw is not None:
                try:
                    pairs = decode_application(s.application_raw)
                except Amqp10Error:
                    pairs = []
                for key, value in pairs:
                    if key[0] != "string":
                        continue
                    v = simple(value)
                    if v is not COMPOUND:
                        got.setdefault(key[1].encode(), v)
            self._app = got
        return got

    def priority(self) -> int | None:
        """mc:priority of an entry: the header's (a ubyte), else an AMQP 0-9-1
        publisher's ``x-basic-priority`` annotation; None without either."""
        s = self._sections
        if s is None:
            return None
        header = s.header
        if header and len(header) > 1 and header[1][0] == "ubyte":
            return int(header[1][1])
        for key, value in s.annotations:
            if key == "x-basic-priority":
                v = simple(value)
                return v if is_number(v) else None
        return None

    def creation_time(self) -> int | None:
        """mc:timestamp: the creation-time when it is a timestamp."""
        s = self._sections
        fields = s.properties if s is not None else None
        if fields and len(fields) > 9 and fields[9][0] == "timestamp":
            return int(fields[9][1])
        return None
