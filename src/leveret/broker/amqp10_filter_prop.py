"""Property filter expressions (AMQP Filter Expressions 1.0, §4) as RabbitMQ 4.2 serves
them on a stream's receiving link (rabbit_amqp_filter_prop at v4.2.9).

A filter is a described map, its descriptor ``amqp:properties-filter`` (0x173) or
``amqp:application-properties-filter`` (0x174), of 1 to 16 entries. Of the properties
filter, each key is a field's symbol and each value of the field's type (message-id and
correlation-id a ulong, uuid, binary or string; user-id a binary; to, subject, reply-to,
group-id and reply-to-group-id a string; content-type and content-encoding a symbol;
absolute-expiry-time and creation-time a timestamp; group-sequence a uint). Of the
application-properties filter each key is a string, each value anything. Anything else
makes the whole filter unusable: :func:`parse` returns None and the broker leaves it out.

A string reference value may start with a modifier: ``&p:`` (the field starts with the
rest), ``&s:`` (ends with it), ``&&`` (an escaped ``&``: the rest, with one ``&``
dropped); any other ``&`` makes the filter unusable.

A message passes when every entry matches (§4.2.4, §4.2.5): a null reference value
matches anything (an application property must be there, though), a prefix or suffix
matches bytes that start or end with it, anything else is Erlang's ``==``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leveret.broker.amqp10_filter_msg import FilterMessage, erl_eq, simple
from leveret.protocol.amqp10.types import Value

PROPERTIES_FILTER = "amqp:properties-filter"
PROPERTIES_FILTER_CODE = 0x173
APPLICATION_PROPERTIES_FILTER = "amqp:application-properties-filter"
APPLICATION_PROPERTIES_FILTER_CODE = 0x174
MAX_FIELDS = 16  # "impose a limit on the complexity of each filter expression" [7.1]

_ANY_ID = ("ulong", "uuid", "binary", "string")
#: each properties field's symbol: its name (as mc:property has it) and the types it takes
_FIELDS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    # symbol: (field, types, string modifiers apply)
    "message-id": ("message_id", _ANY_ID, True),
    "user-id": ("user_id", ("binary",), False),
    "to": ("to", ("string",), True),
    "subject": ("subject", ("string",), True),
    "reply-to": ("reply_to", ("string",), True),
    "correlation-id": ("correlation_id", _ANY_ID, True),
    "content-type": ("content_type", ("symbol",), False),
    "content-encoding": ("content_encoding", ("symbol",), False),
    "absolute-expiry-time": ("absolute_expiry_time", ("timestamp",), False),
    "creation-time": ("creation_time", ("timestamp",), False),
    "group-id": ("group_id", ("string",), True),
    "group-sequence": ("group_sequence", ("uint",), False),
    "reply-to-group-id": ("reply_to_group_id", ("string",), True),
}


@dataclass(frozen=True, slots=True)
class Affix:
    """A ``&p:`` (prefix) or ``&s:`` (suffix) reference value."""

    prefix: bool
    text: bytes

    def matches(self, value: Any) -> bool:
        if not isinstance(value, bytes):
            return False
        return value.startswith(self.text) if self.prefix else value.endswith(self.text)


class _Invalid(Exception):
    """A reference value 4.2 cannot take."""


def _modified(text: str) -> Any:
    """parse_string_modifier_prefix: an affix, or the string's bytes."""
    if text.startswith("&s:"):
        return Affix(False, text[3:].encode())
    if text.startswith("&p:"):
        return Affix(True, text[3:].encode())
    if text.startswith("&&"):
        return text[1:].encode()
    if text.startswith("&"):
        raise _Invalid(text)
    return text.encode()


@dataclass(frozen=True, slots=True)
class PropertyExpression:
    """One parsed filter: of the properties (``application`` False, keys the fields'
    names) or of the application properties (keys as bytes)."""

    application: bool
    entries: tuple[tuple[Any, Any], ...]

    def matches(self, message: FilterMessage) -> bool:
        if self.application:
            props = message.application_properties()
            for key, ref in self.entries:
                if key not in props or not _match(ref, props[key]):
                    return False
            return True
        return all(_match(ref, message.property(name)) for name, ref in self.entries)


def _match(ref: Any, value: Any) -> bool:
    """match_simple_type."""
    if ref is None:
        return True
    if isinstance(ref, Affix):
        return ref.matches(value)
    return erl_eq(ref, value)


def _descriptor_is(descriptor: Value, name: str, code: int) -> bool:
    return descriptor == ("symbol", name) or descriptor == ("ulong", code)


def parse(value: Value) -> PropertyExpression | None:
    """A filter's value (tagged) as a property filter expression; None when it is none,
    or one 4.2 refuses."""
    if value[0] != "described":
        return None
    descriptor, inner = value[1]
    if inner[0] != "map" or not 0 < len(inner[1]) <= MAX_FIELDS:
        return None
    try:
        if _descriptor_is(descriptor, PROPERTIES_FILTER, PROPERTIES_FILTER_CODE):
            return PropertyExpression(False, tuple(_property(k, v) for k, v in inner[1]))
        if _descriptor_is(
            descriptor, APPLICATION_PROPERTIES_FILTER, APPLICATION_PROPERTIES_FILTER_CODE
        ):
            return PropertyExpression(True, tuple(_application(k, v) for k, v in inner[1]))
    except _Invalid:
        return None
    return None


def _property(key: Value, value: Value) -> tuple[str, Any]:
    if key[0] != "symbol" or key[1] not in _FIELDS:
        raise _Invalid(key)
    name, kinds, modifiers = _FIELDS[key[1]]
    if value[0] not in kinds:
        raise _Invalid(value)
    if modifiers and value[0] == "string":
        return name, _modified(value[1])
    return name, simple(value)


def _application(key: Value, value: Value) -> tuple[bytes, Any]:
    if key[0] != "string":
        raise _Invalid(key)
    if value[0] == "string":
        return key[1].encode(), _modified(value[1])
    return key[1].encode(), simple(value)
