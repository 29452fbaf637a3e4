"""basic.get, consumers, prefetch and settling (ack, nack, reject, recover) through a
Session: delivery tags, the redelivered flag, and RabbitMQ 3.10.8's errors."""

from __future__ import annotations

from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from leveret.broker.ports import WriteStalls
from tests.broker.fakes import Client, ClientChannel, Deliver, delivered


def fill(ch: ClientChannel, queue: str, n: int) -> None:
    for i in range(n):
        ch.publish("", queue, f"m{i}".encode())


def tags(records: list[Deliver]) -> list[int]:
    return [d.delivery_tag for d in records]


# ---------------------------------------------------------------- basic.get
def test_get_ok_fields_and_get_empty(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "direct")
    ch.declare_queue("q")
    ch.bind("q", "x", "rk")
    assert ch.get("q") is None
    props = C.Basic.Properties(content_type="text/plain", headers={"a": 1}, message_id="id-1")
    ch.publish("x", "rk", b"one", properties=props)
    ch.publish("x", "rk", b"two")
    got = ch.get("q")
    m = got.method
    assert (m.delivery_tag, m.redelivered, m.exchange, m.routing_key, m.message_count) == (
        1,
        False,
        "x",
        "rk",
        1,
    )
    assert got.body == b"one"
    assert (got.props.content_type, got.props.headers, got.props.message_id) == (
        "text/plain",
        {"a": 1},
        "id-1",
    )


def test_ack_removes_and_a_second_ack_is_an_unknown_tag(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 1)
    tag = ch.get("q").method.delivery_tag
    assert ch.ack(tag) == []
    assert ch.declare_queue("q").message_count == 0
    assert ch.refused(C.Basic.Ack(delivery_tag=tag)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 1",
    )


def test_unknown_delivery_tags(client: Client) -> None:
    assert client.channel().refused(C.Basic.Ack(delivery_tag=42)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 42",
    )
    assert client.channel().refused(C.Basic.Reject(delivery_tag=7)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 7",
    )
    assert client.channel().refused(C.Basic.Nack(delivery_tag=3, multiple=True)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 3",
    )


def test_nack_requeue_sets_redelivered_and_keeps_order(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 3)
    first, second = ch.get("q"), ch.get("q")
    assert (first.method.message_count, second.method.delivery_tag) == (2, 2)
    ch.nack(second.method.delivery_tag, multiple=True, requeue=True)
    again = [ch.get("q", no_ack=True) for _ in range(3)]
    assert [(m.method.redelivered, m.body) for m in again] == [
        (True, b"m0"),
        (True, b"m1"),
        (False, b"m2"),
    ]
    assert ch.get("q") is None


def test_reject_with_requeue_puts_it_back_first(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 2)
    tag = ch.get("q").method.delivery_tag
    ch.reject(tag, requeue=True)
    got = ch.get("q", no_ack=True)
    assert (got.body, got.method.redelivered, got.method.delivery_tag) == (b"m0", True, 2)


def test_reject_without_requeue_drops(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 2)
    ch.reject(ch.get("q").method.delivery_tag, requeue=False)
    assert ch.drain("q") == [b"m1"]


def test_ack_multiple_zero_settles_everything(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 3)
    for _ in range(3):
        ch.get("q")
    ch.ack(0, multiple=True)
    assert ch.channel.unacked == {}
    assert ch.declare_queue("q").message_count == 0


def test_recover_requeues_as_redelivered(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 2)
    ch.get("q")
    ch.get("q")
    assert isinstance(ch.reply(C.Basic.Recover(requeue=True)), C.Basic.RecoverOk)
    again = [ch.get("q", no_ack=True) for _ in range(2)]
    assert [(m.method.redelivered, m.body) for m in again] == [(True, b"m0"), (True, b"m1")]


def test_channel_close_requeues_unacked(client: Client) -> None:
    ch, other = client.channel(), client.channel()
    ch.declare_queue("q")
    fill(ch, "q", 2)
    other.consume("q")
    assert len(other.deliveries()) == 2
    assert ch.declare_queue("q").message_count == 0
    other.close()
    assert ch.declare_queue("q").message_count == 2
    assert ch.get("q").method.redelivered


def test_connection_close_requeues_unacked(domain: BrokerCore) -> None:
    consumer = Client(domain)
    cch = consumer.channel()
    cch.declare_queue("q")
    fill(cch, "q", 3)
    cch.get("q")
    consumer.close()
    ch = Client(domain).channel()
    assert [m.method.redelivered for m in (ch.get("q"), ch.get("q"), ch.get("q"))] == [
        True,
        False,
        False,
    ]


# ---------------------------------------------------------------- consumers
def test_consume_ok_comes_before_the_first_delivery(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 2)
    got = ch.consume("q", "c")
    assert got[0].method.consumer_tag == "c"
    assert [(d.consumer_tag, d.delivery_tag, d.routing_key, d.body) for d in got[1:]] == [
        ("c", 1, "q", b"m0"),
        ("c", 2, "q", b"m1"),
    ]


def test_server_generated_consumer_tag(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    tag = ch.consume("q")[0].method.consumer_tag
    assert tag.startswith("amq.ctag-") and len(tag) == len("amq.ctag-") + 22


def test_gets_and_deliveries_share_the_channel_tags(ch: ClientChannel) -> None:
    ch.declare_queue("a")
    ch.declare_queue("b")
    fill(ch, "a", 2)
    assert ch.get("a").method.delivery_tag == 1
    ch.consume("b", "c")
    assert tags(delivered(ch.publish("", "b", b"x"))) == [2]
    assert ch.get("a").method.delivery_tag == 3


def test_prefetch_limits_unacked(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 10)
    ch.qos(3)
    assert tags(delivered(ch.consume("q"))) == [1, 2, 3]
    assert tags(delivered(ch.ack(2))) == [4]
    assert tags(delivered(ch.ack(4, multiple=True))) == [5, 6, 7]


def test_qos_applies_to_consumers_made_after_it(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 5)
    ch.consume("q", "unlimited")
    assert len(ch.deliveries()) == 5
    ch.qos(1)
    fill(ch, "q", 3)
    assert len(ch.deliveries()) == 8


def test_global_prefetch_is_shared_by_the_channel(ch: ClientChannel) -> None:
    for q in ("a", "b"):
        ch.declare_queue(q)
        fill(ch, q, 5)
    ch.qos(4, global_=True)
    ch.consume("a")
    ch.consume("b")
    assert len(ch.deliveries()) == 4
    assert len(delivered(ch.ack(0, multiple=True))) == 4


def test_prefetch_size_is_not_implemented(ch: ClientChannel) -> None:
    assert ch.refused(C.Basic.Qos(prefetch_size=10)) == (
        540,
        "NOT_IMPLEMENTED - prefetch_size!=0 (10)",
    )
    assert ch.client.closed


def test_no_ack_deliveries_leave_nothing_to_ack(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    fill(ch, "q", 2)
    got = ch.consume("q", no_ack=True)
    assert tags(delivered(got)) == [1, 2]
    assert ch.channel.unacked == {}
    assert ch.refused(C.Basic.Ack(delivery_tag=1))[0] == 406


def test_round_robin_between_consumers(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", "one", no_ack=True)
    ch.consume("q", "two", no_ack=True)
    fill(ch, "q", 4)
    assert [(d.consumer_tag, d.body) for d in ch.deliveries()] == [
        ("one", b"m0"),
        ("two", b"m1"),
        ("one", b"m2"),
        ("two", b"m3"),
    ]


def test_consumer_priority(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", "low", no_ack=True, arguments={"x-priority": 1})
    ch.consume("q", "high", no_ack=True, arguments={"x-priority": 10})
    fill(ch, "q", 3)
    assert [d.consumer_tag for d in ch.deliveries()] == ["high"] * 3


def test_cancel_stops_deliveries(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", "c", no_ack=True)
    assert ch.reply(C.Basic.Cancel(consumer_tag="c")).consumer_tag == "c"
    fill(ch, "q", 2)
    assert ch.deliveries() == []
    assert ch.declare_queue("q").message_count == 2


def test_reused_consumer_tag_closes_the_connection(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", "ctag")
    assert ch.refused(C.Basic.Consume(queue="q", consumer_tag="ctag")) == (
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'ctag'",
    )
    assert ch.client.closed


def test_exclusive_consumer_conflict(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", exclusive=True)
    assert ch.refused(C.Basic.Consume(queue="q")) == (
        403,
        "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use",
    )


def test_consumers_hear_of_their_queue_deleted(domain: BrokerCore) -> None:
    notified = Client(domain).channel()
    deaf = Client(domain, capabilities={}).channel()
    notified.declare_queue("q")
    notified.consume("q", "watcher")
    deaf.consume("q", "deaf")
    Client(domain).channel().reply(C.Queue.Delete(queue="q"))
    cancel = notified.out.methods()[-1]
    assert isinstance(cancel, C.Basic.Cancel) and cancel.consumer_tag == "watcher"
    assert not any(isinstance(m, C.Basic.Cancel) for m in deaf.out.methods())


def test_delete_ok_goes_out_before_the_deleters_own_cancel(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q", "mine")
    got = ch.call(C.Queue.Delete(queue="q"))
    assert [type(r.method) for r in got] == [C.Queue.DeleteOk, C.Basic.Cancel]


# ------------------------------------------------------- queue arguments
def test_max_length_drops_the_head(ch: ClientChannel) -> None:
    ch.declare_queue("q", arguments={"x-max-length": 2})
    fill(ch, "q", 3)
    assert ch.drain("q") == [b"m1", b"m2"]


def test_rejected_message_is_dead_lettered(ch: ClientChannel) -> None:
    ch.declare_queue("dead")
    ch.declare_queue(
        "q", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    )
    fill(ch, "q", 1)
    ch.reject(ch.get("q").method.delivery_tag, requeue=False)
    got = ch.get("dead", no_ack=True)
    death = got.props.headers["x-death"][0]
    assert (got.body, death["queue"], death["reason"], death["count"]) == (
        b"m0",
        "q",
        "rejected",
        1,
    )
    assert got.props.headers["x-first-death-reason"] == "rejected"


# ------------------------------------------------------------- credit flow
def test_a_consumer_that_cannot_write_holds_its_publisher_back_until_it_drains_or_goes(
    domain: BrokerCore,
) -> None:
    """While a consumer's connection cannot write, a publish that leaves messages waiting
    for it holds the publisher back (RabbitMQ's credit flow); the connection counts itself
    among the process's write stalls until it drains again or closes."""
    base = WriteStalls.count
    consumer, publisher = Client(domain), Client(domain)
    cch, pch = consumer.channel(), publisher.channel()
    cch.declare_queue("q")
    cch.consume("q", no_ack=True)
    consumer.session.set_writable(False)
    assert WriteStalls.count == base + 1
    pch.publish("", "q", b"waits")
    assert publisher.session.held_by == {consumer.session}
    consumer.session.set_writable(True)
    assert WriteStalls.count == base
    assert publisher.session.held_by == set()
    assert [d.body for d in delivered(consumer.out.log)] == [b"waits"]
    consumer.session.set_writable(False)
    pch.publish("", "q", b"again")
    assert publisher.session.held_by == {consumer.session}
    consumer.close()
    assert WriteStalls.count == base
    assert publisher.session.held_by == set()
    pch.publish("", "q", b"nobody")  # a queue without consumers holds no one back
    assert publisher.session.held_by == set()


class _OtherPublisher:
    """A publisher of another protocol (an AMQP 1.0 or stream session) as credit flow
    sees it: held back by whatever it feeds, and told when nothing holds it any more."""

    def __init__(self) -> None:
        self.held_by: set[object] = set()
        self.reads_again = 0
        self.writable = True

    def awaits_settlements(self) -> bool:
        return False

    def released(self) -> None:
        self.reads_again += 1


def test_a_draining_consumer_lets_a_publisher_of_another_protocol_go_at_once(
    domain: BrokerCore,
) -> None:
    """An AMQP 1.0 publisher held by a 0-9-1 consumer's connection reads again as soon as
    that connection drains (or closes), not only when its patience runs out."""
    consumer = Client(domain)
    other = _OtherPublisher()
    consumer.session.set_writable(False)
    consumer.session.hold(other)  # type: ignore[arg-type]
    assert other.held_by == {consumer.session}
    consumer.session.set_writable(True)
    assert (other.held_by, other.reads_again) == (set(), 1)
    consumer.session.set_writable(False)
    consumer.session.hold(other)  # type: ignore[arg-type]
    consumer.close()
    assert (other.held_by, other.reads_again) == (set(), 2)
