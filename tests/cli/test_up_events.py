"""``leveret up`` puts the broker's events (rabbitmq_event_exchange) in the lake: its
broker runs with the plugin, besides the plugins the user asked for, and the lake's stream
is bound to ``amq.rabbitmq.event``; a broker without the plugin costs one line, not up."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from leveret.cli import up
from leveret.spark.reader import read_stream_range


def _stream(url: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()


def test_the_brokers_events_reach_the_lakes_stream_as_facility_broker_records(
    tmp_path: Path,
) -> None:
    with leveret.Broker(plugins=["rabbitmq_event_exchange"], data_dir=tmp_path) as b:
        _stream(b.url, "logs-ev")
        assert up._bind_broker_events(b.url, "logs-ev")
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("orders")
        ch.queue_delete("orders")
        conn.close()
        bad = pika.URLParameters(b.url.replace("guest:guest", "guest:wrong"))
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(bad)
        # the stream's length: consumed up to the last event wanted
        wanted = {"queue.deleted", "user.authentication.failure"}
        keys: list[str] = []
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)

        def got(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
            keys.append(method.routing_key)
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume("logs-ev", got, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 20
        while not wanted <= set(keys) and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
        assert wanted <= set(keys), keys
        conn.close()
        batches = read_stream_range(b.url, "logs-ev", 0, len(keys), records=True)
        found = {r["routing_key"]: r for batch in batches for r in batch.to_pylist()}
        assert set(found) == set(keys)
        created = found["queue.created"]
        assert (created["facility"], created["severity"], created["_corrupt"]) == (
            "broker", "info", None)  # fmt: skip
        assert created["message"] == "queue.created name=orders vhost=/ by guest"
        assert found["queue.deleted"]["message"] == "queue.deleted name=orders vhost=/ by guest"
        failed = found["user.authentication.failure"]
        assert (failed["facility"], failed["severity"]) == ("broker", "warning")
        assert str(failed["message"]).startswith("user.authentication.failure name=guest by guest")
        assert str(found["connection.created"]["host"]).startswith("rabbit@")  # its node


def test_a_broker_without_the_event_exchange_costs_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with leveret.Broker(data_dir=tmp_path) as b:
        _stream(b.url, "logs-ne")
        assert not up._bind_broker_events(b.url, "logs-ne")
        _stream(b.url, "logs-ne")  # the broker still serves up's next step
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "amq.rabbitmq.event" in lines[0], lines


def test_ups_broker_runs_the_event_exchange_besides_the_users_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEVERET_PLUGINS", raising=False)
    assert up._server_plugins(None) == ("rabbitmq_event_exchange",)
    conf = tmp_path / "leveret.toml"
    conf.write_text('plugins = ["rabbitmq_consistent_hash_exchange"]\n')
    assert up._server_plugins(conf) == (
        "rabbitmq_consistent_hash_exchange", "rabbitmq_event_exchange")  # fmt: skip
    monkeypatch.setenv("LEVERET_PLUGINS", "rabbitmq_event_exchange")
    assert up._server_plugins(conf) == ("rabbitmq_event_exchange",)  # the env wins, as in server
    conf.write_text('plugins = ["no_such_plugin"]\n')
    assert up._server_plugins(conf) is None  # the server says why
