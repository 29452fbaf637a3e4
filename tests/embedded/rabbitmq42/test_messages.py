"""What an AMQP 0-9-1 consumer sees of a message in RabbitMQ 4: its properties rebuilt
from the message container (sorted headers, a canonical expiration), an x-death history
that is the broker's own, and direct reply-to addresses routed as queues."""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.embedded.rabbitmq42.support import MODES, api, broker, channel

# An x-death entry's fields as both releases order them, but for original-expiration: 3.10.8
# puts it last, 4.2 first.
DEATH = ["count", "reason", "queue", "time", "exchange", "routing-keys"]


def _roundtrip(ch: Any, queue: str, props: pika.BasicProperties) -> pika.BasicProperties:
    """The properties a consumer's first delivery of a message published so has."""
    ch.basic_publish("", queue, b"m", props)
    for method, got, _ in ch.consume(queue, auto_ack=True, inactivity_timeout=5):
        assert method is not None, "nothing delivered"
        ch.cancel()
        return got
    raise AssertionError("nothing delivered")


@pytest.mark.parametrize("mode", MODES)
def test_headers_are_delivered_sorted_from_3_13(mode: str) -> None:
    """mc_amqpl:protocol_state at v4.2.9 (mc_amqpl.erl:483-518), run for every delivery
    (rabbit_channel.erl:2818-2822 outgoing_content): the headers are lists:usort'ed by
    key. 3.10.8 delivers them in the publisher's order."""
    with broker(mode) as b, channel(b) as ch:
        ch.queue_declare("q")
        for queue_type in ("classic", "quorum"):
            name = f"q-{queue_type}"
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
            got = _roundtrip(ch, name, pika.BasicProperties(headers={"zz": 1, "b": "x", "a": 2}))
            expected = ["a", "b", "zz"] if mode == "4.2" else ["zz", "b", "a"]
            assert list(got.headers) == expected, queue_type


@pytest.mark.parametrize("mode", MODES)
def test_the_expiration_is_delivered_as_the_integer_it_was_read_as(mode: str) -> None:
    """mc_amqpl:protocol_state (v4.2.9 mc_amqpl.erl:526-535): the expiration of a
    delivery is integer_to_binary of the TTL parsed at publish."""
    with broker(mode) as b, channel(b) as ch:
        ch.queue_declare("q")
        got = _roundtrip(ch, "q", pika.BasicProperties(expiration="0060000"))
        assert got.expiration == ("60000" if mode == "4.2" else "0060000")


def _dead_letter_setup(ch: Any) -> None:
    ch.queue_declare("dlq")
    ch.queue_declare(
        "work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )


def _reject(ch: Any, queue: str) -> None:
    for _ in range(200):
        method, _, _ = ch.basic_get(queue)
        if method is not None:
            ch.basic_reject(method.delivery_tag, requeue=False)
            return
        time.sleep(0.01)
    raise AssertionError("nothing to reject")


def _take(ch: Any, queue: str) -> tuple[pika.BasicProperties, bytes]:
    for _ in range(200):
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return props, body
        time.sleep(0.01)
    raise AssertionError("nothing delivered")


def test_a_republished_x_death_is_not_read_from_4_0() -> None:
    """release-notes/4.0.1.md, "AMQP 0.9.1 x-death header": RabbitMQ 4 no longer reads the
    x-death header of a message a client (re-)publishes; the history it writes at the next
    dead-lettering is its own (v4.2.9 mc.erl:387-461 record_death; mc_amqpl.erl:618-634
    deaths_to_headers replaces the header). 3.10.8 counts on in the publisher's x-death."""
    for mode, count in (("3.10.8", 2), ("4.2", 1)):
        with broker(mode) as b, channel(b) as ch:
            _dead_letter_setup(ch)
            ch.basic_publish("", "work", b"m")
            _reject(ch, "work")
            props, body = _take(ch, "dlq")
            assert props.headers["x-death"][0]["count"] == 1
            ch.basic_publish("", "work", body, props)  # a consumer republishes it as is
            _reject(ch, "work")
            props, _ = _take(ch, "dlq")
            (death,) = props.headers["x-death"]
            assert death["count"] == count, mode


def test_dead_lettering_adds_x_last_death_and_writes_deaths_in_4_2s_order() -> None:
    """From 3.13 each dead-lettering sets x-last-death-reason/queue/exchange besides the
    first death's x-first-death-* (v4.2.9 mc.erl:436-454); an x-death entry's fields are
    in mc_amqpl:death_table's order: original-expiration (when the message had one),
    count, reason, queue, time, exchange, routing-keys (mc_amqpl.erl:669-685). A death for
    the same queue and reason counts on in its entry, moved first (mc.erl:427-434)."""
    with broker("3.10.8") as b, channel(b) as ch:
        _dead_letter_setup(ch)
        ch.basic_publish("", "work", b"m", pika.BasicProperties(expiration="60000"))
        _reject(ch, "work")
        props, _ = _take(ch, "dlq")
        assert "x-last-death-reason" not in props.headers
        assert list(props.headers["x-death"][0]) == [*DEATH, "original-expiration"]
    with broker("4.2") as b, channel(b) as ch:
        _dead_letter_setup(ch)
        ch.basic_publish("", "work", b"m", pika.BasicProperties(expiration="60000"))
        _reject(ch, "work")
        props, _ = _take(ch, "dlq")
        headers = props.headers
        assert list(headers) == [
            "x-death",
            "x-first-death-exchange",
            "x-first-death-queue",
            "x-first-death-reason",
            "x-last-death-exchange",
            "x-last-death-queue",
            "x-last-death-reason",
        ]
        assert (headers["x-last-death-reason"], headers["x-last-death-queue"]) == (
            "rejected",
            "work",
        )
        (death,) = headers["x-death"]
        assert list(death) == ["original-expiration", *DEATH]
        assert death["original-expiration"] == "60000"


@pytest.mark.parametrize("mode", MODES)
def test_the_brokers_own_history_counts_on(mode: str) -> None:
    """A message the broker dead-letters again keeps its history in both: the entry of
    the same queue and reason counts on and comes first (v4.2.9 mc.erl:427-434,
    deaths ordered by recency)."""
    with broker(mode) as b, channel(b) as ch:
        ch.queue_declare(
            "work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "wait"}
        )
        ch.queue_declare(
            "wait",
            arguments={
                "x-message-ttl": 0,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "work",
            },
        )
        ch.basic_publish("", "work", b"m")
        _reject(ch, "work")  # to wait, where it expires back to work
        _reject(ch, "work")
        ch.queue_delete("wait")
        props, _ = _take_after_reject(ch)
        deaths = [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]
        assert deaths == [("work", "rejected", 3), ("wait", "expired", 2)]


def _take_after_reject(ch: Any) -> tuple[pika.BasicProperties, bytes]:
    """Reject the message once more into a dead-letter queue that keeps it."""
    ch.queue_declare("wait", arguments={"x-message-ttl": 60000})
    _reject(ch, "work")
    return _take(ch, "wait")


@pytest.mark.parametrize("mode", MODES)
def test_a_mandatory_reply_to_a_direct_reply_to_address_is_routed_from_4_2(mode: str) -> None:
    """release-notes/4.2.0.md, "Mandatory flag in Direct Reply-To": a responder publishing
    with mandatory to amq.rabbitmq.reply-to.* is routed, whether the requester is still
    there or not (v4.2.9 rabbit_db_queue.erl:549-559: the address is a volatile queue);
    3.10.8 returns it (no queue has that name), even when the reply was delivered."""
    with broker(mode) as b, channel(b) as requester, channel(b) as responder:
        replies: list[bytes] = []
        requester.basic_consume(
            "amq.rabbitmq.reply-to", lambda _c, _m, _p, body: replies.append(body), auto_ack=True
        )
        requester.queue_declare("rpc")
        requester.basic_publish(
            "", "rpc", b"question", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
        )
        _, props, _ = responder.basic_get("rpc", auto_ack=True)
        address = props.reply_to
        returned: list[bytes] = []
        responder.add_on_return_callback(lambda _c, _m, _p, body: returned.append(body))
        responder.basic_publish("", address, b"answer", mandatory=True)
        responder.connection.process_data_events(time_limit=0.2)
        requester.connection.process_data_events(time_limit=0.2)
        assert replies == [b"answer"]
        requester.close()  # the requester goes away: its address stays routable in 4.2
        responder.basic_publish("", address, b"late", mandatory=True)
        responder.connection.process_data_events(time_limit=0.2)
        expected = [b"answer", b"late"] if mode == "3.10.8" else []
        assert returned == expected


def test_the_local_random_exchange_of_4_0() -> None:
    """x-local-random (release-notes/4.0.1.md; v4.2.9 rabbit_exchange_type_local_random.erl):
    each message goes to one bound queue picked at random among the node's; only classic
    queues with an empty key may be bound (binding_invalid: 406, rabbit_channel.erl:
    1939-1940). RabbitMQ 3.10.8 has no such type (503, unknown exchange type)."""
    with broker("3.10.8", management=True) as b:
        with channel(b) as ch, pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            ch.exchange_declare("spread", "x-local-random")
        assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'x-local-random'"
        names = [t["name"] for t in api(b, "GET", "/api/overview")[1]["exchange_types"]]
        assert "x-local-random" not in names
    with broker("4.2", management=True) as b, channel(b) as ch:
        types = {t["name"]: t for t in api(b, "GET", "/api/overview")[1]["exchange_types"]}
        assert types["x-local-random"] == {
            "name": "x-local-random",
            "description": "Picks one random local binding (queue) to route via (to).",
            "enabled": True,
        }
        ch.exchange_declare("spread", "x-local-random")
        for name in ("a", "b", "c"):
            ch.queue_declare(name)
            ch.queue_bind(name, "spread", "")  # pika binds with the name otherwise
        for i in range(60):
            ch.basic_publish("spread", "any key", str(i).encode())
        counts = [ch.queue_declare(n, passive=True).method.message_count for n in "abc"]
        assert sum(counts) == 60 and all(counts)  # each once, spread over all three
        ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
        for queue, key, text in (
            ("qq", "", "Queue type rabbit_quorum_queue not valid for this exchange type"),
            ("a", "k", "Non empty binding 'k' key not permitted"),
        ):
            with channel(b) as other:
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as chan:
                    other.queue_bind(queue, "spread", key)
                assert (chan.value.reply_code, chan.value.reply_text) == (
                    406,
                    f"PRECONDITION_FAILED - {text}",
                )
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as chan:
            ch.exchange_bind("amq.fanout", "spread")
        assert chan.value.reply_text == "PRECONDITION_FAILED - Destination not found"
