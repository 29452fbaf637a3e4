"""AMQP 1.0 connections on a Leveret that behaves as RabbitMQ 4.2, as RabbitMQ 4.2's
management API and rabbitmqctl show them (read from v4.2.9's source: rabbit_amqp_reader
?CONNECTION_EVENT_KEYS and its checks at open, rabbit_mgmt_wm_connection_sessions,
rabbit_amqp_session:infos/1). Leveret only: there is no RabbitMQ 4.2 to compare with
here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from proton import ConnectionException

import leveret
from tests.support.amqp10 import ACTIVE, Amqp10Client
from tests.support.mgmt import Api, q


@pytest.fixture(scope="module")
def broker() -> Iterator[leveret.Broker]:
    """RabbitMQ 4.2's mode."""
    b = leveret.Broker(plugins="rabbitmq_amqp1_0", management=True, rabbitmq_version="4.2")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def api(broker: leveret.Broker) -> Api:
    return Api(broker.management_url)


def test_the_connection_is_listed_from_its_open(broker: leveret.Broker, api: Api) -> None:
    """One network connection, protocol "AMQP 1-0", from the open; its sessions counted
    as channels, none listed; its consumer on no channel, its tag the handle."""
    assert api.put("/api/queues/%2F/a10n-q", {"durable": False}) == 201
    c = Amqp10Client(broker.host, broker.port, "/")
    try:
        (row,) = [r for r in api.get("/api/connections") if r["protocol"] == "AMQP 1-0"]
        assert row["type"] == "network" and row["channels"] == 0
        assert (row["user"], row["vhost"], row["auth_mechanism"]) == ("guest", "/", "PLAIN")
        assert row["channel_max"] == 63 and row["state"] == "running"
        assert row["container_id"] and row["frame_max"] > 0
        assert {"recv_oct", "send_oct", "recv_cnt", "send_cnt", "send_pend"} <= set(row)
        s = c.session()
        receiver = c.receiver(s, "/amq/queue/a10n-q", credit=4)
        c.sender(s, "/amq/queue/a10n-q")
        name = q(str(row["name"]))
        assert api.get(f"/api/connections/{name}")["channels"] == 1
        assert api.get(f"/api/connections/{name}/channels") == []
        assert api.get("/api/channels") == []
        ((session),) = api.get(f"/api/connections/{name}/sessions")
        assert session["channel_number"] == 0 and session["outgoing_unsettled_deliveries"] == 0
        (link,) = session["outgoing_links"]
        granted = receiver.link.credit  # as the client granted it
        assert (link["handle"], link["queue_name"], link["credit"]) == (0, "a10n-q", granted)
        assert (link["source_address"], link["max_message_size"]) == (
            "/amq/queue/a10n-q",
            "unlimited",
        )
        (link,) = session["incoming_links"]
        assert (link["handle"], link["target_address"], link["snd_settle_mode"]) == (
            1,
            "/amq/queue/a10n-q",
            "mixed",
        )
        (consumer,) = api.get("/api/consumers/%2F")
        assert consumer["channel_details"] == {}
        assert (consumer["consumer_tag"], consumer["prefetch_count"]) == ("0", 0)
        ctl = [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", broker.management_url]
        out = subprocess.run(
            [*ctl, "list_connections", "protocol", "channels"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.splitlines()
        assert out[2:] == ["{1,0}\t1"]
    finally:
        c.close()
        api.delete("/api/queues/%2F/a10n-q")


def test_connection_limits_refuse_the_open(
    broker: leveret.Broker, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """The vhost's and the user's connection limits are checked at open. As any error
    before the connection is open, RabbitMQ 4.2 logs it and closes the socket after a
    delay, with no close frame (rabbit_amqp_reader handle_exception; amqp_auth_SUITE
    vhost_connection_limit sees the connection closed): RabbitMQ 4.2's words are in the
    log."""
    caplog.set_level("WARNING", logger="leveret.broker.amqp10_session")
    assert api.put("/api/vhosts/a10n", {}) == 201
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    try:
        assert api.put("/api/permissions/a10n/guest", perms) == 204  # the creator's already
        assert api.put("/api/vhost-limits/a10n/max-connections", {"value": 0}) == 204
        with pytest.raises(ConnectionException) as refused:
            Amqp10Client(broker.host, broker.port, "a10n")
        assert "amqp:resource-limit-exceeded" not in str(refused.value)  # no close frame
        assert (
            "access to vhost 'a10n' refused for user 'guest': vhost connection limit (0) is reached"
        ) in caplog.text
        api.delete("/api/vhost-limits/a10n/max-connections")
        assert api.put("/api/user-limits/guest/max-connections", {"value": 0}) == 204
        with pytest.raises(ConnectionException):
            Amqp10Client(broker.host, broker.port, "a10n")
        assert "connection refused for user 'guest': user connection limit (0) is reached" in (
            caplog.text
        )
        api.delete("/api/user-limits/guest/max-connections")
        c = Amqp10Client(broker.host, broker.port, "a10n")
        assert c.session().state & ACTIVE
        c.close()
    finally:
        api.delete("/api/user-limits/guest/max-connections")
        api.delete("/api/vhosts/a10n")


def test_closing_it_from_the_management_api(broker: leveret.Broker, api: Api) -> None:
    """DELETE /api/connections/{name}: the reader terminates, closing with
    amqp:internal-error (rabbit_mgmt_http_SUITE connections_amqp at v4.2.9)."""
    c = Amqp10Client(broker.host, broker.port, "/")
    try:
        (row,) = [r for r in api.get("/api/connections") if r["protocol"] == "AMQP 1-0"]
        assert api.call("DELETE", f"/api/connections/{q(str(row['name']))}")[0] == 204
        c.wait(lambda: c.closed)
        condition = c.conn.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:internal-error",
            'Connection forced: "Closed via management plugin"',
        )
    finally:
        c.close()


def test_the_management_node_declares_rabbitmq_4s_exchange_types(
    broker: leveret.Broker, api: Api
) -> None:
    """The /management node knows the mode's exchange types: x-local-random is RabbitMQ
    4.2's (rabbit_exchange_type_local_random, v4.2.9), declared through the node as through
    AMQP 0-9-1."""
    from rabbitmq_amqp_python_client import Environment, ExchangeCustomSpecification

    env = Environment(f"amqp://guest:guest@{broker.host}:{broker.port}/")
    conn = env.connection()
    conn.dial()
    try:
        mgmt = conn.management()
        mgmt.declare_exchange(
            ExchangeCustomSpecification(name="a10n-local", exchange_type="x-local-random")
        )
        assert api.get("/api/exchanges/%2F/a10n-local")["type"] == "x-local-random"
        mgmt.delete_exchange("a10n-local")
        mgmt.close()
    finally:
        conn.close()
