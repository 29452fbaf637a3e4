"""RabbitMQ's incoming message interceptors (``message_interceptors.incoming.*``), which
stamp what clients publish with the broker's arrival time and node.

RabbitMQ 3.10.8 has none (they came in 3.12), so there is no broker here to compare with:
the behaviour pinned is RabbitMQ's source, tag v3.13.7: deps/rabbit/src/
rabbit_message_interceptor.erl (``timestamp_in_ms`` as a long in milliseconds and the
``timestamp`` property in seconds, each left alone when present and overwrite is false;
``x-routed-by`` with the node's name) and deps/rabbit/src/mc_amqpl.erl (protocol_state:
the headers of a stamped message are sorted by key), and its rabbit.schema mapping of
``message_interceptors.incoming.$interceptor.overwrite`` (an unknown name "is invalid")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret import Broker
from leveret.server.config import Config, ConfigError


@contextmanager
def _channel(**settings: Any) -> Iterator[Any]:
    with Broker(**settings) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            ch = conn.channel()
            ch.queue_declare("q")
            yield ch
        finally:
            conn.close()


def _roundtrip(ch: Any, props: pika.BasicProperties | None = None) -> pika.BasicProperties:
    ch.basic_publish("", "q", b"x", props or pika.BasicProperties())
    for _ in range(200):
        method, got, _ = ch.basic_get("q", auto_ack=True)
        if method is not None:
            return got
        time.sleep(0.01)
    raise AssertionError("nothing delivered")


def test_set_header_timestamp_stamps_the_arrival_time_unless_the_publisher_did() -> None:
    with _channel(message_interceptors="set_header_timestamp=false") as ch:
        before = int(time.time() * 1000)
        got = _roundtrip(ch, pika.BasicProperties(headers={"b": 1, "a": "x"}))
        after = int(time.time() * 1000)
        ms = got.headers["timestamp_in_ms"]
        assert before <= ms <= after
        assert got.timestamp == ms // 1000
        # the headers of a stamped message are sorted by key, as RabbitMQ rebuilds them
        assert list(got.headers) == ["a", "b", "timestamp_in_ms"]
        # without overwrite, what the publisher set stays, each on its own
        got = _roundtrip(ch, pika.BasicProperties(timestamp=1000))
        assert got.timestamp == 1000 and before <= got.headers["timestamp_in_ms"]
        got = _roundtrip(ch, pika.BasicProperties(headers={"timestamp_in_ms": 7}))
        assert got.headers["timestamp_in_ms"] == 7 and got.timestamp >= before // 1000


def test_overwrite_replaces_what_the_publisher_set() -> None:
    with _channel(message_interceptors="set_header_timestamp=true") as ch:
        got = _roundtrip(ch, pika.BasicProperties(timestamp=1000, headers={"timestamp_in_ms": 7}))
        assert got.headers["timestamp_in_ms"] > 7 and got.timestamp > 1000


def test_set_header_routing_node_names_the_node() -> None:
    with _channel(
        message_interceptors="set_header_routing_node=false", node_name="rabbit@here"
    ) as ch:
        assert _roundtrip(ch).headers == {"x-routed-by": "rabbit@here"}
        kept = _roundtrip(ch, pika.BasicProperties(headers={"x-routed-by": "elsewhere"}))
        assert kept.headers == {"x-routed-by": "elsewhere"} and kept.timestamp is None


def test_off_by_default_as_in_rabbitmq() -> None:
    with _channel() as ch:
        got = _roundtrip(ch)
        assert got.headers is None and got.timestamp is None


def test_the_config_file_takes_rabbitmq_confs_keys(tmp_path: Path) -> None:
    conf = tmp_path / "leveret.toml"
    conf.write_text("message_interceptors.incoming.set_header_timestamp.overwrite = false\n")
    assert Config.load(conf, env={}).message_interceptors == (("set_header_timestamp", False),)
    conf.write_text("message_interceptors.incoming.set_header_stamp.overwrite = false\n")
    with pytest.raises(ConfigError, match="set_header_stamp is invalid"):
        Config.load(conf, env={})
    env = {"LEVERET_MESSAGE_INTERCEPTORS": "set_header_timestamp=true,set_header_routing_node=no"}
    assert Config.load(env=env).message_interceptors == (
        ("set_header_timestamp", True),
        ("set_header_routing_node", False),
    )
    with pytest.raises(ConfigError, match="name=true or name=false"):
        Config.load(env={"LEVERET_MESSAGE_INTERCEPTORS": "set_header_timestamp"})


def test_a_stamped_time_is_the_records_time_for_every_reader() -> None:
    """A plain-text record (the tutorial's emit_log.py sets no time) read later has the
    time it arrived, not the time it was read."""
    from leveret.logs.reading import Envelope, read

    with _channel(message_interceptors="set_header_timestamp=false") as ch:
        ch.confirm_delivery()
        sent = datetime.now(UTC).replace(microsecond=0)  # what ms, seconds, round down to
        ch.basic_publish("", "q", b"error: disk full")
        confirmed = datetime.now(UTC)
        time.sleep(0.5)
        method, props, body = ch.basic_get("q", auto_ack=True)
        read_at = datetime.now(UTC)
        assert method is not None
        record = read(body, Envelope(headers=props.headers, timestamp=props.timestamp))
        ts = datetime.fromisoformat(record.ts)
        assert sent <= ts <= confirmed < read_at
        assert record.severity == "error"
