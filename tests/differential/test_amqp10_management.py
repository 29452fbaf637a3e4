"""AMQP 1.0 connections in the management API and rabbitmqctl, on Leveret (the
rabbitmq_amqp1_0 plugin enabled) and on the reference RabbitMQ 3.10.8 with its plugin,
driven by an unmodified proton client: each session listed as a direct connection with
its channel, its consumers, closing it, the connection limits at begin, and what
rabbitmqctl lists and closes. What differs by nature (ports, times, node names, pids) is
set aside; RabbitMQ's figures are waited for (its statistics lag)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from proton import ConnectionException

from tests.support.amqp10 import ACTIVE, CLOSED, Amqp10Broker, Amqp10Client
from tests.support.mgmt import Site, make_site, q
from tests.support.waiting import STATS_WAIT, wait_for

PORTS = re.compile(r":\d+")
VOLATILE = {"connected_at", "peer_port", "port", "node"}
# what RabbitMQ measures of its Erlang processes and Leveret has no figure for
UNMEASURED = {"garbage_collection", "reductions", "reductions_details", "idle_since"}


@pytest.fixture
def site(amqp10: Amqp10Broker) -> Iterator[Site]:
    """A vhost and a user of the test's own, on each broker (over AMQP 1.0, its plugin
    enabled)."""
    yield from make_site(amqp10.broker, "a10")


def client(site: Site, user: str = "guest", password: str = "guest") -> Amqp10Client:
    return Amqp10Client(site.broker.host, site.broker.port, site.vhost, user, password)


def normal(item: dict[str, Any], site: Site) -> dict[str, Any]:
    """A row with what differs by nature set aside: ports, times, the node, the vhost."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        if key in UNMEASURED:
            continue
        if key in VOLATILE:
            value = type(value).__name__
        elif isinstance(value, str):
            value = PORTS.sub(":P", value.replace(site.vhost, "VHOST"))
        elif isinstance(value, dict):
            value = normal(value, site)
        out[key] = value
    return out


def rows(site: Site) -> list[dict[str, Any]]:
    """The vhost's AMQP 1.0 connections."""
    items = site.api.get(f"/api/vhosts/{q(site.vhost)}/connections")
    return [c for c in items if c.get("protocol", "").startswith("AMQP 1")]


def wait_rows(site: Site, count: int) -> list[dict[str, Any]]:
    found = wait_for(lambda: len(rows(site)) == count and rows(site), STATS_WAIT, 0.3)
    assert found, f"expected {count} AMQP 1.0 connections, have {rows(site)}"
    return found


def declare_queue(site: Site, name: str) -> None:
    assert site.api.put(f"/api/queues/{q(site.vhost)}/{q(name)}", {"durable": False}) == 201


# --------------------------------------------------------------------- tests
def test_each_session_is_listed_as_a_direct_connection(site: Site) -> None:
    """No row before a session begins; one per session, under the socket's name; alone
    it is shown as listed; two of one name are found by it no more (404)."""
    c = client(site)
    try:
        c.pump(1.5)  # RabbitMQ would have listed it by now, were it to
        assert rows(site) == []
        s1 = c.session()
        (row,) = wait_rows(site, 1)
        assert normal(row, site) == {
            "client_properties": {},
            "connected_at": "int",
            "host": "127.0.0.1",
            "name": "127.0.0.1:P -> 127.0.0.1:P",
            "node": "str",
            "peer_host": "127.0.0.1",
            "peer_port": "int",
            "port": "int",
            "protocol": "AMQP 1.0",
            "ssl": False,
            "type": "direct",
            "user": "guest",
            "user_who_performed_action": "guest",
            "vhost": "VHOST",
        }
        path = f"/api/connections/{q(row['name'])}"
        assert site.api.get(path) == row
        projected = {"name": row["name"], "protocol": "AMQP 1.0", "type": "direct"}
        assert projected in site.api.get("/api/connections?columns=name,protocol,type")
        page = site.api.get(f"/api/connections?page=1&page_size=5&name={q(row['name'])}")
        assert (page["filtered_count"], page["items"]) == (1, [row])
        # one vhost's connections are not paged (rabbit_mgmt_util:reply_list)
        assert rows(site) == [row]
        assert site.api.get(f"/api/vhosts/{q(site.vhost)}/connections?page=1") == [row]
        c.session()
        assert [r["name"] for r in wait_rows(site, 2)] == [row["name"]] * 2
        assert site.api.call("GET", path) == (
            404,
            {"error": "Object Not Found", "reason": "Not Found"},
        )
        assert site.api.call("DELETE", path)[0] == 404
        s1.close()
        c.wait(lambda: bool(s1.state & CLOSED))
        wait_rows(site, 1)
    finally:
        c.close()
    assert wait_for(lambda: rows(site) == [], STATS_WAIT, 0.3)


def test_the_sessions_channel_and_consumer(site: Site) -> None:
    """A session's channel 1: confirm mode for an unsettled publisher, the plugin's
    prefetch, its publishes, confirms, deliveries and acknowledgements; its consumer's
    tag, credit arguments and channel."""
    declare_queue(site, "a10q")
    c = client(site)
    try:
        s = c.session()
        sender = c.sender(s, "/amq/queue/a10q")
        for body in ("one", "two"):
            sender.send(_message(body))
        receiver = c.receiver(s, "/amq/queue/a10q", credit=5)
        receiver.receive(timeout=10)
        receiver.receive(timeout=10)
        receiver.accept()  # the first: the second stays unacknowledged
        c.pump(0.5)  # the disposition goes out
        (row,) = wait_rows(site, 1)

        def channel() -> dict[str, Any]:
            # channel 1 (RabbitMQ may still list an attach's disposable channel 2 a moment)
            found = site.api.get(f"/api/connections/{q(row['name'])}/channels")
            ones = [ch for ch in found if ch["number"] == 1]
            return {k: v for k, v in ones[0].items() if k not in UNMEASURED} if ones else {}

        expected = {
            "acks_uncommitted": 0,
            "confirm": True,
            "connection_details": {
                "name": "127.0.0.1:P -> 127.0.0.1:P",
                "peer_host": "127.0.0.1",
                "peer_port": "int",
            },
            "consumer_count": 1,
            "global_prefetch_count": 0,
            "message_stats": {
                "ack": 1,
                "confirm": 2,
                "deliver": 2,
                "deliver_get": 2,
                "deliver_no_ack": 0,
                "drop_unroutable": 0,
                "get": 0,
                "get_empty": 0,
                "get_no_ack": 0,
                "publish": 2,
                "redeliver": 0,
                "return_unroutable": 0,
            },
            "messages_unacknowledged": 1,
            "messages_uncommitted": 0,
            "messages_unconfirmed": 0,
            "name": "127.0.0.1:P -> 127.0.0.1:P (1)",
            "node": "str",
            "number": 1,
            "pending_raft_commands": 0,
            "prefetch_count": 65535,
            "state": "running",
            "transactional": False,
            "user": "guest",
            "user_who_performed_action": "guest",
            "vhost": "VHOST",
        }
        # RabbitMQ's figures arrive over several of its statistics intervals
        wait_for(lambda: normal(_without_rates(channel()), site) == expected, STATS_WAIT, 0.5)
        ch = _without_rates(channel())
        assert normal(ch, site) == expected
        listed = [
            x
            for x in site.api.get(f"/api/vhosts/{q(site.vhost)}/channels")
            if x["name"] == ch["name"]
        ]
        assert [x["number"] for x in listed] == [1]
        (consumer,) = site.api.get(f"/api/consumers/{q(site.vhost)}")
        assert normal(consumer, site) == {
            "ack_required": True,
            "active": True,
            "activity_status": "up",
            "arguments": {"x-credit": {"credit": 0, "drain": False}},
            "channel_details": {
                "connection_name": "127.0.0.1:P -> 127.0.0.1:P",
                "name": "127.0.0.1:P -> 127.0.0.1:P (1)",
                "node": "str",
                "number": 1,
                "peer_host": "127.0.0.1",
                "peer_port": "int",
                "user": "guest",
            },
            "consumer_tag": "ctag-\x00\x00\x00\x01",
            "exclusive": False,
            "prefetch_count": 65535,
            "queue": {"name": "a10q", "vhost": "VHOST"},
        }
    finally:
        c.close()


def test_closing_the_connection_ends_the_session(site: Site) -> None:
    """DELETE /api/connections/{name} closes the session's direct connection: the session
    ends with amqp:internal-error and the Erlang term of why (the reason's character
    codes), and the AMQP 1.0 connection stays open."""
    declare_queue(site, "a10q")
    for attempt in (1, 2):
        c = client(site)
        s = c.session()
        c.receiver(s, "/amq/queue/a10q", credit=3)
        (row,) = wait_rows(site, 1)
        path = f"/api/connections/{q(row['name'])}"
        assert site.api.call("DELETE", path, headers={"X-Reason": "bye now"})[0] == 204
        try:
            c.wait(lambda s=s: bool(s.state & CLOSED))  # type: ignore[misc]
            break
        except ConnectionException:
            # RabbitMQ 3.10.8's plugin, now and then on a loaded machine: the session's end
            # took its reader down too, and the socket was aborted. Once more, on it alone.
            c.close()
            if site.broker.name != "rabbitmq" or attempt == 2:
                raise
            assert wait_for(lambda: rows(site) == [], STATS_WAIT, 0.3)
    try:
        assert s.remote_condition.name == "amqp:internal-error"
        assert s.remote_condition.description == (
            "{shutdown,{connection_closing,{server_initiated_close,320,"
            "[98,121,101,32,110,111,119]}}}"
        )
        assert not c.closed
        assert wait_for(lambda: rows(site) == [], STATS_WAIT, 0.3)
        assert site.api.get(f"/api/consumers/{q(site.vhost)}") == []
    finally:
        c.close()


def test_connection_limits_refuse_a_session(site: Site) -> None:
    """The vhost's and the user's max-connections count sessions (their direct
    connections), checked at begin: the refused session closes the connection with
    amqp:unauthorized-access."""
    api = site.api
    assert api.put(f"/api/vhost-limits/{q(site.vhost)}/max-connections", {"value": 1}) == 204
    c = client(site)
    try:
        assert c.session().state & ACTIVE
        refused = c.session()
        c.wait(lambda: c.closed)
        assert not refused.state & ACTIVE
        condition = c.conn.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:unauthorized-access",
            "Access for user 'guest' was refused: insufficient permissions",
        )
    finally:
        c.close()
    assert api.delete(f"/api/vhost-limits/{q(site.vhost)}/max-connections") == 204
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/api/permissions/{q(site.vhost)}/{q(site.user)}", perms) == 204
    assert api.put(f"/api/user-limits/{q(site.user)}/max-connections", {"value": 1}) == 204
    b = site.broker
    params = pika.ConnectionParameters(
        b.host, b.port, site.vhost, pika.PlainCredentials(site.user, site.password)
    )
    held = pika.BlockingConnection(params)  # the user's one connection
    c = client(site, site.user, site.password)
    try:
        c.session(wait=False)
        c.wait(lambda: c.closed)
        condition = c.conn.remote_condition
        assert (condition.name, condition.description) == (
            "amqp:unauthorized-access",
            f"Access for user '{site.user}' was refused: insufficient permissions",
        )
    finally:
        c.close()
        held.close()
        api.delete(f"/api/user-limits/{q(site.user)}/max-connections")


def test_rabbitmqctl_lists_the_channel_not_the_connection(site: Site) -> None:
    """rabbitmqctl list_connections does not list a session's direct connection (it
    lists network connections); list_channels lists its channel; close_connection with
    that channel's connection pid closes nothing."""
    c = client(site)
    try:
        s = c.session()
        wait_rows(site, 1)
        conns = site.ctl("list_connections", "vhost", "protocol", "name").stdout.splitlines()
        assert [r for r in conns if site.vhost in r] == []
        chans = site.ctl("list_channels", "vhost", "number", "connection").stdout.splitlines()
        mine = [r.split("\t") for r in chans if r.startswith(site.vhost + "\t")]
        assert [r[1] for r in mine] == ["1"]
        pid = mine[0][2]
        closed = site.ctl("close_connection", pid, "go away")
        assert closed.stdout == f"Closing connection {pid}, reason: go away...\n"
        c.pump(1)
        assert s.state & ACTIVE and len(rows(site)) == 1
    finally:
        c.close()


# ------------------------------------------------------------------- helpers
def _message(body: str) -> Any:
    from proton import Message

    return Message(body=body)


def _without_rates(item: dict[str, Any]) -> dict[str, Any]:
    """A channel with its message figures and none of their rates (they move)."""
    out = dict(item)
    stats = out.get("message_stats")
    if isinstance(stats, dict):
        out["message_stats"] = {k: v for k, v in stats.items() if not k.endswith("_details")}
    return out
