"""Routing by exchange type, exchange-to-exchange bindings, alternate exchanges and
mandatory returns, the same on both brokers."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.differential.helpers import connect, settle
from tests.support.brokers import BrokerUnderTest
from tests.support.drain import drain


def setup_queues(
    ch: BlockingChannel, exchange: str, kind: str, bindings: dict[str, list[Any]]
) -> dict[str, str]:
    ch.exchange_declare(exchange, kind, auto_delete=True)
    queues = {}
    for label, keys in bindings.items():
        q = ch.queue_declare("", exclusive=True).method.queue
        queues[label] = q
        for key in keys:
            if isinstance(key, dict):
                ch.queue_bind(q, exchange, arguments=key)
            else:
                ch.queue_bind(q, exchange, routing_key=key)
    return queues


def test_direct_routing(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        qs = setup_queues(
            ch, name, "direct", {"errors": ["error"], "all": ["info", "warning", "error"]}
        )
        for sev in ("info", "warning", "error", "debug"):
            ch.basic_publish(name, sev, sev.encode())
        assert drain(ch, qs["errors"]) == [b"error"]
        assert drain(ch, qs["all"]) == [b"info", b"warning", b"error"]


@pytest.mark.parametrize(
    ("binding", "matches"),
    [
        ("kern.*", ["kern.critical", "kern.info"]),
        ("*.critical", ["kern.critical", "app.critical"]),
        ("#", ["kern.critical", "kern.info", "app.critical", "a.b.c", "", "lone"]),
        ("a.#", ["a.b.c"]),
        ("a.#.c", ["a.b.c"]),
        ("#.c", ["a.b.c"]),
        ("lone", ["lone"]),
        ("*", ["lone"]),
        ("", [""]),
        ("*.*.*", ["a.b.c"]),
    ],
)
def test_topic_routing(
    broker: BrokerUnderTest, name: str, binding: str, matches: list[str]
) -> None:
    keys = ["kern.critical", "kern.info", "app.critical", "a.b.c", "", "lone"]
    with connect(broker) as conn:
        ch = conn.channel()
        qs = setup_queues(ch, name, "topic", {"q": [binding]})
        for key in keys:
            ch.basic_publish(name, key, key.encode())
        assert drain(ch, qs["q"]) == [k.encode() for k in keys if k in matches]


def test_headers_routing(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        qs = setup_queues(
            ch,
            name,
            "headers",
            {
                "all": [{"x-match": "all", "format": "pdf", "type": "report"}],
                "any": [{"x-match": "any", "format": "pdf", "type": "log"}],
                "default": [{"format": "zip"}],
                "anyx": [{"x-match": "any-with-x", "x-tag": "hot"}],
                "allx": [{"x-match": "all", "x-tag": "hot"}],
            },
        )
        msgs = [
            ({"format": "pdf", "type": "report"}, b"1"),
            ({"format": "pdf"}, b"2"),
            ({"type": "log"}, b"3"),
            ({"format": "zip", "x-tag": "hot"}, b"4"),
            ({}, b"5"),
        ]
        for headers, body in msgs:
            ch.basic_publish(name, "", body, pika.BasicProperties(headers=headers))
        assert drain(ch, qs["all"]) == [b"1"]
        assert drain(ch, qs["any"]) == [b"1", b"2", b"3"]
        assert drain(ch, qs["default"]) == [b"4"]
        assert drain(ch, qs["anyx"]) == [b"4"]
        # 'all' ignores x- arguments, so a binding with only x- arguments matches all
        assert drain(ch, qs["allx"]) == [b"1", b"2", b"3", b"4", b"5"]


def test_fanout_ignores_routing_key_and_dedups(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        qs = setup_queues(ch, name, "fanout", {"a": ["x", "y"], "b": [""]})
        ch.basic_publish(name, "whatever", b"m")
        assert drain(ch, qs["a"]) == [b"m"]
        assert drain(ch, qs["b"]) == [b"m"]


def test_default_exchange_routes_by_queue_name(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, b"hello")
        ch.basic_publish("", f"{name}-none", b"lost")
        assert drain(ch, name) == [b"hello"]


def test_exchange_to_exchange(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-src", "topic", auto_delete=True)
        ch.exchange_declare(f"{name}-dst", "fanout", auto_delete=True)
        ch.exchange_bind(f"{name}-dst", f"{name}-src", routing_key="app.*")
        # a cycle back must not loop or duplicate
        ch.exchange_bind(f"{name}-src", f"{name}-dst", routing_key="#")
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, f"{name}-dst")
        ch.queue_bind(q, f"{name}-src", routing_key="#")
        ch.basic_publish(f"{name}-src", "app.start", b"1")
        ch.basic_publish(f"{name}-src", "other", b"2")
        assert drain(ch, q) == [b"1", b"2"]
        ch.exchange_unbind(f"{name}-dst", f"{name}-src", routing_key="app.*")
        ch.basic_publish(f"{name}-src", "app.start", b"3")
        ch.basic_publish(f"{name}-dst", "", b"4")
        assert drain(ch, q) == [b"3", b"4"]
        ch.exchange_delete(f"{name}-src")
        ch.exchange_delete(f"{name}-dst")


def test_alternate_exchange(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-ae", "fanout", auto_delete=True)
        ch.exchange_declare(
            name, "direct", auto_delete=True, arguments={"alternate-exchange": f"{name}-ae"}
        )
        main = ch.queue_declare("", exclusive=True).method.queue
        other = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(main, name, routing_key="known")
        ch.queue_bind(other, f"{name}-ae")
        ch.basic_publish(name, "known", b"1")
        ch.basic_publish(name, "unknown", b"2")
        assert drain(ch, main) == [b"1"]
        assert drain(ch, other) == [b"2"]


def test_mandatory_return(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        returned: list[tuple[int, str, str, str, bytes, Any]] = []
        ch.add_on_return_callback(
            lambda c, m, p, b: returned.append(
                (m.reply_code, m.reply_text, m.exchange, m.routing_key, b, p.headers)
            )
        )
        ch.exchange_declare(name, "direct", auto_delete=True)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, name, routing_key="here")
        ch.basic_publish(
            name, "nowhere", b"r", pika.BasicProperties(headers={"h": 1}), mandatory=True
        )
        ch.basic_publish(name, "here", b"ok", mandatory=True)
        settle(conn, 0.3)
        assert returned == [(312, "NO_ROUTE", name, "nowhere", b"r", {"h": 1})]
        assert drain(ch, q) == [b"ok"]


def test_auto_delete_exchange_goes_with_last_binding(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(name, "fanout", auto_delete=True)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, name)
        ch.exchange_declare(name, "fanout", passive=True)
        ch.queue_unbind(q, name)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare(name, "fanout", passive=True)
        assert info.value.reply_code == 404


def test_auto_delete_queue_goes_with_last_consumer(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, auto_delete=True)
        # no consumer yet: it stays
        ch.queue_declare(name, passive=True)
        tag = ch.basic_consume(name, lambda *a: None)
        ch.basic_cancel(tag)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(name, passive=True)
        assert info.value.reply_code == 404


@pytest.mark.parametrize("suffix", ["café", "a*b", "日本", "x!y"])
def test_names_any_utf8(broker: BrokerUnderTest, name: str, suffix: str) -> None:
    """Queue and exchange names may be any UTF-8, as RabbitMQ takes them: declare-ok, a
    get-ok and a mandatory return name them (building those replies with pamqp's checks
    dropped the connection; found by the fuzzing campaign)."""
    queue, exchange = f"{name}-q-{suffix}", f"{name}-x-{suffix}"
    returned: list[tuple[str, str]] = []
    with connect(broker) as conn:
        ch = conn.channel()
        ok = ch.queue_declare(queue, auto_delete=True)
        assert ok.method.queue == queue
        ch.exchange_declare(exchange, "direct", auto_delete=True)
        ch.queue_bind(queue, exchange, routing_key=suffix)
        ch.add_on_return_callback(
            lambda _ch, method, _props, _body: returned.append(
                (method.exchange, method.routing_key)
            )
        )
        ch.basic_publish(exchange, suffix, b"routed")
        ch.basic_publish(exchange, "nowhere", b"returned", mandatory=True)
        method, _, body = ch.basic_get(queue, auto_ack=True)
        assert (method.exchange, method.routing_key, body) == (exchange, suffix, b"routed")
        conn.process_data_events(time_limit=0.3)
        assert returned == [(exchange, "nowhere")]
        ch.exchange_delete(exchange)
        ch.queue_delete(queue)
