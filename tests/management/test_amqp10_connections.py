"""AMQP 1.0 connections on Leveret (RabbitMQ 3.10.8's plugin's shape), where the reference
cannot be compared with: it answers a name two sessions share with a crash (500), its
statistics lag, and its per-channel metrics and listener limits name processes and
acceptors of its own. tests/differential/test_amqp10_management.py and
test_amqp10_events.py compare the rest with RabbitMQ."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

import leveret
from tests.support.amqp10 import ACTIVE, CLOSED, Amqp10Client
from tests.support.mgmt import Api, q
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def broker() -> Iterator[leveret.Broker]:
    with leveret.Broker(plugins="rabbitmq_amqp1_0", management=True) as b:
        yield b


@pytest.fixture
def api(broker: leveret.Broker) -> Api:
    return Api(broker.management_url)


def amqp10_rows(api: Api) -> list[dict[str, object]]:
    return [c for c in api.get("/api/connections") if c["protocol"] == "AMQP 1.0"]


def test_a_name_two_sessions_share_names_nothing(broker: leveret.Broker, api: Api) -> None:
    """Two sessions: two rows of one name, their channels listed, and the name finds no
    connection, nor its channels (RabbitMQ 3.10.8: 404, and a 500 for the channels)."""
    c = Amqp10Client(broker.host, broker.port, "/")
    try:
        c.session()
        c.session()
        rows = amqp10_rows(api)
        assert [r["name"] for r in rows] == [rows[0]["name"]] * 2
        name = q(str(rows[0]["name"]))
        for path in (f"/api/connections/{name}", f"/api/connections/{name}/channels"):
            assert api.call("GET", path)[0] == 404
        channels = [ch for ch in api.get("/api/channels") if ch["name"].startswith(rows[0]["name"])]
        assert [ch["number"] for ch in channels] == [1, 1]
        assert api.call("GET", f"/api/channels/{q(channels[0]['name'])}")[0] == 404
        overview = api.get("/api/overview")["object_totals"]
        assert (overview["connections"], overview["channels"]) == (2, 2)
    finally:
        c.close()
    assert wait_for(lambda: amqp10_rows(api) == [], 10, 0.1)


def test_one_session_channel_alone_with_its_consumer(broker: leveret.Broker, api: Api) -> None:
    """/api/channels/{name} shows the session's channel with its consumer; the metrics
    label the channel, and count the connection and channel; RabbitMQ 4.2's sessions
    endpoint is not there (RabbitMQ 3.10.8 has none)."""
    assert api.put("/api/queues/%2F/a10-one", {"durable": False}) == 201
    c = Amqp10Client(broker.host, broker.port, "/")
    try:
        s = c.session()
        c.receiver(s, "/amq/queue/a10-one", credit=2)
        (row,) = amqp10_rows(api)
        ch = api.get(f"/api/channels/{q(str(row['name']) + ' (1)')}")
        assert ch["number"] == 1 and ch["consumer_count"] == 1
        (consumer,) = ch["consumer_details"]
        assert consumer["consumer_tag"] == "ctag-\x00\x00\x00\x00"
        assert consumer["queue"] == {"name": "a10-one", "vhost": "/"}
        assert api.call("GET", f"/api/connections/{q(str(row['name']))}/sessions")[0] == 404
        metrics = urlparse(broker.metrics_url)
        per_object = Api(f"http://{metrics.netloc}").call("GET", "/metrics/per-object")[1]
        lines = per_object.splitlines()
        assert "rabbitmq_connections 1.0" in lines
        assert "rabbitmq_channels 1.0" in lines
        assert any(
            line.startswith("rabbitmq_channel_consumers{channel=") and line.endswith(" 1.0")
            for line in lines
        )
        # a direct connection has no socket of its own to count
        assert not any(line.startswith("rabbitmq_connection_channels{") for line in lines)
    finally:
        c.close()
        api.delete("/api/queues/%2F/a10-one")


def test_churn_counts_each_sessions_connection_and_channels(
    broker: leveret.Broker, api: Api
) -> None:
    """Each session opens a direct connection and its channel, each attach a channel
    more (closed at once); the reader's close counts as a connection closed."""
    before = api.get("/api/overview")["churn_rates"]
    assert api.put("/api/queues/%2F/a10-churn", {"durable": False}) == 201
    c = Amqp10Client(broker.host, broker.port, "/")
    s = c.session()
    c.sender(s, "/amq/queue/a10-churn")
    s.close()
    c.wait(lambda: bool(s.state & CLOSED))
    c.close()
    api.delete("/api/queues/%2F/a10-churn")

    def moved() -> dict[str, int]:
        after = api.get("/api/overview")["churn_rates"]
        return {k: after[k] - before[k] for k in before if not k.endswith("_details")}

    assert wait_for(lambda: moved()["connection_closed"] == 2, 10, 0.1)
    assert moved() == {
        "channel_closed": 2,
        "channel_created": 2,
        "connection_closed": 2,
        "connection_created": 1,
        "queue_created": 1,
        "queue_declared": 1,
        "queue_deleted": 1,
    }


def test_an_amqp10_socket_takes_a_place_under_connection_max() -> None:
    """At connection_max the next connection, AMQP 1.0 or not, is not served until a
    place frees: RabbitMQ's listener counts sockets, whatever their protocol (the
    differential tests of connection_max, in tests/differential/test_tls.py, cannot
    compare exact counts: Ranch's acceptors overshoot)."""
    with leveret.Broker(plugins="rabbitmq_amqp1_0", connection_max=1) as b:
        held = Amqp10Client(b.host, b.port, "/")
        assert held.session().state & ACTIVE
        waiting = socket.create_connection((b.host, b.port), timeout=2)
        try:
            waiting.sendall(b"AMQP\x03\x01\x00\x00")
            with pytest.raises(TimeoutError):
                waiting.recv(8)  # not served
            held.close()
            waiting.settimeout(30)
            assert waiting.recv(8) == b"AMQP\x03\x01\x00\x00"
        finally:
            waiting.close()
            held.close()
