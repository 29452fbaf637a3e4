"""In-memory stand-ins for the ports the broker's domain talks through, so that Session,
VirtualHost and Channel can be driven directly: no socket, no event loop.

:class:`RecordingOutput` is the :class:`~leveret.broker.ports.Output` a session writes to;
it keeps everything sent, in order, as plain records. :class:`Client` and
:class:`ClientChannel` play the asyncio edge (``leveret.server.amqp``): they open a session
the way the server does after connection.start-ok / open, hand it methods and publishes,
and flush publisher confirms after each one, as the edge does after each batch.
:class:`FakeConnection` is a bare :class:`~leveret.broker.ports.ConnectionInfo`, and
:class:`FakeHost` the connection a :class:`~leveret.broker.channel.Channel` sees, for tests
of a vhost or a channel on their own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from leveret.broker.channel import Channel
from leveret.broker.event_exchange import EventExchange, encode_headers
from leveret.broker.message import Message
from leveret.broker.ports import Endpoint, FlowHolder, Output
from leveret.broker.session import Session
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec, table
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import Method
from leveret.protocol.stream.connection import ServerConnection as StreamConnection

# --------------------------------------------------------------------- records


class Sent(NamedTuple):
    """A method with no content (declare-ok, get-empty, basic.cancel, basic.nack...)."""

    channel: int
    method: Method


class Content(NamedTuple):
    """A method with content: basic.get-ok or basic.return."""

    channel: int
    method: Any
    properties: bytes
    body: bytes

    @property
    def props(self) -> C.Basic.Properties:
        return spec.decode_properties(self.properties)


class Deliver(NamedTuple):
    """A basic.deliver, with its exchange and routing key decoded."""

    channel: int
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class Ack(NamedTuple):
    """A publisher confirm."""

    channel: int
    delivery_tag: int
    multiple: bool


class Closed(NamedTuple):
    """channel.close (channel > 0) or connection.close (channel 0) from the broker."""

    channel: int
    code: int
    text: str
    class_id: int
    method_id: int

    @property
    def reply(self) -> tuple[int, str]:
        return self.code, self.text


Record = Sent | Content | Deliver | Ack | Closed


def _short_strings(raw: bytes) -> tuple[str, str]:
    n = raw[0]
    m = raw[1 + n]
    return raw[1 : 1 + n].decode(), raw[2 + n : 2 + n + m].decode()


class RecordingOutput(Output):
    """An Output that keeps every frame the domain sends, in order."""

    def __init__(self) -> None:
        self.log: list[Record] = []

    def send_method(self, channel: int, method: Method) -> None:
        self.log.append(Sent(channel, method))

    def send_content(self, channel: int, method: Method, properties: bytes, body: bytes) -> None:
        self.log.append(Content(channel, method, properties, body))

    def send_deliver(
        self,
        channel: int,
        consumer_tag: bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None:
        exchange, key = _short_strings(exchange_and_key)
        tag = consumer_tag[1 : 1 + consumer_tag[0]].decode()
        self.log.append(
            Deliver(channel, tag, delivery_tag, redelivered, exchange, key, properties, body)
        )

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.log.append(Ack(channel, delivery_tag, multiple))

    def close_channel(self, channel: int, error: AMQPError) -> None:
        self.log.append(
            Closed(channel, error.code, error.reply_text, error.class_id, error.method_id)
        )

    def close_connection(self, error: AMQPError) -> None:
        self.log.append(Closed(0, error.code, error.reply_text, error.class_id, error.method_id))

    # ------------------------------------------------------------------ reading
    def of(self, kind: type[Any], channel: int | None = None) -> list[Any]:
        return [
            r for r in self.log if type(r) is kind and (channel is None or r.channel == channel)
        ]

    def methods(self, channel: int | None = None) -> list[Method]:
        return [r.method for r in self.of(Sent, channel)]


# ---------------------------------------------------------------------- client


class BrokerClosed(Exception):
    """What a call ended in: the broker closed the channel or the connection."""

    def __init__(self, closed: Closed) -> None:
        super().__init__(f"{closed.code} {closed.text}")
        self.closed = closed

    @property
    def reply(self) -> tuple[int, str]:
        return self.closed.reply

    @property
    def hard(self) -> bool:
        return self.closed.channel == 0


def plain(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def recorded_events(broker: BrokerCore, monkeypatch: Any) -> list[tuple[str, list[Any]]]:
    """The event exchange attached to ``broker`` (as if bound): the events it publishes,
    each as its key and its headers (name, decoded value) in their order."""
    x = EventExchange(broker)
    monkeypatch.setattr(x, "_bound", lambda: True)
    out: list[tuple[str, list[Any]]] = []

    def emit(key: str, props: list[Any]) -> None:
        fields = encode_headers([("timestamp_in_ms", 0), *props])
        out.append((key, [(k, table.decode(v)) for k, v in fields]))

    monkeypatch.setattr(x, "emit", emit)
    return out


def new_broker() -> BrokerCore:
    """A broker as RabbitMQ starts (vhost '/', guest/guest), with a fixed node name."""
    return BrokerCore.with_defaults("rabbit@domain-test")


class Client:
    """One client connection, driving a Session as the server's edge does."""

    def __init__(
        self,
        broker: BrokerCore,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        capabilities: dict[str, bool] | None = None,
    ) -> None:
        self.broker = broker
        self.out = RecordingOutput()
        self.session = Session(broker, self.out, local=("127.0.0.1", 5672))
        self.session.peer = ("127.0.0.1", 40000 + self.session.id)
        caps = {"consumer_cancel_notify": True, "publisher_confirms": True}
        if capabilities is not None:
            caps = capabilities
        err = self.session.authenticate("PLAIN", plain(user, password), {"capabilities": caps})
        assert err is None, err
        err = self.session.open_vhost(vhost)
        if err is not None:  # connection.close (the edge closes the session at its end)
            self.session.close()
            raise BrokerClosed(Closed(0, err.code, err.reply_text, 10, 40))
        self._numbers = itertools.count(1)
        self._batching = False

    @contextmanager
    def batch(self) -> Iterator[None]:
        """What the client sends in one read: publisher confirms go out once, at the end
        of it, as the edge flushes them once per batch of events."""
        self._batching = True
        try:
            yield
        finally:
            self._batching = False
            if self.session.pending_confirms:
                self.session.flush_confirms()

    def channel(self, number: int | None = None) -> ClientChannel:
        return ClientChannel(self, next(self._numbers) if number is None else number)

    @property
    def closed(self) -> bool:
        return self.session.closed

    def close(self) -> None:
        """The client closes its connection (connection.close, or the socket ends)."""
        self.session.close()


class ClientChannel:
    """One channel of a :class:`Client`: each call hands the session one method (or one
    publish) and returns what the broker sent on this channel in answer; a close of the
    channel or of the connection is raised as :class:`BrokerClosed`."""

    def __init__(self, client: Client, number: int) -> None:
        self.client = client
        self.number = number
        refused = client.session.channel_opened(number)
        assert refused is None, refused

    @property
    def out(self) -> RecordingOutput:
        return self.client.out

    @property
    def channel(self) -> Channel:
        """The domain's channel object (gone once closed)."""
        return self.client.session.channels[self.number]

    @property
    def is_open(self) -> bool:
        return self.number in self.client.session.channels

    @contextmanager
    def _answer(self) -> Iterator[list[Record]]:
        start = len(self.out.log)
        got: list[Record] = []
        yield got
        session = self.client.session
        if session.pending_confirms and not self.client._batching:
            session.flush_confirms()  # as the edge does after each batch of events
        new = self.out.log[start:]
        for r in new:
            if isinstance(r, Closed) and r.channel in (0, self.number):
                raise BrokerClosed(r)
        got.extend(r for r in new if r.channel == self.number)

    def call(self, method: Method) -> list[Record]:
        with self._answer() as got:
            self.client.session.handle(self.number, method)
        return got

    def reply(self, method: Method) -> Any:
        """The one method the broker answered with."""
        got = self.call(method)
        assert len(got) == 1 and isinstance(got[0], Sent), got
        return got[0].method

    def refused(self, method: Method) -> tuple[int, str]:
        """The (code, text) the broker closed the channel or connection with."""
        try:
            got = self.call(method)
        except BrokerClosed as exc:
            return exc.reply
        raise AssertionError(f"not refused; answered {got}")

    def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes = b"",
        *,
        mandatory: bool = False,
        immediate: bool = False,
        properties: C.Basic.Properties | None = None,
    ) -> list[Record]:
        m = Message.build(exchange, routing_key, body, properties)
        with self._answer() as got:
            self.client.session.publish(
                self.number,
                exchange,
                routing_key,
                mandatory,
                immediate,
                m.exchange_and_key,
                m.properties,
                body,
            )
        return got

    def close(self) -> None:
        """The client closes the channel (channel.close)."""
        self.client.session.channel_closed(self.number)

    # ------------------------------------------------------------- shorthands
    def declare_queue(self, queue: str = "", **fields: Any) -> Any:
        return self.reply(C.Queue.Declare(queue=queue, **fields))

    def declare_exchange(self, exchange: str, exchange_type: str = "direct", **fields: Any) -> Any:
        return self.reply(
            C.Exchange.Declare(exchange=exchange, exchange_type=exchange_type, **fields)
        )

    def bind(self, queue: str, exchange: str, routing_key: str = "", **fields: Any) -> Any:
        return self.reply(
            C.Queue.Bind(queue=queue, exchange=exchange, routing_key=routing_key, **fields)
        )

    def get(self, queue: str, no_ack: bool = False) -> Content | None:
        got = self.call(C.Basic.Get(queue=queue, no_ack=no_ack))
        assert len(got) == 1, got
        if isinstance(got[0], Sent):
            assert isinstance(got[0].method, C.Basic.GetEmpty)
            return None
        assert isinstance(got[0], Content)
        return got[0]

    def drain(self, queue: str) -> list[bytes]:
        """Every ready message of the queue, taken with no ack."""
        out = []
        while (m := self.get(queue, no_ack=True)) is not None:
            out.append(m.body)
        return out

    def consume(self, queue: str, tag: str = "", **fields: Any) -> list[Record]:
        """basic.consume: consume-ok first, then whatever is delivered at once."""
        got = self.call(C.Basic.Consume(queue=queue, consumer_tag=tag, **fields))
        assert isinstance(got[0], Sent) and isinstance(got[0].method, C.Basic.ConsumeOk), got
        return got

    def ack(self, tag: int, multiple: bool = False) -> list[Record]:
        return self.call(C.Basic.Ack(delivery_tag=tag, multiple=multiple))

    def nack(self, tag: int, multiple: bool = False, requeue: bool = True) -> list[Record]:
        return self.call(C.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue))

    def reject(self, tag: int, requeue: bool = True) -> list[Record]:
        return self.call(C.Basic.Reject(delivery_tag=tag, requeue=requeue))

    def qos(self, prefetch_count: int, global_: bool = False) -> Any:
        return self.reply(C.Basic.Qos(prefetch_count=prefetch_count, global_=global_))

    def deliveries(self) -> list[Deliver]:
        """Every basic.deliver this channel was sent so far."""
        return self.out.of(Deliver, self.number)


def delivered(records: list[Record]) -> list[Deliver]:
    return [r for r in records if isinstance(r, Deliver)]


def bodies(records: list[Record]) -> list[bytes]:
    return [r.body for r in records if isinstance(r, Deliver | Content)]


# ------------------------------------------------------- connection and host


class FakeConnection:
    """A ConnectionInfo with nothing behind it: an exclusive queue's owner, a connection
    the broker can force closed."""

    def __init__(self, cid: int = 1, username: str = "guest", vhost: str = "/") -> None:
        self._id = cid
        self._username = username
        self._vhost = vhost
        self.forced: list[str] = []

    @property
    def id(self) -> int:
        return self._id

    @property
    def name(self) -> str:
        return f"127.0.0.1:{40000 + self._id} -> 127.0.0.1:5672"

    @property
    def peer(self) -> tuple[str, int] | None:
        return ("127.0.0.1", 40000 + self._id)

    @property
    def username(self) -> str:
        return self._username

    @property
    def vhost(self) -> str:
        return self._vhost

    @property
    def channel_count(self) -> int:
        return 0

    def force_close(self, reason: str) -> None:
        self.forced.append(reason)


class FakeHost(FakeConnection):
    """The connection a Channel belongs to (its ChannelHost), over one vhost, with a
    socket that is writable unless a test says otherwise."""

    def __init__(self, vhost: VirtualHost, capabilities: tuple[str, ...] = ()) -> None:
        super().__init__(vhost=vhost.name)
        self.output = RecordingOutput()
        self.pending_confirms: set[Channel] = set()
        self.held_by: set[FlowHolder] = set()
        self.holding: set[FlowHolder] = set()
        self.writable = True
        self._vhost_obj = vhost
        self._capabilities = capabilities

    @property
    def vhost_obj(self) -> VirtualHost:
        return self._vhost_obj

    def capability(self, name: str) -> bool:
        return name in self._capabilities

    def hold(self, publisher: FlowHolder) -> None:
        self.holding.add(publisher)
        publisher.held_by.add(self)


def stream_endpoint(
    edge: Any, mechanisms: tuple[str, ...] = ("AMQPLAIN", "PLAIN")
) -> Endpoint[StreamConnection, Any]:
    """A stream session's endpoint around a fake edge (what it sends, and whether its
    socket drains), with a sans-IO connection of its own."""
    return Endpoint(StreamConnection(), edge, mechanisms)
