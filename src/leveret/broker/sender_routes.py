"""Sender-selected distribution, as RabbitMQ: the ``CC`` and ``BCC`` headers (arrays of
long strings) name more routing keys a message is routed with; ``BCC`` is removed before
anything sees the message. Another type of value in either header makes the message
invalid, with RabbitMQ's reason."""

from __future__ import annotations

from leveret.broker.message import Message
from leveret.protocol import errors, table
from leveret.protocol.spec import TYPE_NAMES

_HEADERS_FLAG = 0x20  # byte 0 of the property flags: headers (0x2000)
_ROUTING_HEADERS = ("CC", "BCC")


def might_name_routes(properties: bytes) -> bool:
    """A cheap test that rules out most messages: a CC or BCC key is in the bytes."""
    return bool(properties[0] & _HEADERS_FLAG) and (
        b"\x02CC" in properties or b"\x03BCC" in properties
    )


def with_sender_routes(message: Message) -> Message:
    """The message with the routing keys of its CC and BCC headers, BCC removed; the
    message itself when it has neither. Raises PRECONDITION_FAILED ('invalid message')
    for a CC or BCC that is not an array."""
    fields = table.headers(message.properties)
    if not fields:
        return message
    keys: list[str] = []
    bcc = False
    for name in _ROUTING_HEADERS:
        value = table.lookup(fields, name)
        if value is None:
            continue
        elements = table.array_elements(value)
        if elements is None:
            kind = TYPE_NAMES.get(chr(value[0]), chr(value[0]))
            raise errors.precondition_failed(
                f'invalid message: {{unacceptable_type_in_header,"{name}",{kind}}}'
            )
        keys.extend(k for k in map(table.text, elements) if k is not None)
        bcc = bcc or name == "BCC"
    if bcc:
        # As rabbit_basic:strip_header: the one BCC entry goes, the rest keeps its order.
        message = message.with_properties(
            table.with_headers(message.properties, _without_first(fields, "BCC"))
        )
    message.cc = tuple(keys)
    return message


def _without_first(fields: list[table.Field], key: str) -> list[table.Field]:
    out = list(fields)
    for i, (k, _v) in enumerate(out):
        if k == key:
            del out[i]
            break
    return out
