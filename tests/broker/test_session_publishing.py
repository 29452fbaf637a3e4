"""Publishing through a Session: routing by exchange type, mandatory returns, publisher
confirms and transactions, and the errors a publish meets (RabbitMQ 3.10.8's texts)."""

from __future__ import annotations

import pytest
from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from tests.broker.fakes import Ack, BrokerClosed, Client, ClientChannel, Content, Sent


def queues(ch: ClientChannel, exchange: str, kind: str, bindings: dict[str, list[object]]) -> None:
    """Declare ``exchange`` and a queue per label, bound with each key (a dict: the
    binding's arguments, for headers exchanges)."""
    ch.declare_exchange(exchange, kind)
    for label, keys in bindings.items():
        ch.declare_queue(label)
        for key in keys:
            if isinstance(key, dict):
                ch.bind(label, exchange, arguments=key)
            else:
                ch.bind(label, exchange, str(key))


# ------------------------------------------------------------------ routing
def test_direct_routing(ch: ClientChannel) -> None:
    queues(ch, "x", "direct", {"errors": ["error"], "all": ["info", "warning", "error"]})
    for sev in ("info", "warning", "error", "debug"):
        ch.publish("x", sev, sev.encode())
    assert ch.drain("errors") == [b"error"]
    assert ch.drain("all") == [b"info", b"warning", b"error"]


@pytest.mark.parametrize(
    ("binding", "matches"),
    [
        ("kern.*", ["kern.critical", "kern.info"]),
        ("*.critical", ["kern.critical", "app.critical"]),
        ("#", ["kern.critical", "kern.info", "app.critical", "a.b.c", "", "lone"]),
        ("a.#.c", ["a.b.c"]),
        ("#.c", ["a.b.c"]),
        ("*", ["lone"]),
        ("", [""]),
    ],
)
def test_topic_routing(ch: ClientChannel, binding: str, matches: list[str]) -> None:
    keys = ["kern.critical", "kern.info", "app.critical", "a.b.c", "", "lone"]
    queues(ch, "t", "topic", {"q": [binding]})
    for key in keys:
        ch.publish("t", key, key.encode())
    assert ch.drain("q") == [k.encode() for k in keys if k in matches]


def test_headers_routing(ch: ClientChannel) -> None:
    queues(
        ch,
        "h",
        "headers",
        {
            "all": [{"x-match": "all", "format": "pdf", "type": "report"}],
            "any": [{"x-match": "any", "format": "pdf", "type": "log"}],
            "default": [{"format": "zip"}],
            "allx": [{"x-match": "all", "x-tag": "hot"}],
        },
    )
    for headers, body in [
        ({"format": "pdf", "type": "report"}, b"1"),
        ({"format": "pdf"}, b"2"),
        ({"type": "log"}, b"3"),
        ({"format": "zip", "x-tag": "hot"}, b"4"),
    ]:
        ch.publish("h", "", body, properties=C.Basic.Properties(headers=headers))
    assert ch.drain("all") == [b"1"]
    assert ch.drain("any") == [b"1", b"2", b"3"]
    assert ch.drain("default") == [b"4"]
    assert ch.drain("allx") == [b"1", b"2", b"3", b"4"]  # 'all' ignores x- arguments


def test_fanout_ignores_the_key_and_delivers_once(ch: ClientChannel) -> None:
    queues(ch, "f", "fanout", {"a": ["x", "y"], "b": [""]})
    ch.publish("f", "whatever", b"m")
    assert (ch.drain("a"), ch.drain("b")) == ([b"m"], [b"m"])


def test_unbind_stops_routing(ch: ClientChannel) -> None:
    queues(ch, "x", "direct", {"q": ["k"]})
    ch.reply(C.Queue.Unbind(queue="q", exchange="x", routing_key="k"))
    ch.publish("x", "k", b"lost")
    assert ch.drain("q") == []


def test_exchange_to_exchange_with_a_cycle(ch: ClientChannel) -> None:
    ch.declare_exchange("src", "topic")
    ch.declare_exchange("dst", "fanout")
    ch.reply(C.Exchange.Bind(destination="dst", source="src", routing_key="app.*"))
    ch.reply(C.Exchange.Bind(destination="src", source="dst", routing_key="#"))
    ch.declare_queue("q")
    ch.bind("q", "dst")
    ch.bind("q", "src", "#")
    ch.publish("src", "app.start", b"1")
    ch.publish("src", "other", b"2")
    assert ch.drain("q") == [b"1", b"2"]


def test_alternate_exchange(ch: ClientChannel) -> None:
    queues(ch, "ae", "fanout", {"other": [""]})
    ch.declare_exchange("y", "direct", arguments={"alternate-exchange": "ae"})
    ch.declare_queue("main")
    ch.bind("main", "y", "known")
    ch.publish("y", "known", b"1")
    ch.publish("y", "unknown", b"2")
    assert (ch.drain("main"), ch.drain("other")) == ([b"1"], [b"2"])


# ------------------------------------------------------------------ returns
def test_mandatory_unroutable_is_returned_with_no_route(ch: ClientChannel) -> None:
    queues(ch, "x", "direct", {"q": ["here"]})
    props = C.Basic.Properties(headers={"h": 1})
    [ret] = ch.publish("x", "nowhere", b"r", mandatory=True, properties=props)
    assert isinstance(ret, Content)
    m = ret.method
    assert (m.reply_code, m.reply_text, m.exchange, m.routing_key) == (
        312,
        "NO_ROUTE",
        "x",
        "nowhere",
    )
    assert (ret.body, ret.props.headers) == (b"r", {"h": 1})
    assert ch.publish("x", "here", b"ok", mandatory=True) == []
    assert ch.publish("x", "nowhere", b"dropped") == []
    assert ch.drain("q") == [b"ok"]


def test_publish_to_missing_exchange(ch: ClientChannel) -> None:
    with pytest.raises(BrokerClosed) as info:
        ch.publish("nope", "rk", b"x")
    closed = info.value.closed
    assert closed.reply == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    assert (closed.class_id, closed.method_id) == (60, 40)  # basic.publish


def test_publish_to_internal_exchange(ch: ClientChannel) -> None:
    ch.declare_exchange("i", "fanout", internal=True)
    with pytest.raises(BrokerClosed) as info:
        ch.publish("i", "", b"x")
    assert info.value.reply == (
        403,
        "ACCESS_REFUSED - cannot publish to internal exchange 'i' in vhost '/'",
    )


def test_immediate_closes_the_connection(ch: ClientChannel) -> None:
    with pytest.raises(BrokerClosed) as info:
        ch.publish("", "q", b"x", immediate=True)
    assert info.value.reply == (540, "NOT_IMPLEMENTED - immediate=true")
    assert ch.client.closed


def test_user_id_must_be_the_user(ch: ClientChannel) -> None:
    with pytest.raises(BrokerClosed) as info:
        ch.publish("", "q", b"x", properties=C.Basic.Properties(user_id="mallory"))
    assert info.value.reply == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user "
        "was 'guest'",
    )


# ----------------------------------------------------------------- confirms
def test_confirms_ack_each_publish_in_order(ch: ClientChannel) -> None:
    assert isinstance(ch.reply(C.Confirm.Select()), C.Confirm.SelectOk)
    ch.declare_queue("q")
    got = [ch.publish("", "q", b"x") for _ in range(3)]
    assert [[a.delivery_tag for a in answer if isinstance(a, Ack)] for answer in got] == [
        [1],
        [2],
        [3],
    ]


def test_confirms_of_one_batch_go_out_as_one_multiple_ack(ch: ClientChannel) -> None:
    ch.reply(C.Confirm.Select())
    ch.declare_queue("q")
    with ch.client.batch():
        for _ in range(5):
            ch.publish("", "q", b"x")
    assert ch.out.of(Ack) == [Ack(ch.number, 5, True)]
    assert ch.channel.unconfirmed == 0


def test_unroutable_publishes_are_confirmed_too(ch: ClientChannel) -> None:
    ch.reply(C.Confirm.Select())
    assert [type(r) for r in ch.publish("", "nowhere", b"x")] == [Ack]
    # mandatory: basic.return first, then the ack
    got = ch.publish("", "nowhere", b"y", mandatory=True)
    assert [type(r) for r in got] == [Content, Ack]
    assert (got[0].method.reply_code, got[1].delivery_tag) == (312, 2)


def test_a_refused_publish_is_nacked_after_the_earlier_acks(ch: ClientChannel) -> None:
    ch.reply(C.Confirm.Select())
    ch.declare_queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    with ch.client.batch():
        ch.publish("", "q", b"fits")
        ch.publish("", "q", b"too many")
    assert [(type(r).__name__, getattr(r, "delivery_tag", None)) for r in ch.out.log[-2:]] == [
        ("Ack", 1),
        ("Sent", None),
    ]
    nack = ch.out.log[-1].method
    assert isinstance(nack, C.Basic.Nack) and (nack.delivery_tag, nack.multiple) == (2, False)


def test_confirm_then_tx(ch: ClientChannel) -> None:
    ch.reply(C.Confirm.Select())
    assert ch.refused(C.Tx.Select()) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
    )


def test_tx_then_confirm(ch: ClientChannel) -> None:
    ch.reply(C.Tx.Select())
    assert ch.refused(C.Confirm.Select()) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    )


# ------------------------------------------------------------- transactions
@pytest.mark.parametrize("method", [C.Tx.Commit(), C.Tx.Rollback()], ids=["commit", "rollback"])
def test_not_transactional(ch: ClientChannel, method: C.Tx.Commit) -> None:
    assert ch.refused(method) == (406, "PRECONDITION_FAILED - channel is not transactional")


def test_tx_publishes_wait_for_commit(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.reply(C.Tx.Select())
    ch.publish("", "q", b"a")
    assert ch.declare_queue("q").message_count == 0
    assert isinstance(ch.reply(C.Tx.Commit()), C.Tx.CommitOk)
    assert ch.declare_queue("q").message_count == 1
    ch.publish("", "q", b"b")
    assert isinstance(ch.reply(C.Tx.Rollback()), C.Tx.RollbackOk)
    assert ch.drain("q") == [b"a"]


def test_tx_acks_wait_for_commit_and_rollback_undoes_them(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.publish("", "q", b"a")
    ch.reply(C.Tx.Select())
    tag = ch.get("q").method.delivery_tag
    ch.ack(tag)
    ch.reply(C.Tx.Rollback())
    assert tag in ch.channel.unacked  # the ack was undone
    ch.ack(tag)
    ch.reply(C.Tx.Commit())
    assert ch.channel.unacked == {}
    assert ch.declare_queue("q").message_count == 0


def test_tx_ack_of_an_unknown_tag_fails_at_once(ch: ClientChannel) -> None:
    ch.reply(C.Tx.Select())
    assert ch.refused(C.Basic.Ack(delivery_tag=9)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 9",
    )


@pytest.mark.parametrize("first", [C.Basic.Ack, C.Basic.Reject, C.Basic.Nack])
def test_tx_settling_a_tag_twice_is_an_unknown_tag(ch: ClientChannel, first: type) -> None:
    ch.declare_queue("q")
    ch.publish("", "q", b"a")
    ch.reply(C.Tx.Select())
    tag = ch.get("q").method.delivery_tag
    ch.call(first(delivery_tag=tag))
    assert ch.refused(C.Basic.Ack(delivery_tag=tag)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 1",
    )


def test_tx_publish_is_routed_when_published(ch: ClientChannel) -> None:
    ch.declare_exchange("x")
    ch.declare_queue("before")
    ch.declare_queue("after")
    ch.bind("before", "x", "k")
    ch.reply(C.Tx.Select())
    ch.publish("x", "k", b"m")
    ch.reply(C.Queue.Unbind(queue="before", exchange="x", routing_key="k"))
    ch.bind("after", "x", "k")
    ch.reply(C.Tx.Commit())
    assert (ch.drain("before"), ch.drain("after")) == ([b"m"], [])


def test_tx_publish_reaches_the_queues_named_at_commit(ch: ClientChannel) -> None:
    ch.declare_queue("deleted")
    ch.reply(C.Tx.Select())
    ch.publish("", "declared", b"1", mandatory=True)
    ch.publish("", "deleted", b"2", mandatory=True)
    ch.declare_queue("declared")
    ch.reply(C.Queue.Delete(queue="deleted"))
    got = ch.call(C.Tx.Commit())
    assert [type(r) for r in got] == [Content, Sent]
    assert got[0].body == b"2" and got[0].method.reply_code == 312
    assert ch.drain("declared") == [b"1"]


def test_tx_commit_delivers_the_publishes_before_the_settles(ch: ClientChannel) -> None:
    ch.declare_queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.publish("", "q", b"first")
    ch.reply(C.Tx.Select())
    tag = ch.get("q").method.delivery_tag
    ch.call(C.Basic.Reject(delivery_tag=tag, requeue=True))
    ch.publish("", "q", b"second")
    assert isinstance(ch.reply(C.Tx.Commit()), C.Tx.CommitOk)
    assert ch.drain("q") == [b"first", b"second"]


def test_tx_commit_a_queue_refuses_is_a_partial_completion(ch: ClientChannel) -> None:
    ch.declare_queue("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.reply(C.Tx.Select())
    ch.publish("", "full", b"fits")
    ch.publish("", "full", b"refused")
    assert ch.refused(C.Tx.Commit()) == (406, "PRECONDITION_FAILED - partial tx completion")


def test_tx_mandatory_return_comes_at_commit(ch: ClientChannel) -> None:
    ch.reply(C.Tx.Select())
    assert ch.publish("", "nowhere", b"x", mandatory=True) == []
    got = ch.call(C.Tx.Commit())
    assert [type(r) for r in got] == [Content, Sent]
    assert got[0].method.reply_code == 312 and isinstance(got[1].method, C.Tx.CommitOk)


def test_consumers_on_another_connection_see_committed_messages(domain: BrokerCore) -> None:
    consumer = Client(domain).channel()
    consumer.declare_queue("q")
    consumer.consume("q", "c", no_ack=True)
    publisher = Client(domain).channel()
    publisher.reply(C.Tx.Select())
    publisher.publish("", "q", b"1")
    publisher.publish("", "q", b"2")
    assert consumer.deliveries() == []
    publisher.reply(C.Tx.Commit())
    assert [d.body for d in consumer.deliveries()] == [b"1", b"2"]
