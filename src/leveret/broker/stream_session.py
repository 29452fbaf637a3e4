"""One stream-protocol connection's view of the broker (RabbitMQ's rabbit_stream_reader,
after the bytes): who it is, its vhost, its publishers and subscriptions, and the meaning
of each command (its handshake's frames are :mod:`leveret.broker.stream_handshake`'s).
Streams are the same stream queues AMQP 0-9-1 declares and reads, created and deleted
through the broker's operations.

Replies go out through the session's endpoint; publish confirms wait for
:meth:`StreamSession.flush_confirms`, which the server calls once what was published is
on disk. Deliveries are paced by credit (in chunks, as RabbitMQ counts it) and by the
socket: a subscriber with no credit, or whose socket does not drain, is sent nothing and
costs no memory."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from leveret.broker import names
from leveret.broker.broker import BrokerCore
from leveret.broker.events import ConnectionClosed
from leveret.broker.operations import Actor, check_access
from leveret.broker.operations.streams import create_stream, delete_stream, stream_name
from leveret.broker.ports import Traffic
from leveret.broker.queues.stream import StreamQueue
from leveret.broker.stream_features import (
    AS_3_10,
    FEATURES,
    StreamFeatures,
    dispatch,
    serves_3_13,
    start_offset,
)
from leveret.broker.stream_handshake import (
    HANDSHAKE,
    StreamEdge,
    StreamEndpoint,
    StreamHandshake,
    count_error,
)
from leveret.broker.users import Permission
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec
from leveret.protocol.errors import AMQPError
from leveret.protocol.stream import chunk, encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.bloom import Matcher
from leveret.protocol.stream.spec import VERSION_2, Code, Key

log = logging.getLogger(__name__)

NO_LEADER = 0xFFFF

#: The stream protocol's answer to an operation's AMQP error.
_CODES = {spec.ACCESS_REFUSED: Code.ACCESS_REFUSED, spec.NOT_FOUND: Code.STREAM_DOES_NOT_EXIST}


def code_of(error: AMQPError) -> int:
    """The response code for an operation refused with ``error`` (a precondition failed
    for anything but access and existence, as RabbitMQ's stream manager answers)."""
    return _CODES.get(error.code, Code.PRECONDITION_FAILED)


@dataclass(eq=False, slots=True)
class Publisher:
    id: int
    stream: str
    reference: str
    queue: StreamQueue
    # as rabbit_stream_reader counts them: messages in Publish frames, confirmed, and
    # refused with a publish error
    published: int = 0
    confirmed: int = 0
    errored: int = 0


@dataclass(eq=False, slots=True)
class Subscription:
    id: int
    stream: str
    queue: StreamQueue
    offset: int  # the next offset to deliver
    credit: int
    properties: dict[str, str] = field(default_factory=dict)
    consumed: int = 0  # records delivered
    chunk_offset: int = 0  # the first offset of the last chunk delivered
    offset_spec: tuple[int, int] = (0, 0)  # the subscribe's offset type and value
    # RabbitMQ 3.13's filtering: the chunks whose Bloom filter cannot match are skipped
    matcher: Matcher | None = None
    # RabbitMQ 3.11's single active consumer: its group's name (None: not one), whether
    # it is its group's active one, and whether chunks go out (once the client answered
    # where to read from)
    group: str | None = None
    active: bool = True
    reading: bool = True


class StreamSession(names.NamedConnection, StreamFeatures, StreamHandshake):
    # the info item protocol of rabbit_stream_reader's connections (the events say it)
    protocol: ClassVar[str] = "stream"

    def __init__(
        self,
        broker: BrokerCore,
        endpoint: StreamEndpoint,
        peer: tuple[str, int] | None,
        advertised: tuple[str, int],
        local: tuple[str, int] | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        self.connected(broker.next_connection_id(), peer, local, traffic)
        self.broker = broker
        self.endpoint = endpoint
        self.output: StreamEdge = endpoint.edge
        self.heartbeat = 0
        self.blocked = False  # a resource alarm stopped reading its publishes
        # what the transport says of the connection for management (TLS)
        self.transport_details: dict[str, Any] = dict(endpoint.details)
        self.registered = False
        self.advertised = advertised
        self.client_properties: dict[str, str] = {}
        self.vhost = ""
        self.vhost_obj: VirtualHost | None = None
        self.permission: Permission | None = None
        self.frame_max = 0
        self.publishers: dict[int, Publisher] = {}
        self.subscriptions: dict[int, Subscription] = {}
        self._confirms: dict[int, list[int]] = {}
        # one watcher per stream this connection publishes to or reads: told of new
        # records (feeds the subscriptions) and of the stream's deletion
        self._watches: dict[StreamQueue, Callable[[], None]] = {}
        # what was written to a stream since the last sync (publishes, stored offsets)
        self.needs_sync = False
        self.closed = False
        # RabbitMQ 3.11-3.13's commands, served in the 4.2 mode (the one gate)
        self.v313 = serves_3_13(broker)
        self._table = _HANDLERS_4_2 if self.v313 else _HANDLERS
        self.deliver_version = 1  # 2 once the client says it takes it
        self.requests = {}  # the ConsumerUpdates sent, by correlation id
        self._next_request = 0
        self._requests_timer = False  # armed while a ConsumerUpdate awaits its answer

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.endpoint.mechanisms

    # ------------------------------ as others see it (ports; and NamedConnection)
    @property
    def channel_count(self) -> int:
        return 0

    def force_close(self, reason: str) -> None:
        self.output.force_close(reason)
        self.close()

    # ------------------------------------------------------------------ commands
    def handle(self, event: ev.Event) -> None:
        """A frame of the connection, by its handler (what each phase takes is the
        connection's table; RabbitMQ 3.10.8's, or 4.2.9's in the 4.2 mode)."""
        self._table[type(event)](self, event)

    @property
    def actor(self) -> Actor:
        assert self.user is not None
        return Actor(self.user.name, self.permission)

    def _allowed(self, what: str, stream: str) -> bool:
        assert self.vhost_obj is not None
        try:
            check_access(self.vhost_obj, self.actor, what, "queue", stream)
        except AMQPError:
            return False
        return True

    def _stream(self, name: str) -> StreamQueue | None:
        assert self.vhost_obj is not None
        q = self.vhost_obj.queues.get(name)
        return q if isinstance(q, StreamQueue) and not q.deleted else None

    def _respond(self, key: int, correlation_id: int, code: int) -> None:
        if code != Code.OK:
            count_error(self.broker, code)
        self.output.send(encode.response(key, correlation_id, code))

    def _publish_error(
        self, pub: Publisher | None, publisher_id: int, code: int, ids: list[int]
    ) -> None:
        count_error(self.broker, code)
        if pub is not None:
            pub.errored += len(ids)
        self.output.send(encode.publish_error(publisher_id, code, ids))

    def _create(self, e: ev.Create) -> None:
        assert self.vhost_obj is not None
        key = Key.CREATE
        name = stream_name(e.stream)
        if name is None:
            return self._respond(key, e.correlation_id, Code.PRECONDITION_FAILED)
        try:
            args = e.arguments
            created = create_stream(self.vhost_obj, self.actor, name, args, self.v313).created
        except AMQPError as exc:
            log.info("stream %s not created: %s", name, exc.reply_text)
            return self._respond(key, e.correlation_id, code_of(exc))
        # an equivalent stream of that name is there already
        self._respond(key, e.correlation_id, Code.OK if created else Code.STREAM_ALREADY_EXISTS)

    def _delete(self, e: ev.Delete) -> None:
        assert self.vhost_obj is not None
        key, cid = Key.DELETE, e.correlation_id
        try:
            # answered before the stream goes (its subscribers hear of it then)
            gone = delete_stream(
                self.vhost_obj, self.actor, e.stream, lambda q: self._respond(key, cid, Code.OK)
            )
        except AMQPError as exc:
            return self._respond(key, cid, code_of(exc))
        if gone is None:
            self._respond(key, cid, Code.STREAM_DOES_NOT_EXIST)

    def _metadata(self, e: ev.Metadata) -> None:
        host, port = self.advertised
        streams: list[tuple[str, int, int, list[int]]] = []
        found = False
        for name in dict.fromkeys(e.streams):
            if self._stream(name) is not None:
                found = True
                streams.append((name, int(Code.OK), 0, []))
            else:
                streams.append((name, int(Code.STREAM_DOES_NOT_EXIST), NO_LEADER, []))
        brokers = [(0, host, port)] if found else []
        self.output.send(encode.metadata(e.correlation_id, brokers, streams))

    # -- publishing -------------------------------------------------------------
    def _declare_publisher(self, e: ev.DeclarePublisher) -> None:
        key = Key.DECLARE_PUBLISHER
        if not self._allowed("write", e.stream):
            return self._respond(key, e.correlation_id, Code.ACCESS_REFUSED)
        taken = e.publisher_id in self.publishers or (
            e.reference
            and any(
                p.reference == e.reference and p.stream == e.stream
                for p in self.publishers.values()
            )
        )
        if taken:
            return self._respond(key, e.correlation_id, Code.PRECONDITION_FAILED)
        q = self._stream(e.stream)
        if q is None:
            return self._respond(key, e.correlation_id, Code.STREAM_DOES_NOT_EXIST)
        self.publishers[e.publisher_id] = Publisher(e.publisher_id, e.stream, e.reference, q)
        self._watch(q)
        self._respond(key, e.correlation_id, Code.OK)

    def _publish_3_10(self, e: ev.Publish) -> None:
        if e.filters is not None:  # version 2: RabbitMQ 3.10.8 does not know it
            return self._unknown_frame(ev.UnknownFrame(Key.PUBLISH, VERSION_2))
        self.publish(e)

    def publish(self, e: ev.Publish) -> None:
        ids = [m[0] for m in e.messages] + [b.publishing_id for b in e.batches]
        pub = self.publishers.get(e.publisher_id)
        if pub is None:
            self._publish_error(None, e.publisher_id, Code.PUBLISHER_DOES_NOT_EXIST, ids)
            return
        pub.published += len(ids)
        self.broker.stream_counters["messages_received"] += len(ids)
        if not self._allowed("write", pub.stream):
            self._publish_error(pub, e.publisher_id, Code.ACCESS_REFUSED, ids)
            return
        q = pub.queue
        if q.deleted:
            self._publish_error(pub, e.publisher_id, Code.STREAM_NOT_AVAILABLE, ids)
            return
        confirms = self._confirms.setdefault(e.publisher_id, [])
        self.needs_sync = True
        log_ = q.log
        ref = pub.reference
        last = log_.writer_sequence(ref) if ref else None
        filters = e.filters
        for i, (publishing_id, message) in enumerate(e.messages):
            if last is None or publishing_id > last:
                q.append_amqp10(message, filters[i] if filters else None)
                last = publishing_id if ref else None
            confirms.append(publishing_id)
        errors = []
        for batch in e.batches:
            # stored as it came, compressed or not, as RabbitMQ stores it; an uncompressed
            # one whose records do not add up is refused
            if batch.compression == chunk.NONE and not _adds_up(batch):
                errors.append(batch.publishing_id)
                continue
            if last is None or batch.publishing_id > last:
                if batch.records:
                    q.append_batch(
                        batch.compression, batch.records, batch.uncompressed_size, batch.data
                    )
                last = batch.publishing_id if ref else None
            confirms.append(batch.publishing_id)
        if ref and last is not None:
            log_.set_writer_sequence(ref, last)
        if errors:
            self._publish_error(pub, e.publisher_id, Code.INTERNAL_ERROR, errors)

    @property
    def pending_confirms(self) -> bool:
        return bool(self._confirms)

    def flush_confirms(self) -> None:
        """What was published is on disk: confirm it."""
        self.needs_sync = False
        for publisher_id, ids in self._confirms.items():
            if ids:
                pub = self.publishers.get(publisher_id)
                if pub is not None:
                    pub.confirmed += len(ids)
                self.broker.stream_counters["messages_confirmed"] += len(ids)
                self.output.send(encode.publish_confirm(publisher_id, ids))
        self._confirms.clear()

    def _query_publisher_sequence(self, e: ev.QueryPublisherSequence) -> None:
        if not self._allowed("read", e.stream):
            count_error(self.broker, Code.ACCESS_REFUSED)
            self.output.send(
                encode.query_publisher_sequence(e.correlation_id, Code.ACCESS_REFUSED, 0)
            )
            return
        q = self._stream(e.stream)
        if q is None:
            count_error(self.broker, Code.STREAM_DOES_NOT_EXIST)
            self.output.send(
                encode.query_publisher_sequence(e.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0)
            )
            return
        seq = q.log.writer_sequence(e.reference) or 0
        self.output.send(encode.query_publisher_sequence(e.correlation_id, Code.OK, seq))

    def _delete_publisher(self, e: ev.DeletePublisher) -> None:
        pub = self.publishers.pop(e.publisher_id, None)
        if pub is not None:
            self._unwatch(pub.queue)
        if pub is None:
            return self._respond(
                Key.DELETE_PUBLISHER, e.correlation_id, Code.PUBLISHER_DOES_NOT_EXIST
            )
        self._confirms.pop(e.publisher_id, None)
        self._respond(Key.DELETE_PUBLISHER, e.correlation_id, Code.OK)

    # -- consuming --------------------------------------------------------------
    def _subscribe(self, e: ev.Subscribe) -> None:
        key, cid = Key.SUBSCRIBE, e.correlation_id
        props = e.properties
        group = props.get("name") if self.v313 else None
        if group is not None and len(group.encode()) > 255:  # RabbitMQ 3.13: too long a name
            allowed = self._allowed("read", e.stream)
            return self._respond(key, cid, Code.PRECONDITION_FAILED if allowed
                                 else Code.ACCESS_REFUSED)  # fmt: skip
        if not self._allowed("read", e.stream):
            return self._respond(key, cid, Code.ACCESS_REFUSED)
        q = self._stream(e.stream)
        if q is None:
            return self._respond(key, cid, Code.STREAM_DOES_NOT_EXIST)
        if e.subscription_id in self.subscriptions:
            return self._respond(key, cid, Code.SUBSCRIPTION_ID_ALREADY_EXISTS)
        sac = self.v313 and props.get("single-active-consumer") == "true"
        if sac and group is None:
            log.warning("Cannot create subcription %d, a single active consumer must have a "
                        "name", e.subscription_id)  # fmt: skip
            return self._respond(key, cid, Code.PRECONDITION_FAILED)
        start = start_offset(q, e.offset_type, e.offset)
        sub = Subscription(e.subscription_id, e.stream, q, start, e.credit, dict(props))
        sub.offset_spec = (e.offset_type, e.offset)
        if self.v313:
            sub.matcher = _matcher(props)
        notices = []
        if sac:
            sub.group, sub.reading = group, False  # until the client says where from
            joined = self.sac_join(sub, props.get("super-stream"))
            if joined is None:
                return self._respond(key, cid, Code.PRECONDITION_FAILED)
            notices = joined
        self.subscriptions[e.subscription_id] = sub
        self._watch(q)
        self._respond(key, cid, Code.OK)
        dispatch(notices)
        self.feed(sub)

    def _watch(self, q: StreamQueue) -> None:
        if q in self._watches:
            return

        def watch() -> None:
            if q.deleted:
                self._stream_gone(q)
                return
            for sub in list(self.subscriptions.values()):
                if sub.queue is q:
                    self.feed(sub)

        self._watches[q] = watch
        q.watchers.add(watch)

    def _unwatch(self, q: StreamQueue) -> None:
        """Stop watching ``q`` once nothing of this connection uses it."""
        if any(s.queue is q for s in self.subscriptions.values()) or any(
            p.queue is q for p in self.publishers.values()
        ):
            return
        watch = self._watches.pop(q, None)
        if watch is not None:
            q.watchers.discard(watch)

    def feed(self, sub: Subscription) -> None:
        """Stored chunks to ``sub``, whole and as they are on disk, while it has credit
        (one per chunk) and the socket drains. The first chunk may begin before the
        subscription's offset: the client skips those records, as with RabbitMQ."""
        out = self.output
        counters = self.broker.stream_counters
        matcher = sub.matcher
        v2 = self.deliver_version == VERSION_2
        while (
            sub.reading
            and sub.credit > 0
            and out.writable()
            and self.subscriptions.get(sub.id) is sub
        ):
            ref = sub.queue.chunk_at(sub.offset)
            if ref is None:
                return
            end = ref.first + ref.records
            if matcher is not None and not matcher.matches(ref.read_filter()):
                sub.offset = end  # osiris's reader skips it: no credit spent
                continue
            n = end - max(sub.offset, ref.first)
            if v2:  # RabbitMQ 3.13: after the id of the stream's last committed chunk
                out.send_chunk(sub.id, ref, sub.queue.log.chunk_ids()[1])
            else:
                out.send_chunk(sub.id, ref)
            sub.offset = end
            sub.credit -= 1
            sub.consumed += n
            sub.chunk_offset = ref.first
            counters["messages_delivered"] += n

    def feed_all(self) -> None:
        """The socket drains again: what waited goes out."""
        for sub in list(self.subscriptions.values()):
            self.feed(sub)

    def _credit(self, e: ev.Credit) -> None:
        sub = self.subscriptions.get(e.subscription_id)
        if sub is None:
            count_error(self.broker, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST)
            self.output.send(
                encode.credit_response(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, e.subscription_id)
            )
            return
        sub.credit += e.credit
        if sub.group is not None and not sub.active:
            # RabbitMQ 3.11: credit left over for an inactive single active consumer
            count_error(self.broker, Code.PRECONDITION_FAILED)
            self.output.send(encode.credit_response(Code.PRECONDITION_FAILED, e.subscription_id))
            return
        self.feed(sub)

    def _unsubscribe(self, e: ev.Unsubscribe) -> None:
        if e.subscription_id not in self.subscriptions:
            return self._respond(
                Key.UNSUBSCRIBE, e.correlation_id, Code.SUBSCRIPTION_ID_DOES_NOT_EXIST
            )
        self._remove_subscription(e.subscription_id)
        self._respond(Key.UNSUBSCRIBE, e.correlation_id, Code.OK)

    def _remove_subscription(self, subscription_id: int) -> None:
        sub = self.subscriptions.pop(subscription_id, None)
        if sub is not None:
            self._unwatch(sub.queue)
            if sub.group is not None:
                self.sac_leave(sub)

    def _stream_gone(self, q: StreamQueue) -> None:
        """A stream this connection used was deleted: its subscriptions and publishers go,
        and the client hears of it once (metadata update, stream not available)."""
        for sub in [s for s in self.subscriptions.values() if s.queue is q]:
            del self.subscriptions[sub.id]
            if sub.group is not None:
                self.sac_leave(sub)
        for pub_id in [p.id for p in self.publishers.values() if p.queue is q]:
            del self.publishers[pub_id]
        self._watches.pop(q, None)
        count_error(self.broker, Code.STREAM_NOT_AVAILABLE)
        self.output.send(encode.metadata_update(Code.STREAM_NOT_AVAILABLE, q.name))

    # -- offsets ----------------------------------------------------------------
    def _store_offset(self, e: ev.StoreOffset) -> None:
        if not self._allowed("write", e.stream):
            return  # as RabbitMQ: store offset has no answer, even refused
        q = self._stream(e.stream)
        if q is not None:
            # as osiris's writer: written (a tracking chunk, or the trailer of this batch's
            # chunk) once the batch is read
            q.log.store_offset(e.reference, e.offset)
            self.needs_sync = True

    def _query_offset(self, e: ev.QueryOffset) -> None:
        if not self._allowed("read", e.stream):
            count_error(self.broker, Code.ACCESS_REFUSED)
            self.output.send(encode.query_offset(e.correlation_id, Code.ACCESS_REFUSED, 0))
            return
        q = self._stream(e.stream)
        if q is None:
            count_error(self.broker, Code.STREAM_DOES_NOT_EXIST)
            self.output.send(encode.query_offset(e.correlation_id, Code.STREAM_DOES_NOT_EXIST, 0))
            return
        offset = q.log.query_offset(e.reference)
        if offset is None:
            self.output.send(encode.query_offset(e.correlation_id, Code.NO_OFFSET, 0))
        else:
            self.output.send(encode.query_offset(e.correlation_id, Code.OK, offset))

    # -------------------------------------------------------------------- close
    def set_blocked(self, blocked: bool, reason: str = "") -> None:
        """A resource alarm stops reading its publishes, or no longer does."""
        self.blocked = blocked

    def give_up_holds(self) -> None:
        """(Its publishes go to streams, which hold no publisher back.)"""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.registered:
            self.broker.unregister(self)
        else:
            # as rabbit_stream_reader's terminate: told of even if it never opened
            self.broker.observers.emit(ConnectionClosed(self))
        self.subscriptions.clear()
        self.publishers.clear()
        self._confirms.clear()
        self.requests.clear()
        dispatch(self.broker.stream_groups.connection_down(self))
        for q, watch in self._watches.items():
            q.watchers.discard(watch)
        self._watches.clear()


def _matcher(properties: dict[str, str]) -> Matcher | None:
    """A subscription's filter (RabbitMQ 3.13): its ``filter.*`` values, and whether it
    takes messages without a filter value (``match-unfiltered``); None without values."""
    values = [v.encode() for k, v in properties.items() if k.startswith("filter.")]
    if not values:
        return None
    return Matcher(values, properties.get("match-unfiltered") == "true")


def _adds_up(batch: ev.SubBatch) -> bool:
    """Whether an uncompressed sub-entry batch's records (``u32 size | bytes`` each) fit
    in it, as the chunk walker reads them."""
    try:
        shape = (chunk.NONE, batch.records, batch.uncompressed_size)
        chunk.walk_batch(batch.data, 0, len(batch.data), shape, 0, _ignore)
    except chunk.ChunkError:
        return False
    return True


def _ignore(_buf: bytes, _start: int, _end: int, _offset: int) -> None:
    pass


#: What each frame of a stream connection means, by its handler.
_HANDLERS: dict[type, Any] = {
    **HANDSHAKE,
    ev.Create: StreamSession._create,
    ev.Delete: StreamSession._delete,
    ev.Metadata: StreamSession._metadata,
    ev.DeclarePublisher: StreamSession._declare_publisher,
    ev.Publish: StreamSession.publish,
    ev.QueryPublisherSequence: StreamSession._query_publisher_sequence,
    ev.DeletePublisher: StreamSession._delete_publisher,
    ev.Subscribe: StreamSession._subscribe,
    ev.Credit: StreamSession._credit,
    ev.Unsubscribe: StreamSession._unsubscribe,
    ev.StoreOffset: StreamSession._store_offset,
    ev.QueryOffset: StreamSession._query_offset,
    **AS_3_10,
}
_HANDLERS[ev.Publish] = StreamSession._publish_3_10
#: The same in the RabbitMQ 4.2 mode, with what RabbitMQ 3.11-3.13 added.
_HANDLERS_4_2: dict[type, Any] = {**_HANDLERS, ev.Publish: StreamSession.publish, **FEATURES}
