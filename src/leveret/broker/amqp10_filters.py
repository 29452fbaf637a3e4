"""What a consumer's attach asks of its queue beyond the address, as RabbitMQ 4.2 reads it
(rabbit_amqp_session's parse_attach_properties and parse_filter): the link property
``rabbitmq:priority`` (the consumer's ``x-priority``) and the source's filters.

A filter is honoured or left out: the attach the broker sends back names, in its source's
filter map, only the filters it put in place (AMQP 1.0 §3.5.3), and a client that needs
one checks for it there. This broker puts in place ``rabbitmq:stream-offset-spec`` (where
a stream consumer starts: ``first``, ``last``, ``next``, an offset, a timestamp, or an
interval such as ``10m``), as the AMQP 0-9-1 consumer argument ``x-stream-offset``
(a timestamp in seconds, as AMQP 0-9-1 has them). RabbitMQ 4.2's other filters (the
stream filter values, and the property and SQL filter expressions) are not put in place,
so they are left out of the answer, as RabbitMQ leaves out a filter it cannot parse."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from leveret.protocol.amqp10.types import Described, Symbol, Timestamp

OFFSET_SPEC = "rabbitmq:stream-offset-spec"
PRIORITY = "rabbitmq:priority"


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """The filters in place (the map to answer with; None when the client sent none) and
    the consumer arguments they make."""

    filter: dict[Any, Any] | None
    arguments: dict[str, Any] = field(default_factory=dict)


def _integer(value: Any) -> int | None:
    """An integer of any AMQP integer type (the plain view keeps no width)."""
    if isinstance(value, int) and not isinstance(value, (bool, Timestamp)):
        return int(value)
    return None


def _offset(value: Any) -> Any:
    """The ``x-stream-offset`` of an offset spec's value, None when RabbitMQ ignores it."""
    if isinstance(value, Timestamp):
        seconds = int(value) // 1000
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    if isinstance(value, str):  # a string or a symbol: first, last, next, 10m...
        return str(value)
    number = _integer(value)
    if number is not None and number >= 0:
        return number
    return None


def consumer_spec(
    filters: dict[Any, Any] | None, properties: dict[Any, Any] | None
) -> ConsumerSpec:
    """The consumer an attach asks for, from its source's filter map and its link
    properties."""
    arguments: dict[str, Any] = {}
    priority = _integer((properties or {}).get(Symbol(PRIORITY)))
    if priority is not None:
        arguments["x-priority"] = priority
    if filters is None:
        return ConsumerSpec(None, arguments)
    effective: dict[Any, Any] = {}
    for key, value in filters.items():
        if not isinstance(key, Symbol) or not isinstance(value, Described):
            continue
        if value.descriptor == OFFSET_SPEC:
            offset = _offset(value.value)
            if offset is not None:
                effective[key] = value
                arguments["x-stream-offset"] = offset
    return ConsumerSpec(effective, arguments)
