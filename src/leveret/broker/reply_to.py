"""Direct reply-to, as RabbitMQ 3.10: a channel consumes (no-ack) from the pseudo-queue
``amq.rabbitmq.reply-to``; a message it publishes with that ``reply_to`` has it rewritten
to ``amq.rabbitmq.reply-to.<suffix>``, an address naming the channel; whoever publishes to
that address through the default exchange reaches the channel directly, while it lives.

The broker keeps one :class:`DirectReplyTo` for every vhost (RabbitMQ's address names a
channel process, whatever its vhost)."""

from __future__ import annotations

import base64
import binascii
import os
import struct
import zlib
from typing import TYPE_CHECKING, Protocol

from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.message import Message

REPLY_QUEUE = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_QUEUE + "."
_CHANNEL_ID = struct.Struct(">IQ")  # node hash, channel serial: what names a channel


class ReplyConsumer(Protocol):
    """A channel consuming its replies."""

    def deliver_reply(self, message: Message) -> None: ...


class DirectReplyTo:
    """The live reply consumers, by the address suffix each was given."""

    def __init__(self, node_name: str) -> None:
        self._node = zlib.crc32(node_name.encode())
        self._serial = 0
        self._consumers: dict[str, ReplyConsumer] = {}

    def register(self, consumer: ReplyConsumer) -> str:
        """A new address suffix for ``consumer``: ``<channel>.<key>``, base64 both."""
        self._serial += 1
        channel = base64.b64encode(_CHANNEL_ID.pack(self._node, self._serial)).decode()
        key = base64.b64encode(os.urandom(16)).decode()
        suffix = f"{channel}.{key}"
        self._consumers[suffix] = consumer
        return suffix

    def unregister(self, suffix: str) -> None:
        self._consumers.pop(suffix, None)

    def resolve(self, name: str) -> ReplyConsumer | None:
        """The live consumer an ``amq.rabbitmq.reply-to.<suffix>`` address names, or None.
        An address of two parts whose first does not name a channel of this broker is
        what RabbitMQ fails to decode: its channel process crashes (541)."""
        parts = [p for p in name[len(REPLY_PREFIX) :].split(".") if p]
        if len(parts) != 2:
            return None
        if not self._names_a_channel(parts[0]):
            raise errors.Crash()
        return self._consumers.get(f"{parts[0]}.{parts[1]}")

    def addresses_a_channel(self, name: str) -> bool:
        """Whether an ``amq.rabbitmq.reply-to.<suffix>`` address decodes to a channel of
        this broker, live or gone (RabbitMQ 4 routes to such an address as to a queue:
        v4.2.9 rabbit_db_queue.erl:549-559, rabbit_volatile_queue:new_target)."""
        parts = [p for p in name[len(REPLY_PREFIX) :].split(".") if p]
        return len(parts) == 2 and self._names_a_channel(parts[0])

    def _names_a_channel(self, part: str) -> bool:
        try:
            raw = base64.b64decode(part, validate=True)
        except (binascii.Error, ValueError):
            return False
        return len(raw) == _CHANNEL_ID.size and _CHANNEL_ID.unpack(raw)[0] == self._node


def is_reply_address(routing_key: str) -> bool:
    return routing_key.startswith(REPLY_PREFIX)
