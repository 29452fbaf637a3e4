"""What RabbitMQ 3.11 to 3.13 added to the stream protocol, served as RabbitMQ 4.2.9 serves
it when Leveret behaves as RabbitMQ 4.2 (:func:`serves_3_13`, the one gate): the command
versions a client asks about (ExchangeCommandVersions, which is how rstream and the Java
client learn that filtering is there), StreamStats, super streams over the protocol
(CreateSuperStream, DeleteSuperStream; Route and Partitions with their response bit and
permission checks), and single active consumers (the ConsumerUpdate a subscription of a
group is sent, and its answer). A part of
:class:`~leveret.broker.stream_session.StreamSession`, as its handshake is; filtering
(Publish version 2, the subscriptions' ``filter.N``) is in the session's publish and feed.

In the default (3.10.8) mode none of this is there, and a client that asks for it is
answered as RabbitMQ 3.10.8 answers: a command it does not know closes the connection
(unknown frame), and a ConsumerUpdate response, which its reader cannot parse, ends the
connection without a word (measured on RabbitMQ 3.10.8; tests/differential/
test_stream_features.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.broker.operations import super_streams as ss
from leveret.broker.operations.authorization import check_access
from leveret.broker.operations.streams import stream_name
from leveret.broker.queues.stream import StreamQueue
from leveret.broker.stream_handshake import count_error
from leveret.broker.stream_sac import Notice, PartitionIndexConflict
from leveret.protocol.errors import AMQPError
from leveret.protocol.stream import encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.spec import VERSION_2, Code, Key, OffsetType

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore
    from leveret.broker.operations import Actor
    from leveret.broker.stream_handshake import StreamEdge, StreamEndpoint
    from leveret.broker.vhost import VirtualHost

log = logging.getLogger(__name__)


def serves_3_13(broker: BrokerCore) -> bool:
    """Whether the broker serves what RabbitMQ 3.11-3.13 added to streams: in its RabbitMQ
    4.2 mode (``broker.compat``), not as RabbitMQ 3.10.8."""
    return broker.compat.v4


#: rabbit_stream_utils:command_versions() at v4.2.9, in its order (rstream reads Publish's
#: entry by its position: the second).
COMMAND_VERSIONS: list[tuple[int, int, int]] = [
    (Key.DECLARE_PUBLISHER, 1, 1),
    (Key.PUBLISH, 1, 2),
    (Key.QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (Key.DELETE_PUBLISHER, 1, 1),
    (Key.SUBSCRIBE, 1, 1),
    (Key.CREDIT, 1, 1),
    (Key.STORE_OFFSET, 1, 1),
    (Key.QUERY_OFFSET, 1, 1),
    (Key.UNSUBSCRIBE, 1, 1),
    (Key.CREATE, 1, 1),
    (Key.DELETE, 1, 1),
    (Key.METADATA, 1, 1),
    (Key.CLOSE, 1, 1),
    (Key.HEARTBEAT, 1, 1),
    (Key.ROUTE, 1, 1),
    (Key.PARTITIONS, 1, 1),
    (Key.STREAM_STATS, 1, 1),
    (Key.CREATE_SUPER_STREAM, 1, 1),
    (Key.DELETE_SUPER_STREAM, 1, 1),
]

#: rabbitmq_stream's request_timeout: a client that leaves a ConsumerUpdate unanswered
#: this long has its connection closed.
REQUEST_TIMEOUT = 60.0

#: The key of each command RabbitMQ 3.10.8 does not know (it closes the connection).
NEWER_COMMANDS: dict[type, int] = {
    ev.ExchangeCommandVersions: Key.EXCHANGE_COMMAND_VERSIONS,
    ev.StreamStats: Key.STREAM_STATS,
    ev.CreateSuperStream: Key.CREATE_SUPER_STREAM,
    ev.DeleteSuperStream: Key.DELETE_SUPER_STREAM,
}


@dataclass(frozen=True, slots=True)
class PendingUpdate:
    """A ConsumerUpdate sent, its answer awaited."""

    subscription_id: int
    active: bool
    stepping_down: bool
    stream: str
    name: str
    sent: float  # monotonic seconds


def start_offset(q: StreamQueue, kind: int, offset: int) -> int:
    """Where a subscription with this offset specification starts reading."""
    log_ = q.log
    if kind == OffsetType.FIRST:
        return log_.first
    if kind == OffsetType.LAST:
        return log_.last_chunk_start()
    if kind == OffsetType.OFFSET:
        return min(max(offset, log_.first), log_.committed)
    if kind == OffsetType.TIMESTAMP:
        return log_.offset_at(offset)
    return log_.committed  # NEXT, and what RabbitMQ does not know either


def dispatch(notices: list[Notice]) -> None:
    """Each notice to the connection it is for."""
    for n in notices:
        owner: Any = n.owner
        owner.sac_notice(n)


class StreamFeatures:
    """The session's handlers of RabbitMQ 3.11-3.13's commands."""

    # what these handlers use, on the session
    broker: BrokerCore
    endpoint: StreamEndpoint
    output: StreamEdge
    vhost: str
    vhost_obj: VirtualHost | None
    subscriptions: dict[int, Any]
    requests: dict[int, PendingUpdate]
    deliver_version: int
    v313: bool
    _next_request: int
    _requests_timer: bool
    closed: bool

    if TYPE_CHECKING:  # the session's own, which these handlers use

        @property
        def actor(self) -> Actor: ...

        @property
        def name(self) -> str: ...

        def feed(self, sub: Any) -> None: ...

        def _allowed(self, what: str, stream: str) -> bool: ...

        def _stream(self, name: str) -> StreamQueue | None: ...

        def _respond(self, key: int, correlation_id: int, code: int) -> None: ...

        def _unknown_frame(self, e: ev.UnknownFrame) -> None: ...

    def _may(self, what: str, kind: str, name: str) -> bool:
        assert self.vhost_obj is not None
        try:
            check_access(self.vhost_obj, self.actor, what, kind, name)
        except AMQPError:
            return False
        return True

    def _may_read_or_write(self, kind: str, name: str) -> bool:
        return self._may("read", kind, name) or self._may("write", kind, name)

    # ------------------------------------------------ as RabbitMQ 3.10.8 answers
    def _newer_command(self, e: Any) -> None:
        """A command RabbitMQ 3.10.8 does not know: the connection closes."""
        self._unknown_frame(ev.UnknownFrame(NEWER_COMMANDS[type(e)], 1))

    def _unparsable_response(self, e: ev.ConsumerUpdateResponse) -> None:
        """RabbitMQ 3.10.8's reader cannot parse a ConsumerUpdate response: it fails, and
        the connection ends without a Close."""
        log.info("stream connection %s: a consumer update response it cannot take", self.name)
        self.endpoint.connection.drop()

    # ------------------------------------------------------------- commands
    def _exchange_command_versions(self, e: ev.ExchangeCommandVersions) -> None:
        self.output.send(encode.exchange_command_versions(e.correlation_id, Code.OK,
                                                          COMMAND_VERSIONS))  # fmt: skip
        # a client that takes Deliver version 2 gets it from now on
        if any(k == Key.DELIVER and hi >= VERSION_2 for k, _, hi in e.versions):
            self.deliver_version = VERSION_2

    def _stream_stats(self, e: ev.StreamStats) -> None:
        code, stats = Code.OK, {}
        if not self._allowed("read", e.stream):
            code = Code.ACCESS_REFUSED
        elif (q := self._stream(e.stream)) is None:
            code = Code.STREAM_DOES_NOT_EXIST
        else:
            first, last = q.log.chunk_ids()
            # osiris:get_stats, its keys in the order RabbitMQ sends them
            stats = {"committed_chunk_id": last, "first_chunk_id": first, "last_chunk_id": last}
        if code != Code.OK:
            count_error(self.broker, code)
        self.output.send(encode.stream_stats(e.correlation_id, code, stats))

    def _create_super_stream(self, e: ev.CreateSuperStream) -> None:
        assert self.vhost_obj is not None
        key, cid = Key.CREATE_SUPER_STREAM, e.correlation_id
        name = stream_name(e.name)
        if name is None:
            return self._respond(key, cid, Code.PRECONDITION_FAILED)
        if not ss.management_permitted(self.vhost_obj, self.actor, name, e.partitions):
            return self._respond(key, cid, Code.ACCESS_REFUSED)
        try:
            ss.create_super_stream(
                self.vhost_obj, self.actor, name, e.partitions, e.binding_keys, e.arguments
            )
        except ss.SuperStreamRefused as exc:
            log.warning("Error while trying to create super stream %s: %s", name, exc.message)
            return self._respond(key, cid, _REFUSAL_CODES[exc.kind])
        self._respond(key, cid, Code.OK)

    def _delete_super_stream(self, e: ev.DeleteSuperStream) -> None:
        assert self.vhost_obj is not None
        key, cid = Key.DELETE_SUPER_STREAM, e.correlation_id
        if not self._may("configure", "exchange", e.name):
            return self._respond(key, cid, Code.ACCESS_REFUSED)
        partitions = ss.partitions(self.vhost_obj, e.name)
        if partitions is None:
            return self._respond(key, cid, Code.STREAM_DOES_NOT_EXIST)
        if not ss.management_permitted(self.vhost_obj, self.actor, e.name, partitions):
            return self._respond(key, cid, Code.ACCESS_REFUSED)
        # answered before the partitions go (their subscribers hear of it then)
        self._respond(key, cid, Code.OK)
        ss.delete_super_stream(self.vhost_obj, e.name, partitions)

    def _route(self, e: ev.Route) -> None:
        self._streams_response(
            Key.ROUTE,
            e,
            lambda vhost: ss.route(vhost, e.super_stream, e.routing_key),
            lambda kind, name: self._may("write", kind, name),
        )

    def _partitions(self, e: ev.Partitions) -> None:
        self._streams_response(
            Key.PARTITIONS,
            e,
            lambda vhost: ss.partitions(vhost, e.super_stream),
            self._may_read_or_write,
        )

    def _streams_response(
        self,
        key: Key,
        e: ev.Route | ev.Partitions,
        find: Callable[[VirtualHost], list[str] | None],
        may: Callable[[str, str], bool],
    ) -> None:
        """Route's and Partitions' answer: the streams of the super stream ``find`` gives,
        or why not; from 3.13 on, the permission ``may`` on its exchange and each stream."""
        vhost = self.vhost_obj
        assert vhost is not None
        code, streams = Code.OK, []
        if self.v313 and not may("exchange", e.super_stream):
            code = Code.ACCESS_REFUSED
        else:
            found = find(vhost)
            if found is None:
                code = Code.STREAM_DOES_NOT_EXIST
            elif self.v313 and not all(may("queue", s) for s in found):
                code = Code.ACCESS_REFUSED
            else:
                streams = found
        if code != Code.OK:
            count_error(self.broker, code)
        self.output.send(encode.streams_response(key, e.correlation_id, code, streams, self.v313))

    # ------------------------------------------------ single active consumer
    def sac_notice(self, notice: Notice) -> None:
        """The coordinator says a subscription of this connection becomes active, or
        inactive: the client is asked (ConsumerUpdate), and an inactive one stops reading
        at once."""
        sub = self.subscriptions.get(notice.subscription_id)
        if sub is None or sub.group is None:
            if not notice.active and notice.stepping_down:
                # the former active one is gone: its group's next choice goes on
                dispatch(self.broker.stream_groups.activate(self.vhost, notice.stream,
                                                            notice.name))  # fmt: skip
            return
        sub.active = notice.active
        if not notice.active:
            sub.reading = False
        cid = self._next_request
        self._next_request += 1
        self.requests[cid] = PendingUpdate(
            sub.id, notice.active, notice.stepping_down, notice.stream, notice.name,
            time.monotonic(),
        )  # fmt: skip
        self.output.send(encode.consumer_update(cid, sub.id, notice.active))
        self._watch_requests()

    def _watch_requests(self) -> None:
        """RabbitMQ's outstanding-requests timer (rabbit_stream_reader v4.2.9,
        ensure_outstanding_requests_timer): armed while a ConsumerUpdate awaits its
        answer, for the request timeout."""
        if self._requests_timer or not self.requests or self.closed:
            return
        self._requests_timer = True
        self.output.later(REQUEST_TIMEOUT, self._check_requests)

    def _check_requests(self) -> None:
        """The timer fired (check_outstanding_requests): a request older than the
        timeout ends the connection, without a Close frame; else the timer is armed again
        while requests remain."""
        self._requests_timer = False
        if self.closed:
            return
        overdue = self.overdue_requests()
        if overdue:
            self.output.force_close(
                f"client did not respond within {REQUEST_TIMEOUT * 1000:.0f}ms to "
                f"{overdue} RPC request(s)"
            )
            return
        self._watch_requests()

    def _consumer_update_response(self, e: ev.ConsumerUpdateResponse) -> None:
        if e.code != Code.OK:
            log.info("Unexpected consumer update response code: %d", e.code)
        pending = self.requests.pop(e.correlation_id, None)
        if pending is None:
            log.warning(
                "Could not find outstanding consumer update request with correlation ID %d",
                e.correlation_id,
            )
            return
        sub = self.subscriptions.get(pending.subscription_id)
        if sub is None:
            return
        if sub.active:
            kind, offset = e.offset_type, e.offset
            if kind == OffsetType.NONE:
                kind, offset = sub.offset_spec
            sub.offset = start_offset(sub.queue, kind, offset)
            sub.reading = True
            self.feed(sub)
        elif pending.stepping_down:
            dispatch(self.broker.stream_groups.activate(self.vhost, sub.stream, sub.group))

    def sac_leave(self, sub: Any) -> None:
        """A single active consumer's subscription ends: an answer it owed as it stepped
        down is taken as given, then it leaves its group."""
        groups = self.broker.stream_groups
        for cid, p in list(self.requests.items()):
            if p.subscription_id == sub.id:
                del self.requests[cid]
                if not p.active and p.stepping_down:
                    dispatch(groups.activate(self.vhost, sub.stream, sub.group))
        dispatch(groups.unregister(self.vhost, sub.stream, sub.group, self, sub.id))

    def sac_join(self, sub: Any, super_stream: str | None) -> list[Notice] | None:
        """A subscription joins its group: who to tell (after the subscription's answer),
        or None when its group has another partition index (refused)."""
        assert self.vhost_obj is not None
        index = -1
        if super_stream is not None:
            index = ss.partition_index(self.vhost_obj, super_stream, sub.stream)
        try:
            active, notices = self.broker.stream_groups.register(
                self.vhost, sub.stream, index, sub.group, self, sub.id
            )
        except PartitionIndexConflict:
            log.warning("Cannot create SAC subcription %d: partition_index_conflict", sub.id)
            return None
        sub.active = active
        return notices

    def overdue_requests(self, now: float | None = None) -> int:
        """How many ConsumerUpdates have gone unanswered past the request timeout."""
        now = time.monotonic() if now is None else now
        return sum(now - p.sent > REQUEST_TIMEOUT for p in self.requests.values())


_REFUSAL_CODES = {
    ss.Refusal.VALIDATION: Code.PRECONDITION_FAILED,
    ss.Refusal.EXISTS: Code.STREAM_ALREADY_EXISTS,
    ss.Refusal.ACCESS: Code.ACCESS_REFUSED,
    ss.Refusal.NOT_FOUND: Code.STREAM_DOES_NOT_EXIST,
    ss.Refusal.INTERNAL: Code.INTERNAL_ERROR,
}


#: What each of RabbitMQ 3.11-3.13's commands means, in the 4.2 mode.
FEATURES: dict[type, Any] = {
    ev.ExchangeCommandVersions: StreamFeatures._exchange_command_versions,
    ev.StreamStats: StreamFeatures._stream_stats,
    ev.CreateSuperStream: StreamFeatures._create_super_stream,
    ev.DeleteSuperStream: StreamFeatures._delete_super_stream,
    ev.ConsumerUpdateResponse: StreamFeatures._consumer_update_response,
    ev.Route: StreamFeatures._route,
    ev.Partitions: StreamFeatures._partitions,
}

#: The same commands as RabbitMQ 3.10.8 answers them.
AS_3_10: dict[type, Any] = {
    **{cls: StreamFeatures._newer_command for cls in NEWER_COMMANDS},
    ev.ConsumerUpdateResponse: StreamFeatures._unparsable_response,
    ev.Route: StreamFeatures._route,
    ev.Partitions: StreamFeatures._partitions,
}
