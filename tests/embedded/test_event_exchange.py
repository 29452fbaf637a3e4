"""rabbitmq_event_exchange on Leveret: off unless enabled (no amq.rabbitmq.event then, as
RabbitMQ without the plugin), and the administrative events (vhosts, users, permissions,
policies) with RabbitMQ's routing keys and headers."""

from __future__ import annotations

import json
import time
import urllib.request
from base64 import b64encode
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from tests.support.drain import events_from_now
from tests.support.rawclient import end_early


def _request(url: str, method: str, body: Any = None) -> None:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10):
        pass


def test_off_unless_enabled() -> None:
    with leveret.Broker() as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare("amq.rabbitmq.event", "topic", passive=True)
        assert info.value.reply_code == 404
        conn.close()
    with leveret.Broker(plugins=["rabbitmq_event_exchange"]) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.exchange_declare("amq.rabbitmq.event", "topic", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("amq.rabbitmq.event", "x", b"")
            ch.queue_declare("", exclusive=True)
        assert info.value.reply_code == 403  # internal
        conn.close()


def test_administrative_events() -> None:
    with leveret.Broker(plugins=["rabbitmq_event_exchange"], management=True) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        q = events_from_now(ch)
        api = b.management_url + "/api"
        b.add_vhost("evv")
        b.add_user("evu", "pw")
        b.set_permissions("evu", "evv")
        b.clear_permissions("evu", "evv")
        _request(
            f"{api}/policies/evv/evp", "PUT", {"pattern": "^x", "definition": {"max-length": 3}}
        )
        _request(f"{api}/policies/evv/evp", "DELETE")
        b.delete_user("evu")
        b.delete_vhost("evv")
        time.sleep(0.5)
        events: list[tuple[str, dict[str, Any]]] = []
        while True:
            m, p, _ = ch.basic_get(q, auto_ack=True)
            if m is None:
                break
            events.append((m.routing_key, p.headers))
        conn.close()
    keys = [k for k, _ in events]
    assert keys == [
        *["exchange.created"] * 7,
        "vhost.created",
        "user.created",
        "permission.created",
        "permission.deleted",
        "policy.set",
        "policy.cleared",
        "user.deleted",
        # the vhost's exchanges go one by one, then the vhost, then its supervisor
        *["parameter.set", "exchange.deleted", "parameter.cleared"] * 7,
        "vhost.deleted",
        "vhost.down",
    ]
    by_key = dict(events)
    assert by_key["vhost.created"]["name"] == "evv"
    assert by_key["vhost.created"]["tags"] == []
    assert by_key["vhost.down"]["user_who_performed_action"] == "rmq-internal"
    assert by_key["user.created"]["name"] == "evu"
    perm = by_key["permission.created"]
    assert (perm["user"], perm["vhost"], perm["configure"]) == ("evu", "evv", ".*")
    policy = by_key["policy.set"]
    assert (policy["name"], policy["pattern"], policy["definition"]) == (
        "evp",
        "^x",
        {"max-length": 3},
    )
    assert list(policy) == [  # the plugin's order
        "apply-to", "priority", "definition", "pattern", "user_who_performed_action",
        "vhost", "name", "timestamp_in_ms",
    ]  # fmt: skip


def test_a_watermark_moved_below_the_memory_in_use_sets_the_alarm_and_blocks() -> None:
    """Broker.set_vm_memory_high_watermark, as rabbitmqctl's: the memory alarm is set at
    once (alarm.set), publishers are blocked at their next publish, and a watermark moved
    back clears it (alarm.cleared) and unblocks them."""
    with leveret.Broker(plugins=["rabbitmq_event_exchange"]) as b:
        events = pika.BlockingConnection(pika.URLParameters(b.url))
        ech = events.channel()
        q = ech.queue_declare("", exclusive=True).method.queue
        ech.queue_bind(q, "amq.rabbitmq.event", "alarm.*")
        blocked: list[str] = []
        params = pika.URLParameters(b.url)
        params.blocked_connection_timeout = None
        pub = pika.BlockingConnection(params)
        pub.add_on_connection_blocked_callback(
            lambda _c, frame: blocked.append(frame.method.reason)
        )
        pub.add_on_connection_unblocked_callback(lambda _c, _f: blocked.append("unblocked"))
        pch = pub.channel()
        with pytest.raises(ValueError):
            b.set_vm_memory_high_watermark("lots")
        b.set_vm_memory_high_watermark("1MiB")
        pch.basic_publish("", "nowhere", b"x")
        deadline = time.monotonic() + 10
        while not blocked and time.monotonic() < deadline:
            pub.process_data_events(0.1)
        assert blocked == ["low on memory"]
        b.set_vm_memory_high_watermark(0.4)
        while len(blocked) < 2 and time.monotonic() < deadline:
            pub.process_data_events(0.1)
        assert blocked == ["low on memory", "unblocked"]
        got = []
        while (m := ech.basic_get(q, auto_ack=True))[0] is not None:
            got.append((m[0].routing_key, m[1].headers["source"]))
        assert got == [("alarm.set", "memory"), ("alarm.cleared", "memory")]
        pub.close()
        events.close()


def test_sockets_that_end_before_a_login_are_told_of_once() -> None:
    """Every socket's end is told of (rabbit_reader's), whatever it got to; one the AMQP
    port hands to AMQP 1.0 by its header, by the AMQP 1.0 connection alone."""
    plugins = ["rabbitmq_event_exchange", "rabbitmq_amqp1_0"]
    with leveret.Broker(plugins=plugins) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        q = events_from_now(ch)
        for data in (b"", b"AMQP\x00", b"AMQP\x00\x00\x09\x01", b"AMQP\x03\x01\x00\x00"):
            end_early(b.port, data, linger=0.3)
        time.sleep(0.5)
        got = []
        while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
            got.append((m[0].routing_key, m[1].headers["client_properties"]))
        conn.close()
    assert got == [("connection.closed", [])] * 4
