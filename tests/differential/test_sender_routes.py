"""Sender-selected distribution: the CC and BCC headers, the same on both brokers."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.differential.helpers import channel_error, connect, settle
from tests.support.brokers import BrokerUnderTest


def drain(ch: Any, queue: str) -> list[tuple[str, str, bytes, list[tuple[str, Any]]]]:
    out = []
    while True:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            return out
        out.append((m.exchange, m.routing_key, b, list((p.headers or {}).items())))


def test_cc_and_bcc_route_to_more_queues_and_bcc_is_removed(
    broker: BrokerUnderTest, name: str
) -> None:
    qa, qb, qc, qd = (f"{name}-{x}" for x in "abcd")
    with connect(broker) as conn:
        ch = conn.channel()
        for q in (qa, qb, qc, qd):
            ch.queue_declare(q, exclusive=True)
        ch.exchange_declare(f"{name}-x", "direct", auto_delete=True)
        ch.queue_bind(qb, f"{name}-x", "kb")
        ch.queue_bind(qc, f"{name}-x", "kc")
        ch.confirm_delivery()
        # default exchange: the keys are queue names
        ch.basic_publish(
            "",
            qa,
            b"one",
            pika.BasicProperties(headers={"z": 1, "CC": [qb], "BCC": [qc, qd], "a": "x"}),
        )
        # a direct exchange, BCC alone: the headers table stays, empty
        ch.basic_publish(f"{name}-x", "kb", b"two", pika.BasicProperties(headers={"BCC": ["kc"]}))
        # keys that lead nowhere, and a queue named twice, are fine: each queue gets one copy
        ch.basic_publish(
            "", qa, b"three", pika.BasicProperties(headers={"CC": [qa, "nowhere"], "BCC": [qa]})
        )
        # array elements that are not long strings are skipped
        ch.basic_publish("", qa, b"four", pika.BasicProperties(headers={"CC": [3, b"raw", qb]}))
        kept = [("z", 1), ("CC", [qb]), ("a", "x")]
        assert drain(ch, qa) == [
            ("", qa, b"one", kept),
            ("", qa, b"three", [("CC", [qa, "nowhere"])]),
            ("", qa, b"four", [("CC", [3, b"raw", qb])]),
        ]
        assert drain(ch, qb) == [
            ("", qa, b"one", kept),
            (f"{name}-x", "kb", b"two", []),
            ("", qa, b"four", [("CC", [3, b"raw", qb])]),
        ]
        assert drain(ch, qc) == [("", qa, b"one", kept), (f"{name}-x", "kb", b"two", [])]
        assert drain(ch, qd) == [("", qa, b"one", kept)]


def test_cc_routes_through_topic_bindings_and_mandatory(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.exchange_declare(f"{name}-t", "topic", auto_delete=True)
        ch.queue_bind(q, f"{name}-t", "kern.*")
        returned: list[str] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b.decode()))
        # the routing key leads nowhere, a CC key does: routed, not returned
        ch.basic_publish(
            f"{name}-t",
            "app.info",
            b"cc",
            pika.BasicProperties(headers={"CC": ["kern.warning"]}),
            mandatory=True,
        )
        ch.basic_publish(
            f"{name}-t",
            "app.info",
            b"lost",
            pika.BasicProperties(headers={"CC": ["app.debug"]}),
            mandatory=True,
        )
        settle(conn, 0.3)
        assert returned == ["lost"]
        m, _p, body = ch.basic_get(q, auto_ack=True)
        assert (m.routing_key, body) == ("app.info", b"cc")


@pytest.mark.parametrize(
    ("headers", "text"),
    [
        ({"CC": "q"}, 'invalid message: {unacceptable_type_in_header,"CC",longstr}'),
        ({"BCC": 5}, 'invalid message: {unacceptable_type_in_header,"BCC",signedint}'),
        ({"CC": {"a": 1}}, 'invalid message: {unacceptable_type_in_header,"CC",table}'),
        ({"CC": ["ok"], "BCC": True}, 'invalid message: {unacceptable_type_in_header,"BCC",bool}'),
    ],
)
def test_cc_or_bcc_of_another_type_is_an_invalid_message(
    broker: BrokerUnderTest, headers: dict[str, Any], text: str
) -> None:
    code, reply = channel_error(
        broker,
        lambda ch: ch.basic_publish("", "anywhere", b"x", pika.BasicProperties(headers=headers)),
    )
    assert (code, reply) == (406, f"PRECONDITION_FAILED - {text}")
