"""What the broker needs from the world around it, as Protocols: where a session writes
frames, what others know of a connection, and where the broker keeps what must survive a
restart. (What a queue sees of its consumers is in :mod:`leveret.broker.queues.base`.)"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import Method
from leveret.protocol.stream.chunk import HEADER_SIZE

if TYPE_CHECKING:
    from pathlib import Path

    from leveret.broker.entry import Entry
    from leveret.broker.message import Message
    from leveret.protocol.connection import ServerConnection  # noqa: F401 (AMQPEndpoint)


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


class Edge(Output, Protocol):
    """The server's side of a client's socket, as the session of a real connection sees
    it: frames out, and what the connection's events start or stop there."""

    def start_heartbeats(self, interval: int) -> None:
        """connection.tune-ok agreed on ``interval`` seconds (0: none)."""
        ...

    def opened(self) -> None:
        """connection.open-ok went out: the handshake's clock stops."""
        ...

    def released(self) -> None:
        """Credit flow: nothing holds this publisher back any more; it is read again."""
        ...

    def sync_confirms(self) -> None:
        """Everything published is made durable now, and the confirms that waited for
        it go out (a nack is to follow them)."""
        ...


def _no_certificate() -> tuple[str | None, str]:
    return None, "connection peer presented no TLS (x.509) certificate"


C = TypeVar("C", covariant=True)
E = TypeVar("E", covariant=True)


@dataclass(frozen=True, slots=True)
class Endpoint(Generic[C, E]):
    """What the server knows of a client's socket, told to its session once, whatever the
    protocol: the sans-IO connection that frames its replies, the edge that drives the
    socket, and the facts of the transport."""

    connection: C
    edge: E
    mechanisms: tuple[str, ...] = ("AMQPLAIN", "PLAIN")  # what the handshake offers
    # what the transport says for management (TLS: protocol, suite, client certificate)
    details: Mapping[str, Any] = field(default_factory=dict)
    # who the client's TLS certificate names (EXTERNAL), and why no one when it does not
    certificate: Callable[[], tuple[str | None, str]] = _no_certificate


#: an AMQP 0-9-1 client's endpoint
AMQPEndpoint = Endpoint["ServerConnection", Edge]


class ConnectionInfo(Protocol):
    """A client connection as others see it: who and where. Exclusive queues are owned
    by one; management shows it beside channels and consumers."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def peer(self) -> tuple[str, int] | None: ...

    @property
    def username(self) -> str: ...

    @property
    def vhost(self) -> str: ...

    @property
    def channel_count(self) -> int:
        """Channels open on it (users' channel limits count them)."""
        ...

    def force_close(self, reason: str) -> None: ...


class Traffic:
    """What went over one connection's socket, as the server counted it: bytes and
    reads received, bytes and writes sent, and the bytes still waiting to be sent
    (RabbitMQ's recv_oct, recv_cnt, send_oct, send_cnt, send_pend)."""

    __slots__ = ("pending", "recv_cnt", "recv_oct", "send_cnt", "send_oct")

    def __init__(self, pending: Callable[[], int] | None = None) -> None:
        self.recv_oct = 0
        self.recv_cnt = 0
        self.send_oct = 0
        self.send_cnt = 0
        self.pending: Callable[[], int] = pending or (lambda: 0)


class WriteStalls:
    """How many connections of this process cannot write now (their transport paused
    writing). A publish that leaves messages waiting asks the queues which consumer's
    connection holds them back (credit flow) only while this is above zero: a queue is
    congested only behind a connection that cannot write. A :class:`FlowHolder` whose
    ``writable`` turns false counts itself here, and uncounts itself when it turns true or
    goes away. Shared by every broker of the process, so it can only err towards asking."""

    count = 0

    @classmethod
    def turn(cls, holder: Writable, writable: bool) -> bool:
        """``holder`` can write again (``writable``) or cannot any more: counted, and
        False when that is no change."""
        if writable == holder.writable:
            return False
        holder.writable = writable
        cls.count += -1 if writable else 1
        return True


class Writable(Protocol):
    writable: bool


class FlowHolder(Protocol):
    """A connection whose socket can stop draining; while it cannot, the publishers that
    feed its consumers are held back (RabbitMQ's credit flow)."""

    held_by: set[FlowHolder]  # the connections holding this one back

    @property
    def writable(self) -> bool: ...

    def hold(self, publisher: FlowHolder) -> None:
        """Hold ``publisher`` back until this connection drains again."""
        ...

    def awaits_settlements(self) -> bool:
        """Its consumers have deliveries out, settled by what comes in on its own socket:
        a queue's backlog does not hold it (the settlements would wait too)."""
        ...


class QueueStore(Protocol):
    """Persistent messages of one durable classic queue. What it kept before a restart
    comes back through the queue's :class:`Pager` (paged, not loaded into memory)."""

    def add(self, entry: Entry) -> None:
        """Keep the entry's message; sets ``entry.store_id``."""
        ...

    def remove(self, store_id: int) -> None:
        """The message left the queue (acknowledged, dropped, expired)."""
        ...

    def drop(self) -> None:
        """The queue is deleted: forget all its messages."""
        ...


class Pager(Protocol):
    """Where a classic queue keeps ready messages it does not hold in memory, oldest
    first. Only a compact index stays in memory: where each run of messages lies on
    disk, and the store ids of the persistent ones. Transient pages are dropped at
    restart; a durable queue's pager starts with what its :class:`QueueStore` kept."""

    @property
    def count(self) -> int:
        """Messages paged."""
        ...

    @property
    def bytes(self) -> int:
        """Their body bytes."""
        ...

    @property
    def persistent(self) -> tuple[int, int]:
        """How many of them are persistent, and their body bytes."""
        ...

    @property
    def recovered(self) -> bool:
        """Whether it holds messages kept from before a restart."""
        ...

    def write(self, entries: list[Entry]) -> bool:
        """Page entries out behind everything paged so far; False (nothing written)
        when the disk cannot take them."""
        ...

    def read(self, max_bytes: int) -> list[Entry]:
        """Take the oldest paged entries: about ``max_bytes`` of bodies, at least one
        when any is paged."""
        ...

    def clear(self) -> list[int]:
        """Drop everything paged; the store ids of the persistent messages among them."""
        ...

    def close(self) -> None:
        """The queue is gone: drop the pages."""
        ...


# What became of a quorum queue's message before a restart (RecoveredMessage.state).
READY = "ready"  # waiting in the queue
RETURNED = "returned"  # returned to the front of the queue
OUT = "out"  # delivered and not settled when the broker stopped
DEAD_LETTERED = "dlx"  # waiting to be dead-lettered (at-least-once)


class RecoveredMessage(Protocol):
    """A live message of a quorum queue, as its store found it after a restart."""

    id: int
    message: Message
    count: int | None  # delivery count; None: never returned
    ts_ms: int  # when it was enqueued
    state: str  # READY, RETURNED, OUT or DEAD_LETTERED
    reason: str  # the dead-letter reason, for DEAD_LETTERED


class QuorumStore(Protocol):
    """A quorum queue's log of messages and of what became of them. Writes are buffered;
    :meth:`sync` makes them durable (fsync) before publisher confirms go out."""

    def recover(self) -> Sequence[RecoveredMessage]:
        """The live messages in queue order: returned ones first, then those that were
        out with consumers, then the rest as enqueued."""
        ...

    def append(self, message: Message, count: int | None = None) -> int:
        """Log a message (with its delivery count, when requeued); its id."""
        ...

    def checked_out(self, mid: int) -> None: ...

    def settle(self, mid: int) -> None: ...

    def returned(self, mid: int, count: int) -> None: ...

    def dead_lettered(self, mid: int, reason: str) -> None:
        """The message waits to be dead-lettered (at-least-once)."""
        ...

    def release(self, below: int) -> None:
        """No message below id ``below`` is live any more: free what held them."""
        ...

    def sync(self) -> bool: ...

    def open_files(self) -> int:
        """How many files it holds open now."""
        ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where a stored chunk of a stream is: ``fd`` (open for reading) at ``position``;
    ``size`` bytes of header and data (what a Deliver frame carries; the filter and the
    trailer are not sent); its ``first`` offset, how many ``records`` and its
    ``timestamp``; ``filter_size`` bytes of Bloom filter between the header and the data.
    The store makes them; the broker and the stream edge read them."""

    fd: int
    position: int
    size: int
    first: int
    records: int
    timestamp: int
    filter_size: int = 0

    def read_filter(self) -> bytes:
        """The chunk's Bloom filter (empty: none of its messages has a filter value)."""
        if not self.filter_size:
            return b""
        return os.pread(self.fd, self.filter_size, self.position + HEADER_SIZE)

    def read(self) -> bytes:
        """The chunk's header and data, as a Deliver frame carries them."""
        if not self.filter_size:
            return os.pread(self.fd, self.size, self.position)
        head = os.pread(self.fd, HEADER_SIZE, self.position)
        data_at = self.position + HEADER_SIZE + self.filter_size
        return head + os.pread(self.fd, self.size - HEADER_SIZE, data_at)


class StreamLog(Protocol):
    """An append-only, replayable log of AMQP 1.0-encoded messages in osiris chunks (a
    stream queue's storage)."""

    next_offset: int

    @property
    def first(self) -> int: ...

    @property
    def committed(self) -> int: ...

    @property
    def segment_count(self) -> int: ...

    @property
    def total_bytes(self) -> int: ...

    filter_size: int  # the Bloom filter's bytes in each chunk (x-stream-filter-size-bytes)

    def append(self, message: bytes, filter_value: bytes | None = None) -> int:
        """An AMQP 1.0-encoded message, with the filter value its chunk's Bloom filter
        takes in (RabbitMQ 3.13); its offset (readable after the next sync)."""
        ...

    def append_batch(
        self, compression: int, records: int, uncompressed_size: int, data: bytes
    ) -> int:
        """A publisher's sub-entry batch, stored as it came (one entry, ``records``
        offsets); its first offset."""
        ...

    def sync(self) -> bool: ...

    def read(
        self, offset: int, max_count: int, max_bytes: int = ...
    ) -> list[tuple[int, int, bytes]]:
        """(offset, chunk timestamp, message) from ``offset`` on."""
        ...

    def chunk_at(self, offset: int) -> ChunkRef | None:
        """The stored chunk that holds ``offset`` (or the next one); None: nothing yet."""
        ...

    def last_chunk_start(self) -> int: ...

    def chunk_ids(self) -> tuple[int, int]:
        """The first offsets of the first and the last chunk stored (-1 each: none)."""
        ...

    def offset_at(self, ts_ms: int) -> int: ...

    def chunk_end(self, offset: int) -> int:
        """One past the last offset of the stored chunk that holds ``offset``."""
        ...

    def store_offset(self, reference: str, offset: int) -> None:
        """A consumer's offset, kept by reference (made durable at the next sync)."""
        ...

    def query_offset(self, reference: str) -> int | None: ...

    def writer_sequence(self, reference: str) -> int | None:
        """The last publishing id a named publisher had stored (de-duplication)."""
        ...

    def set_writer_sequence(self, reference: str, sequence: int) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...

    def set_retention(
        self, max_bytes: int | None, max_age_ms: int | None, max_segment_bytes: int
    ) -> None:
        """New retention limits and segment size, applied from now on."""
        ...

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Drop the whole segments beyond the limits now; how many went."""
        ...


class Storage(Protocol):
    """Where the broker keeps queue contents that outlive the process."""

    def queue_store(self, vhost: str, queue: str) -> QueueStore | None:
        """The store of a durable classic queue, or None to keep it in memory only."""
        ...

    def pager(self, vhost: str, queue: str, store: QueueStore | None) -> Pager | None:
        """Where a classic queue pages its messages (holding what ``store`` kept from
        before a restart), or None when it cannot page."""
        ...

    def open_stream(self, vhost: str, queue: str, arguments: dict[str, Any]) -> StreamLog:
        """The log of a stream queue; raises AMQPError when streams cannot be kept."""
        ...

    def quorum_store(self, vhost: str, queue: str) -> QuorumStore:
        """The log of a quorum queue (what it kept before a restart, if anything)."""
        ...

    def plugin_dir(self, plugin: str) -> Path:
        """A directory of a plugin's own (made if missing), for what it keeps on disk."""
        ...
