"""Binding listings of names that do not exist, the same on Leveret and on RabbitMQ 3.10.8:
rabbit_mgmt_wm_bindings lists what the names match whether or not the queue or exchange
exists (a queue's implicit binding to the default exchange is made from its name), and a
vhost that does not exist lists nothing, except the vhost-wide listing, which is 404."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import GUEST

pytestmark = pytest.mark.rabbitmq


def get(broker: BrokerUnderTest, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": GUEST})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def implicit(queue: str) -> dict[str, Any]:
    return {
        "source": "",
        "vhost": "/",
        "destination": queue,
        "destination_type": "queue",
        "routing_key": queue,
        "arguments": {},
        "properties_key": queue,
    }


def test_missing_names_list_what_they_match(mbroker: BrokerUnderTest) -> None:
    tag = uuid.uuid4().hex[:8]
    q, x = f"no-queue-{tag}", f"no-exchange-{tag}"
    assert get(mbroker, f"/api/queues/%2F/{q}/bindings") == (200, [implicit(q)])
    assert get(mbroker, f"/api/exchanges/%2F/{x}/bindings/source") == (200, [])
    assert get(mbroker, f"/api/exchanges/%2F/{x}/bindings/destination") == (200, [])
    assert get(mbroker, f"/api/bindings/%2F/e/amq.direct/q/{q}") == (200, [])
    assert get(mbroker, f"/api/bindings/%2F/e/{x}/e/{x}") == (200, [])
    assert get(mbroker, f"/api/bindings/%2F/e/amq.default/q/{q}") == (200, [implicit(q)])


def test_a_missing_vhost_lists_nothing(mbroker: BrokerUnderTest) -> None:
    vhost = f"no-vhost-{uuid.uuid4().hex[:8]}"
    assert get(mbroker, f"/api/queues/{vhost}/q/bindings") == (200, [])
    assert get(mbroker, f"/api/exchanges/{vhost}/x/bindings/source") == (200, [])
    assert get(mbroker, f"/api/bindings/{vhost}/e/amq.direct/q/q") == (200, [])
    status, _ = get(mbroker, f"/api/bindings/{vhost}")
    assert status == 404
