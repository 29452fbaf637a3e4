"""RabbitMQ 3.10.8's health checks, the same on Leveret and on RabbitMQ: virtual hosts,
mirror-sync and quorum criticality, port and protocol listeners, certificate expiry and
the deprecated ``/api/healthchecks/node``: status, body byte for byte, the headers a
monitor sees, and the bad-input answers.

A failed listener check lists the node's listeners, which differ by design (RabbitMQ has a
clustering listener, its ports are its own): those compare by shape, status, reason and
``missing``; tests/management/test_health.py checks Leveret's lists are its listeners."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import GUEST

pytestmark = pytest.mark.rabbitmq

CHECKS = "/api/health/checks"


def call(
    broker: BrokerUnderTest, path: str, method: str = "GET", auth: bool = True
) -> tuple[int, bytes, dict[str, str]]:
    """Status, body and (lower-cased) headers of one request."""
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    try:
        conn.request(method, path, headers={"Authorization": GUEST} if auth else {})
        r = conn.getresponse()
        body = r.read()
        return r.status, body, {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def node_name(broker: BrokerUnderTest) -> str:
    status, body, _ = call(broker, "/api/overview")
    assert status == 200
    name: str = json.loads(body)["node"]
    return name


OK = b'{"status":"ok"}'
SINGLE = b'{"status":"ok","reason":"single node cluster"}'
UNIT = (
    b'{"error":"bad_request","reason":"Time unit not recognised. '
    b'Supported units: days, weeks, months, years."}'
)
VALUE = b'{"error":"bad_request","reason":"Invalid expiration value."}'


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        (f"{CHECKS}/virtual-hosts", 200, OK),
        (f"{CHECKS}/virtual-hosts/", 200, OK),
        (f"{CHECKS}/node-is-mirror-sync-critical", 200, SINGLE),
        (f"{CHECKS}/node-is-quorum-critical", 200, SINGLE),
        (f"{CHECKS}/port-listener/abc", 400, b'{"error":"bad_request","reason":"Invalid port"}'),
        (f"{CHECKS}/port-listener/5672x", 400, b'{"error":"bad_request","reason":"Invalid port"}'),
        (f"{CHECKS}/protocol-listener/amqp", 200, b'{"status":"ok","protocol":"amqp"}'),
        (f"{CHECKS}/protocol-listener/amqp091", 200, b'{"status":"ok","protocol":"amqp"}'),
        (f"{CHECKS}/protocol-listener/AMQP0-9-1", 200, b'{"status":"ok","protocol":"amqp"}'),
        (f"{CHECKS}/protocol-listener/http", 200, b'{"status":"ok","protocol":"http"}'),
        (f"{CHECKS}/protocol-listener/Management", 200, b'{"status":"ok","protocol":"http"}'),
        (f"{CHECKS}/protocol-listener/stream", 200, b'{"status":"ok","protocol":"stream"}'),
        (
            f"{CHECKS}/protocol-listener/http%2Fprometheus",
            200,
            b'{"status":"ok","protocol":"http/prometheus"}',
        ),
        (f"{CHECKS}/certificate-expiration/1/months", 200, OK),
        (f"{CHECKS}/certificate-expiration/10/YEARS", 200, OK),
        (f"{CHECKS}/certificate-expiration/-1/days", 200, OK),
        (f"{CHECKS}/certificate-expiration/{10**30}/years", 200, OK),
        (f"{CHECKS}/certificate-expiration/-{10**30}/Weeks", 200, OK),
        (f"{CHECKS}/certificate-expiration/1/foo", 400, UNIT),
        (f"{CHECKS}/certificate-expiration/x/days", 400, VALUE),
        (f"{CHECKS}/certificate-expiration/1.5/days", 400, VALUE),
        (f"{CHECKS}/certificate-expiration/x/foo", 400, VALUE),
        ("/api/healthchecks/node", 200, OK),
        ("/api/healthchecks/node/", 200, OK),
        ("/api/healthchecks/node/rabbit@nosuch", 404, None),
        # Cowboy drops dot segments before routing: no check but the static files' 404
        (f"{CHECKS}/protocol-listener/..", 404, None),
        (f"{CHECKS}/protocol-listener/%2E", 404, None),
        (f"{CHECKS}/port-listener/.", 404, None),
        (f"{CHECKS}/certificate-expiration/../days", 404, None),
        (f"{CHECKS}/certificate-expiration/x/..", 404, None),
        ("/api/healthchecks/node/..", 404, None),
        ("/api/healthchecks/node/.", 200, OK),
    ],
)
def test_a_check_answers_as_rabbitmq(
    mbroker: BrokerUnderTest, path: str, status: int, body: bytes | None
) -> None:
    got_status, got_body, headers = call(mbroker, path)
    assert got_status == status, got_body
    if body is not None:
        assert got_body == body
    else:
        assert json.loads(got_body) == {"error": "Object Not Found", "reason": "Not Found"}
    assert headers["content-type"] == "application/json"
    # the static files' 404 is the listener's, before any resource's variances
    static = status == 404 and ("/." in path or "%2E" in path)
    assert headers["vary"] == ("origin" if static else "accept, accept-encoding, origin")
    # a resource's reply (a pass or a failed check) has cache-control; an error has none
    assert headers.get("cache-control") == ("no-cache" if status in (200, 503) else None)


def test_the_node_by_name(mbroker: BrokerUnderTest) -> None:
    status, body, _ = call(mbroker, f"/api/healthchecks/node/{node_name(mbroker)}")
    assert (status, body) == (200, OK)


def test_a_port_with_a_listener(mbroker: BrokerUnderTest) -> None:
    for port in (mbroker.port, mbroker.http_port, mbroker.prometheus_port):
        status, body, _ = call(mbroker, f"{CHECKS}/port-listener/{port}")
        assert (status, body) == (200, b'{"status":"ok","port":%d}' % port)


def failure(broker: BrokerUnderTest, path: str) -> tuple[dict[str, object], dict[str, str]]:
    status, body, headers = call(broker, path)
    assert status == 503, body
    assert headers["content-type"] == "application/json"
    assert headers["cache-control"] == "no-cache"
    assert headers["vary"] == "accept, accept-encoding, origin"
    data: dict[str, object] = json.loads(body)
    return data, headers


@pytest.mark.parametrize("port", ["1", "+1", "0", "70000", "-5"])
def test_a_port_without_a_listener(mbroker: BrokerUnderTest, port: str) -> None:
    data, _ = failure(mbroker, f"{CHECKS}/port-listener/{port}")
    assert list(data) == ["status", "reason", "missing", "ports"]
    assert data["status"] == "failed"
    assert data["reason"] == "No active listener"
    assert data["missing"] == int(port)
    ports = data["ports"]
    assert isinstance(ports, list) and mbroker.port in ports and mbroker.http_port in ports


@pytest.mark.parametrize(
    ("asked", "missing"),
    [
        ("foo", "foo"),
        ("AMQPS", "amqp/ssl"),
        ("amqp%2Fssl", "amqp/ssl"),
        ("mqtt3.1.1", "mqtt"),
        ("stomp+tls", "stomp/ssl"),
        ("https", "https"),
        ("Web-MQTT%2Btls", "https/web-mqtt"),
        ("webstomp", "http/web-stomp"),
    ],
)
def test_a_protocol_without_a_listener(mbroker: BrokerUnderTest, asked: str, missing: str) -> None:
    data, _ = failure(mbroker, f"{CHECKS}/protocol-listener/{asked}")
    assert list(data) == ["status", "reason", "missing", "protocols"]
    assert (data["status"], data["reason"], data["missing"]) == (
        "failed",
        "No active listener",
        missing,
    )
    protocols = data["protocols"]
    assert isinstance(protocols, list) and "amqp" in protocols and "http" in protocols


@pytest.mark.parametrize(
    "path",
    [
        f"{CHECKS}/virtual-hosts",
        f"{CHECKS}/port-listener/1",
        f"{CHECKS}/certificate-expiration/1/days",
        "/api/healthchecks/node",
    ],
)
def test_without_credentials_and_other_methods(mbroker: BrokerUnderTest, path: str) -> None:
    status, _, headers = call(mbroker, path, auth=False)
    assert status == 401
    assert "www-authenticate" in headers
    status, body, headers = call(mbroker, path, method="OPTIONS")
    assert (status, body) == (200, b"")
    assert headers["allow"] == "HEAD, GET, OPTIONS"
    status, body, headers = call(mbroker, path, method="DELETE")
    assert (status, body) == (405, b"")
    assert headers["allow"] == "HEAD, GET, OPTIONS"
