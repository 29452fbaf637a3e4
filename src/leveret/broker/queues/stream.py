"""Stream queues, as RabbitMQ 3.10 offers them over AMQP 0-9-1: an append-only,
replayable log. Every consumer reads from its own offset (``x-stream-offset``), needs a
prefetch, and acks only to return credit; each delivery carries its offset in the
``x-stream-offset`` header. Messages become visible once their chunk is on disk."""

from __future__ import annotations

import datetime
import re
import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from leveret.broker.arguments import text
from leveret.broker.clock import wall_ms
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.entry import Entry
from leveret.broker.message import Message
from leveret.broker.policies import policy_wins
from leveret.broker.queues.base import (
    MIRRORING_POLICIES,
    Accepted,
    Queue,
    check_replicated_declaration,
)
from leveret.broker.queues.stream_amqp091 import to_amqp091
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.broker.queues.stream_filtering import (
    SCAN_BUDGET,
    ConsumerFilter,
    amqp091_view,
    chunk_matcher,
    stream_record,
)
from leveret.broker.queues.stream_properties import refused_by_a_stream
from leveret.broker.spec_texts import stream_not_supported
from leveret.protocol import errors
from leveret.protocol.spec import add_header

if TYPE_CHECKING:
    from leveret.broker.ports import ChunkRef, StreamLog
    from leveret.broker.queues.base import Declaration, QueueHome, Subscriber

_long = struct.Struct(">q").pack
_INTERVAL = re.compile(r"^(\d+)([YMDhms])$")
_UNIT_MS = {
    "Y": 365 * 86400_000,
    "M": 30 * 86400_000,
    "D": 86400_000,
    "h": 3600_000,
    "m": 60_000,
    "s": 1000,
}

# The queue arguments a stream takes (rabbit_stream_queue:capabilities()); the other
# types' are refused.
STREAM_ARGS = frozenset(
    (
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    )
)
READ_BATCH = 256


def interval_ms(text: str) -> int | None:
    m = _INTERVAL.match(text)
    if m is None:
        return None
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


DEFAULT_SEGMENT_BYTES = 500_000_000  # osiris's default max_segment_size_bytes
DEFAULT_FILTER_SIZE = 16  # osiris's ?DEFAULT_FILTER_SIZE


class StreamQueue(Queue):
    keeps_log = True
    type_name = "stream"
    rabbit_type = "rabbit_stream_queue"
    # The consumer arguments a stream takes (rabbit_stream_queue:capabilities()).
    CONSUMER_ARGS = frozenset(("x-stream-offset", "x-credit"))
    # rabbit_stream_queue:update_stream_conf: a policy's value wins over the argument.
    POLICY_RULES = {
        "max-length-bytes": policy_wins,
        "max-age": policy_wins,
        "stream-max-segment-size-bytes": policy_wins,
    }
    UNSUPPORTED_POLICIES = frozenset(
        (
            "expires",
            "message-ttl",
            "dead-letter-exchange",
            "dead-letter-routing-key",
            "max-length",
            "max-in-memory-length",
            "max-in-memory-bytes",
            "max-priority",
            "overflow",
            "queue-mode",
            "single-active-consumer",
            "delivery-limit",
            *MIRRORING_POLICIES,
            "dead-letter-strategy",
        )
    )

    def __init__(self, declaration: Declaration, log: StreamLog) -> None:
        super().__init__(declaration)
        self.durable = True
        self.log = log
        name = self.name.encode()[:255]
        # the exchange ('') and routing key (the stream's name) of an entry as stored
        self._key = b"\x00" + bytes((len(name),)) + name
        self._offsets: dict[Subscriber, int] = {}  # each consumer's next offset
        # RabbitMQ 4.2's stream filtering: each filtering consumer's filters, and those
        # whose reading paused after many messages that did not match (taken up again
        # at the next tick, so that one consumer's scan does not hold up the broker)
        self._filters: dict[Subscriber, ConsumerFilter] = {}
        self._paused: set[Subscriber] = set()
        # stream-protocol subscriptions: told when new records are committed
        self.watchers: set[Callable[[], None]] = set()
        self.configure()

    def configure(self) -> None:
        """Retention and segment size from arguments and policies, applied to the log
        at once (RabbitMQ's stream coordinator updates a live stream's configuration)."""
        max_bytes = self.setting("max-length-bytes")
        age = self.setting("max-age")
        segment = self.setting("stream-max-segment-size-bytes")
        self.log.set_retention(
            max_bytes if isinstance(max_bytes, int) and not isinstance(max_bytes, bool) else None,
            interval_ms(text(age)) if isinstance(age, (str, bytes)) else None,
            segment
            if isinstance(segment, int) and not isinstance(segment, bool)
            else DEFAULT_SEGMENT_BYTES,
        )
        # RabbitMQ 3.13's x-stream-filter-size-bytes (taken in the 4.2 mode only): the
        # Bloom filter's bytes in each chunk written from now on
        size = self.arguments.get("x-stream-filter-size-bytes")
        if isinstance(size, int) and not isinstance(size, bool) and 16 <= size <= 255:
            self.log.filter_size = size
        else:
            self.log.filter_size = DEFAULT_FILTER_SIZE

    @classmethod
    def validate(cls, declaration: Declaration, compat: RabbitMQ = RABBITMQ_3_10) -> None:
        type_args = STREAM_ARGS | {"x-stream-filter-size-bytes"} if compat.v4 else STREAM_ARGS
        check_replicated_declaration(declaration, type_args, cls.rabbit_type, compat.v4)
        size = declaration.arguments.get("x-stream-filter-size-bytes")
        if compat.v4 and size is not None and not 16 <= size <= 255:
            # rabbit_stream_queue:check_filter_size at v4.2.9 (its type was checked above);
            # the size of a chunk's filter, which Leveret's chunks do not have
            raise errors.precondition_failed("Invalid value for x-stream-filter-size-bytes")

    @classmethod
    def create(cls, declaration: Declaration, home: QueueHome) -> StreamQueue:
        storage = home.storage
        if storage is None:
            raise errors.not_implemented("stream queues need a data directory")
        d = declaration
        return cls(d, storage.open_stream(d.vhost, d.name, d.arguments))

    def declare_ok_count(self, arguments: dict[str, Any]) -> int:
        # Leveret's extension: a passive declare with x-stream-offsets learns the committed
        # end offset (RabbitMQ, which ignores the argument, answers 0 for a stream).
        if "x-stream-offsets" in arguments:
            return self.log.committed
        return 0

    # -- writing ---------------------------------------------------------------
    def enqueue(self, message: Message) -> Accepted:
        if refused_by_a_stream(message.properties):
            return Accepted.UNSTORABLE
        self.published += 1
        if self.compat.v4:  # RabbitMQ 4.2: AMQP 1.0 messages as published; filter values
            stored, value = stream_record(message)
            self.log.append(stored, value)
            return Accepted.YES
        # stored as RabbitMQ 3.10 stores it: converted to AMQP 1.0 once, here
        self.log.append(
            to_amqp10(message.exchange, message.routing_key, message.properties, message.body)
        )
        return Accepted.YES

    def append_amqp10(self, message: bytes, filter_value: bytes | None = None) -> int:
        """A message published over the stream protocol, stored as it came (with its
        filter value, RabbitMQ 3.13's Publish version 2); its offset."""
        self.published += 1
        return self.log.append(message, filter_value)

    def append_batch(
        self, compression: int, records: int, uncompressed_size: int, data: bytes
    ) -> int:
        """A sub-entry batch published over the stream protocol, stored as it came
        (compressed or not, as RabbitMQ stores it); its first offset."""
        self.published += records
        return self.log.append_batch(compression, records, uncompressed_size, data)

    def sync(self) -> None:
        """Make appended messages durable (one chunk) and deliver them."""
        if self.log.sync():
            self.dispatch()
            for watcher in list(self.watchers):
                watcher()

    def chunk_at(self, offset: int) -> ChunkRef | None:
        """The stored chunk holding ``offset`` (or the next one), as the stream protocol
        delivers it: its bytes go out as they are on disk."""
        return self.log.chunk_at(offset)

    def close(self) -> None:
        self.log.close()

    # -- reading ---------------------------------------------------------------
    def consumer_start(
        self, no_ack: bool, prefetch: int, arguments: dict[str, Any], global_prefetch: int = 0
    ) -> int:
        self._check_consume_arguments(arguments)
        if no_ack:
            raise stream_not_supported("automatic acknowledgement", self)
        if not prefetch:
            raise errors.precondition_failed(
                f"consumer prefetch count is not set for 'queue '{self.name}' in vhost "
                f"'{self.vhost}''"
            )
        return self.resolve_offset(arguments.get("x-stream-offset"))

    def resolve_offset(self, spec: Any) -> int:
        """Where a consumer with this ``x-stream-offset`` starts."""
        log = self.log
        if spec is None:
            return log.committed
        if isinstance(spec, (bytes, bytearray)):
            spec = text(spec)
        if isinstance(spec, bool):
            raise errors.error(541, "")
        if isinstance(spec, int):
            return max(spec, log.first)
        if isinstance(spec, datetime.datetime):
            stamp = spec if spec.tzinfo else spec.replace(tzinfo=datetime.UTC)
            return log.offset_at(int(stamp.timestamp() * 1000))
        if isinstance(spec, str):
            if spec == "first":
                return log.first
            if spec == "last":
                return log.last_chunk_start()
            if spec == "next":
                return log.committed
            ms = interval_ms(spec)
            if ms is not None:
                return log.offset_at(wall_ms() - ms)
        raise errors.error(541, "")  # RabbitMQ crashes the channel: INTERNAL_ERROR

    def add_consumer(self, consumer: Subscriber, start: Any = None) -> None:
        self.had_consumers = True
        if self.compat.v4 and consumer not in self._filters:
            # an AMQP 0-9-1 consumer's x-stream-filter (RabbitMQ 3.13 on): chunks skipped
            chunks = chunk_matcher(consumer.arguments)
            if chunks is not None:
                self._filters[consumer] = ConsumerFilter(chunks)
        self.ring.add(consumer)
        self._offsets[consumer] = self.log.committed if start is None else int(start)
        self._feed(consumer)

    def remove_consumer(self, consumer: Subscriber) -> None:
        super().remove_consumer(consumer)
        self._offsets.pop(consumer, None)
        self._filters.pop(consumer, None)
        self._paused.discard(consumer)

    def dispatch(self) -> None:
        for consumer in list(self.consumers):
            self._feed(consumer)

    def set_filter(self, consumer: Subscriber, spec: ConsumerFilter) -> None:
        """What ``consumer`` (not yet added) filters: the chunks it reads, the messages
        it takes (RabbitMQ 4.2's stream filtering)."""
        if spec.chunks is not None or spec.messages is not None:
            self._filters[consumer] = spec

    def _feed(self, consumer: Subscriber) -> None:
        offsets = self._offsets
        spec = self._filters.get(consumer)
        if spec is not None:
            self._paused.discard(consumer)
            if self._feed_filtered(consumer, spec):
                self._paused.add(consumer)
            return
        while consumer in offsets:
            credit = consumer.credit()
            if credit <= 0:
                return
            records = self.log.read(offsets[consumer], min(credit, READ_BATCH))
            if not records:
                return
            stored_form = consumer.reads_stored
            settles = consumer.no_ack  # an AMQP 1.0 link that consumes settled
            for offset, _ts, stored in records:
                if stored_form:  # the consumer converts the entry itself
                    message = Message.stored(self._key, b"", stored)
                else:
                    message = Message.stored(*self._as_amqp091(stored, offset))
                offsets[consumer] = offset + 1
                self.delivered += 1
                if settles:
                    self.acked += 1
                else:
                    self.unacked += 1  # a stream consumer acks, to return credit
                consumer.deliver(self, Entry(message, offset))
                if consumer not in offsets:
                    return

    def _feed_filtered(self, consumer: Subscriber, spec: ConsumerFilter) -> bool:
        """_feed for a consumer with filters: the chunks whose Bloom filter cannot match
        skipped whole (osiris's reader), each message of the others delivered if it passes
        the message filter (rabbit_stream_queue's stream_entries); no credit spent on what
        is left out. True when it stopped after :data:`SCAN_BUDGET` records or chunks
        passed over, with credit left (to read on at the next tick)."""
        offsets = self._offsets
        log = self.log
        chunks = spec.chunks
        messages = spec.messages
        passed = 0
        while consumer in offsets:
            credit = consumer.credit()
            if credit <= 0:
                return False
            if passed >= SCAN_BUDGET:
                return True
            offset = offsets[consumer]
            limit = READ_BATCH
            if chunks is not None:
                ref = log.chunk_at(offset)
                if ref is None:
                    return False
                end = ref.first + ref.records
                if not chunks.matches(ref.read_filter()):
                    offsets[consumer] = max(offset, end)
                    passed += 1
                    continue
                limit = min(limit, end - max(offset, ref.first))
            records = log.read(offset, limit if messages is not None else min(credit, limit))
            if not records:
                return False
            stored_form = consumer.reads_stored
            for rec_offset, _ts, stored in records:
                if credit <= 0:
                    break
                offsets[consumer] = rec_offset + 1
                if messages is not None and not messages.matches(stored):
                    passed += 1
                    if passed >= SCAN_BUDGET:
                        return True
                    continue
                if stored_form:
                    message = Message.stored(self._key, b"", stored)
                else:
                    message = Message.stored(*self._as_amqp091(stored, rec_offset))
                credit -= 1
                self.delivered += 1
                if consumer.no_ack:
                    self.acked += 1
                else:
                    self.unacked += 1
                consumer.deliver(self, Entry(message, rec_offset))
                if consumer not in offsets:
                    return False
        return False

    def _as_amqp091(self, message: bytes, offset: int) -> tuple[bytes, bytes, bytes]:
        """A stored message as AMQP 0-9-1 delivers it, with its offset in an
        ``x-stream-offset`` header. Bytes that are not AMQP 1.0 (RabbitMQ 3.10 fails the
        consuming connection) go out as the body, with no other properties."""
        if self.compat.v4:  # an AMQP 1.0 client's message as RabbitMQ 4.2 converts it
            view = amqp091_view(message, self.name, offset)
            if view is not None:
                return view
        try:
            return to_amqp091(message, self.name, offset)
        except ValueError:
            k = self.name.encode()[:255]
            properties = add_header(b"\x00\x00", "x-stream-offset", b"l" + _long(offset))
            return b"\x00" + bytes((len(k),)) + k, properties, message

    # -- settling: acks only return credit --------------------------------------
    def check_reject(self) -> None:
        raise stream_not_supported("basic.nack and basic.reject", self)

    def ack(self, entries: Iterable[Entry]) -> None:
        for _ in entries:
            self.unacked -= 1
            self.acked += 1

    def reject(self, entries: Iterable[Entry], requeue: bool) -> None:
        raise stream_not_supported("basic.nack and basic.reject", self)

    def requeue(self, entries: Iterable[Entry]) -> None:
        for _ in entries:
            self.unacked -= 1

    # -- what a stream does not do ---------------------------------------------
    def get(self, no_ack: bool) -> Entry | None:
        raise stream_not_supported("basic.get", self)

    def expire(self) -> None:
        """Retention by age follows the broker's clock: old segments go as time passes,
        not only when something is written. Filtering consumers that paused read on."""
        self.log.apply_retention()
        for consumer in list(self._paused):
            self._feed(consumer)

    def purge(self) -> int:
        raise stream_not_supported("queue.purge", self)

    def delete(self) -> int:
        self.deleted = True
        self.log.delete()
        for watcher in list(self.watchers):  # each sees the stream is gone
            watcher()
        self.watchers.clear()
        return 0
