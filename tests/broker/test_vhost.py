"""A VirtualHost on its own: its built-in exchanges, declaring and deleting, bindings and
what routing answers a publish (PublishResult), with connections as FakeConnections."""

from __future__ import annotations

import pytest
from pamqp import commands as C

from leveret.broker import operations
from leveret.broker.exchanges import Binding
from leveret.broker.message import Message
from leveret.broker.operations import Actor
from leveret.broker.routing import RETURNED, ROUTED, UNROUTED, PublishResult
from leveret.broker.users import Permission
from leveret.broker.vhost import VirtualHost
from leveret.protocol.errors import AMQPError
from tests.broker.fakes import FakeConnection, new_broker


@pytest.fixture
def vhost() -> VirtualHost:
    return VirtualHost("/")


def publish(
    vhost: VirtualHost, exchange: str, key: str, mandatory: bool = False, **props: object
) -> PublishResult:
    properties = C.Basic.Properties(**props) if props else None
    message = Message.build(exchange, key, b"x", properties)
    return operations.publish(vhost, Actor("u", Permission("u", "/")), exchange, message, mandatory)


def refusal(exc: pytest.ExceptionInfo[AMQPError]) -> tuple[int, str]:
    return exc.value.code, exc.value.reply_text


def test_built_in_exchanges(vhost: VirtualHost) -> None:
    kinds = {n: (x.type_name, x.durable, x.internal) for n, x in vhost.exchanges.items() if n}
    assert kinds == {
        "amq.direct": ("direct", True, False),
        "amq.fanout": ("fanout", True, False),
        "amq.headers": ("headers", True, False),
        "amq.match": ("headers", True, False),
        "amq.rabbitmq.trace": ("topic", True, True),
        "amq.topic": ("topic", True, False),
    }


def test_declare_tells_new_from_existing(vhost: VirtualHost) -> None:
    q, new = vhost.declare_queue("q", durable=True)
    assert new and q.durable
    assert vhost.declare_queue("q", durable=True) == (q, False)
    x, new = vhost.declare_exchange("x", "fanout")
    assert new and vhost.declare_exchange("x", "fanout") == (x, False)


def test_an_exclusive_queue_belongs_to_one_connection(vhost: VirtualHost) -> None:
    owner, other = FakeConnection(1), FakeConnection(2)
    q, _ = vhost.declare_queue("q", exclusive_owner=owner)
    assert q.exclusive_owner is owner
    assert vhost.declare_queue("q", exclusive_owner=owner) == (q, False)
    for who in (other, None):
        with pytest.raises(AMQPError) as info:
            vhost.declare_queue("q", exclusive_owner=who)
        assert info.value.code == 405


def test_publish_answers_routed_unrouted_or_returned(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    assert publish(vhost, "", "q") is ROUTED
    assert publish(vhost, "", "nowhere") is UNROUTED
    assert publish(vhost, "", "nowhere", mandatory=True) is RETURNED
    assert vhost.queues["q"].message_count == 1


def test_reject_publish_overflow_answers_refused(vhost: VirtualHost) -> None:
    vhost.declare_queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert publish(vhost, "", "q") is ROUTED
    result = publish(vhost, "", "q")
    assert (result.routed, result.refused) == (True, True)


def test_cc_and_bcc_route_to_every_key_once(vhost: VirtualHost) -> None:
    for name in ("a", "b", "c"):
        q, _ = vhost.declare_queue(name)
        vhost.bind(vhost.exchanges["amq.direct"], Binding("amq.direct", q, name))
    publish(vhost, "amq.direct", "a", headers={"CC": ["b", "a"], "BCC": ["c"]})
    got = {n: vhost.queues[n].get(True) for n in "abc"}
    assert all(got.values())
    assert vhost.queues["a"].message_count == 0
    assert "BCC" not in got["c"].message.headers


def test_bind_and_unbind_report_whether_anything_changed(vhost: VirtualHost) -> None:
    q, _ = vhost.declare_queue("q")
    x = vhost.exchanges["amq.direct"]
    binding = Binding(x.name, q, "k")
    assert vhost.bind(x, binding) and not vhost.bind(x, Binding(x.name, q, "k"))
    assert [b.routing_key for b in vhost.bindings()] == ["k"]
    assert vhost.unbind(x, Binding(x.name, q, "k")) and not vhost.unbind(x, binding)
    assert vhost.bindings() == []


def test_removing_a_queue_takes_its_bindings_and_auto_delete_sources(vhost: VirtualHost) -> None:
    q, _ = vhost.declare_queue("q")
    x, _ = vhost.declare_exchange("x", "fanout", auto_delete=True)
    vhost.bind(x, Binding(x.name, q, ""))
    vhost.bind(vhost.exchanges["amq.fanout"], Binding("amq.fanout", q, ""))
    assert vhost.remove_queue(q) == 0
    assert "x" not in vhost.exchanges
    assert vhost.exchanges["amq.fanout"].bindings == {}


def test_deleting_an_exchange_unbinds_it_from_its_sources(vhost: VirtualHost) -> None:
    src, _ = vhost.declare_exchange("src", "fanout")
    dst, _ = vhost.declare_exchange("dst", "fanout")
    vhost.bind(src, Binding(src.name, dst, ""))
    with pytest.raises(AMQPError) as info:
        vhost.delete_exchange("src", if_unused=True)  # the source of a binding: in use
    assert refusal(info) == (406, "PRECONDITION_FAILED - exchange 'src' in vhost '/' in use")
    # a binding into it does not count (rabbit_exchange:conditional_delete), and goes too
    assert vhost.delete_exchange("dst", if_unused=True)
    assert src.bindings == {} and not vhost.delete_exchange("dst")


def test_alternate_exchanges_that_loop_end(vhost: VirtualHost) -> None:
    vhost.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    vhost.declare_exchange("b", "direct", arguments={"alternate-exchange": "a"})
    assert publish(vhost, "a", "k", mandatory=True) is RETURNED


def test_check_access_names_the_resource_and_the_user(vhost: VirtualHost) -> None:
    reader = Permission("r", "/", configure="", write="", read=".*")
    operations.check_access(vhost, Actor("r", reader), "read", "queue", "q")
    with pytest.raises(AMQPError) as info:
        operations.check_access(vhost, Actor("r", reader), "write", "exchange", "")
    assert refusal(info) == (
        403,
        "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'r'",
    )


def test_queue_limit(vhost: VirtualHost) -> None:
    vhost.set_limits({"max-queues": 1})
    actor = Actor("u", Permission("u", "/"))
    operations.declare_queue(vhost, actor, C.Queue.Declare(queue="a"))
    operations.declare_queue(
        vhost, actor, C.Queue.Declare(queue="a")
    )  # existing: not counted again
    with pytest.raises(AMQPError) as info:
        operations.declare_queue(vhost, actor, C.Queue.Declare(queue="b"))
    assert refusal(info) == (
        406,
        "PRECONDITION_FAILED - cannot declare queue 'b': queue limit in vhost '/' (1) is reached",
    )


def test_deleting_a_vhost_forces_its_connections_closed() -> None:
    broker = new_broker()
    broker.add_vhost("other")
    here, there = FakeConnection(101, vhost="other"), FakeConnection(102, vhost="/")
    broker.register(here)
    broker.register(there)
    broker.vhosts["other"].declare_queue("q")
    assert broker.delete_vhost("other")
    assert (here.forced, there.forced) == (["vhost deleted"], [])
    assert "other" not in broker.vhosts
