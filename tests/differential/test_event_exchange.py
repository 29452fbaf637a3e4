"""rabbitmq_event_exchange: the same scenario on Leveret (with the plugin enabled) and on a
RabbitMQ node of the test's own with the plugin; the events on amq.rabbitmq.event, their
routing keys, headers and properties, compared once what differs by nature (pids, ports,
times, the node's name) is set aside."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from tests.support import rabbitmq
from tests.support.drain import events_from_now
from tests.support.mgmt import Api
from tests.support.rawclient import end_early
from tests.support.waiting import wait_for

VOLATILE = {"timestamp_in_ms", "connected_at", "peer_port", "port", "pid", "channel",
            "connection", "owner_pid", "node", "consumer_tag"}  # fmt: skip
PORTS = re.compile(r":\d+")


# each broker's way to move its memory high watermark while it runs
WATERMARK: dict[str, Callable[[str], None]] = {}


@pytest.fixture(scope="module")
def brokers() -> Iterator[dict[str, tuple[str, str]]]:
    """Each broker's AMQP URL and management API root."""
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(management=True, plugins=["rabbitmq_event_exchange"]).start()

    def rabbitmq_watermark(value: str) -> None:
        args = ("absolute", value) if not value.startswith("0.") else (value,)
        result = node.ctl("set_vm_memory_high_watermark", *args)
        assert result.returncode == 0, result.stderr

    try:
        with leveret.Broker(plugins=["rabbitmq_event_exchange"], management=True) as b:
            WATERMARK.update(leveret=b.set_vm_memory_high_watermark, rabbitmq=rabbitmq_watermark)
            yield {
                "leveret": (b.url, b.management_url),
                "rabbitmq": (node.url, f"http://127.0.0.1:{node.http_port}"),
            }
    finally:
        WATERMARK.clear()
        node.close()


@pytest.fixture(scope="module")
def urls(brokers: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: amqp for name, (amqp, _) in brokers.items()}


def normal(headers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in headers.items():
        if isinstance(v, bytes):
            v = v.decode()
        if k in VOLATILE:
            v = type(v).__name__
        elif k in ("name", "connection_name") and isinstance(v, str):
            v = PORTS.sub(":P", v)
        elif k == "client_properties":
            v = len(v)
        elif k == "cluster_state":  # {node name: running}
            v = sorted(v.values())
        out[k] = v
    return out


def scenario(url: str) -> list[tuple[str, dict[str, Any], Any]]:
    ev = pika.BlockingConnection(pika.URLParameters(url))
    ech = ev.channel()
    q = events_from_now(ech)
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    ch.exchange_declare("evx-x", "direct", arguments={"alternate-exchange": "ae"})
    ch.queue_declare("evx-q", arguments={"x-max-length": 5})
    ch.queue_declare("evx-excl", exclusive=True)
    ch.queue_bind("evx-q", "evx-x", "rk")
    tag = ch.basic_consume("evx-q", lambda *a: None)
    ch.basic_cancel(tag)
    ch.queue_unbind("evx-q", "evx-x", "rk")
    ch.queue_bind("evx-excl", "evx-x", "gone-with-it")
    ch.queue_delete("evx-excl")  # its binding goes with it, removed by rmq-internal
    ch.queue_delete("evx-q")
    ch.exchange_delete("evx-x")
    ch.close()
    c.close()
    with pytest.raises(pika.exceptions.AMQPError):
        pika.BlockingConnection(pika.URLParameters(url.replace("guest:guest", "guest:wrong")))
    time.sleep(1)
    out = []
    while True:
        m, p, body = ech.basic_get(q, auto_ack=True)
        if m is None:
            break
        assert body == b"" and p.delivery_mode == 2 and p.content_type is None
        assert abs(p.timestamp * 1000 - p.headers["timestamp_in_ms"]) < 1000
        out.append((m.routing_key, normal(p.headers), list(p.headers)))
    ev.close()
    return out


KEYS = [
    "user.authentication.success",
    "connection.created",
    "channel.created",
    "exchange.created",
    "queue.created",
    "queue.created",
    "binding.created",
    "consumer.created",
    "consumer.deleted",
    "binding.deleted",
    "binding.created",
    "binding.deleted",
    "queue.deleted",
    "queue.deleted",
    "parameter.set",
    "exchange.deleted",
    "parameter.cleared",
    "channel.closed",
    "connection.closed",
    "user.authentication.failure",
    "connection.closed",
]


def test_events_as_rabbitmq_publishes_them(urls: dict[str, str]) -> None:
    got = {name: scenario(url) for name, url in urls.items()}
    assert [k for k, _, _ in got["rabbitmq"]] == KEYS
    assert [k for k, _, _ in got["leveret"]] == KEYS
    for (key, theirs, their_order), (_, ours, our_order) in zip(
        got["rabbitmq"], got["leveret"], strict=True
    ):
        assert (key, ours) == (key, theirs)
        assert (key, our_order) == (key, their_order)


# Each step of an exchange's removal, as the events tell it: bindings both ways go with an
# exchange, a source left with none goes too if auto-delete, and exchange.delete marks
# itself in progress (parameter.set / parameter.cleared) even when nothing is deleted.
def _deletion_steps(ch: Any) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("delete with bindings both ways", lambda: ch.exchange_delete("evd-x")),
        ("delete a missing exchange", lambda: ch.exchange_delete("evd-missing")),
        ("if-unused, bound into only", lambda: ch.exchange_delete("evd-d", if_unused=True)),
        ("unbind the last", lambda: ch.queue_unbind("evd-q1", "evd-ad", "k")),
        ("delete the queue", lambda: ch.queue_delete("evd-q2")),
    ]


def _deletion_scenario(url: str) -> list[list[tuple[str, dict[str, Any], list[str]]]]:
    ev = pika.BlockingConnection(pika.URLParameters(url))
    ech = ev.channel()
    q = ech.queue_declare("", exclusive=True).method.queue
    for key in ("parameter.#", "exchange.deleted", "binding.deleted", "queue.deleted"):
        ech.queue_bind(q, "amq.rabbitmq.event", key)
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    for name, kind, auto_delete in (
        ("evd-x", "fanout", False),
        ("evd-src", "direct", True),
        ("evd-src2", "topic", False),
        ("evd-d", "direct", False),
        ("evd-s", "direct", False),
        ("evd-ad", "direct", True),
        ("evd-ad2", "direct", True),
    ):
        ch.exchange_declare(name, kind, auto_delete=auto_delete)
    ch.queue_declare("evd-q1")
    ch.queue_declare("evd-q2")
    for queue, source, key in (
        ("evd-q1", "evd-x", "b"),
        ("evd-q1", "evd-x", "a"),
        ("evd-q2", "evd-x", "a"),
        ("evd-q1", "evd-ad", "k"),
        ("evd-q2", "evd-ad2", "k2"),
        ("evd-q2", "evd-ad2", "k1"),
        ("evd-q2", "evd-src2", "z"),
        ("evd-q1", "evd-src2", "w"),  # keeps it in use to the end
    ):
        ch.queue_bind(queue, source, key)
    for source, destination, key in (
        ("evd-src", "evd-x", "k2"),
        ("evd-src", "evd-x", "k1"),
        ("evd-src2", "evd-x", "y"),
        ("evd-s", "evd-d", "k"),
    ):
        ch.exchange_bind(destination, source, key)
    time.sleep(0.3)
    _collect(ech, q)
    per_step = []
    try:
        for _, step in _deletion_steps(ch):
            step()
            time.sleep(0.3)
            per_step.append(_collect(ech, q))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.exchange_delete("evd-src2", if_unused=True)
        assert refused.value.reply_code == 406
        time.sleep(0.3)
        per_step.append(_collect(ech, q))
        ch = c.channel()
        ch.exchange_delete("evd-src2")
        ch.exchange_delete("evd-s")
        ch.queue_delete("evd-q1")
    finally:
        c.close()
        ev.close()
    return per_step


def _sources_unordered(events: list[Any]) -> list[Any]:
    """Each run of exchange and binding deletions grouped by source exchange, the groups
    sorted by name: RabbitMQ tells of one removal's groups in its dictionary's hash order,
    and within a group in the order kept here (the exchange first, then its bindings)."""
    out: list[Any] = []
    run: list[Any] = []

    def flush() -> None:
        groups: dict[str, list[Any]] = {}
        for event in run:
            key, headers, _ = event
            source = headers["name"] if key == "exchange.deleted" else headers["source_name"]
            groups.setdefault(source, []).append(event)
        out.extend(groups[name] for name in sorted(groups))
        run.clear()

    for event in events:
        if event[0] in ("exchange.deleted", "binding.deleted"):
            run.append(event)
            continue
        flush()
        out.append(event)
    flush()
    return out


def test_what_goes_with_a_deleted_exchange_queue_or_binding(urls: dict[str, str]) -> None:
    """exchange.deleted and binding.deleted for everything an exchange.delete, a
    queue.delete or a queue.unbind takes with it, each credited as RabbitMQ credits it."""
    got = {name: _deletion_scenario(url) for name, url in urls.items()}
    keys = [[k for k, _, _ in step] for step in got["rabbitmq"]]
    assert keys[1] == ["parameter.set", "parameter.cleared"]  # nothing to delete
    assert keys[-1] == ["parameter.set", "parameter.cleared"]  # refused: in use
    assert keys[0].count("binding.deleted") == 6
    names = [n for n, _ in _deletion_steps(None)] + ["if-unused, in use"]
    for name, theirs, ours in zip(names, got["rabbitmq"], got["leveret"], strict=True):
        assert _sources_unordered(ours) == _sources_unordered(theirs), name


def _collect(ech: Any, q: str) -> list[tuple[str, dict[str, Any], list[str]]]:
    out = []
    while True:
        m, p, _ = ech.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append((m.routing_key, normal(p.headers), list(p.headers)))


# what the management API is asked, in order; each step's events are compared
ADMIN_STEPS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("PUT", "/api/users/evu", {"password": "p1", "tags": "monitoring"}),
    ("PUT", "/api/users/evu", {"password": "p2", "tags": "monitoring,management"}),
    ("PUT", "/api/users/evu", {"tags": ""}),  # clears the password
    ("PUT", "/api/users/evu2", {"password": "p", "tags": ""}),
    (
        "PUT",
        "/api/topic-permissions/%2F/evu",
        {"exchange": "amq.topic", "write": "^a", "read": ".*"},
    ),
    (
        "PUT",
        "/api/topic-permissions/%2F/evu",
        {"exchange": "amq.topic", "write": "^a", "read": ".*"},
    ),
    ("DELETE", "/api/topic-permissions/%2F/evu", None),
    ("PUT", "/api/vhost-limits/%2F/max-connections", {"value": 100}),
    ("PUT", "/api/vhost-limits/%2F/max-queues", {"value": 10}),
    ("PUT", "/api/vhost-limits/%2F/max-queues", {"value": 10}),  # the same: no event
    ("DELETE", "/api/vhost-limits/%2F/max-queues", None),
    ("DELETE", "/api/vhost-limits/%2F/max-connections", None),
    ("PUT", "/api/user-limits/evu/max-channels", {"value": 5}),
    ("DELETE", "/api/user-limits/evu/max-channels", None),
    ("PUT", "/api/queues/%2F/evq", {"durable": False}),
    ("DELETE", "/api/queues/%2F/evq", None),
    ("DELETE", "/api/users/evu", None),
    ("DELETE", "/api/users/evu2", None),
    # a virtual host with objects of each kind, then deleted with them all
    ("PUT", "/api/vhosts/evh", None),
    ("PUT", "/api/exchanges/evh/evhx", {"type": "fanout", "durable": True}),
    ("PUT", "/api/queues/evh/evhq", {"durable": True}),
    ("POST", "/api/bindings/evh/e/evhx/q/evhq", {"routing_key": "k"}),
    ("PUT", "/api/policies/evh/evhp", {"pattern": "^evhq$", "definition": {"max-length": 3}}),
    ("PUT", "/api/policies/evh/evhp2", {"pattern": "^none$", "definition": {"max-length": 4}}),
    ("DELETE", "/api/policies/evh/evhp", None),
    ("PUT", "/api/policies/evh/evhp", {"pattern": "^evhq$", "definition": {"max-length": 5}}),
    ("PUT", "/api/vhost-limits/evh/max-queues", {"value": 9}),
    ("DELETE", "/api/vhosts/evh", None),
]


def _exchanges_unordered(events: list[Any]) -> list[Any]:
    """Each run of exchange deletions (a deleted vhost's) sorted by exchange: RabbitMQ
    deletes a vhost's exchanges in the order of its table's hash, not one to copy."""
    out: list[Any] = []
    run: list[Any] = []
    i = 0
    while i < len(events):
        if events[i][1].get("component") == "exchange-delete-in-progress":
            run.append(events[i : i + 3])
            i += 3
            continue
        if run:
            out.append(sorted(run, key=lambda three: three[0][1]["name"]))
            run = []
        out.append(events[i])
        i += 1
    if run:
        out.append(sorted(run, key=lambda three: three[0][1]["name"]))
    return out


def admin_scenario(url: str, http: str) -> list[list[tuple[str, dict[str, Any], list[str]]]]:
    api = Api(http)
    ev = pika.BlockingConnection(pika.URLParameters(url))
    ech = ev.channel()
    q = ech.queue_declare("", exclusive=True).method.queue
    for key in ("user.#", "topic.#", "vhost.#", "parameter.#", "permission.#", "queue.#",
                "exchange.#", "binding.#", "policy.#"):  # fmt: skip
        ech.queue_bind(q, "amq.rabbitmq.event", key)
    time.sleep(0.3)
    _collect(ech, q)
    per_step = []
    try:
        for method, path, body in ADMIN_STEPS:
            status, reply = api.call(method, path, body)
            assert status in (201, 204), (method, path, status, reply)
            time.sleep(0.2)  # the broker's events of this step, and no other's
            per_step.append(_collect(ech, q))
    finally:
        ev.close()
    return per_step


def test_the_management_apis_user_permission_and_limit_events(
    brokers: dict[str, tuple[str, str]],
) -> None:
    """user.tags.set, user.password.changed / cleared, topic.permission.*, vhost.limits.*
    with their parameter.set, user.limits.*: as RabbitMQ tells of them, each credited to
    the API's user (not rmq-internal)."""
    got = {name: admin_scenario(*where) for name, where in brokers.items()}
    keys = [[k for k, _, _ in step] for step in got["rabbitmq"]]
    assert keys[2] == ["user.tags.set", "user.password.cleared"]
    assert keys[9] == []
    for (method, path, _), theirs, ours in zip(
        ADMIN_STEPS, got["rabbitmq"], got["leveret"], strict=True
    ):
        assert _exchanges_unordered(ours) == _exchanges_unordered(theirs), (method, path)
    deleted = [k for k, _, _ in got["leveret"][-1]]
    assert deleted[:3] == ["permission.deleted", "binding.deleted", "queue.deleted"]
    assert deleted[deleted.index("vhost.deleted") :] == [
        "vhost.deleted", "parameter.cleared", "vhost.limits.cleared", "policy.cleared",
        "policy.cleared", "vhost.down",
    ]  # fmt: skip
    assert any(
        h["user_who_performed_action"] == "guest" for step in got["leveret"] for _, h, _ in step
    )


def test_resource_alarm_events(urls: dict[str, str]) -> None:
    """alarm.set and alarm.cleared, as the memory high watermark is moved below what the
    broker uses and back (rabbitmqctl set_vm_memory_high_watermark)."""
    got = {name: _alarm_events(name, url) for name, url in urls.items()}
    assert [k for k, _, _ in got["rabbitmq"]] == ["alarm.set", "alarm.cleared"]
    assert got["leveret"] == got["rabbitmq"]
    assert got["leveret"][0][1]["source"] == "memory"


def _alarm_events(name: str, url: str) -> list[tuple[str, dict[str, Any], list[str]]]:
    ev = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ech = ev.channel()
        q = ech.queue_declare("", exclusive=True).method.queue
        ech.queue_bind(q, "amq.rabbitmq.event", "alarm.#")
        try:
            WATERMARK[name]("1MiB")
            assert wait_for(lambda: ech.queue_declare(q, passive=True).method.message_count)
        finally:
            WATERMARK[name]("0.4")
        time.sleep(1)
        return _collect(ech, q)
    finally:
        ev.close()


# Sockets that end before any login, each as its client leaves it: rabbit_reader tells of
# every connection it read (and counts it in connection_closed), whatever it got to.
EARLY_ENDS: list[tuple[str, bytes]] = [
    ("sent nothing", b""),
    ("sent part of a protocol header", b"AMQP\x00"),
    ("sent the protocol header, read connection.start", b"AMQP\x00\x00\x09\x01"),
    ("sent a wrong protocol header", b"HTTP/1.1"),
    ("sent AMQP 1.0's header (no AMQP 1.0 here)", b"AMQP\x03\x01\x00\x00"),
]


def early_ends_scenario(url: str) -> list[list[tuple[str, dict[str, Any], list[str]]]]:
    port = pika.URLParameters(url).port
    ev = pika.BlockingConnection(pika.URLParameters(url))
    ech = ev.channel()
    q = events_from_now(ech)
    out = []
    for _, data in EARLY_ENDS:
        end_early(port, data)
        out.append(wait_for(lambda: _collect(ech, q), 5) or [])
        time.sleep(0.3)  # nothing more comes
        out[-1] += _collect(ech, q)
    ev.close()
    return out


def test_connections_that_end_before_a_login(urls: dict[str, str]) -> None:
    got = {name: early_ends_scenario(url) for name, url in urls.items()}
    for (name, _), theirs, ours in zip(EARLY_ENDS, got["rabbitmq"], got["leveret"], strict=True):
        assert [k for k, _, _ in theirs] == ["connection.closed"], name
        assert ours == theirs, name
        (_, headers, order) = theirs[0]
        assert order == ["client_properties", "node", "pid", "name", "timestamp_in_ms"], name
        assert headers["client_properties"] == 0, name
