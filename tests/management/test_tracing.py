"""Firehose tracing on both brokers: ``trace_on``/``trace_off`` (rabbitmqctl, leveret
ctl), the management API's vhost ``tracing`` flag, and the messages published to
``amq.rabbitmq.trace``, compared message by message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.mgmt import Site, q, site_of

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(params=["leveret", "rabbitmq"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    yield from site_of(request, "trace")


def traced_scenario(site: Site) -> list[tuple[Any, ...]]:
    """Publish, consume and get with tracing on; the trace messages, normalised."""
    conn = site.connect()
    try:
        ch = conn.channel()
        ch.queue_declare("t-trace", exclusive=True)
        ch.queue_bind("t-trace", "amq.rabbitmq.trace", "#")
        ch.queue_declare("t-work", exclusive=True)
        ch.queue_declare("t-qq", durable=True, arguments={"x-queue-type": "quorum"})
        ch.exchange_declare("t-x", "fanout", auto_delete=True)
        ch.queue_bind("t-work", "t-x")
        ch.confirm_delivery()
        ch.basic_publish(
            "",
            "t-work",
            b"one",
            pika.BasicProperties(
                content_type="text/plain",
                headers={"b": 1, "a": "x"},
                delivery_mode=2,
                priority=3,
                timestamp=1700000000,
                message_id="m1",
                expiration="60000",
                correlation_id="c",
                type="t",
                app_id="app",
                reply_to="r",
            ),
        )
        ch.basic_publish(
            "t-x", "k", b"two", pika.BasicProperties(headers={"CC": ["cc1"], "BCC": ["bcc1"]})
        )
        ch.basic_publish("", "nowhere", b"three")
        ch.basic_publish("", "t-qq", b"four")
        m = ch.basic_get("t-work")[0]
        ch.basic_nack(m.delivery_tag, requeue=True)
        ch.basic_get("t-work", auto_ack=True)
        ch.basic_get("t-work", auto_ack=True)
        m = ch.basic_get("t-qq")[0]
        ch.basic_nack(m.delivery_tag, requeue=True)
        ch.basic_get("t-qq", auto_ack=True)
        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish("", "t-work", b"in a transaction")
        tx.tx_rollback()  # traced when published, committed or not
        # direct reply-to deliveries are not traced
        tx.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=True)
        ch.queue_delete("t-qq")
        time.sleep(0.5)
        out = []
        while True:
            m, p, body = ch.basic_get("t-trace", auto_ack=True)
            if m is None:
                return out
            headers = dict(p.headers)
            assert headers.pop("connection").endswith(f":{site.broker.port}")
            assert headers.pop("node") == site.api.get("/api/overview")["node"]
            assert headers.pop("vhost") == site.vhost
            out.append((m.exchange, m.routing_key, body, p.delivery_mode, list(headers.items())))
    finally:
        conn.close()


def test_trace_messages_match(leveret_site: Site, rabbitmq_site: Site) -> None:
    traces = {}
    for site in (leveret_site, rabbitmq_site):
        site.ctl("trace_on", "-p", site.vhost)
        try:
            traces[site.broker.name] = traced_scenario(site)
        finally:
            site.ctl("trace_off", "-p", site.vhost)
    assert traces["leveret"] == traces["rabbitmq"]
    keys = [t[1] for t in traces["leveret"]]
    assert keys == [
        "publish.",
        "publish.t-x",
        "publish.",
        "publish.",
        "deliver.t-work",
        "deliver.t-work",
        "deliver.t-work",
        "deliver.t-qq",
        "deliver.t-qq",
        "publish.",
    ]
    first = dict(traces["leveret"][0][4])
    assert first["routed_queues"] == ["t-work"] and first["channel"] == 1
    assert list(first["properties"]) == [
        "app_id",
        "type",
        "timestamp",
        "message_id",
        "expiration",
        "reply_to",
        "correlation_id",
        "priority",
        "delivery_mode",
        "headers",
        "content_type",
    ]


def test_trace_on_and_off_and_the_vhost_flag(site: Site) -> None:
    def flag() -> bool:
        return bool(site.api.get(f"/api/vhosts/{q(site.vhost)}")["tracing"])

    assert flag() is False
    on = site.ctl("trace_on", "-p", site.vhost).stdout
    assert on == (
        f'Starting tracing for vhost "{site.vhost}" ...\nTrace enabled for vhost {site.vhost}\n'
    )
    assert flag() is True
    assert site.ctl("-q", "trace_on", "-p", site.vhost).stdout == (
        f"Trace enabled for vhost {site.vhost}\n"
    )
    listed = site.ctl("list_vhosts", "name", "tracing").stdout
    assert f"{site.vhost}\ttrue\n" in listed
    off = site.ctl("trace_off", "-p", site.vhost).stdout
    assert off == (
        f'Stopping tracing for vhost "{site.vhost}" ...\nTrace disabled for vhost {site.vhost}\n'
    )
    assert flag() is False
    # the API's flag; a PUT without it leaves tracing as it is
    path = f"/api/vhosts/{q(site.vhost)}"
    assert site.api.put(path, {"tracing": True}) == 204 and flag() is True
    assert site.api.put(path, {"description": "d"}) == 204 and flag() is True
    assert site.api.put(path, {"tracing": False}) == 204 and flag() is False
