"""Interop with the unmodified Node client amqplib (npm, pinned in package-lock.json), over
real sockets, against Leveret and RabbitMQ.

``tests/interop/node/interop.js`` runs one scenario per process and prints JSON that these
tests judge. ``npm ci`` runs once per session when ``node_modules`` is missing. Every
assertion pins what RabbitMQ 3.10.8 does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.identity import RABBITMQ_CAPABILITIES, SERVER_PROPERTIES, cluster_name_held
from tests.support.interop import (
    QOS_DELIVERIES,
    assert_names_itself,
    fanout_tutorial,
    run_scenario,
    unavailable,
)

pytestmark = pytest.mark.node

NODE_DIR = Path(__file__).parent / "node"
SCRIPT = NODE_DIR / "interop.js"
INSTALL_HINT = (
    "scripts/install-interop-deps (apt-get install nodejs npm; npm ci in tests/interop/node)"
)


def _amqplib_installed() -> bool:
    installed = NODE_DIR / "node_modules" / "amqplib" / "package.json"
    if not installed.exists():
        return False
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    wanted = lock["packages"]["node_modules/amqplib"]["version"]
    return bool(json.loads(installed.read_text())["version"] == wanted)


@pytest.fixture(scope="session")
def node_client() -> list[str]:
    """The command that runs interop.js, with amqplib installed from the lock file."""
    node = shutil.which("node")
    if node is None:
        unavailable("Node", "Node.js (`node`) is not installed", INSTALL_HINT)
    # One installer at a time, also across pytest-xdist workers.
    digest = hashlib.sha256(str(NODE_DIR).encode()).hexdigest()[:12]
    lock_path = Path(tempfile.gettempdir()) / f"leveret-npm-ci-{digest}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _amqplib_installed():
            npm = shutil.which("npm")
            if npm is None:
                unavailable("Node", "amqplib is not installed and `npm` is missing", INSTALL_HINT)
            proc = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=NODE_DIR,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0 or not _amqplib_installed():
                unavailable("Node", f"`npm ci` failed:\n{proc.stdout}{proc.stderr}", INSTALL_HINT)
    return [node, str(SCRIPT)]


def run_node(
    client: list[str], scenario: str, broker: BrokerUnderTest, name: str, *args: str
) -> dict[str, Any]:
    return run_scenario(client, scenario, broker, name, *args, timeout=60)


def test_tutorial_fanout_every_receiver_gets_every_message(
    node_client: list[str],
    broker: BrokerUnderTest,
    name: str,
    processes: list[subprocess.Popen[str]],
) -> None:
    """The publish/subscribe tutorial in JavaScript: two receive_logs processes each get
    every message emit_log publishes, in order."""
    fanout_tutorial(node_client, broker, name, processes, timeout=60)


def test_connection_tuning_and_server_properties(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    with cluster_name_held():
        r = run_node(node_client, "connection", broker, name)
    # amqplib asks for any channel count, frame_max 131072 and the server's heartbeat.
    assert (r["channelMax"], r["frameMax"], r["heartbeat"]) == (2047, 131072, 60)
    assert r["capabilities"] == RABBITMQ_CAPABILITIES
    props = r["properties"]
    assert_names_itself(props, broker)


def test_confirm_channel_wait_for_confirms(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    r = run_node(node_client, "confirms", broker, name)
    assert r["declared"] == {"queue": f"{name}-confirms", "messageCount": 0, "consumerCount": 0}
    # 20 routed and one unroutable publish: every callback sees an ack.
    assert r["outcomes"] == [True] * 21
    assert r["messageCount"] == 20


def test_mandatory_publish_without_route_is_returned(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    r = run_node(node_client, "mandatory", broker, name)
    keys = ("replyCode", "replyText", "exchange", "routingKey", "body", "correlationId", "headers")
    returned = [
        (312, "NO_ROUTE", f"{name}-unbound", "nobody", "lost", "c-1", {"k": "v"}),
        (312, "NO_ROUTE", "", f"{name}-no-such-queue", "lost too", None, {}),
    ]
    assert r["returns"] == [dict(zip(keys, values, strict=True)) for values in returned]
    assert r["acks"] == [True, True, True]
    # basic.return reaches the client before the basic.ack of the same message.
    assert r["order"] == ["return:lost", "confirm", "return:lost too", "confirm", "confirm"]
    assert r["extraReturns"] == 0


def closed_by_server(class_id: int, method_id: int, what: str, missing: str) -> dict[str, Any]:
    """amqplib's error for a channel closed with 404 NOT_FOUND (``missing``: what is not
    found) in answer to the method ``class_id``/``method_id``; ``what`` begins its message."""
    text = f"NOT_FOUND - {missing} in vhost '/'"
    return {
        "code": 404,
        "classId": class_id,
        "methodId": method_id,
        "message": f'{what} 404 (NOT-FOUND) with message "{text}"',
    }


def test_channel_error_text_on_close(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    r = run_node(node_client, "channel_error", broker, name)
    missing = f"{name}-missing"
    exchange, queue = f"no exchange '{missing}'", f"no queue '{missing}'"
    # the methods refused: basic.publish (60, 40), exchange.declare (40, 10), queue.declare
    assert r["publish"] == closed_by_server(60, 40, "Channel closed by server:", exchange)
    assert r["channelClosed"] is True
    assert r["exchangePassive"] == closed_by_server(
        40, 10, "Operation failed: ExchangeDeclare;", exchange
    )
    assert r["queuePassive"] == closed_by_server(50, 10, "Operation failed: QueueDeclare;", queue)
    assert r["connectionError"] is None
    assert r["afterwards"] is True


def test_prefetch_ack_and_nack_requeue(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    r = run_node(node_client, "qos", broker, name)
    assert r["deliveries"] == QOS_DELIVERIES
    assert r["early"] == 0
    assert r["readyWhileUnacked"] == 2
    assert r["consumers"] == 1
    assert r["readyAfter"] == 0


def test_consumer_cancelled_when_queue_deleted(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    r = run_node(node_client, "cancel_notify", broker, name)
    assert r == {"first": "one", "deletedCount": 0, "cancelled": True, "declaredAfter": True}


def test_server_properties_wire_order(
    node_client: list[str], broker: BrokerUnderTest, name: str
) -> None:
    """amqplib keeps a field table's wire order in the object it decodes, so the order in
    connection.start is visible to JavaScript clients."""
    r = run_node(node_client, "connection", broker, name)
    assert r["propertyOrder"] == SERVER_PROPERTIES
    assert r["capabilityOrder"] == list(RABBITMQ_CAPABILITIES)
