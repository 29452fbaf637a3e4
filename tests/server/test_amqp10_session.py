"""AMQP 1.0 on the AMQP port, as RabbitMQ 4.2 serves it, through python-qpid-proton over a
real socket: v2 addresses, the anonymous terminus (each message's ``to``), the subject as
routing key of a v1 address, outcomes, dispositions, and a stream read from an offset spec.

These are RabbitMQ 4.2's own behaviours (rabbit_amqp_session, v4.2.9): the reference broker
here is RabbitMQ 3.10.8, whose AMQP 1.0 plugin has none of them, so they run on Leveret
alone; tests/differential holds what both brokers share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

import leveret

proton = pytest.importorskip("proton")
from proton import Described, Message, symbol  # noqa: E402
from proton.reactor import Filter  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[leveret.Broker]:
    data = tmp_path_factory.mktemp("amqp10")  # streams need a data directory
    with leveret.Broker(plugins="rabbitmq_amqp1_0", data_dir=data) as b:
        yield b


@pytest.fixture
def amqp(broker: leveret.Broker) -> Iterator[BlockingConnection]:
    conn = BlockingConnection(
        f"amqp://guest:guest@127.0.0.1:{broker.port}", allowed_mechs="PLAIN", timeout=10
    )
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def channel(broker: leveret.Broker) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield conn.channel()
    finally:
        conn.close()


def test_a_message_goes_through_a_queue_as_it_was_sent(amqp, channel) -> None:
    channel.queue_declare("as-sent")
    sender = amqp.create_sender("/queues/as-sent")
    sent = Message(
        body={"n": 1, "tags": ["a", "b"]},
        subject="s",
        properties={"app": "shop", "n": 7},
        content_type="application/x-python",
        correlation_id="c-1",
        durable=True,
        priority=7,
    )
    sender.send(sent)
    got = amqp.create_receiver("/queues/as-sent").receive(timeout=5)
    assert got.body == {"n": 1, "tags": ["a", "b"]}
    assert (got.subject, got.properties, got.content_type, got.correlation_id) == (
        "s", {"app": "shop", "n": 7}, "application/x-python", "c-1",
    )  # fmt: skip
    assert got.durable and got.priority == 7
    assert got.annotations[symbol("x-exchange")] == ""
    assert got.annotations[symbol("x-routing-key")] == "as-sent"
    assert got.first_acquirer


def test_the_anonymous_terminus_routes_by_each_messages_to(amqp, channel) -> None:
    channel.queue_declare("anon-q")
    channel.exchange_declare("anon-x", "topic")
    channel.queue_declare("anon-t")
    channel.queue_bind("anon-t", "anon-x", "a.*")
    sender = amqp.create_sender(None)
    sender.send(Message(address="/queues/anon-q", body="to a queue"))
    sender.send(Message(address="/exchanges/anon-x/a.b", body="to an exchange"))
    assert amqp.create_receiver("/queues/anon-q").receive(timeout=5).body == "to a queue"
    assert amqp.create_receiver("/queues/anon-t").receive(timeout=5).body == "to an exchange"


def test_on_the_anonymous_terminus_a_message_without_a_good_to_is_rejected(amqp) -> None:
    sender = amqp.create_sender(None)
    with pytest.raises(SendException) as missing:
        sender.send(Message(body="nowhere"))
    assert missing.value.state == proton.Delivery.REJECTED
    with pytest.raises(SendException) as bad:
        sender.send(Message(address="/nowhere/x", body="bad"))
    assert bad.value.state == proton.Delivery.REJECTED
    with pytest.raises(SendException) as gone:
        sender.send(Message(address="/exchanges/no-such-exchange", body="bad"))
    assert gone.value.state == proton.Delivery.REJECTED
    # the link goes on (amq.fanout has no bindings: released)
    delivery = sender.send(
        Message(address="/exchanges/amq.fanout", body="fine"),
        error_states=[proton.Delivery.REJECTED],
    )
    assert delivery.remote_state == proton.Delivery.RELEASED


def test_rejections_carry_rabbitmqs_errors(amqp) -> None:
    """The rejected outcome names the condition and the text (read off the delivery)."""
    sender = amqp.create_sender(None)
    delivery = sender.send(Message(body="nowhere"), error_states=[])
    error = delivery.remote.condition
    assert (error.name, error.description) == (
        "amqp:precondition-failed",
        "anonymous terminus requires 'to' address to be set",
    )
    delivery = sender.send(Message(address="/exchanges/missing", body="x"), error_states=[])
    error = delivery.remote.condition
    assert (error.name, error.description) == (
        "amqp:not-found",
        "no exchange 'missing' in vhost '/'",
    )


def test_a_v1_exchange_address_without_a_key_routes_by_the_subject(amqp, channel) -> None:
    channel.queue_declare("by-subject")
    channel.queue_bind("by-subject", "amq.topic", "logs.error")
    sender = amqp.create_sender("/exchange/amq.topic")
    sender.send(Message(subject="logs.error", body="routed"))
    assert amqp.create_receiver("/queues/by-subject").receive(timeout=5).body == "routed"


def test_an_unroutable_message_is_released(amqp) -> None:
    sender = amqp.create_sender("/exchanges/amq.direct/nobody")
    with pytest.raises(SendException) as released:
        sender.send(Message(body="lost"))
    assert released.value.state == proton.Delivery.RELEASED


def test_a_released_message_comes_back_not_first_acquirer(amqp, channel) -> None:
    channel.queue_declare("released")
    amqp.create_sender("/queues/released").send(Message(body="again"))
    receiver = amqp.create_receiver("/queues/released", credit=1)
    first = receiver.receive(timeout=5)
    assert first.first_acquirer
    receiver.release()
    again = receiver.receive(timeout=5)
    assert again.body == "again" and not again.first_acquirer
    receiver.accept()


def test_a_rejected_message_is_dead_lettered(amqp, channel) -> None:
    channel.queue_declare("dlq")
    channel.queue_declare(
        "with-dlx",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    )
    amqp.create_sender("/queues/with-dlx").send(Message(body="bad"))
    receiver = amqp.create_receiver("/queues/with-dlx")
    receiver.receive(timeout=5)
    receiver.reject()
    dead = amqp.create_receiver("/queues/dlq").receive(timeout=5)
    assert dead.body == "bad"
    (death,) = dead.annotations[symbol("x-opt-deaths")].elements
    assert death[symbol("reason")] == symbol("rejected")
    assert death[symbol("queue")] == "with-dlx"


def _modify(receiver, annotations: dict, undeliverable: bool = False) -> None:
    """Settle the next message taken with a modified outcome carrying ``annotations``."""
    from proton import Delivery

    delivery = receiver.fetcher.unsettled.popleft()
    delivery.local.annotations = annotations
    delivery.local.undeliverable = undeliverable
    delivery.update(Delivery.MODIFIED)
    delivery.settle()


def test_a_quorum_queue_keeps_a_modified_outcomes_annotations(amqp, channel) -> None:
    """rabbit_fifo incr_msg (v4.2.9): the annotations merge onto the message and go with its
    next deliveries: as message annotations over AMQP 1.0, as headers over AMQP 0-9-1
    (mc_amqpl:protocol_state), and with it when it is dead-lettered."""
    channel.queue_declare("dlq-modified")
    channel.queue_declare(
        "qq-modified",
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq-modified",
        },
    )
    sender = amqp.create_sender("/queues/qq-modified")
    sender.send(Message(body="m"))
    receiver = amqp.create_receiver("/queues/qq-modified", credit=1)
    receiver.receive(timeout=5)
    _modify(receiver, {symbol("x-opt-first"): "one", symbol("x-opt-n"): 7})
    again = receiver.receive(timeout=5)
    assert again.annotations[symbol("x-opt-first")] == "one"
    assert again.annotations[symbol("x-opt-n")] == 7
    _modify(receiver, {symbol("x-opt-first"): "two"}, undeliverable=True)
    dead = amqp.create_receiver("/queues/dlq-modified").receive(timeout=5)
    assert dead.annotations[symbol("x-opt-first")] == "two"
    assert dead.annotations[symbol("x-opt-n")] == 7
    sender.send(Message(body=b"m2", inferred=True))  # a data section
    receiver.receive(timeout=5)
    _modify(receiver, {symbol("x-opt-flag"): True, symbol("x-opt-s"): "s"})
    receiver.close()
    _, props, body = channel.basic_get("qq-modified", auto_ack=True)
    assert body == b"m2"
    assert props.headers["x-opt-flag"] is True and props.headers["x-opt-s"] == "s"


def test_a_classic_queue_ignores_a_modified_outcomes_annotations(amqp, channel) -> None:
    """rabbit_classic_queue:settle (v4.2.9) turns modify into requeue, dropping the rest."""
    channel.queue_declare("cq-modified")
    amqp.create_sender("/queues/cq-modified").send(Message(body="m"))
    receiver = amqp.create_receiver("/queues/cq-modified", credit=1)
    receiver.receive(timeout=5)
    _modify(receiver, {symbol("x-opt-first"): "one"})
    again = receiver.receive(timeout=5)
    assert symbol("x-opt-first") not in (again.annotations or {})
    receiver.accept()


def test_attaching_to_a_missing_queue_is_refused_with_not_found(amqp) -> None:
    with pytest.raises(LinkDetached) as refused:
        amqp.create_receiver("/queues/no-such-queue")
    assert "no queue 'no-such-queue' in vhost '/'" in str(refused.value)


def test_a_stream_is_read_from_the_offset_spec(amqp, channel) -> None:
    channel.queue_declare("a-stream", durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", "a-stream", f"m{i}".encode())
    key = symbol("rabbitmq:stream-offset-spec")

    def read(spec: object, n: int) -> list[tuple[bytes, int]]:
        link = amqp.create_receiver(
            "/queues/a-stream", credit=n, options=Filter({key: Described(key, spec)})
        )
        got = []
        for _ in range(n):
            m = link.receive(timeout=5)
            got.append((bytes(m.body), m.annotations[symbol("x-stream-offset")]))
            link.accept()
        link.close()
        return got

    assert read("first", 5) == [(f"m{i}".encode(), i) for i in range(5)]
    assert read(3, 2) == [(b"m3", 3), (b"m4", 4)]


def test_a_message_over_the_receivers_max_message_size_ends_its_session(amqp, channel) -> None:
    """RabbitMQ 4.2 (amqp_client_SUITE max_message_size_server_to_client): the session
    ends with message-size-exceeded; the message stays in the queue."""
    channel.queue_declare("too-big")
    channel.basic_publish("", "too-big", b"x" * 500)
    session = amqp.conn.session()
    session.open()
    receiver = session.receiver("too-big-link")
    receiver.source.address = "/queues/too-big"
    receiver.max_message_size = 100
    receiver.open()
    receiver.flow(1)
    amqp.wait(lambda: session.state & proton.Endpoint.REMOTE_CLOSED, timeout=5)
    assert session.remote_condition.name == "amqp:link:message-size-exceeded"
    assert session.remote_condition.description.startswith("message size (")
    assert session.remote_condition.description.endswith(" > maximum message size (100 bytes)")
    again = amqp.create_receiver("/queues/too-big").receive(timeout=5)
    assert bytes(again.body) == b"x" * 500 and not again.first_acquirer


class _DynamicSource(proton.reactor.ReceiverOption):
    """A dynamic source with the capabilities (and settle mode) a client asks for."""

    def __init__(self, capability: str, settled: bool) -> None:
        self.capability = capability
        self.settled = settled

    def apply(self, link: proton.Link) -> None:
        link.source.address = None
        link.source.dynamic = True
        link.source.expiry_policy = proton.Terminus.EXPIRE_WITH_LINK
        link.source.capabilities.put_array(False, proton.Data.SYMBOL)
        link.source.capabilities.enter()
        link.source.capabilities.put_symbol(self.capability)
        link.source.capabilities.exit()
        if self.settled:
            link.snd_settle_mode = proton.Link.SND_SETTLED


def test_direct_reply_to_over_a_volatile_queue(amqp, channel) -> None:
    """RabbitMQ 4.2's direct reply-to over AMQP 1.0: a dynamic source with the capability
    rabbitmq:volatile-queue gets an amq.rabbitmq.reply-to. address; what is sent there,
    over AMQP 1.0 or 0-9-1, reaches the link."""
    replies = amqp.create_receiver(
        None, credit=10, options=_DynamicSource("rabbitmq:volatile-queue", True)
    )
    address = replies.link.remote_source.address
    assert address.startswith("/queues/amq.rabbitmq.reply-to.")
    assert replies.link.remote_source.dynamic
    amqp.create_sender(None).send(Message(address=address, body="over 1.0"))
    assert replies.receive(timeout=5).body == "over 1.0"
    from urllib.parse import unquote

    name = unquote(address[len("/queues/") :])
    channel.basic_publish("", name, b"over 0-9-1")
    assert bytes(replies.receive(timeout=5).body) == b"over 0-9-1"
    # a link to the address itself: the volatile queue exists while its consumer lives
    # (rabbit_db_queue:exists, v4.2.9)
    amqp.create_sender(address).send(Message(body="on its own link"))
    assert replies.receive(timeout=5).body == "on its own link"


def test_a_temporary_queue_lives_as_long_as_its_link(amqp, channel, broker) -> None:
    receiver = amqp.create_receiver(None, options=_DynamicSource("temporary-queue", False))
    address = receiver.link.remote_source.address
    assert address.startswith("/queues/amq.dyn-")
    amqp.create_sender(address).send(Message(body="tmp"))
    assert receiver.receive(timeout=5).body == "tmp"
    receiver.accept()
    from urllib.parse import unquote

    name = unquote(address[len("/queues/") :])
    # it exists while the link does, exclusive to its connection
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
        channel.queue_declare(name, passive=True)
    assert locked.value.reply_code == 405
    receiver.close()
    other = channel.connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        other.queue_declare(name, passive=True)
    assert gone.value.reply_code == 404


def test_v1_addresses_declare_the_queue_or_bind_one(amqp, channel) -> None:
    """/queue/Q is declared if missing; /exchange/X/key reads a new amq.gen- queue
    bound to X with key."""
    amqp.create_sender("/queue/v1-declared").send(Message(body="declared"))
    assert channel.queue_declare("v1-declared", passive=True).method.message_count == 1
    receiver = amqp.create_receiver("/exchange/amq.direct/v1-key", credit=1)
    channel.basic_publish("amq.direct", "v1-key", b"bound")
    assert bytes(receiver.receive(timeout=5).body) == b"bound"


def test_a_reply_address_naming_nobody_is_released(amqp) -> None:
    sender = amqp.create_sender(None)
    for name in ("amq.rabbitmq.reply-to.bm9ib2R5.a2V5", "amq.rabbitmq.reply-to.x"):
        delivery = sender.send(Message(address=f"/queues/{name}", body="?"), error_states=[])
        assert delivery.remote_state == proton.Delivery.RELEASED


def test_the_open_names_rabbitmq_as_the_product_and_leveret_in_its_information(amqp) -> None:
    """The official AMQP 1.0 clients refuse a server whose product is not RabbitMQ."""
    props = amqp.conn.remote_properties
    assert props[symbol("product")] == "RabbitMQ"
    assert props[symbol("information")].startswith("Leveret ")
    assert symbol("node") in props and symbol("version") in props


def test_a_memory_alarm_shuts_the_sessions_incoming_window(broker, amqp, channel) -> None:
    """RabbitMQ 4.2 (conserve_resources): each session's incoming window goes to 0 and a
    flow says so, at once; the socket is still read (a consumer still detaches). When the
    alarm clears, a flow opens the window again (400). Proton sends regardless of the
    window, so the frames are read off its trace."""
    channel.queue_declare("alarmed")
    sender = amqp.create_sender("/queues/alarmed")
    sender.send(Message(body="before"))
    receiver = amqp.create_receiver("/queues/alarmed", credit=5)
    assert receiver.receive(timeout=5).body == "before"
    frames: list[str] = []
    transport = amqp.conn.transport
    transport.trace(proton.Transport.TRACE_FRM)
    transport.tracer = lambda _transport, line: frames.append(line)

    def flow_with(window: str) -> bool:
        return any("@flow" in f and f"incoming-window={window}," in f for f in frames)

    broker.set_vm_memory_high_watermark("1MiB")
    try:
        amqp.wait(lambda: flow_with("0x0"), timeout=5)
        receiver.close()  # the socket is read: the detach puts the message back
        count = channel.queue_declare("alarmed", passive=True).method.message_count
        assert count == 1
    finally:
        broker.set_vm_memory_high_watermark(0.4)
    amqp.wait(lambda: flow_with("0x190"), timeout=5)


def test_rabbitmq_4_offers_anonymous_which_logs_in_as_guest(tmp_path) -> None:
    """RabbitMQ 4 offers SASL ANONYMOUS by default (deps/rabbit/Makefile v4.2.9:
    auth_mechanisms, anonymous_login_user guest); RabbitMQ 3.10.8 has no such mechanism.
    RabbitMQ 4 serves AMQP 1.0 in its core, with no plugin to enable."""
    with leveret.Broker(rabbitmq_version="4.2") as b:
        conn = BlockingConnection(
            f"amqp://127.0.0.1:{b.port}", allowed_mechs="ANONYMOUS", timeout=10
        )
        try:
            assert conn.conn.remote_properties[symbol("version")] == "4.2.9"
        finally:
            conn.close()
        assert _amqp091_mechanisms(b.port) == "AMQPLAIN ANONYMOUS PLAIN"
    with leveret.Broker(plugins="rabbitmq_amqp1_0") as b:
        assert _amqp091_mechanisms(b.port) == "AMQPLAIN PLAIN"
        with pytest.raises(proton.ConnectionException):
            BlockingConnection(f"amqp://127.0.0.1:{b.port}", allowed_mechs="ANONYMOUS", timeout=10)
    # 3.10.8 without its rabbitmq_amqp1_0 plugin: no AMQP 1.0
    with leveret.Broker() as b, pytest.raises(proton.ConnectionException):
        BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=5)


def _amqp091_mechanisms(port: int) -> str:
    """The mechanisms an AMQP 0-9-1 connection.start offers."""
    import socket

    from pamqp import frame

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        data = b""
        while True:
            data += sock.recv(65536)
            try:
                _, _, start = frame.unmarshal(data)
                break
            except Exception:  # not all of it yet
                continue
    return str(start.mechanisms)


def test_rabbitmq_4_closes_a_connection_to_a_missing_vhost_without_a_close() -> None:
    """RabbitMQ 4.2 (rabbit_amqp_reader: check_vhost_exists in waiting_open, a handshake
    error): no close frame, the socket is closed after SILENT_CLOSE_DELAY (amqp_auth_SUITE
    vhost_absent sees the connection closed). RabbitMQ 3.10.8's plugin answers a close."""

    def refused(**broker: Any) -> str:
        """What proton says of a connection to vhost nope, refused."""
        with (
            leveret.Broker(plugins="rabbitmq_amqp1_0", **broker) as b,
            pytest.raises(proton.ConnectionException) as closed,
        ):
            BlockingConnection(
                f"amqp://guest:guest@127.0.0.1:{b.port}",
                allowed_mechs="PLAIN",
                virtual_host="vhost:nope",
                timeout=10,
            )
        return str(closed.value)

    assert "does not exist" not in refused(rabbitmq_version="4.2")
    assert "virtual host 'nope' does not exist" in refused()
