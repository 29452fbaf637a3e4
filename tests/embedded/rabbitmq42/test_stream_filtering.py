"""Stream filtering for AMQP 0-9-1 clients (RabbitMQ 3.13 on): a publisher sets the
``x-stream-filter-value`` header, a consumer gives ``x-stream-filter`` (a string or an
array) and ``x-stream-match-unfiltered``, and the broker skips the chunks whose Bloom
filter cannot match. Pinned to v4.2.9's rabbit_stream_queue (stream_message: the
filter value is the message's ``x-stream-filter-value`` x-header once converted;
filter_spec: the consumer's arguments, match-unfiltered a bool, meaningful only with
values) and osiris_bloom; the default mode, as RabbitMQ 3.10.8, filters nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.embedded.rabbitmq42.support import MODES, broker, channel


def _publish(ch: Any) -> None:
    """One chunk per message (each confirmed before the next)."""
    ch.confirm_delivery()
    for body, value in (("r1", "red"), ("b1", "blue"), ("n1", None), ("r2", "red")):
        headers = {"x-stream-filter-value": value} if value else {}
        ch.basic_publish("", "s", body.encode(), pika.BasicProperties(headers=headers))


def _consume(ch: Any, arguments: dict[str, Any], expected: int) -> list[str]:
    got: list[str] = []
    ch.basic_qos(prefetch_count=10)
    tag = ch.basic_consume(
        "s",
        lambda c, m, p, body: got.append(body.decode()),
        arguments={"x-stream-offset": "first", **arguments},
    )
    for _ in range(50):  # until the expected count has come (or 50 turns)
        if len(got) >= expected:
            break
        ch.connection.process_data_events(time_limit=0.1)
    ch.connection.process_data_events(time_limit=0.3)  # nothing more comes
    ch.basic_cancel(tag)
    return got


@pytest.mark.parametrize("version", MODES)
def test_an_amqp091_consumer_reads_only_the_chunks_with_its_values(version: str) -> None:
    """filter_spec and osiris's reader at v4.2.9 (4.2 mode); RabbitMQ 3.10.8 knows no
    filtering (default mode): every message."""
    with (
        tempfile.TemporaryDirectory() as d,
        broker(version, data_dir=Path(d)) as b,
        channel(b) as ch,
    ):
        ch.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
        _publish(ch)
        red = _consume(ch, {"x-stream-filter": "red"}, 2)
        either = _consume(ch, {"x-stream-filter": ["red", "blue"]}, 3)
        unfiltered = _consume(ch, {"x-stream-filter": "blue", "x-stream-match-unfiltered": True}, 2)
        alone = _consume(ch, {"x-stream-match-unfiltered": True}, 4)
    if version == "4.2":
        assert red == ["r1", "r2"]
        assert either == ["r1", "b1", "r2"]
        assert unfiltered == ["b1", "n1"]
        assert alone == ["r1", "b1", "n1", "r2"]  # without values nothing is filtered
    else:
        everything = ["r1", "b1", "n1", "r2"]
        assert red == either == unfiltered == alone == everything
