"""The management API's publish and get take the same path as an AMQP client's publish,
basic.get, basic.ack and basic.reject, on Leveret as on RabbitMQ 3.10.8: what the broker
refuses comes back as a 400 naming the AMQP error, a full reject-publish queue is a
"rejected" 400, and a get with ``reject_requeue_false`` dead-letters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential.helpers import death_times_checked
from tests.support.mgmt import Site, q

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(params=["leveret", "rabbitmq"])
def site(request: pytest.FixtureRequest) -> Site:
    s: Site = request.getfixturevalue(f"{request.param}_site")
    return s


def channel(site: Site) -> Any:
    conn = site.connect()
    return conn, conn.channel()


def publish(site: Site, exchange: str, body: dict[str, Any], api: Any = None) -> tuple[int, Any]:
    message = {"routing_key": "", "properties": {}, "payload": "x", "payload_encoding": "string"}
    message.update(body)
    return (api or site.api).call(
        "POST", f"/api/exchanges/{q(site.vhost)}/{q(exchange)}/publish", message
    )


def answers(site: Site) -> Iterator[tuple[str, tuple[int, Any]]]:
    conn, ch = channel(site)
    ch.exchange_declare("t-internal", "fanout", internal=True)
    ch.queue_declare("t-full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_declare("t-plain")
    conn.close()
    v = q(site.vhost)
    yield "internal", publish(site, "t-internal", {})
    yield "missing", publish(site, "t-nope", {})
    yield "first fits", publish(site, "amq.default", {"routing_key": "t-full"})
    yield "full", publish(site, "amq.default", {"routing_key": "t-full"})
    yield "routed", publish(site, "amq.default", {"routing_key": "t-plain"})
    yield "unroutable", publish(site, "amq.default", {"routing_key": "t-nowhere"})
    yield "user_id", publish(site, "amq.default", {"properties": {"user_id": "someone"}})
    yield "expiration", publish(site, "amq.default", {"properties": {"expiration": "soon"}})
    # a user who may not write: the AMQP texts, the default exchange named amq.default
    assert site.api.put(
        f"/api/permissions/{v}/{q(site.user)}", {"configure": ".*", "write": "^$", "read": ".*"}
    ) in (201, 204)
    as_user = site.api.as_user(site.user, site.password)
    yield "no write, default", publish(site, "amq.default", {"routing_key": "t-plain"}, as_user)
    yield "no write, fanout", publish(site, "amq.fanout", {}, as_user)


def normalized(site: Site) -> dict[str, Any]:
    """Each case's answer, with the site's own vhost name made the same on both."""
    return {
        case: json.loads(json.dumps(answer).replace(site.vhost, "VHOST"))
        for case, answer in answers(site)
    }


def test_publish_answers_match(leveret_site: Site, rabbitmq_site: Site) -> None:
    ours = normalized(leveret_site)
    theirs = normalized(rabbitmq_site)
    for case in theirs:
        assert ours[case] == theirs[case], case
    assert theirs["internal"] == [
        400,
        {
            "error": "bad_request",
            "reason": "403 ACCESS_REFUSED - cannot publish to internal exchange 't-internal' in "
            "vhost 'VHOST'",
        },
    ]
    assert theirs["full"] == [
        400,
        {
            "error": "bad_request",
            "reason": "rejected Unable to publish message. Check queue limits.",
        },
    ]
    assert theirs["routed"] == [200, {"routed": True}]
    assert theirs["unroutable"] == [200, {"routed": False}]


def test_publish_to_an_internal_exchange_is_refused(site: Site) -> None:
    conn, ch = channel(site)
    ch.exchange_declare("t-int", "fanout", internal=True)
    ch.queue_declare("t-behind")
    ch.queue_bind("t-behind", "t-int")
    status, body = publish(site, "t-int", {})
    assert status == 400
    assert body["reason"].startswith("403 ACCESS_REFUSED - cannot publish to internal exchange")
    # nothing got through to the queue behind it
    assert ch.queue_declare("t-behind", passive=True).method.message_count == 0
    conn.close()


def dead_letters_of_a_rejecting_get(site: Site) -> list[tuple[bytes, dict[str, Any]]]:
    conn, ch = channel(site)
    ch.exchange_declare("t-dlx", "fanout")
    ch.queue_declare("t-dead")
    ch.queue_bind("t-dead", "t-dlx")
    ch.queue_declare("t-work", arguments={"x-dead-letter-exchange": "t-dlx"})
    ch.confirm_delivery()
    for i in range(2):
        ch.basic_publish("", "t-work", f"job {i}".encode())
    status, got = site.api.call(
        "POST",
        f"/api/queues/{q(site.vhost)}/t-work/get",
        {"count": 2, "ackmode": "reject_requeue_false", "encoding": "auto"},
    )
    assert status == 200 and [m["payload"] for m in got] == ["job 0", "job 1"]
    assert ch.queue_declare("t-work", passive=True).method.message_count == 0
    out = []
    for _ in range(2):
        method, props, body = ch.basic_get("t-dead", auto_ack=True)
        assert method is not None, "the rejected message was not dead-lettered"
        # time: each broker's clock, checked for type and closeness
        out.append((body, death_times_checked(props.headers)))
    conn.close()
    return out


def test_get_with_reject_requeue_false_dead_letters(
    leveret_site: Site, rabbitmq_site: Site
) -> None:
    ours = dead_letters_of_a_rejecting_get(leveret_site)
    theirs = dead_letters_of_a_rejecting_get(rabbitmq_site)
    assert ours == theirs
    body, headers = theirs[0]
    assert body == b"job 0"
    assert headers["x-first-death-reason"] == "rejected"
