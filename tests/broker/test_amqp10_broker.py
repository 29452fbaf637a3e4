"""A message published over AMQP 1.0 goes through the broker as any other: routed by a
headers exchange on its application properties, refused by the publish checks, queued,
dead-lettered; it stays an Amqp10Message all along, so its AMQP 1.0 consumers get its own
bare message back, while AMQP 0-9-1 consumers get its AMQP 0-9-1 view."""

from __future__ import annotations

from leveret.broker import amqp10_delivery, amqp10_message, operations
from leveret.broker.amqp10_message import Amqp10Message
from leveret.broker.exchanges import Binding
from leveret.broker.operations import Actor
from leveret.broker.users import Permission
from leveret.broker.vhost import VirtualHost
from tests.broker.amqp10_helpers import amap, application, data, header, properties, sections

_ACTOR = Actor("u", Permission("u", "/"))
_PAYLOAD = (
    header(durable=True)
    + properties(message_id=("string", "m1"))
    + application([("region", ("string", "eu"))])
    + data(b"hello")
)


def test_routed_by_application_properties_and_queued_as_published() -> None:
    vhost = VirtualHost("/")
    q, _ = vhost.declare_queue("q")
    headers = vhost.exchanges["amq.headers"]
    vhost.bind(headers, Binding("amq.headers", q, "", {"x-match": "all", "region": "eu"}))
    parsed = amqp10_message.parse(_PAYLOAD)
    message = parsed.message("amq.headers", "")
    result = operations.publish(vhost, _ACTOR, "amq.headers", message)
    assert result.routed
    entry = q.get(no_ack=True)
    assert entry is not None
    assert isinstance(entry.message, Amqp10Message)
    assert entry.message.properties == parsed.properties
    assert entry.message.body == b"hello"
    out = amqp10_delivery.delivery(entry.message, redelivered=entry.redelivered)
    assert out.endswith(_PAYLOAD[_PAYLOAD.index(b"\x00Ss") :])


def test_dead_lettered_through_a_queue() -> None:
    """Overflowing a queue dead-letters its head (maxlen): the copy in the dead-letter
    queue is still the AMQP 1.0 message, with RabbitMQ 4.2's x-opt-deaths."""
    vhost = VirtualHost("/")
    dlq, _ = vhost.declare_queue("dlq")
    vhost.bind(vhost.exchanges["amq.fanout"], Binding("amq.fanout", dlq, ""))
    vhost.declare_queue("q", arguments={"x-max-length": 1, "x-dead-letter-exchange": "amq.fanout"})
    for _ in range(2):
        message = amqp10_message.parse(_PAYLOAD).message("", "q")
        operations.publish(vhost, _ACTOR, "", message)
    entry = dlq.get(no_ack=True)
    assert entry is not None and isinstance(entry.message, Amqp10Message)
    s = sections(amqp10_delivery.delivery(entry.message))
    ma = amap(s[0x72])
    assert ma["x-exchange"] == ("string", "amq.fanout")
    assert ma["x-first-death-reason"] == ("string", "maxlen")
    (death,) = ma["x-opt-deaths"][1]
    fields = {k[1]: v for k, v in death[1]}
    assert fields["queue"] == ("string", "q")
    assert fields["reason"] == ("symbol", "maxlen")
    assert fields["routing-keys"] == ("array", [("string", "q")])
