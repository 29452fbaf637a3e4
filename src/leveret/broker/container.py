"""What RabbitMQ 4 does to an AMQP 0-9-1 message between its publish and its delivery.

From 3.13 on RabbitMQ keeps every message in its message container (``mc``) and rebuilds
the AMQP 0-9-1 properties of each delivery from it (v4.2.9 deps/rabbit/src/mc_amqpl.erl:
483-575 protocol_state, called for every basic.deliver and basic.get-ok by
rabbit_channel.erl:2818-2822 outgoing_content):

- the headers table is sorted by key and a key that appears twice keeps its first value
  (``lists:usort``), whatever order the publisher sent;
- the expiration is the integer it was parsed as (``integer_to_binary(Ttl)``: "0100" is
  delivered as "100").

The publisher's ``x-death`` header is not read any more (release-notes/4.0.1.md, "AMQP 0.9.1
x-death header"): the broker's death history lives in the container, and the first time
such a message is dead-lettered its ``x-death`` starts afresh (see
:mod:`leveret.broker.deadletter`). :func:`as_held` marks those messages.

Leveret keeps property bytes as they came: in 4.2 mode, :func:`as_held` rewrites them
once, when a message enters the broker, into what every delivery of it shows; a header the
broker adds later (``x-death``, ``x-delivery-count``) is stored in key order, so the
table stays sorted."""

from __future__ import annotations

import struct

from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.spec import HEADERS_FLAG

_HEADERS_BYTE = HEADERS_FLAG >> 8  # the flag's bit in the first byte of the flags
_EXPIRATION_BYTE = table.EXPIRATION_FLAG >> 8


def as_held(message: Message) -> Message:
    """``message`` as RabbitMQ 4 delivers it (headers sorted and deduplicated, expiration
    canonical), marked when it came with an ``x-death`` header of its publisher's."""
    raw = message.properties
    if len(raw) < 2 or not raw[0] & (_HEADERS_BYTE | _EXPIRATION_BYTE):
        return message  # the usual message: nothing to rebuild
    try:
        props = raw
        foreign = False
        if raw[0] & _HEADERS_BYTE:
            fields = table.headers(raw) or []
            kept = _usort(fields)
            foreign = table.lookup(kept, "x-death") is not None
            if kept != fields:
                props = table.with_headers(props, kept)
        if raw[0] & _EXPIRATION_BYTE:
            expiration = table.short_property(props, table.EXPIRATION_FLAG)
            if expiration and expiration.isdigit() and str(int(expiration)) != expiration:
                props = table.with_short_property(
                    props, table.EXPIRATION_FLAG, str(int(expiration))
                )
    except (ValueError, IndexError, struct.error):
        return message  # not for this function to judge: the publish checks refuse it
    held = message if props is raw else message.with_properties(props)
    held.foreign_deaths = foreign
    return held


def _usort(fields: list[table.Field]) -> list[table.Field]:
    """lists:usort by key: sorted bytewise, the first of each key kept."""
    seen: set[str] = set()
    unique = []
    for key, value in fields:
        if key not in seen:
            seen.add(key)
            unique.append((key, value))
    return table.sort(unique)
