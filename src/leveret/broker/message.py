"""A published message: raw property bytes and body, decoded only when a feature needs
the properties (headers exchange, TTL, persistence, dead-lettering)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from leveret.protocol import spec

_DELIVERY_MODE_FLAG = 0x1000
_EMPTY_PROPERTIES = b"\x00\x00"


def split_exchange_and_key(exchange_and_key: bytes, errors: str = "strict") -> tuple[str, str]:
    """The exchange and routing key of their wire form: two short strings, one after the
    other. ``errors`` as for :meth:`bytes.decode`."""
    n = exchange_and_key[0]
    return (
        exchange_and_key[1 : 1 + n].decode("utf-8", errors),
        exchange_and_key[2 + n :].decode("utf-8", errors),
    )


@dataclass(slots=True, eq=False, repr=False)
class Message:
    """Compared by identity: two publishes of the same bytes are two messages."""

    exchange: str
    routing_key: str
    exchange_and_key: bytes
    properties: bytes
    body: bytes
    _props: commands.Basic.Properties | None = field(default=None, init=False)
    id: int = field(default=0, init=False)
    timestamp_ms: int = field(default=0, init=False)
    # The routing keys of its CC and BCC headers (sender-selected distribution): it is
    # routed with each of them too, and dead-lettered with them.
    cc: tuple[str, ...] = field(default=(), init=False)
    # RabbitMQ 4 mode: its x-death header is its publisher's, not the broker's death
    # history (see leveret.broker.container); dead-lettering it starts the history afresh
    foreign_deaths: bool = field(default=False, init=False)

    @classmethod
    def build(
        cls,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: commands.Basic.Properties | None = None,
    ) -> Message:
        ex = exchange.encode()
        rk = routing_key.encode()
        raw = spec.encode_properties(properties) if properties else _EMPTY_PROPERTIES
        return cls(
            exchange, routing_key, bytes((len(ex),)) + ex + bytes((len(rk),)) + rk, raw, body
        )

    @classmethod
    def stored(
        cls, exchange_and_key: bytes, properties: bytes, body: bytes, errors: str = "strict"
    ) -> Message:
        """A message as a log keeps it: its exchange and routing key as they went on the
        wire (two short strings), its property bytes and its body."""
        n = exchange_and_key[0]  # as split_exchange_and_key, without a call per record
        return cls(
            exchange_and_key[1 : 1 + n].decode("utf-8", errors),
            exchange_and_key[2 + n :].decode("utf-8", errors),
            exchange_and_key,
            properties,
            body,
        )

    @classmethod
    def from_parts(cls, exchange: str, routing_key: str, properties: bytes, body: bytes) -> Message:
        m = cls.build(exchange, routing_key, body)
        m.properties = properties
        return m

    @property
    def props(self) -> commands.Basic.Properties:
        if self._props is None:
            self._props = spec.decode_properties(self.properties)
        return self._props

    @property
    def headers(self) -> dict[str, Any]:
        if len(self.properties) >= 2 and not self.properties[0] & 0x20:
            return {}
        return dict(self.props.headers or {})

    @property
    def persistent(self) -> bool:
        raw = self.properties
        if len(raw) < 2 or not raw[0] & 0x10:
            return False
        if self._props is None:
            # delivery-mode follows content-type, content-encoding and headers: skip
            # them rather than decode every property (this is the durable publish path)
            try:
                pos = spec.headers_start(raw, raw[0] << 8)
                if raw[0] & 0x20:
                    pos += 4 + int.from_bytes(raw[pos : pos + 4], "big")
                return raw[pos] == 2
            except IndexError:
                pass
        return self.props.delivery_mode == 2

    @property
    def size(self) -> int:
        return len(self.body)

    @property
    def routing_keys(self) -> tuple[str, ...]:
        """Every key it is routed with: its own, then those of its CC and BCC headers."""
        return (self.routing_key, *self.cc)

    def keyed(self, routing_key: str) -> Message:
        """The same message under another routing key, to ask an exchange where that key
        leads (CC and BCC routing)."""
        m = Message.build(self.exchange, routing_key, self.body)
        m.properties = self.properties
        m._props = self._props
        m.foreign_deaths = self.foreign_deaths
        return m

    def with_properties(self, properties: bytes) -> Message:
        """A copy with other property bytes (a header stripped, reply-to rewritten)."""
        m = Message(self.exchange, self.routing_key, self.exchange_and_key, properties, self.body)
        m.cc = self.cc
        m.foreign_deaths = self.foreign_deaths
        return m

    def with_route(
        self,
        exchange: str,
        routing_keys: tuple[str, ...],
        properties: bytes | None = None,
    ) -> Message:
        """A copy as republished elsewhere (dead-lettering): another exchange, routing
        keys (the first is its routing key) and optionally other property bytes."""
        m = Message.build(exchange, routing_keys[0], self.body)
        if properties is None:
            m.properties = self.properties
            m._props = self._props
        else:
            m.properties = properties
        m.cc = routing_keys[1:]
        return m
