"""Publisher confirms under load, on both brokers: persistent messages to a durable queue
(confirmed once on disk: group commit on Leveret), nacks among acks, mandatory returns
before the acks of the same publishes, a publisher whose consumer stops acking, and two
connections that feed each other (credit flow on a queue's backlog must stop neither).

The frames are read as a client reads them: each basic.ack / basic.nack settles its tag,
or with ``multiple`` every tag up to it not settled yet; every publish is settled exactly
once."""

from __future__ import annotations

import struct
import threading

from pamqp import commands as C
from pamqp import frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.support.brokers import BrokerUnderTest
from tests.support.rawclient import RawClient


def publishes(
    queue: str, bodies: list[bytes], persistent: bool = True, mandatory: bool = False
) -> bytes:
    """basic.publish frames (method, header, body) for each body, to ``queue``."""
    props = C.Basic.Properties(delivery_mode=2 if persistent else 1)
    method = C.Basic.Publish(exchange="", routing_key=queue, mandatory=mandatory)
    out = []
    for body in bodies:
        out.append(frame.marshal(method, 1))
        out.append(frame.marshal(ContentHeader(body_size=len(body), properties=props), 1))
        out.append(frame.marshal(ContentBody(body), 1))
    return b"".join(out)


class Outcomes:
    """Which publish sequence numbers were acked or nacked, from the confirm frames."""

    def __init__(self) -> None:
        self.of: dict[int, str] = {}

    def settle(self, method: C.Basic.Ack | C.Basic.Nack, published: int) -> None:
        kind = "ack" if isinstance(method, C.Basic.Ack) else "nack"
        tags = (
            [t for t in range(1, method.delivery_tag + 1) if t not in self.of]
            if method.multiple
            else [method.delivery_tag]
        )
        assert tags, f"{method!r} settles nothing new"
        for tag in tags:
            assert 1 <= tag <= published, f"{kind} of tag {tag}, only {published} published"
            assert tag not in self.of, f"tag {tag} settled twice"
            self.of[tag] = kind


def read_confirms(
    client: RawClient, published: int, deliveries: list[bytes] | None = None
) -> Outcomes:
    """Read until every publish is settled (deliveries on channel 2 are kept)."""
    outcomes = Outcomes()
    while len(outcomes.of) < published:
        got = client.recv_frame()
        assert got is not None, f"closed with {len(outcomes.of)} of {published} settled"
        channel, value = got
        if isinstance(value, C.Basic.Ack | C.Basic.Nack) and channel == 1:
            outcomes.settle(value, published)
        elif isinstance(value, ContentBody) and deliveries is not None:
            deliveries.append(bytes(value.value))
        elif isinstance(value, C.Channel.Close | C.Connection.Close):
            raise AssertionError(f"closed: {value!r}")
    return outcomes


def test_persistent_publishes_in_one_read_are_acked_and_nacked_once_each(
    broker: BrokerUnderTest, name: str
) -> None:
    """A durable queue with x-max-length 3 and reject-publish: of 8 persistent publishes
    sent in one write, the first 3 are acked (once on disk), the other 5 nacked."""
    with RawClient(broker.host, broker.port) as client:
        client.handshake()
        client.open_channel(1)
        client.call(1, C.Confirm.Select(), C.Confirm.SelectOk)
        args = {"x-max-length": 3, "x-overflow": "reject-publish"}
        client.call(1, C.Queue.Declare(queue=name, durable=True, arguments=args), C.Queue.DeclareOk)
        try:
            client.send(publishes(name, [b"m%d" % i for i in range(8)]))
            outcomes = read_confirms(client, 8)
            assert outcomes.of == {i: "ack" if i <= 3 else "nack" for i in range(1, 9)}
        finally:
            client.call(1, C.Queue.Delete(queue=name), C.Queue.DeleteOk)


def test_a_flood_of_persistent_messages_is_confirmed_and_delivered_in_order(
    broker: BrokerUnderTest, name: str
) -> None:
    """5,000 persistent publishes to a durable queue in writes of 250 (the next write
    while the last is unconfirmed), a consumer on the same connection acking each delivery
    as it comes: every publish acked once, every message delivered once, in order."""
    count, batch = 5000, 250
    bodies = [b"%06d" % i for i in range(count)]
    with RawClient(broker.host, broker.port, timeout=30) as client:
        client.handshake()
        client.open_channel(1)
        client.open_channel(2)
        client.call(1, C.Confirm.Select(), C.Confirm.SelectOk)
        client.call(1, C.Queue.Declare(queue=name, durable=True), C.Queue.DeclareOk)
        client.call(2, C.Basic.Qos(prefetch_count=100), C.Basic.QosOk)
        client.call(2, C.Basic.Consume(queue=name, consumer_tag="c"), C.Basic.ConsumeOk)
        delivered: list[bytes] = []
        outcomes = Outcomes()
        sent = 0
        try:
            while len(outcomes.of) < count or len(delivered) < count:
                if sent < count and len(outcomes.of) >= sent - batch:
                    # the next write once at most one is unconfirmed
                    client.send(publishes(name, bodies[sent : sent + batch]))
                    sent += batch
                    continue
                before = len(delivered)
                _read_one(client, outcomes, sent, delivered)
                if len(delivered) > before:  # each delivery acked as it comes
                    client.send(_ack(2, len(delivered)))
            assert set(outcomes.of.values()) == {"ack"}
            assert delivered == bodies
        finally:
            client.send_method(1, C.Queue.Delete(queue=name))


def test_a_consumer_that_stops_acking_does_not_stop_its_publisher(
    broker: BrokerUnderTest, name: str
) -> None:
    """A consumer with prefetch 10 that never acks: 3,000 publishes with confirms pile up
    behind it, and every one is confirmed (RabbitMQ lets such a queue grow; Leveret's
    credit flow on the backlog gives up its hold)."""
    count = 3000
    with RawClient(broker.host, broker.port, timeout=30) as consumer:
        consumer.handshake()
        consumer.open_channel(1)
        consumer.call(1, C.Queue.Declare(queue=name, auto_delete=True), C.Queue.DeclareOk)
        consumer.call(1, C.Basic.Qos(prefetch_count=10), C.Basic.QosOk)
        consumer.call(1, C.Basic.Consume(queue=name, consumer_tag="stuck"), C.Basic.ConsumeOk)
        with RawClient(broker.host, broker.port, timeout=30) as publisher:
            publisher.handshake()
            publisher.open_channel(1)
            publisher.call(1, C.Confirm.Select(), C.Confirm.SelectOk)
            publisher.send(publishes(name, [b"%d" % i for i in range(count)], persistent=False))
            outcomes = read_confirms(publisher, count)
            assert set(outcomes.of.values()) == {"ack"}
            publisher.send_method(1, C.Queue.Declare(queue=name, passive=True))
            ok = publisher.expect(C.Queue.DeclareOk)
            assert ok.message_count == count - 10


def test_mandatory_returns_go_out_before_the_acks_of_their_publishes(
    broker: BrokerUnderTest, name: str
) -> None:
    """300 persistent publishes in one write, every third mandatory to a queue that does
    not exist, the others to a durable queue: each unroutable publish is returned
    (NO_ROUTE) before the ack that settles it, and every publish is acked once (on
    Leveret the acks wait for the disk and the returns do not: still, none comes late)."""
    count = 300
    nowhere = f"{name}-nowhere"
    batch = b"".join(
        publishes(nowhere, [b"r%d" % i], mandatory=True)
        if i % 3 == 0
        else publishes(name, [b"m%d" % i])
        for i in range(1, count + 1)
    )
    unroutable = [i for i in range(1, count + 1) if i % 3 == 0]
    with RawClient(broker.host, broker.port, timeout=30) as client:
        client.handshake()
        client.open_channel(1)
        client.call(1, C.Confirm.Select(), C.Confirm.SelectOk)
        client.call(1, C.Queue.Declare(queue=name, durable=True), C.Queue.DeclareOk)
        try:
            client.send(batch)
            outcomes = Outcomes()
            returned: list[bytes] = []
            returning = False
            while len(outcomes.of) < count:
                got = client.recv_frame()
                assert got is not None, f"closed with {len(outcomes.of)} of {count} settled"
                _, value = got
                if isinstance(value, C.Basic.Return):
                    assert (value.reply_code, value.reply_text) == (312, "NO_ROUTE")
                    assert value.routing_key == nowhere
                    returning = True
                elif isinstance(value, ContentBody) and returning:
                    returned.append(bytes(value.value))
                    returning = False
                elif isinstance(value, C.Basic.Ack | C.Basic.Nack):
                    outcomes.settle(value, count)
                    settled = max(outcomes.of)
                    due = [i for i in unroutable if i <= settled]
                    assert len(returned) >= len(due), (
                        f"tags up to {settled} settled, {len(returned)} of {len(due)} returned"
                    )
                elif isinstance(value, C.Channel.Close | C.Connection.Close):
                    raise AssertionError(f"closed: {value!r}")
            assert set(outcomes.of.values()) == {"ack"}
            assert returned == [b"r%d" % i for i in unroutable]
            client.send_method(1, C.Queue.Declare(queue=name, passive=True))
            assert client.expect(C.Queue.DeclareOk).message_count == count - len(unroutable)
        finally:
            client.send_method(1, C.Queue.Delete(queue=name))


def test_two_connections_that_feed_each_other_both_finish(
    broker: BrokerUnderTest, name: str
) -> None:
    """Each of two connections publishes 4,000 messages to a queue the other consumes
    (prefetch 20, an ack per delivery) while it consumes the other's. A client's acks
    queue behind its publishes on its one socket, as any client's do: should a broker
    stop reading both publishers until their consumers ack, neither would ever ack. Both
    finish, every message delivered once, in order."""
    count, batch = 4000, 200
    queues = (f"{name}-a", f"{name}-b")
    bodies = [b"%05d" % i for i in range(count)]
    with (
        RawClient(broker.host, broker.port, timeout=30) as a,
        RawClient(broker.host, broker.port, timeout=30) as b,
    ):
        clients = (a, b)
        for client, queue in zip(clients, queues, strict=True):
            client.handshake()
            client.open_channel(1)
            client.open_channel(2)
            client.call(1, C.Queue.Declare(queue=queue), C.Queue.DeclareOk)
        for client, queue in zip(clients, queues, strict=True):
            client.call(2, C.Basic.Qos(prefetch_count=20), C.Basic.QosOk)
            client.call(2, C.Basic.Consume(queue=queue, consumer_tag="c"), C.Basic.ConsumeOk)
        locks = (threading.Lock(), threading.Lock())  # one writer at a time per socket
        delivered: tuple[list[bytes], list[bytes]] = ([], [])
        failures: list[BaseException] = []

        def publish(me: int) -> None:
            other = queues[1 - me]
            try:
                for start in range(0, count, batch):
                    data = publishes(other, bodies[start : start + batch], persistent=False)
                    with locks[me]:
                        clients[me].send(data)
            except BaseException as exc:  # reported by the test's thread
                failures.append(exc)

        def consume(me: int) -> None:
            client, mine = clients[me], delivered[me]
            try:
                while len(mine) < count:
                    got = client.recv_frame()
                    assert got is not None, f"connection {me}: closed after {len(mine)}"
                    channel, value = got
                    if channel == 2 and isinstance(value, ContentBody):
                        mine.append(bytes(value.value))
                        with locks[me]:
                            client.send(_ack(2, len(mine)))
                    elif isinstance(value, C.Channel.Close | C.Connection.Close):
                        raise AssertionError(f"connection {me}: closed: {value!r}")
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=f, args=(me,), daemon=True)
            for me in (0, 1)
            for f in (publish, consume)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # a socket that makes no progress for its timeout ends its thread
        try:
            assert not failures, failures
            assert delivered == (bodies, bodies)
        finally:
            for client, queue in zip(clients, queues, strict=True):
                client.send_method(1, C.Queue.Delete(queue=queue))


_ACK = struct.Struct(">BHIIQB")


def _ack(channel: int, tag: int) -> bytes:
    return _ACK.pack(1, channel, 13, C.Basic.Ack.index, tag, 0) + b"\xce"


def _read_one(
    client: RawClient, outcomes: Outcomes, published: int, delivered: list[bytes]
) -> None:
    got = client.recv_frame()
    assert got is not None, "the broker closed the connection"
    channel, value = got
    if channel == 1 and isinstance(value, C.Basic.Ack | C.Basic.Nack):
        outcomes.settle(value, published)
    elif channel == 2 and isinstance(value, ContentBody):
        delivered.append(bytes(value.value))
    elif isinstance(value, C.Channel.Close | C.Connection.Close):
        raise AssertionError(f"closed: {value!r}")
