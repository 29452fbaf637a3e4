"""What the broker needs from the world around it, as Protocols: where it writes frames
for a connection, and where it keeps what must survive a restart."""

from __future__ import annotations

from typing import Any, Protocol

from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import Method


class Output(Protocol):
    """The frames a session sends to its client."""

    def send_method(self, channel: int, method: Method) -> None: ...

    def send_content(
        self, channel: int, method: Method, properties: bytes, body: bytes
    ) -> None: ...

    def send_deliver(
        self,
        channel: int,
        consumer_tag: bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None: ...

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None: ...

    def close_channel(self, channel: int, error: AMQPError) -> None: ...

    def close_connection(self, error: AMQPError) -> None: ...


class StreamLog(Protocol):
    """An append-only, replayable log of messages (a stream queue's storage)."""

    next_offset: int

    @property
    def first(self) -> int: ...

    @property
    def committed(self) -> int: ...

    def append(
        self, exchange_and_key: bytes, properties: bytes, body: bytes, ts_ms: int | None = None
    ) -> int: ...

    def sync(self) -> bool: ...

    def read(
        self, offset: int, max_count: int, max_bytes: int = ...
    ) -> list[tuple[int, int, bytes, bytes, bytes]]: ...

    def last_chunk_start(self) -> int: ...

    def offset_at(self, ts_ms: int) -> int: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class DefinitionStore(Protocol):
    """Durable exchanges, queues, bindings, users, vhosts and permissions."""

    def load(self) -> dict[str, Any] | None: ...

    def save(self, definitions: dict[str, Any]) -> None: ...


class MessageStore(Protocol):
    """Persistent messages in durable queues."""

    def add(
        self,
        vhost: str,
        queue: str,
        message_id: int,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
    ) -> None: ...

    def remove(self, vhost: str, queue: str, message_id: int) -> None: ...

    def drop_queue(self, vhost: str, queue: str) -> None: ...

    def load(self) -> list[tuple[str, str, int, str, str, bytes, bytes]]: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...
