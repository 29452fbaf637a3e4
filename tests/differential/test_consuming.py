"""Consumers, prefetch, acknowledgements, confirms and transactions, the same on both
brokers."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.differential.helpers import channel_error, connect, settle
from tests.support.brokers import BrokerUnderTest


def collect(
    conn: pika.BlockingConnection,
    ch: BlockingChannel,
    queue: str,
    auto_ack: bool,
    seconds: float = 0.3,
) -> list[tuple[int, bool, bytes]]:
    got: list[tuple[int, bool, bytes]] = []
    tag = ch.basic_consume(
        queue, lambda c, m, p, b: got.append((m.delivery_tag, m.redelivered, b)), auto_ack=auto_ack
    )
    settle(conn, seconds)
    ch.basic_cancel(tag)
    return got


def wait_for(conn: pika.BlockingConnection, done: Any, timeout: float = 3.0) -> None:
    """Process events until ``done()`` holds or the timeout passes."""
    import time

    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        settle(conn, 0.05)


def fill(ch: BlockingChannel, queue: str, n: int) -> None:
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode())


def filled(conn: pika.BlockingConnection, queue: str, n: int) -> BlockingChannel:
    """A channel on ``conn``, on which exclusive ``queue`` is declared and filled with
    ``n`` messages (m0, m1, ...)."""
    ch = conn.channel()
    ch.queue_declare(queue, exclusive=True)
    fill(ch, queue, n)
    return ch


def test_declare_ok_counts_and_purge(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()  # RabbitMQ counts only what its queue has taken in
        ch.queue_declare(name, exclusive=True)
        fill(ch, name, 3)
        ok = ch.queue_declare(name, exclusive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 3, 0)
        ch.basic_consume(name, lambda *a: None, consumer_tag="c1")
        ch.basic_qos(prefetch_count=1)
        ok = ch.queue_declare(name, passive=True).method
        assert ok.consumer_count == 1
        assert ch.queue_purge(name).method.message_count == 0  # all went to the consumer
        other = conn.channel()
        other.confirm_delivery()
        other.queue_declare(f"{name}-2", exclusive=True)
        fill(other, f"{name}-2", 4)
        assert other.queue_purge(f"{name}-2").method.message_count == 4
        assert other.queue_delete(f"{name}-2").method.message_count == 0


def test_prefetch_limits_unacked(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 10)
        ch.basic_qos(prefetch_count=3)
        got: list[int] = []
        ch.basic_consume(name, lambda c, m, p, b: got.append(m.delivery_tag))
        settle(conn, 0.3)
        assert got == [1, 2, 3]
        ch.basic_ack(2)
        settle(conn, 0.3)
        assert got == [1, 2, 3, 4]
        ch.basic_ack(4, multiple=True)
        settle(conn, 0.3)
        assert got == [1, 2, 3, 4, 5, 6, 7]


def test_global_prefetch_is_shared(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        for q in (f"{name}-a", f"{name}-b"):
            ch.queue_declare(q, exclusive=True)
            fill(ch, q, 5)
        ch.basic_qos(prefetch_count=4, global_qos=True)
        got: list[str] = []
        ch.basic_consume(f"{name}-a", lambda c, m, p, b: got.append("a"))
        ch.basic_consume(f"{name}-b", lambda c, m, p, b: got.append("b"))
        settle(conn, 0.3)
        assert len(got) == 4


def test_nack_requeue_sets_redelivered_and_keeps_order(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 3)
        m1, _, b1 = ch.basic_get(name)
        m2, _, _b2 = ch.basic_get(name)
        assert (m1.redelivered, m1.message_count, b1) == (False, 2, b"m0")
        assert (m2.delivery_tag, m2.message_count) == (2, 1)
        ch.basic_nack(m2.delivery_tag, multiple=True, requeue=True)
        got = [ch.basic_get(name, auto_ack=True) for _ in range(3)]
        assert [(m.redelivered, b) for m, _, b in got] == [
            (True, b"m0"),
            (True, b"m1"),
            (False, b"m2"),
        ]
        method, _, _ = ch.basic_get(name)
        assert method is None


def test_reject_without_requeue_drops(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 2)
        m, _, _ = ch.basic_get(name)
        ch.basic_reject(m.delivery_tag, requeue=False)
        m, _, body = ch.basic_get(name, auto_ack=True)
        assert body == b"m1"
        assert ch.basic_get(name)[0] is None


def test_recover_requeues_unacked(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 2)
        got = collect(conn, ch, name, auto_ack=False)
        assert [(r, b) for _, r, b in got] == [(False, b"m0"), (False, b"m1")]
        ch.basic_recover(requeue=True)
        again = collect(conn, ch, name, auto_ack=True)
        assert [(r, b) for _, r, b in again] == [(True, b"m0"), (True, b"m1")]


def test_channel_close_requeues_unacked(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 2)
        ch2 = conn.channel()
        collect(conn, ch2, name, auto_ack=False)
        ch2.close()
        # RabbitMQ requeues asynchronously after the close: give it a moment
        counts = []
        wait_for(
            conn,
            lambda: (
                counts.append(ch.queue_declare(name, passive=True).method.message_count)
                or counts[-1] == 2
            ),
        )
        assert counts[-1] == 2
        m, _, _ = ch.basic_get(name, auto_ack=True)
        assert m.redelivered


def test_round_robin_between_consumers(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        got: list[tuple[str, bytes]] = []
        ch.basic_consume(
            name,
            lambda c, m, p, b: got.append((m.consumer_tag, b)),
            auto_ack=True,
            consumer_tag="one",
        )
        ch.basic_consume(
            name,
            lambda c, m, p, b: got.append((m.consumer_tag, b)),
            auto_ack=True,
            consumer_tag="two",
        )
        fill(ch, name, 4)
        wait_for(conn, lambda: len(got) >= 4)
        assert sorted(tag for tag, _ in got) == ["one", "one", "two", "two"]
        assert [b for _, b in got] == [b"m0", b"m1", b"m2", b"m3"]


def test_consumer_priority(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        got: list[str] = []
        ch.basic_consume(
            name, lambda c, m, p, b: got.append("low"), auto_ack=True, arguments={"x-priority": 1}
        )
        ch.basic_consume(
            name, lambda c, m, p, b: got.append("high"), auto_ack=True, arguments={"x-priority": 10}
        )
        fill(ch, name, 3)
        wait_for(conn, lambda: len(got) >= 3)
        settle(conn, 0.1)
        assert got == ["high", "high", "high"]


def test_server_generated_consumer_tag(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        ok: list[Any] = []
        ch._impl._rpc(
            pika.spec.Basic.Consume(queue=name, consumer_tag=""),
            lambda frame: ok.append(frame.method),
            [pika.spec.Basic.ConsumeOk],
        )
        wait_for(conn, lambda: bool(ok))
        tag = ok[0].consumer_tag
        assert tag.startswith("amq.ctag-") and len(tag) == len("amq.ctag-") + 22


def test_consumer_cancel_notification(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        cancelled: list[str] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        ch.basic_consume(name, lambda *a: None, consumer_tag="watcher")
        other = conn.channel()
        other.queue_delete(name)
        settle(conn, 0.3)
        assert cancelled == ["watcher"]


def test_publisher_confirms(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, exclusive=True)
        for i in range(20):
            ch.basic_publish("", name, f"{i}".encode())  # raises unless acked
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("", f"{name}-nowhere", b"x", mandatory=True)
        assert ch.queue_declare(name, passive=True).method.message_count == 20


def test_confirm_nack_on_reject_publish_overflow(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(
            name, exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
        ch.basic_publish("", name, b"fits")
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", name, b"too many")


def test_tx_commit_and_rollback(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 1)
        ch.tx_select()
        ch.basic_publish("", name, b"a")
        assert ch.queue_declare(name, passive=True).method.message_count == 1
        ch.tx_commit()
        assert ch.queue_declare(name, passive=True).method.message_count == 2
        ch.basic_publish("", name, b"b")
        ch.tx_rollback()
        m, _, _ = ch.basic_get(name)
        ch.basic_ack(m.delivery_tag)
        ch.tx_rollback()  # the ack is undone: the message stays unacked
        ch.tx_commit()
        assert ch.queue_declare(name, passive=True).method.message_count == 1
        m2, _, _ = ch.basic_get(name)
        ch.basic_ack(m2.delivery_tag)
        ch.tx_commit()
        assert ch.queue_declare(name, passive=True).method.message_count == 0


@pytest.mark.parametrize("first", ["ack", "reject", "nack"])
def test_tx_settling_a_tag_twice_is_an_unknown_tag(broker: BrokerUnderTest, first: str) -> None:
    """A transaction's ack, reject or nack takes the tag off the channel's unacked list
    at once (rabbit_channel:collect_acks), though the queue hears of it at the commit."""

    def action(ch: BlockingChannel) -> None:
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"a")
        ch.tx_select()
        m, _, _ = ch.basic_get(q)
        getattr(ch, f"basic_{first}")(m.delivery_tag)
        ch.basic_ack(m.delivery_tag)

    assert channel_error(broker, action) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


@pytest.mark.parametrize(
    ("settles", "unknown"),
    [
        ([(1, False), (1, True)], 1),  # a multiple ack reaching up to a settled tag
        ([(0, True), (1, False)], 1),  # ack-all in a transaction settled tag 1 too
        ([(2, False), (2, True)], 2),
    ],
    ids=["single-then-multiple", "all-then-single", "tag-2-then-multiple"],
)
def test_tx_multiple_acks_meet_settled_tags(
    broker: BrokerUnderTest, settles: list[tuple[int, bool]], unknown: int
) -> None:
    def action(ch: BlockingChannel) -> None:
        q = ch.queue_declare("", exclusive=True).method.queue
        fill(ch, q, 2)
        ch.tx_select()
        ch.basic_get(q)
        ch.basic_get(q)
        for tag, multiple in settles:
            ch.basic_ack(tag, multiple=multiple)

    assert channel_error(broker, action) == (
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {unknown}",
    )


def test_tx_rollback_returns_settled_tags_in_order(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 3)
        ch.tx_select()
        for _ in range(3):
            ch.basic_get(name)
        ch.basic_reject(3)
        ch.basic_nack(1, requeue=False)
        ch.tx_rollback()
        ch.basic_ack(2, multiple=True)  # 1 and 2 are back, in order
        ch.basic_ack(3)
        ch.tx_commit()
        ok = ch.queue_declare(name, passive=True).method
        assert ok.message_count == 0
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.basic_ack(1)
            ch.queue_declare(name, passive=True)
        assert (exc.value.reply_code, exc.value.reply_text) == (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 1",
        )


@pytest.mark.parametrize("global_qos", [False, True], ids=["consumer", "channel"])
def test_tx_acks_return_prefetch_credit_at_commit(
    broker: BrokerUnderTest, name: str, global_qos: bool
) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 3)
        ch.basic_qos(prefetch_count=1, global_qos=global_qos)
        ch.tx_select()
        got: list[tuple[int, bytes]] = []
        ch.basic_consume(name, lambda c, m, p, b: got.append((m.delivery_tag, b)))
        wait_for(conn, lambda: got)
        ch.basic_ack(1)
        settle(conn, 0.3)
        assert got == [(1, b"m0")]
        ch.tx_commit()
        wait_for(conn, lambda: len(got) == 2)
        settle(conn, 0.1)
        assert got == [(1, b"m0"), (2, b"m1")]


def test_tx_settles_of_a_closed_channel_are_requeued(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = filled(conn, name, 2)
        tx = conn.channel()
        tx.tx_select()
        tx.basic_get(name)
        tx.basic_get(name)
        tx.basic_ack(2)
        tx.close()
        settle(conn, 0.2)
        bodies = [ch.basic_get(name, auto_ack=True) for _ in range(2)]
        assert [(m.redelivered, b) for m, _, b in bodies] == [(True, b"m0"), (True, b"m1")]


def test_tx_publish_is_routed_when_published(broker: BrokerUnderTest, name: str) -> None:
    """RabbitMQ routes a transactional publish when it is published and delivers it at
    the commit: bindings changed in between do not change where it goes, nor does the
    exchange's deletion."""
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(name, "direct")
        before, after = f"{name}-before", f"{name}-after"
        for q in (before, after):
            ch.queue_declare(q, exclusive=True)
        ch.queue_bind(before, name, "k")
        ch.tx_select()
        ch.basic_publish(name, "k", b"first")
        ch.queue_unbind(before, name, "k")
        ch.queue_bind(after, name, "k")
        ch.tx_commit()
        ch.basic_publish(name, "k", b"second")
        ch.exchange_delete(name)
        ch.tx_commit()
        counts = [ch.queue_declare(q, passive=True).method.message_count for q in (before, after)]
        assert counts == [1, 1]
        assert ch.basic_get(before, auto_ack=True)[2] == b"first"
        assert ch.basic_get(after, auto_ack=True)[2] == b"second"


def test_tx_publish_reaches_the_queues_named_at_commit(broker: BrokerUnderTest, name: str) -> None:
    """What a transactional publish was routed to is a list of queue names, looked up at
    the commit: the default exchange names a queue for the routing key whether or not it
    exists, so a queue declared before the commit takes the message, a queue deleted
    before it does not (mandatory: returned at the commit), and a queue deleted and
    declared again takes it."""
    with connect(broker) as conn:
        ch = conn.channel()
        returned: list[str] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b.decode()))
        declared, deleted, again = f"{name}-declared", f"{name}-deleted", f"{name}-again"
        ch.queue_declare(deleted)
        ch.queue_declare(again, exclusive=True)
        ch.tx_select()
        for q in (declared, deleted, again):
            ch.basic_publish("", q, q.encode(), mandatory=True)
        ch.queue_declare(declared, exclusive=True)
        ch.queue_delete(deleted)
        ch.queue_delete(again)
        ch.queue_declare(again, exclusive=True)
        settle(conn, 0.1)
        assert returned == []
        ch.tx_commit()
        wait_for(conn, lambda: returned)
        assert returned == [deleted]
        counts = [ch.queue_declare(q, passive=True).method.message_count for q in (declared, again)]
        assert counts == [1, 1]


def test_tx_commit_delivers_the_publishes_before_the_settles(
    broker: BrokerUnderTest, name: str
) -> None:
    """At the commit RabbitMQ delivers the transaction's publishes, then settles its acks
    and rejects: a publish into a full reject-publish queue goes in before a reject of
    the same transaction requeues the message that filled it."""
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(
            name, exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
        ch.basic_publish("", name, b"first")
        ch.tx_select()
        m, _, _ = ch.basic_get(name)
        ch.basic_reject(m.delivery_tag, requeue=True)
        ch.basic_publish("", name, b"second")
        ch.tx_commit()
        assert ch.queue_declare(name, passive=True).method.message_count == 2


def test_tx_commit_a_queue_refuses_is_a_partial_completion(
    broker: BrokerUnderTest, name: str
) -> None:
    """A queue that refuses a transaction's publish (x-overflow reject-publish) fails the
    commit: the rest of the transaction was applied, and the channel closes."""
    with connect(broker) as conn:
        ch = conn.channel()
        full, other = f"{name}-full", f"{name}-other"
        ch.queue_declare(
            full, exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        )
        ch.queue_declare(other, exclusive=True)
        ch.basic_publish("", other, b"acked")
        tx = conn.channel()
        tx.tx_select()
        m, _, _ = tx.basic_get(other)
        tx.basic_ack(m.delivery_tag)
        for body in (b"fits", b"refused", b"after"):
            tx.basic_publish("", full, body)
        tx.basic_publish("", other, b"published")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            tx.tx_commit()
        assert (exc.value.reply_code, exc.value.reply_text) == (
            406,
            "PRECONDITION_FAILED - partial tx completion",
        )
        counts = [ch.queue_declare(q, passive=True).method.message_count for q in (full, other)]
        assert counts == [1, 1]
        assert ch.basic_get(other, auto_ack=True)[2] == b"published"


def test_get_empty_and_get_ok_fields(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(name, "direct", auto_delete=True)
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, name, routing_key="rk")
        assert ch.basic_get(name)[0] is None
        props = pika.BasicProperties(
            content_type="text/plain",
            delivery_mode=2,
            headers={"a": 1, "b": "two"},
            message_id="id-1",
            correlation_id="c",
            reply_to="r",
            expiration="60000",
            timestamp=1700000000,
            type="t",
            app_id="app",
            priority=3,
        )
        ch.basic_publish(name, "rk", b"body", props)
        m, p, body = ch.basic_get(name, auto_ack=True)
        assert (m.exchange, m.routing_key, m.message_count, m.redelivered) == (name, "rk", 0, False)
        assert body == b"body"
        for field in (
            "content_type",
            "delivery_mode",
            "headers",
            "message_id",
            "correlation_id",
            "reply_to",
            "expiration",
            "timestamp",
            "type",
            "app_id",
            "priority",
        ):
            assert getattr(p, field) == getattr(props, field), field


def test_large_message_spans_frames(broker: BrokerUnderTest, name: str) -> None:
    body = bytes(range(256)) * 2048  # 512 KiB, several frames at frame_max 131072
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, body)
        _m, _, got = ch.basic_get(name, auto_ack=True)
        assert got == body


def test_message_ttl_and_dead_lettering(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-dlx", "fanout", auto_delete=True)
        dead = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(dead, f"{name}-dlx")
        ch.queue_declare(
            name,
            exclusive=True,
            arguments={"x-message-ttl": 50, "x-dead-letter-exchange": f"{name}-dlx"},
        )
        ch.basic_publish("", name, b"expiring")
        settle(conn, 0.3)
        assert ch.basic_get(name)[0] is None
        _m, p, body = ch.basic_get(dead, auto_ack=True)
        assert body == b"expiring"
        death = p.headers["x-death"][0]
        assert (death["reason"], death["queue"], death["count"]) == (
            b"expired" if isinstance(death["reason"], bytes) else "expired",
            name,
            1,
        )


def test_max_length_drops_head(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True, arguments={"x-max-length": 2})
        fill(ch, name, 5)
        assert [ch.basic_get(name, auto_ack=True)[2] for _ in range(2)] == [b"m3", b"m4"]


def test_per_message_expiration(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, b"short", pika.BasicProperties(expiration="50"))
        ch.basic_publish("", name, b"long", pika.BasicProperties(expiration="60000"))
        settle(conn, 0.3)
        assert ch.queue_declare(name, passive=True).method.message_count == 1
        assert ch.basic_get(name, auto_ack=True)[2] == b"long"


def test_queue_expires_when_unused(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, arguments={"x-expires": 200})
        settle(conn, 0.8)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(name, passive=True)
        assert info.value.reply_code == 404


def test_invalid_expiration_property(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: BlockingChannel) -> None:
        ch.basic_publish("", name, b"x", pika.BasicProperties(expiration="soon"))

    from tests.differential.helpers import channel_error

    code, text = channel_error(broker, action)
    assert code == 406 and text.startswith("PRECONDITION_FAILED - invalid expiration 'soon'")


def test_user_id_must_match(broker: BrokerUnderTest, name: str) -> None:
    from tests.differential.helpers import channel_error

    assert channel_error(
        broker, lambda ch: ch.basic_publish("", name, b"x", pika.BasicProperties(user_id="mallory"))
    ) == (
        406,
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user "
        "was 'guest'",
    )
