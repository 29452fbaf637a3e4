"""A small client of the management HTTP API for tests (RabbitMQ's and Leveret's)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management

#: the Authorization header of guest/guest, for tests that speak HTTP themselves
GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def q(name: str) -> str:
    return quote(name, safe="")


class Api:
    def __init__(self, base: str, user: str = "guest", password: str = "guest") -> None:
        self.base = base.rstrip("/")
        self.user = user
        self.password = password

    def as_user(self, user: str, password: str) -> Api:
        return Api(self.base, user, password)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, Any]:
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if auth:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw) if raw.strip() else None
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body)
        return body

    def put(self, path: str, body: Any = None) -> int:
        return self.call("PUT", path, {} if body is None else body)[0]

    def delete(self, path: str) -> int:
        return self.call("DELETE", path)[0]


# A queue's figures that follow time and load on either broker: its consumers' utilisation and
# capacity and its message rates. Differential tests leave them out of the comparison of
# values (what each broker's figures must be is checked by test_measured_differential.py).
QUEUE_RATES = frozenset(
    {
        "consumer_utilisation",
        "consumer_capacity",
        "message_stats",
        "messages_details",
        "messages_ready_details",
        "messages_unacknowledged_details",
    }
)


# ------------------------------------------------------------------ scenario
GEN_NAME = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


def normalize(text: str) -> str:
    """Server-generated queue names differ between brokers: give them one name."""
    return GEN_NAME.sub("amq.gen-X", text)


@dataclass
class Site:
    """One broker with a vhost and a user of the test's own."""

    broker: BrokerUnderTest
    api: Api
    vhost: str
    user: str
    password: str
    # a RabbitMQ node of the test's own: its rabbitmqctl (``-n`` and environment set)
    node_ctl: Callable[..., subprocess.CompletedProcess[str]] | None = None

    def connect(self, name: str | None = None) -> Any:
        """A pika connection to the site's vhost as guest; ``name`` is its connection_name
        (what the management API shows as the client's name)."""
        import pika

        props = {} if name is None else {"client_properties": {"connection_name": name}}
        return pika.BlockingConnection(
            pika.ConnectionParameters(
                self.broker.host, self.broker.port, virtual_host=self.vhost, **props
            )
        )

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl`` on RabbitMQ, ``leveret ctl`` on Leveret."""
        if self.node_ctl is not None:
            result = self.node_ctl(*args, timeout=120)
            if check:
                assert result.returncode == 0, (args, result.stdout, result.stderr)
            return result
        if self.broker.name == "rabbitmq":
            cmd = ["rabbitmqctl", *args]
        else:
            cmd = [
                sys.executable,
                "-m",
                "leveret.cli.main",
                "ctl",
                "--url",
                self.broker.http_url,
                *args,
            ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, (cmd, result.stdout, result.stderr)
        return result


def make_site(
    broker: BrokerUnderTest,
    tag: str = "t",
    node_ctl: Callable[..., subprocess.CompletedProcess[str]] | None = None,
) -> Iterator[Site]:
    api = Api(broker.http_url)
    vhost = f"{tag}-{uuid.uuid4().hex[:8]}"
    user = f"{vhost}-user"
    assert api.put(f"/api/vhosts/{q(vhost)}") == 201
    # the API gives the vhost's creator full permissions already (RabbitMQ does)
    assert (
        api.put(
            f"/api/permissions/{q(vhost)}/guest", {"configure": ".*", "write": ".*", "read": ".*"}
        )
        == 204
    )
    assert api.put(f"/api/users/{q(user)}", {"password": "s3cret", "tags": "management"}) == 201
    assert (
        api.put(
            f"/api/permissions/{q(vhost)}/{q(user)}",
            {"configure": "^t-", "write": ".*", "read": ""},
        )
        == 201
    )
    try:
        yield Site(broker, api, vhost, user, "s3cret", node_ctl)
    finally:
        api.delete(f"/api/vhosts/{q(vhost)}")
        api.delete(f"/api/users/{q(user)}")


@contextmanager
def prepared(
    sites: tuple[Site, Site], prepare: Callable[[Site], Any]
) -> Iterator[tuple[Site, Site]]:
    """``prepare`` on each site in turn (it returns a connection that keeps what it made,
    such as consumers and exclusive queues), then the sites while those connections stay
    open; they are closed at the end."""
    conns = [prepare(site) for site in sites]
    try:
        yield sites
    finally:
        for conn in conns:
            conn.close()


def rabbitmq_with_management(rabbitmq: BrokerUnderTest) -> BrokerUnderTest:
    if not ensure_rabbitmq_management():
        pytest.fail("RabbitMQ's management plugin could not be enabled")
    return rabbitmq


def site_of(request: pytest.FixtureRequest, tag: str) -> Iterator[Site]:
    """For a fixture parametrized by broker name ("leveret", "rabbitmq"): a site on that
    broker (RabbitMQ's management API enabled first), its vhost named after ``tag``."""
    broker: BrokerUnderTest = request.getfixturevalue(request.param)
    if request.param == "rabbitmq":
        broker = rabbitmq_with_management(broker)
    yield from make_site(broker, tag)


def declare_scenario(site: Site) -> Any:
    """The same declarations, bindings and publishes on either broker (the tutorial's
    logs exchange and its server-named exclusive queue among them). Returns the open
    connection: its exclusive queue lives as long as it does."""
    import pika

    conn = site.connect()
    ch = conn.channel()
    ch.exchange_declare("logs", "fanout")
    ch.exchange_declare("direct_logs", "direct", durable=True)
    ch.exchange_declare("topic_logs", "topic", auto_delete=True)
    ch.exchange_declare("ae", "fanout", durable=True)
    ch.exchange_declare("with-ae", "direct", durable=True, arguments={"alternate-exchange": "ae"})
    ch.exchange_declare("hdrs", "headers", internal=True)
    ch.queue_declare("hello", durable=True)
    ch.queue_declare(
        "task_queue",
        durable=True,
        arguments={"x-message-ttl": 60000, "x-max-length": 100, "x-dead-letter-exchange": "logs"},
    )
    ch.queue_declare("transient")
    tmp = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind("hello", "logs")
    ch.queue_bind(tmp, "logs")
    ch.queue_bind("task_queue", "direct_logs", "error")
    ch.queue_bind("task_queue", "direct_logs", "warning")
    ch.queue_bind("transient", "topic_logs", "*.critical")
    ch.queue_bind("transient", "hdrs", "", arguments={"x-match": "any", "level": "error"})
    ch.queue_bind("hello", "ae")
    ch.exchange_bind("logs", "direct_logs", "info")
    ch.confirm_delivery()
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=1)
    for i in range(3):
        ch.basic_publish("logs", "", f"MessageToEveryOne: {i}".encode(), props)
    for _ in range(2):
        ch.basic_publish(
            "direct_logs", "error", b"disk full", pika.BasicProperties(delivery_mode=2)
        )
    ch.basic_publish("direct_logs", "info", b"info line")
    return conn


# queue -> messages after declare_scenario
EXPECTED_DEPTHS = {"hello": 4, "task_queue": 2, "transient": 0, "amq.gen-X": 4}


# ------------------------------------------------------------------ fixtures
# Imported by the conftest files of tests/management, tests/cli and tests/e2e.


@pytest.fixture
def leveret_site(leveret: BrokerUnderTest) -> Iterator[Site]:
    """A vhost and a user of the test's own on the session's Leveret."""
    yield from make_site(leveret)


@pytest.fixture
def rabbitmq_site(rabbitmq: BrokerUnderTest) -> Iterator[Site]:
    """A vhost and a user of the test's own on RabbitMQ, its management API enabled."""
    yield from make_site(rabbitmq_with_management(rabbitmq))
