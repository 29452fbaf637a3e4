"""Quorum queues in RabbitMQ 4: a delivery limit of 20 unless told otherwise, what happens
at the limit, and how ``x-delivery-count`` is reported (release-notes/4.0.1.md, "Quorum
Queues Now Have a Default Redelivery Limit"; v4.2.9 rabbit_quorum_queue.erl and
rabbit_fifo.erl, cited per test)."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.embedded.rabbitmq42.support import api, broker, channel
from tests.support.drain import drain

QUORUM = {"x-queue-type": "quorum"}


def _requeue_until_gone(ch: Any, queue: str, most: int = 30) -> list[Any]:
    """basic.get and nack-requeue the one message until it is gone (or ``most`` times):
    the x-delivery-count header of each delivery (None when absent)."""
    seen = []
    for _ in range(most):
        method, props, _ = ch.basic_get(queue)
        if method is None:
            break
        seen.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_nack(method.delivery_tag, requeue=True)
    return seen


def test_a_message_returned_20_times_is_dropped_from_4_0() -> None:
    """?DEFAULT_DELIVERY_LIMIT 20 (v4.2.9 rabbit_quorum_queue.erl:131, 1783-1800): a
    message acquired more than 20 times is discarded at its 21st return
    (rabbit_fifo.erl:1944-1960 return_one: acquired_count > delivery_limit), dropped
    without a dead-letter exchange. 3.10.8 has no default limit."""
    with broker("3.10.8") as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.basic_publish("", "qq", b"poison")
        assert len(_requeue_until_gone(ch, "qq")) == 30  # never dropped
    with broker("4.2") as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.basic_publish("", "qq", b"poison")
        counts = _requeue_until_gone(ch, "qq")
        assert counts == [None, *range(1, 21)]  # 21 deliveries, then it is gone
        assert ch.queue_declare("qq", passive=True).method.message_count == 0


def test_at_the_limit_a_message_is_dead_lettered_when_the_queue_has_a_dlx() -> None:
    """rabbit_fifo_dlx:discard(..., delivery_limit, ...) (v4.2.9 rabbit_fifo.erl:1955):
    the reason is delivery_limit, and x-last-death-* come with x-first-death-* (3.13+)."""
    with broker("4.2") as b, channel(b) as ch:
        ch.queue_declare("dlq")
        ch.queue_declare(
            "qq",
            durable=True,
            arguments={**QUORUM, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
        )
        ch.basic_publish("", "qq", b"poison")
        assert len(_requeue_until_gone(ch, "qq")) == 21
        _, props, body = ch.basic_get("dlq", auto_ack=True)
        assert body == b"poison"
        headers = props.headers
        assert (
            headers["x-first-death-reason"] == headers["x-last-death-reason"] == ("delivery_limit")
        )
        (death,) = headers["x-death"]
        assert death["reason"] == "delivery_limit" and death["queue"] == "qq"
        assert death["count"] == 1


def test_x_delivery_count_is_left_out_until_a_message_is_returned_basic_get_too() -> None:
    """A consumer's first delivery has no x-delivery-count in both; basic.get added 0 in
    3.10.8 and adds nothing from 3.12 (release-notes/3.12.0.md; v4.2.9
    rabbit_fifo_client.erl:241-258 add_delivery_count_header: no acquired_count, no
    header, not redelivered)."""
    for mode, first in (("3.10.8", 0), ("4.2", None)):
        with broker(mode) as b, channel(b) as ch:
            ch.queue_declare("qq", durable=True, arguments=QUORUM)
            ch.basic_publish("", "qq", b"m")
            method, props, _ = ch.basic_get("qq")
            assert (props.headers or {}).get("x-delivery-count") == first, mode
            assert method.redelivered is False
            ch.basic_nack(method.delivery_tag, requeue=True)
            method, props, _ = ch.basic_get("qq")
            assert props.headers["x-delivery-count"] == 1
            assert method.redelivered is True


def _order_after_requeue(ch: Any, queue: str) -> list[bytes]:
    """Publish a and b, take a and return it; the order they come back in."""
    ch.basic_publish("", queue, b"a")
    ch.basic_publish("", queue, b"b")
    method, _, _ = ch.basic_get(queue)
    ch.basic_nack(method.delivery_tag, requeue=True)
    return drain(ch, queue)


def test_with_a_limit_returns_go_to_the_front_without_one_to_the_back() -> None:
    """rabbit_fifo's aux handler (v4.2.9 rabbit_fifo.erl:1036-1063): with no delivery limit
    a return is a requeue at the back; with one (20 by default from 4.0) it goes to the
    returns, served first. A negative limit means none (rabbit_fifo.erl:202-208)."""
    with broker("3.10.8") as b, channel(b) as ch:
        ch.queue_declare("unlimited", durable=True, arguments=QUORUM)
        assert _order_after_requeue(ch, "unlimited") == [b"b", b"a"]
        ch.queue_declare("limited", durable=True, arguments={**QUORUM, "x-delivery-limit": 5})
        assert _order_after_requeue(ch, "limited") == [b"a", b"b"]
    with broker("4.2") as b, channel(b) as ch:
        ch.queue_declare("default", durable=True, arguments=QUORUM)
        assert _order_after_requeue(ch, "default") == [b"a", b"b"]
        ch.queue_declare("off", durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
        assert _order_after_requeue(ch, "off") == [b"b", b"a"]
        ch.basic_publish("", "off", b"poison")
        assert len(_requeue_until_gone(ch, "off", most=25)) == 25  # never dropped


def test_a_negative_delivery_limit_turns_it_off_from_4_0() -> None:
    """3.10.8: x-delivery-limit -1 drops a message at its first return (1 > -1), and a
    policy's delivery-limit must be a non-negative integer. 4.x: -1 is no limit, in an
    argument or a policy (v4.2.9 rabbit_policies.erl: validate_policy0 delivery-limit takes
    any integer; rabbit_quorum_queue.erl:1777-1781: with a negative one the larger wins,
    the more conservative)."""
    with broker("3.10.8", management=True) as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments={**QUORUM, "x-delivery-limit": -1})
        ch.basic_publish("", "qq", b"m")
        assert len(_requeue_until_gone(ch, "qq")) == 1
        policy = {"pattern": "^p", "definition": {"delivery-limit": -1}}
        status, body = api(b, "PUT", "/api/policies/%2F/off", policy)
        assert status == 400
        assert body["reason"] == "Validation failed\n\n-1 is not a valid delivery limit\n"
    with broker("4.2", management=True) as b, channel(b) as ch:
        status, _ = api(
            b,
            "PUT",
            "/api/policies/%2F/off",
            {"pattern": "^p", "definition": {"delivery-limit": -1}, "apply-to": "queues"},
        )
        assert status == 201
        ch.queue_declare("p1", durable=True, arguments=QUORUM)
        ch.basic_publish("", "p1", b"m")
        assert len(_requeue_until_gone(ch, "p1", most=25)) == 25
        _, queue = api(b, "GET", "/api/queues/%2F/p1")
        assert queue["delivery_limit"] == "unlimited"
        # the policy's -1 against the argument's 3: the larger, the limit of 3
        ch.queue_declare("p3", durable=True, arguments={**QUORUM, "x-delivery-limit": 3})
        ch.basic_publish("", "p3", b"m")
        assert len(_requeue_until_gone(ch, "p3", most=10)) == 4
        _, queue = api(b, "GET", "/api/queues/%2F/p3")
        assert queue["delivery_limit"] == 3


def test_the_management_api_shows_the_limit_in_force_from_4_0() -> None:
    """A quorum queue's delivery_limit in the management API (v4.2.9
    rabbit_quorum_queue.erl:632-638: the limit, or unlimited), and its ready messages by
    kind (lines 604-612); 3.10.8 shows none of them."""
    with broker("3.10.8", management=True) as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        _, queue = api(b, "GET", "/api/queues/%2F/qq")
        assert "delivery_limit" not in queue
    with broker("4.2", management=True) as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.queue_declare("q7", durable=True, arguments={**QUORUM, "x-delivery-limit": 7})
        ch.queue_declare("classic")
        _, queues = api(b, "GET", "/api/queues/%2F")
        limits = {q["name"]: q.get("delivery_limit") for q in queues}
        assert limits == {"qq": 20, "q7": 7, "classic": None}
        # and, from 4.0, its ready messages by priority and returned
        ch.basic_publish("", "qq", b"n", pika.BasicProperties(priority=1))
        ch.basic_publish("", "qq", b"h", pika.BasicProperties(priority=9))
        ch.basic_publish("", "qq", b"r")
        method, _, _ = ch.basic_get("qq")
        ch.basic_nack(method.delivery_tag, requeue=True)
        _, queue = api(b, "GET", "/api/queues/%2F/qq")
        kinds = ("messages_ready_high", "messages_ready_normal", "messages_ready_returned")
        ready = {k: queue[k] for k in kinds}  # h went first, and came back
        assert ready == {
            "messages_ready_high": 0,
            "messages_ready_normal": 2,
            "messages_ready_returned": 1,
        }


@pytest.mark.parametrize("mode", ["3.10.8", "4.2"])
def test_global_qos_is_refused_on_a_quorum_queue(mode: str) -> None:
    """A consumer on a quorum queue of a channel with a global prefetch: 540 NOT_IMPLEMENTED,
    a connection error, in both (v4.2.9 rabbit_quorum_queue.erl:993-997; 3.10.8
    rabbit_channel.erl:1477-1480), global_qos being permitted by default in 4.2."""
    with broker(mode) as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            ch.basic_consume("qq", lambda *a: None)
        assert info.value.reply_code == 540
        assert info.value.reply_text == (
            "NOT_IMPLEMENTED - queue 'qq' in vhost '/' does not support global qos"
        )


def test_with_global_qos_denied_a_global_prefetch_is_a_consumers() -> None:
    """deprecated_features.permit.global_qos = false (a permitted_by_default feature,
    v4.2.9 rabbit_channel.erl:239-243): basic.qos global=true is taken as global=false
    (rabbit_channel.erl:1516-1554), so a quorum consumer is accepted and limited."""
    with broker("4.2", deprecated_features="global_qos=false") as b, channel(b) as ch:
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        for i in range(5):
            ch.basic_publish("", "qq", str(i).encode())
        ch.basic_qos(prefetch_count=2, global_qos=True)
        got: list[bytes] = []
        ch.basic_consume("qq", lambda _c, _m, _p, body: got.append(body))
        ch.connection.process_data_events(time_limit=0.5)
        assert got == [b"0", b"1"]  # two unacknowledged, as the prefetch says


def test_quorum_queues_serve_high_priority_messages_first_two_to_one_from_4_0() -> None:
    """Quorum queue priorities (release-notes/4.0.1.md; v4.2.9 rabbit_fifo.erl:2987-2999: a
    priority above 4 is high; rabbit_fifo_q.erl: high first, but every third dequeue the
    older of the two heads). 3.10.8's quorum queues ignore priorities."""
    for mode, order in (
        ("3.10.8", ["n1", "n2", "n3", "h1", "h2", "h3"]),
        ("4.2", ["h1", "h2", "n1", "h3", "n2", "n3"]),
    ):
        with broker(mode) as b, channel(b) as ch:
            ch.queue_declare("qq", durable=True, arguments=QUORUM)
            for name in ("n1", "n2", "n3"):
                ch.basic_publish("", "qq", name.encode(), pika.BasicProperties(priority=4))
            for name in ("h1", "h2", "h3"):
                ch.basic_publish("", "qq", name.encode(), pika.BasicProperties(priority=5))
            got = []
            while (delivery := ch.basic_get("qq", auto_ack=True))[0] is not None:
                got.append(delivery[2].decode())
            assert got == order, mode
