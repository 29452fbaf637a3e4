"""The broker's own log on amq.rabbitmq.log, as RabbitMQ's ``log.exchange = true``: the
exchange (topic, durable, internal) in the default vhost, a message per log line with the
level as routing key, text/plain, a timestamp and the node; compared with a RabbitMQ node
of the test's own started with that setting."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support import rabbitmq
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret
from tests.support.waiting import wait_for

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\+00:00 \[(\w+)\] <[^>]+> ")


@pytest.fixture(params=["leveret", "rabbitmq"])
def logging_broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, BrokerUnderTest, Any]]:
    """A broker publishing its log to amq.rabbitmq.log, and how to list its exchanges."""
    if request.param == "leveret":
        broker = start_leveret(extra=["--log-exchange"])

        def ctl(*args: str) -> str:
            return subprocess.run(
                [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", broker.http_url, *args],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout

        try:
            yield "leveret", broker, ctl
        finally:
            broker.stop()
        return
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(config={"log.exchange": "true"}).start()
    try:

        def rctl(*args: str) -> str:
            return node.ctl(*args).stdout

        yield "rabbitmq", BrokerUnderTest("rabbitmq", node.host, node.port), rctl
    finally:
        node.close()


def test_the_log_exchange(logging_broker: tuple[str, BrokerUnderTest, Any]) -> None:
    _kind, broker, ctl = logging_broker
    row = "amq.rabbitmq.log\ttopic\ttrue\ttrue\tfalse\t[]"
    columns = ("name", "type", "durable", "internal", "auto_delete", "arguments")
    # RabbitMQ declares it a moment after boot
    wait_for(lambda: row in ctl("list_exchanges", *columns), 30, 0.5)
    assert row in ctl("list_exchanges", *columns)
    conn = pika.BlockingConnection(broker.pika_params())
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.rabbitmq.log", "#")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("amq.rabbitmq.log", "info", b"x")
            ch.queue_declare("", exclusive=True)
        assert info.value.reply_code == 403
        ch = conn.channel()
        with pytest.raises(pika.exceptions.AMQPError):
            pika.BlockingConnection(
                pika.ConnectionParameters(
                    broker.host, broker.port, credentials=pika.PlainCredentials("guest", "wrong")
                )
            )
        errors: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            m, p, body = ch.basic_get(q, auto_ack=True)
            if m is None:
                time.sleep(0.1)
                continue
            text = body.decode()
            assert m.exchange == "amq.rabbitmq.log"
            assert p.content_type == "text/plain" and p.delivery_mode is None
            assert abs(p.timestamp - time.time()) < 60
            assert list(p.headers) == ["node"] and "@" in p.headers["node"]
            lines = text.splitlines()
            assert text.endswith("\n") and all(LINE.match(line) for line in lines), text
            assert {LINE.match(line)[1] for line in lines} == {m.routing_key}  # type: ignore[index]
            if "login refused" in text:
                # the line as RabbitMQ words it, without the pid (Leveret's logger name)
                errors.append((m.routing_key, [LINE.sub("", line) for line in lines]))
    finally:
        conn.close()
    assert len(errors) == 1, errors
    level, lines = errors[0]
    assert level == "error"
    assert re.fullmatch(
        r"Error on AMQP connection (<[\d.]+> )?\(127\.0\.0\.1:\d+ -> "
        r"127\.0\.0\.1:\d+, state: starting\):",
        lines[0],
    ), lines
    assert lines[1:] == ["PLAIN login refused: user 'guest' - invalid credentials"]


def test_off_by_default(leveret: BrokerUnderTest) -> None:
    """Neither broker has the exchange unless told to (the shared RabbitMQ has not)."""
    brokers = [leveret]
    rabbit = ensure_rabbitmq()
    if rabbit is not None:
        brokers.append(rabbit)
    for broker in brokers:
        conn = pika.BlockingConnection(broker.pika_params())
        try:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                conn.channel().exchange_declare("amq.rabbitmq.log", passive=True)
            assert info.value.reply_code == 404
        finally:
            if conn.is_open:
                conn.close()
