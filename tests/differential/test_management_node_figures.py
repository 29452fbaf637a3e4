"""What ``/api/nodes`` and ``/api/vhosts`` show of a node's churn, its SASL mechanisms, its
files and a vhost's connection traffic, the same on Leveret and on RabbitMQ 3.10.8:
connection_created/closed, channel_created/closed and queue_declared/created/deleted
(rabbit_core_metrics' connection_churn_metrics, each with its rate), auth_mechanisms
(rabbit_mgmt_external_stats: every mechanism the node has, enabled as configured),
db_dir, config_files, log_files, cluster_links; and a vhost's recv_oct/send_oct, its
connections' bytes (rabbit_mgmt_metrics_collector's vhost_stats_coarse_conn_stats), which
a vhost no connection has been in does not show.

The counters are the node's, so RabbitMQ is a node of the test's own (the shared reference
counts the other tests' connections too); its statistics arrive every second, so its side
is polled until it settles."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest

import leveret
from tests.support import rabbitmq
from tests.support.mgmt import GUEST
from tests.support.rawclient import end_early
from tests.support.waiting import STATS_WAIT, settled, wait_for

pytestmark = pytest.mark.rabbitmq

CHURN = (
    "connection_created",
    "connection_closed",
    "channel_created",
    "channel_closed",
    "queue_declared",
    "queue_created",
    "queue_deleted",
)


class Node:
    """One broker under test: its AMQP port and its management API."""

    def __init__(self, name: str, port: int, http_port: int) -> None:
        self.name, self.port, self.http_port = name, port, http_port

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        headers = {"Authorization": GUEST}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (self.name, path, status, body)
        return body

    def node(self) -> dict[str, Any]:
        """The node, once its statistics have arrived (a node just started has none)."""

        def ready() -> dict[str, Any] | None:
            (node,) = self.get("/api/nodes")
            return node if "connection_created" in node else None

        node = wait_for(ready, STATS_WAIT)
        assert node, (self.name, self.get("/api/nodes"))
        return node

    def churn(self) -> dict[str, int]:
        node = self.node()
        return {key: node[key] for key in CHURN}

    def connect(self, vhost: str = "/") -> pika.BlockingConnection:
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", self.port, virtual_host=vhost)
        )


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Node]]:
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(
        management=True, config={"collect_statistics_interval": "1000"}
    ).start()
    try:
        base = tmp_path_factory.mktemp("node-figures")
        config = base / "leveret.toml"
        config.write_text("[server]\nheartbeat = 60\n")
        with leveret.Broker(management=True, data_dir=base / "data", config=config) as b:
            assert b.management_url is not None
            http_port = int(b.management_url.rsplit(":", 1)[1].strip("/"))
            yield {
                "leveret": Node("leveret", b.port, http_port),
                "rabbitmq": Node("rabbitmq", node.port, node.http_port),
            }
    finally:
        node.close()


def shape(value: Any) -> Any:
    """A JSON value's type, lists and objects by their members' shapes."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return sorted({json.dumps(shape(v), sort_keys=True) for v in value})
    return type(value).__name__


def test_the_node_fields_have_rabbitmqs_types(nodes: dict[str, Node]) -> None:
    keys = (*CHURN, *(f"{k}_details" for k in CHURN), "auth_mechanisms")
    shapes = {}
    for name, node in nodes.items():
        got = node.node()
        for key in keys:
            assert key in got, (name, key)
        assert isinstance(got["db_dir"], str) and Path(got["db_dir"]).is_absolute()
        for key in ("config_files", "log_files"):
            assert all(isinstance(f, str) for f in got[key]), (name, key, got[key])
        # each node was started with a configuration file of its own
        assert len(got["config_files"]) == 1 and Path(got["config_files"][0]).is_file()
        # RabbitMQ's lists its Erlang distribution links (rabbitmqctl's among them);
        # Leveret, one node without Erlang, has none
        assert isinstance(got["cluster_links"], list)
        assert name == "rabbitmq" or got["cluster_links"] == []
        shapes[name] = {key: shape(got[key]) for key in keys}
    assert shapes["leveret"] == shapes["rabbitmq"]


def test_plain_and_amqplain_as_rabbitmq_describes_them(nodes: dict[str, Node]) -> None:
    mechanisms = {}
    for name, node in nodes.items():
        listed = node.node()["auth_mechanisms"]
        mechanisms[name] = {m["name"]: m for m in listed if m["name"] in ("PLAIN", "AMQPLAIN")}
    assert mechanisms["leveret"] == mechanisms["rabbitmq"]
    assert mechanisms["leveret"]["PLAIN"] == {
        "name": "PLAIN",
        "description": "SASL PLAIN authentication mechanism",
        "enabled": True,
    }
    # Leveret has EXTERNAL always (RabbitMQ's rabbitmq_auth_mechanism_ssl), not enabled
    # unless configured
    (external,) = [m for m in nodes["leveret"].node()["auth_mechanisms"] if m["name"] == "EXTERNAL"]
    assert external["enabled"] is False


def moved(node: Node, act: Any) -> dict[str, int]:
    """How much each churn counter moved over ``act`` (polled until it settles)."""
    before = settled(node.churn)
    act(node)
    after = settled(node.churn)
    return {key: after[key] - before[key] for key in CHURN}


def connections_and_channels(node: Node) -> None:
    conns = [node.connect() for _ in range(2)]
    channels = [conn.channel() for conn in conns for _ in range(3)]
    for ch in channels[:3]:
        ch.close()  # three closed by the client, three with their connection
    for conn in conns:
        conn.close()


def test_connections_and_channels_count_as_in_rabbitmq(nodes: dict[str, Node]) -> None:
    got = {name: moved(node, connections_and_channels) for name, node in nodes.items()}
    assert got["leveret"] == got["rabbitmq"]
    assert got["rabbitmq"] == {
        "connection_created": 2,
        "connection_closed": 2,
        "channel_created": 6,
        "channel_closed": 6,
        "queue_declared": 0,
        "queue_created": 0,
        "queue_deleted": 0,
    }


def early_ends(node: Node) -> None:
    """Sockets that end before any login: one that sent nothing, one that sent part of a
    protocol header, one that read connection.start, one refused for a wrong header."""
    for data in (b"", b"AMQP\x00", b"AMQP\x00\x00\x09\x01", b"HTTP/1.1"):
        end_early(node.port, data)


def test_connections_that_end_before_a_login_count_as_closed(nodes: dict[str, Node]) -> None:
    """rabbit_reader counts every connection it read in connection_closed as it ends;
    connection_created only at connection.open."""
    got = {}
    for name, node in nodes.items():
        before = settled(node.churn)["connection_closed"]

        def ended(n: Node, before: int = before) -> None:
            early_ends(n)
            # RabbitMQ's figure for them comes seconds after they end: waited for first
            wait_for(lambda: n.churn()["connection_closed"] >= before + 4, 15)

        got[name] = moved(node, ended)
    assert got["leveret"] == got["rabbitmq"]
    assert got["rabbitmq"]["connection_created"] == 0
    assert got["rabbitmq"]["connection_closed"] == 4


def queue_life(node: Node) -> None:
    conn = node.connect()
    ch = conn.channel()
    name = f"figures-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name)
    ch.queue_declare(name)  # again: declared, not created
    ch.queue_declare(name, passive=True)  # a passive declaration is not counted
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare(name, durable=True)  # not equivalent: declared all the same
    ch = conn.channel()
    ch.queue_delete(name)
    conn.close()


def test_queue_declarations_count_as_in_rabbitmq(nodes: dict[str, Node]) -> None:
    got = {name: moved(node, queue_life) for name, node in nodes.items()}
    assert got["leveret"] == got["rabbitmq"]
    assert {k: v for k, v in got["rabbitmq"].items() if k.startswith("queue")} == {
        "queue_declared": 3,
        "queue_created": 1,
        "queue_deleted": 1,
    }


def test_a_vhost_counts_its_connections_bytes(nodes: dict[str, Node]) -> None:
    """No figure before a connection has been in the vhost; then its bytes, which stay
    once the connection is gone and grow with the next one's."""
    for node in nodes.values():
        vhost_traffic(node)


def vhost_traffic(node: Node) -> None:
    name = node.name
    vhost = f"figures-{uuid.uuid4().hex[:8]}"
    path = f"/api/vhosts/{quote(vhost, safe='')}"
    assert node.call("PUT", path)[0] in (201, 204)
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert node.call("PUT", f"/api/permissions/{quote(vhost, safe='')}/guest", perms)[0] in (
        201,
        204,
    )
    body = b"x" * 20000

    def grown(at_least: int) -> dict[str, Any] | None:
        v = node.get(path)
        return v if v.get("recv_oct", 0) >= at_least and v.get("send_oct", 0) else None

    def octets() -> tuple[int, int]:
        v = node.get(path)
        return v["recv_oct"], v["send_oct"]

    try:
        assert "recv_oct" not in node.get(path), name
        # RabbitMQ counts what a connection's reader last reported (each stats
        # interval): the connection stays until its bytes are seen
        conn = node.connect(vhost)
        ch = conn.channel()
        ch.queue_declare("q")
        for _ in range(5):
            ch.basic_publish("", "q", body)
        first = wait_for(lambda: grown(5 * len(body)), STATS_WAIT)
        conn.close()
        assert first, (name, node.get(path))
        assert isinstance(first["recv_oct_details"]["rate"], (int, float))
        assert isinstance(first["send_oct_details"]["rate"], (int, float))
        kept = settled(octets)
        assert kept[0] >= 5 * len(body), name  # the closed connection's bytes stay
        conn = node.connect(vhost)
        ch = conn.channel()
        for _ in range(5):
            ch.basic_publish("", "q", body)
        more = wait_for(lambda: grown(kept[0] + 5 * len(body)), STATS_WAIT)
        conn.close()
        assert more, (name, kept, node.get(path))
    finally:
        node.call("DELETE", path)
