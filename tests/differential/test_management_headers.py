"""The headers of the management API's answers, the same on Leveret and on RabbitMQ 3.10.8:
``content-type`` (``application/json``, no charset), ``cache-control: no-cache`` on a
resource's reply but not on an error, ``vary`` (what a resource's answer depends on, or
``origin`` alone before any resource answers), the content security policy on every answer,
the login challenge, and gzip for a JSON body large enough when the client accepts it
(cowboy_compress_h: 300 bytes and more).

``date``, ``server`` and ``content-length`` are left out: the bodies differ in length (each
broker describes itself)."""

from __future__ import annotations

import http.client
import uuid

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import GUEST

pytestmark = pytest.mark.rabbitmq

COMPARED = (
    "content-type",
    "cache-control",
    "vary",
    "content-security-policy",
    "content-encoding",
    "www-authenticate",
)


def headers(
    broker: BrokerUnderTest,
    method: str,
    path: str,
    auth: bool = True,
    gzip: bool = False,
    body: bytes | None = None,
) -> tuple[int, dict[str, str]]:
    """The status and the compared headers (lower-cased names) of one request."""
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    sent = {"Authorization": GUEST} if auth else {}
    if gzip:
        sent["Accept-Encoding"] = "gzip"
    if body is not None:
        sent["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=body, headers=sent)
        r = conn.getresponse()
        r.read()
        got = {k.lower(): v for k, v in r.getheaders()}
        return r.status, {k: got[k] for k in COMPARED if k in got}
    finally:
        conn.close()


CSP = "script-src 'self' 'unsafe-eval' 'unsafe-inline'; object-src 'self'"
RESOURCE = "accept, accept-encoding, origin"


@pytest.mark.parametrize("gzip", [False, True])
def test_a_resource_reply(mbroker: BrokerUnderTest, gzip: bool) -> None:
    status, got = headers(mbroker, "GET", "/api/overview", gzip=gzip)
    expected = {
        "content-type": "application/json",
        "cache-control": "no-cache",
        "vary": RESOURCE,
        "content-security-policy": CSP,
    }
    if gzip:
        expected["content-encoding"] = "gzip"
    assert (status, got) == (200, expected)


def test_a_small_body_is_not_compressed(mbroker: BrokerUnderTest) -> None:
    status, got = headers(mbroker, "GET", "/api/whoami", gzip=True)
    assert (status, got) == (
        200,
        {
            "content-type": "application/json",
            "cache-control": "no-cache",
            "vary": RESOURCE,
            "content-security-policy": CSP,
        },
    )


def test_an_error_has_no_cache_control(mbroker: BrokerUnderTest) -> None:
    missing = f"/api/queues/%2F/no-such-{uuid.uuid4().hex[:8]}"
    assert headers(mbroker, "GET", missing, gzip=True) == (
        404,
        {"content-type": "application/json", "vary": RESOURCE, "content-security-policy": CSP},
    )


def test_the_login_challenge(mbroker: BrokerUnderTest) -> None:
    assert headers(mbroker, "GET", "/api/overview", auth=False) == (
        401,
        {
            "vary": "origin",
            "content-security-policy": CSP,
            "www-authenticate": 'Basic realm="RabbitMQ Management"',
        },
    )


def test_an_unknown_path(mbroker: BrokerUnderTest) -> None:
    assert headers(mbroker, "GET", "/api/no-such-thing") == (
        404,
        {"content-type": "application/json", "vary": "origin", "content-security-policy": CSP},
    )


def test_created_and_deleted(mbroker: BrokerUnderTest) -> None:
    path = f"/api/queues/%2F/headers-{uuid.uuid4().hex[:8]}"
    answered = {"vary": RESOURCE, "content-security-policy": CSP}
    assert headers(mbroker, "PUT", path, body=b"{}") == (201, answered)
    assert headers(mbroker, "PUT", path, body=b"{}") == (204, answered)
    assert headers(mbroker, "DELETE", path) == (204, answered)


@pytest.mark.parametrize(
    ("path", "vary"),
    [
        ("/api/queues", RESOURCE),
        ("/api/vhost-limits", "accept-encoding, origin"),
        ("/api/vhost-limits/%2F", "accept-encoding, origin"),
        ("/api/user-limits", "accept-encoding, origin"),
        ("/api/operator-policies", "accept-encoding, origin"),
        ("/api/topic-permissions", "accept-encoding, origin"),
        ("/api/users/guest/topic-permissions", "accept-encoding, origin"),
        ("/api/stream/connections", "origin"),
        ("/api/stream/publishers", "origin"),
        ("/api/definitions/no-such-vhost", RESOURCE),
    ],
)
def test_what_each_resource_varies_with(mbroker: BrokerUnderTest, path: str, vary: str) -> None:
    """cowboy_rest adds ``accept`` where a resource offers more than one content type;
    the resources that offer one (and the stream plugin's listings, which name no
    variances) vary with less."""
    assert headers(mbroker, "GET", path)[1]["vary"] == vary
