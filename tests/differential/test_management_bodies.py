"""How the management API reads a request's JSON body, the same on Leveret and on RabbitMQ
3.10.8: rabbit_mgmt_util:decode/1 for the resources (an empty body, ``null``, ``undefined``
and JSON ``true``/``false``/``null`` are an empty object; a JSON string is refused as
doubly encoded; anything else not an object is ``not_json``), and the definitions import's
own decoder (only an empty body is empty; anything not an object is
``failed_to_parse_json``, before the vhost is looked up)."""

from __future__ import annotations

import http.client
import uuid

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import GUEST

pytestmark = pytest.mark.rabbitmq

DOUBLY = (
    b'{"error":"bad_request","reason":"invalid payload: the request body JSON-decoded to a '
    b'string. Is the input doubly-JSON-encoded?"}'
)
NOT_JSON = b'{"error":"bad_request","reason":"not_json"}'
UNPARSED = b'{"error":"bad_request","reason":"failed_to_parse_json"}'


def send(broker: BrokerUnderTest, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    headers = {"Authorization": GUEST, "Content-Type": "application/json"}
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", (201, b"")),
        (b"null", (201, b"")),
        (b"undefined", (201, b"")),
        (b"true", (201, b"")),
        (b" null ", (201, b"")),
        (b"{}", (201, b"")),
        (b'"{}"', (400, DOUBLY)),
        (b" ", (400, NOT_JSON)),
        (b"[1]", (400, NOT_JSON)),
        (b"12", (400, NOT_JSON)),
        (b"{", (400, NOT_JSON)),
    ],
)
def test_a_resource_reads_its_body(
    mbroker: BrokerUnderTest, body: bytes, expected: tuple[int, bytes]
) -> None:
    path = f"/api/queues/%2F/body-{uuid.uuid4().hex[:8]}"
    try:
        assert send(mbroker, "PUT", path, body) == expected
    finally:
        send(mbroker, "DELETE", path, b"")


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/api/definitions", b"", (204, b"")),
        ("/api/definitions", b" ", (400, UNPARSED)),
        ("/api/definitions", b"null", (400, UNPARSED)),
        ("/api/definitions", b"[1]", (400, UNPARSED)),
        ("/api/definitions", b"{", (400, UNPARSED)),
        ("/api/definitions/no-such-vhost", b"{", (400, UNPARSED)),
        (
            "/api/definitions/no-such-vhost",
            b"",
            (404, b'{"error":"not_found","reason":"vhost_not_found"}'),
        ),
    ],
)
def test_a_definitions_import_reads_its_body(
    mbroker: BrokerUnderTest, path: str, body: bytes, expected: tuple[int, bytes]
) -> None:
    assert send(mbroker, "POST", path, body) == expected


def test_a_definitions_export_of_a_missing_vhost(mbroker: BrokerUnderTest) -> None:
    conn = http.client.HTTPConnection(mbroker.host, mbroker.http_port, timeout=30)
    try:
        conn.request("GET", "/api/definitions/no-such-vhost", headers={"Authorization": GUEST})
        r = conn.getresponse()
        assert (r.status, r.read()) == (
            400,
            b'{"error":"bad_request","reason":"vhost_not_found"}',
        )
    finally:
        conn.close()
