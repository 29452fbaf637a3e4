"""The pipeline's broker set-up and options (no Spark job here)."""

from __future__ import annotations

import uuid

import pika
import pytest

from leveret.spark.client import AmqpSourceError, stream_tail
from leveret.spark.pipeline import ensure_log_stream, parse_trigger
from tests.spark.conftest import delete_queue
from tests.support.brokers import BrokerUnderTest


@pytest.mark.parametrize("kind", ["fanout", "direct", "topic"])
def test_the_stream_receives_everything_sent_to_the_logs_exchange(
    broker: BrokerUnderTest, kind: str
) -> None:
    exchange = f"logs-{uuid.uuid4().hex[:8]}"
    stream = f"{exchange}-stream"
    conn = pika.BlockingConnection(broker.pika_params())
    conn.channel().exchange_declare(exchange, kind)
    try:
        ensure_log_stream(broker.url, stream, exchange)
        ensure_log_stream(broker.url, stream, exchange)  # idempotent
        ch = conn.channel()
        ch.confirm_delivery()
        keys = ["debug", "info", "warning", "error", "critical", "kern.error", "auth.info"]
        for key in keys:
            ch.basic_publish(exchange, key, key.encode())
        expected = len(keys) if kind != "direct" else 5  # direct: severity keys only
        assert stream_tail(broker.url, stream) == expected
    finally:
        conn.channel().exchange_delete(exchange)
        conn.close()
        delete_queue(broker, stream)


def test_a_missing_logs_exchange_is_declared_as_emit_log_does(broker: BrokerUnderTest) -> None:
    exchange = f"logs-{uuid.uuid4().hex[:8]}"
    stream = f"{exchange}-stream"
    ensure_log_stream(broker.url, stream, exchange)
    conn = pika.BlockingConnection(broker.pika_params())
    try:
        # emit-log's declaration (fanout, transient) is equivalent: no 406
        conn.channel().exchange_declare(exchange, "fanout")
        conn.channel().exchange_delete(exchange)
    finally:
        conn.close()
        delete_queue(broker, stream)


def test_a_classic_queue_of_the_same_name_is_refused(broker: BrokerUnderTest) -> None:
    name = f"logs-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(broker.pika_params())
    conn.channel().queue_declare(name, durable=True)
    conn.close()
    try:
        with pytest.raises(
            AmqpSourceError,
            match=f"cannot declare stream '{name}': "
            "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'",
        ):
            ensure_log_stream(broker.url, name, "")
    finally:
        delete_queue(broker, name)


def test_triggers() -> None:
    assert parse_trigger("availableNow") == {"availableNow": True}
    assert parse_trigger("once") == {"once": True}
    assert parse_trigger("1s") == {"processingTime": "1000 milliseconds"}
    assert parse_trigger("500ms") == {"processingTime": "500 milliseconds"}
    assert parse_trigger("2 minutes") == {"processingTime": "120000 milliseconds"}
    with pytest.raises(ValueError, match="invalid trigger 'soon'"):
        parse_trigger("soon")


def test_a_full_disk_is_named_by_the_directory_the_query_wrote() -> None:
    """A full disk met by a task's writer names the file; met anywhere else (the sink's
    metadata log, a commit) it names the query's output directory that the error names."""
    from pathlib import Path

    from leveret.spark.pipeline import query_error

    lake, checkpoint = Path("/data/lake"), Path("/data/checkpoint")
    writer = OSError(
        "Task failed while writing rows to file:/data/lake/date=x/part-1.parquet."
        "\nCaused by: java.io.IOException: No space left on device"
    )
    assert query_error(writer, (lake, checkpoint)) == (
        "cannot write /data/lake/date=x/part-1.parquet: No space left on device"
    )
    log = OSError(
        "java.io.IOException: failed to write /data/lake/_spark_metadata/3.tmp"
        "\nCaused by: No space left on device"
    )
    assert query_error(log, (lake, checkpoint)) == (
        "cannot write /data/lake: No space left on device"
    )
    bare = OSError("No space left on device")
    assert query_error(bare, (lake, checkpoint)) == "No space left on device"
