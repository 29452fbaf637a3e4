"""RabbitMQ's official AMQP 1.0 Python client (rabbitmq-amqp-python-client) managing queues,
exchanges and bindings through Leveret's ``/management`` node, over real sockets.

Leveret only: the reference broker here is RabbitMQ 3.10.8, which has no management node
(it came with RabbitMQ 4.0). Where the outcome is RabbitMQ 4.2's, the test names the
suite of RabbitMQ v4.2.9 that pins it (deps/rabbitmq_amqp_client/test/management_SUITE.erl,
deps/rabbit/test/amqp_auth_SUITE.erl).

The client's own ``Management`` class speaks the management protocol (its link pair, its
requests); it runs here over the client's own ``BlockingConnection``. Its ``Connection``
wrapper cannot be used against Leveret: it refuses any server that does not announce
itself as RabbitMQ 4.0 or later, and it names no SASL mechanism, so proton takes ANONYMOUS,
which RabbitMQ 4 offers and RabbitMQ 3.10.8 (Leveret's model: PLAIN, AMQPLAIN) does not."""

from __future__ import annotations

import json
import urllib.request
import uuid
from base64 import b64encode
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from rabbitmq_amqp_python_client import (
    ClassicQueueSpecification,
    ExchangeCustomSpecification,
    ExchangeSpecification,
    ExchangeToExchangeBindingSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    Management,
    QueueType,
    QuorumQueueSpecification,
    StreamSpecification,
    ValidationCodeException,
)
from rabbitmq_amqp_python_client.options import ReceiverOption, SenderOption
from rabbitmq_amqp_python_client.qpid.proton import Message
from rabbitmq_amqp_python_client.qpid.proton._data import PropertyDict, symbol
from rabbitmq_amqp_python_client.qpid.proton._exceptions import Timeout
from rabbitmq_amqp_python_client.qpid.proton.reactor import LinkOption
from rabbitmq_amqp_python_client.qpid.proton.utils import (
    BlockingConnection,
    LinkDetached,
)

from tests.support.brokers import BrokerUnderTest, start_leveret

ADDRESS = "/management"


@pytest.fixture(scope="module")
def server() -> Iterator[BrokerUnderTest]:
    broker = start_leveret(extra=["--plugins", "rabbitmq_amqp1_0"])
    yield broker
    broker.stop()


def connect(
    server: BrokerUnderTest, user: str = "guest", password: str = "guest", timeout: float = 30
) -> BlockingConnection:
    return BlockingConnection(
        f"amqp://{user}:{password}@127.0.0.1:{server.port}/",
        allowed_mechs="PLAIN",
        timeout=timeout,
    )


@pytest.fixture
def conn(server: BrokerUnderTest) -> Iterator[BlockingConnection]:
    c = connect(server)
    yield c
    c.close()


@pytest.fixture
def mgmt(conn: BlockingConnection) -> Iterator[Management]:
    m = Management(conn)
    m.open()
    yield m
    m.close()


def api(server: BrokerUnderTest, method: str, path: str, body: Any = None) -> Any:
    """Leveret's HTTP management API, to look at what the node did."""
    request = urllib.request.Request(
        server.http_url + "/api" + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": "Basic " + b64encode(b"guest:guest").decode(),
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request) as response:
        data = response.read()
    return json.loads(data) if data else None


def publish(server: BrokerUnderTest, exchange: str, key: str, count: int = 1) -> None:
    params = pika.ConnectionParameters("127.0.0.1", server.port)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for _ in range(count):
            channel.basic_publish(exchange, key, b"m")


def queue_messages(server: BrokerUnderTest, name: str) -> int:
    params = pika.ConnectionParameters("127.0.0.1", server.port)
    with pika.BlockingConnection(params) as connection:
        ok = connection.channel().queue_declare(name, passive=True)
        return int(ok.method.message_count)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def request(m: Management, method: str, path: str, body: Any = None, msg_id: Any = None) -> Message:
    """One request on the client's own link pair, answered whatever its status."""
    assert m._sender is not None and m._receiver is not None
    m._sender.send(
        Message(
            id=msg_id if msg_id is not None else str(uuid.uuid4()),
            body=body,
            inferred=False,
            reply_to="$me",
            address=path,
            subject=method,
            # as the client's own requests: it writes a null body over the first four
            # bytes of the message, which must then be an empty header
            durable=False,
        )
    )
    return m._receiver.receive()


# ------------------------------------------------------------------------ queues
@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (ClassicQueueSpecification, QueueType.classic),
        (QuorumQueueSpecification, QueueType.quorum),
        (StreamSpecification, QueueType.stream),
    ],
)
def test_declare_queue_info_and_delete(
    server: BrokerUnderTest, mgmt: Management, spec: Any, kind: QueueType
) -> None:
    # management_SUITE all_management_operations: declaring again is no error, the info
    # names the node as leader and replica
    name = unique("q")
    mgmt.declare_queue(spec(name=name))
    mgmt.declare_queue(spec(name=name))
    info = mgmt.queue_info(name)
    node = api(server, "GET", "/overview")["node"]
    assert (info.name, info.queue_type, info.is_durable) == (name, kind, True)
    assert (info.is_exclusive, info.is_auto_delete) == (False, False)
    assert info.leader == node and list(info.members) == [node]
    assert info.arguments["x-queue-type"] == kind.value
    assert (info.message_count, info.consumer_count) == (0, 0)
    listed = api(server, "GET", f"/queues/%2F/{name}")
    assert listed["type"] == kind.value and listed["durable"] is True
    mgmt.delete_queue(name)
    mgmt.delete_queue(name)  # gone already: still 200
    with pytest.raises(ValidationCodeException, match="404"):
        mgmt.queue_info(name)


def test_queue_arguments_reach_the_queue(server: BrokerUnderTest, mgmt: Management) -> None:
    name = unique("q")
    mgmt.declare_queue(QuorumQueueSpecification(name=name, max_len=10, dead_letter_exchange="dlx"))
    info = mgmt.queue_info(name)
    assert info.arguments == {
        "x-queue-type": "quorum",
        "x-max-length": 10,
        "x-dead-letter-exchange": "dlx",
    }
    publish(server, "", name, 12)
    assert mgmt.queue_info(name).message_count == 10  # the limit, applied
    mgmt.delete_queue(name)


def test_purge(server: BrokerUnderTest, mgmt: Management) -> None:
    name = unique("q")
    mgmt.declare_queue(ClassicQueueSpecification(name=name))
    publish(server, "", name, 3)
    assert mgmt.queue_info(name).message_count == 3
    assert mgmt.purge_queue(name) == 3
    assert queue_messages(server, name) == 0
    mgmt.delete_queue(name)


def test_purge_a_stream_is_refused(mgmt: Management) -> None:
    # management_SUITE purge_stream: 400
    name = unique("s")
    mgmt.declare_queue(StreamSpecification(name=name))
    with pytest.raises(ValidationCodeException, match="400"):
        mgmt.purge_queue(name)
    response = request(mgmt, "DELETE", f"/queues/{name}/messages")
    assert response.subject == "400"
    assert response.body == f"purge not supported by queue '{name}' in vhost '/'"
    mgmt.delete_queue(name)


def test_an_exclusive_queue_goes_with_its_connection(server: BrokerUnderTest) -> None:
    name = unique("q")
    c = connect(server)
    m = Management(c)
    m.open()
    m.declare_queue(ClassicQueueSpecification(name=name, is_exclusive=True))
    assert m.queue_info(name).is_exclusive
    assert api(server, "GET", f"/queues/%2F/{name}")["exclusive"] is True
    other_conn = connect(server)
    other = Management(other_conn)
    other.open()
    with pytest.raises(ValidationCodeException, match="400"):
        other.delete_queue(name)  # locked: another connection's
    other.close()
    other_conn.close()
    m.close()
    c.close()
    with pytest.raises(urllib.error.HTTPError):
        api(server, "GET", f"/queues/%2F/{name}")


# --------------------------------------------------------------------- exchanges
@pytest.mark.parametrize(
    "spec",
    [
        ExchangeSpecification(name="", exchange_type=ExchangeType.direct),
        ExchangeSpecification(name="", exchange_type=ExchangeType.fanout),
        ExchangeSpecification(name="", exchange_type=ExchangeType.topic),
        ExchangeSpecification(name="", exchange_type=ExchangeType.headers, is_auto_delete=True),
        ExchangeCustomSpecification(name="", exchange_type="x-consistent-hash"),
        ExchangeCustomSpecification(
            name="", exchange_type="x-delayed-message", arguments={"x-delayed-type": "direct"}
        ),
    ],
    ids=lambda spec: str(getattr(spec.exchange_type, "value", spec.exchange_type)),
)
def test_declare_and_delete_exchange(server: BrokerUnderTest, mgmt: Management, spec: Any) -> None:
    spec.name = unique("x")
    mgmt.declare_exchange(spec)
    mgmt.declare_exchange(spec)
    listed = api(server, "GET", f"/exchanges/%2F/{spec.name}")
    kind = getattr(spec.exchange_type, "value", spec.exchange_type)
    # the client does not send is_auto_delete: the node's default, false, holds
    assert (listed["type"], listed["durable"], listed["auto_delete"]) == (kind, True, False)
    assert listed["arguments"] == spec.arguments
    mgmt.delete_exchange(spec.name)
    mgmt.delete_exchange(spec.name)
    with pytest.raises(urllib.error.HTTPError):
        api(server, "GET", f"/exchanges/%2F/{spec.name}")


# ---------------------------------------------------------------------- bindings
def test_bind_and_unbind_queue(server: BrokerUnderTest, mgmt: Management) -> None:
    x, q = unique("x"), unique("q")
    mgmt.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.topic))
    mgmt.declare_queue(ClassicQueueSpecification(name=q))
    path = mgmt.bind(
        ExchangeToQueueBindingSpecification(
            source_exchange=x, destination_queue=q, binding_key="a.#"
        )
    )
    assert path == f"/bindings/src={x};dstq={q};key=a.%23;args="
    publish(server, x, "a.b")
    assert queue_messages(server, q) == 1
    found = request(mgmt, "GET", f"/bindings?src={x}&dstq={q}&key=a.%23")
    assert found.subject == "200"
    assert found.body == [
        {
            "source": x,
            "destination_queue": q,
            "binding_key": "a.#",
            "arguments": {},
            "location": path,
        }
    ]
    mgmt.unbind(path)
    mgmt.unbind(path)  # gone already: still 204
    publish(server, x, "a.b")
    assert queue_messages(server, q) == 1
    mgmt.delete_queue(q)
    mgmt.delete_exchange(x)


def test_bind_exchange_to_exchange(server: BrokerUnderTest, mgmt: Management) -> None:
    src, dst, q = unique("x"), unique("x"), unique("q")
    mgmt.declare_exchange(ExchangeSpecification(name=src))
    mgmt.declare_exchange(ExchangeSpecification(name=dst, exchange_type=ExchangeType.fanout))
    mgmt.declare_queue(ClassicQueueSpecification(name=q))
    mgmt.bind(ExchangeToQueueBindingSpecification(source_exchange=dst, destination_queue=q))
    spec = ExchangeToExchangeBindingSpecification(
        source_exchange=src, destination_exchange=dst, binding_key="k"
    )
    path = mgmt.bind(spec)
    publish(server, src, "k")
    assert queue_messages(server, q) == 1
    # The client names an exchange destination with dstq= in the path it builds (its
    # address_helper): RabbitMQ finds no such binding to a queue and answers 204 without
    # removing anything; so does Leveret.
    assert ";dstq=" in path
    mgmt.unbind(spec)
    publish(server, src, "k")
    assert queue_messages(server, q) == 2
    # the path with dste= removes it
    response = request(mgmt, "DELETE", path.replace(";dstq=", ";dste="))
    assert response.subject == "204"
    publish(server, src, "k")
    assert queue_messages(server, q) == 2
    mgmt.delete_queue(q)
    mgmt.delete_exchange(src)
    mgmt.delete_exchange(dst)


# ------------------------------------------------------------------------ errors
def test_inequivalent_declarations_are_409(mgmt: Management) -> None:
    # management_SUITE declare_queue_inequivalent_fields, declare_exchange_inequivalent_
    # fields: the client turns 409 into ErrPreconditionFailed
    q, x = unique("q"), unique("x")
    mgmt.declare_queue(ClassicQueueSpecification(name=q))
    with pytest.raises(ValidationCodeException, match="ErrPreconditionFailed"):
        mgmt.declare_queue(ClassicQueueSpecification(name=q, max_len=5))
    response = request(
        mgmt,
        "PUT",
        f"/queues/{q}",
        {"durable": True, "arguments": {"x-queue-type": "quorum"}},
    )
    assert (response.subject, response.body) == (
        "409",
        f"inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'quorum' "
        "but current is 'classic'",
    )
    mgmt.declare_exchange(ExchangeSpecification(name=x))
    with pytest.raises(ValidationCodeException, match="ErrPreconditionFailed"):
        mgmt.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.fanout))
    mgmt.delete_queue(q)
    mgmt.delete_exchange(x)


def test_refusals_with_their_statuses_and_texts(mgmt: Management) -> None:
    # management_SUITE get_queue_not_found, declare_queue_amq_prefix, bad_exchange_type,
    # purge_non_existing_queue_should_return_not_found, bind_missing_queue
    with pytest.raises(ValidationCodeException, match="404"):
        mgmt.queue_info("missing")
    with pytest.raises(ValidationCodeException, match="403"):
        mgmt.declare_queue(ClassicQueueSpecification(name="amq.q"))
    with pytest.raises(ValidationCodeException, match="400"):
        mgmt.declare_exchange(ExchangeCustomSpecification(name="e1", exchange_type="🤷"))
    with pytest.raises(ValidationCodeException, match="400"):
        mgmt.bind(
            ExchangeToQueueBindingSpecification(
                source_exchange="amq.direct", destination_queue="missing"
            )
        )
    for method, path, body, status, text in [
        ("GET", "/queues/missing", None, "404", "queue 'missing' in vhost '/' not found"),
        ("DELETE", "/queues/missing/messages", None, "404", "no queue 'missing' in vhost '/'"),
        (
            "PUT",
            "/queues/amq.q",
            {},
            "403",
            "queue 'amq.q' in vhost '/' starts with reserved prefix 'amq.'",
        ),
        ("PUT", "/exchanges/e1", {"type": "🤷"}, "400", "unknown exchange type '🤷'"),
        (
            "POST",
            "/bindings",
            {
                "source": "amq.direct",
                "destination_queue": "missing",
                "binding_key": "",
                "arguments": {},
            },
            "400",
            "no queue 'missing' in vhost '/'",
        ),
        ("DELETE", "/exchanges/amq.fanout", None, "403",
         "exchange 'amq.fanout' in vhost '/' starts with reserved prefix 'amq.'"),
    ]:  # fmt: skip
        response = request(mgmt, method, path, body)
        assert (response.subject, response.body) == (status, text)


def test_a_name_the_client_does_not_percent_encode(mgmt: Management) -> None:
    # The client leaves non-ASCII letters unencoded in the path (its _is_unreserved uses
    # str.isalnum): RabbitMQ's uri_string refuses such a URI with 400 (management_SUITE
    # bad_uri), and so does Leveret.
    with pytest.raises(ValidationCodeException, match="400"):
        mgmt.declare_queue(ClassicQueueSpecification(name="café"))
    response = request(mgmt, "PUT", "/queues/café", {})
    assert response.body == "failed to normalize URI '/queues/café': invalid_uri \"é\""
    # percent-encoded, the name is fine
    assert request(mgmt, "PUT", "/queues/caf%C3%A9", {}).subject == "201"
    assert request(mgmt, "DELETE", "/queues/caf%C3%A9").subject == "200"


def test_the_response_answers_its_request(mgmt: Management) -> None:
    response = request(mgmt, "GET", "/queues/missing", msg_id="my-id")
    assert response.correlation_id == "my-id"
    assert response.application_properties == {"http:response": "1.1"}


def test_pipelined_requests(server: BrokerUnderTest, conn: BlockingConnection) -> None:
    # management_SUITE pipeline: 8 credits, 8 requests before the first response (the
    # responses need as much credit: the test grants it, as RabbitMQ's does)
    m = Management(conn)
    m.open()
    assert m._sender is not None and m._receiver is not None
    m._receiver.link.flow(8)
    names = [unique("p") for _ in range(8)]
    for name in names:
        m._sender.send(
            Message(id=name, body={}, inferred=False, reply_to="$me", address=f"/queues/{name}",
                    subject="PUT", durable=False)
        )  # fmt: skip
    answers = [m._receiver.receive() for _ in names]
    assert [(a.correlation_id, a.subject) for a in answers] == [(n, "201") for n in names]
    for name in names:
        m.delete_queue(name)
    m.close()


def test_a_request_without_credit_for_its_response_ends_the_session(
    server: BrokerUnderTest,
) -> None:
    # management_SUITE drain: RabbitMQ answers only under the client's credit, and a
    # request that finds none ends the session. The client's receiver keeps one credit
    # out: a second request before the first response is read finds none.
    c = connect(server, timeout=5)
    try:
        m = Management(c)
        m.open()
        assert m._sender is not None and m._receiver is not None
        for n in range(2):
            m._sender.send(Message(id=str(n), body=None, inferred=False, reply_to="$me",
                                   address="/queues/q", subject="GET", durable=False))  # fmt: skip
        c.wait(lambda: m._receiver.link.session.remote_condition is not None, timeout=5)
        condition = m._receiver.link.session.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:precondition-failed",
            "insufficient credit (0) for management link from RabbitMQ to client",
        )
    finally:
        c.close()


# --------------------------------------------------------------- the link pair
class _Pair(LinkOption):  # type: ignore[misc]
    """A management link without (or with) the property paired."""

    def __init__(self, sender: bool, paired: Any) -> None:
        self.sender = sender
        self.paired = paired

    def apply(self, link: Any) -> None:
        if self.sender:
            link.source.address = ADDRESS
            link.snd_settle_mode = 1  # settled
        else:
            link.target.address = ADDRESS
        if self.paired is not None:
            link.properties = PropertyDict({symbol("paired"): self.paired})


def test_a_pair_without_the_paired_property_is_refused(conn: BlockingConnection) -> None:
    with pytest.raises(LinkDetached) as info:
        conn.create_sender(ADDRESS, name="unpaired", options=_Pair(True, None))
    assert info.value.condition == "amqp:invalid-field"
    with pytest.raises(LinkDetached) as info:
        conn.create_receiver(ADDRESS, name="unpaired-2", options=_Pair(False, False))
    assert info.value.condition == "amqp:invalid-field"


def test_attach_order_and_several_pairs(conn: BlockingConnection) -> None:
    # management_SUITE link_attach_order, multiple_link_pairs: either half first, as
    # many pairs as wanted on a session
    q = unique("q")
    receiver = conn.create_receiver(ADDRESS, name="pair 2", options=ReceiverOption(ADDRESS))
    sender = conn.create_sender(ADDRESS, name="pair 2", options=SenderOption(ADDRESS))
    first = Management(conn)
    first.open()
    sender.send(Message(id="1", body={}, inferred=False, reply_to="$me", address=f"/queues/{q}",
                        subject="PUT", durable=False))  # fmt: skip
    assert receiver.receive().subject == "201"
    first.delete_queue(q)
    sender.close()
    receiver.close()
    first.close()


def test_a_request_before_the_pair_is_whole_ends_the_session(server: BrokerUnderTest) -> None:
    # incoming_mgmt_link_transfer: "received transfer on half open management link pair"
    c = connect(server, timeout=5)
    try:
        sender = c.create_sender(ADDRESS, name="half", options=SenderOption(ADDRESS))
        sender.send(Message(id="1", body=None, inferred=False, reply_to="$me",
                            address="/queues/q", subject="GET", durable=False))  # fmt: skip
        c.wait(lambda: sender.link.session.remote_condition is not None, timeout=5)
        condition = sender.link.session.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:precondition-failed",
            "received transfer on half open management link pair",
        )
    finally:
        c.close()


def test_a_refused_permission_ends_the_session(server: BrokerUnderTest) -> None:
    # amqp_auth_SUITE declare_queue: no status; the session ends with
    # amqp:unauthorized-access (the client itself waits for a response until it times out)
    api(server, "PUT", "/users/mgmt-user", {"password": "pw", "tags": ""})
    api(
        server,
        "PUT",
        "/permissions/%2F/mgmt-user",
        {"configure": "^$", "write": ".*", "read": ".*"},
    )
    c = connect(server, "mgmt-user", "pw", timeout=5)
    try:
        m = Management(c)
        m.open()
        with pytest.raises(Timeout):
            m.declare_queue(ClassicQueueSpecification(name="popcorn"))
        assert m._receiver is not None
        condition = m._receiver.link.session.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:unauthorized-access",
            "configure access to queue 'popcorn' in vhost '/' refused for user 'mgmt-user'",
        )
    finally:
        c.close()
        api(server, "DELETE", "/users/mgmt-user")
