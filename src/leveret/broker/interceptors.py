"""RabbitMQ's incoming message interceptors (``message_interceptors.incoming.*`` in
rabbitmq.conf, RabbitMQ 3.12 and later; rabbit_message_interceptor): what the broker
stamps on every message a client publishes, before it routes it.

- ``set_header_timestamp``: the broker's arrival time, as a ``timestamp_in_ms`` header (a
  long, milliseconds since the epoch) and as the ``timestamp`` property (whole seconds).
- ``set_header_routing_node``: the node that routed the message, as an ``x-routed-by``
  header (a long string).

Each has an ``overwrite`` setting: false keeps a header or property the publisher set
(each checked on its own), true replaces it. A message the interceptors change has its
headers table sorted by key, as RabbitMQ rebuilds it. Only what clients publish (AMQP
0-9-1, and the management API's publish, which RabbitMQ runs on a channel) is stamped;
the broker's own messages (events, its log, dead-lettering) are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from leveret.broker.clock import wall_ms
from leveret.broker.message import Message
from leveret.protocol import table

TIMESTAMP_HEADER = "timestamp_in_ms"
ROUTING_NODE_HEADER = "x-routed-by"
#: rabbitmq.conf's names of the interceptors
NAMES = ("set_header_timestamp", "set_header_routing_node")
_TIMESTAMP_FLAG = 0x0040


@dataclass(frozen=True, slots=True)
class Interceptors:
    """The incoming interceptors in force: each one's ``overwrite`` setting, None when it
    is off."""

    set_header_timestamp: bool | None = None
    set_header_routing_node: bool | None = None

    @property
    def active(self) -> bool:
        return self.set_header_timestamp is not None or self.set_header_routing_node is not None

    def intercept(self, message: Message, node: str) -> Message:
        """The message as the queues will hold it."""
        props = message.properties
        fields = table.headers(props)
        if fields is None:  # the usual message: what is stamped is added, nothing replaced
            added: list[table.Field] = []
            if self.set_header_routing_node is not None:
                added.append((ROUTING_NODE_HEADER, table.longstr(node)))
            seconds = None
            if self.set_header_timestamp is not None:
                ms = wall_ms()
                added.append((TIMESTAMP_HEADER, table.long(ms)))
                seconds = ms // 1000
                if self.set_header_timestamp and int.from_bytes(props[:2], "big") & _TIMESTAMP_FLAG:
                    props = table.with_property(props, _TIMESTAMP_FLAG, None)  # overwritten
            return message.with_properties(table.with_absent(props, table.sort(added), seconds))
        have = fields or []
        changed = False
        overwrite = self.set_header_routing_node
        if overwrite is not None and (overwrite or table.lookup(have, ROUTING_NODE_HEADER) is None):
            have = table.store(have, ROUTING_NODE_HEADER, table.longstr(node))
            changed = True
        overwrite = self.set_header_timestamp
        if overwrite is not None:
            ms = wall_ms()
            if overwrite or table.lookup(have, TIMESTAMP_HEADER) is None:
                have = table.store(have, TIMESTAMP_HEADER, table.long(ms))
                changed = True
            if overwrite or not int.from_bytes(props[:2], "big") & _TIMESTAMP_FLAG:
                props = table.with_property(
                    props, _TIMESTAMP_FLAG, table.timestamp_property(ms // 1000)
                )
        if changed:
            props = table.with_headers(props, have)
        if props is message.properties:
            return message
        return message.with_properties(props)
