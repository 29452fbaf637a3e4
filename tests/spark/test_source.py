"""format("amqp") against each broker: batch reads of offset ranges, streaming reads from a
stream queue and from a classic queue, and the errors that stop a query."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pika
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from tests.spark.conftest import delete_queue, emit_records, stream_port
from tests.support.brokers import BrokerUnderTest
from tests.support.ports import free_port


def test_batch_read_of_an_offset_range(
    spark: SparkSession, broker: BrokerUnderTest, stream: str, protocol: dict[str, str]
) -> None:
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(30):
        ch.basic_publish(
            "",
            stream,
            f"body {i}".encode(),
            pika.BasicProperties(
                content_type="text/plain",
                message_id=f"m{i}",
                timestamp=1_700_000_000 + i,
                headers={"n": i, "s": "x"},
                delivery_mode=2,
            ),
        )
    conn.close()
    df = (
        spark.read.format("amqp")
        .options(**protocol)
        .option("url", broker.url)
        .option("stream", stream)
        .option("startingOffsets", "5")
        .option("endingOffsets", "25")
        .load()
    )
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == list(range(5, 25))
    r = rows[0]
    assert r.body == b"body 5"
    assert (r.exchange, r.routing_key, r.redelivered) == ("", stream, False)
    assert (r.content_type, r.message_id, r.delivery_mode) == ("text/plain", "m5", 2)
    assert r.timestamp.replace(tzinfo=UTC) == datetime.fromtimestamp(1_700_000_005, UTC)
    assert r.headers["n"] == "5" and r.headers["s"] == "x"
    assert r.headers["x-stream-offset"] == "5"
    everything = spark.read.format("amqp").options(**protocol).option("url", broker.url)
    assert everything.option("stream", stream).load().count() == 30


def _stream_into(spark: SparkSession, url: str, stream: str, tmp: Path, **options: str) -> int:
    reader = spark.readStream.format("amqp").option("url", url).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .select("offset", "message_id", "body")
        .writeStream.format("parquet")
        .option("path", str(tmp / "out"))
        .option("checkpointLocation", str(tmp / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    return len(query.recentProgress)


def test_streaming_read_resumes_from_its_checkpoint(
    spark: SparkSession,
    broker: BrokerUnderTest,
    stream: str,
    tmp_path: Path,
    protocol: dict[str, str],
) -> None:
    emit_records(broker.url, stream, range(0, 3000))
    batches = _stream_into(
        spark, broker.url, stream, tmp_path, maxRecordsPerTrigger="1000", **protocol
    )
    assert batches >= 3
    emit_records(broker.url, stream, range(3000, 3500))
    _stream_into(spark, broker.url, stream, tmp_path, maxRecordsPerTrigger="1000", **protocol)
    out = spark.read.parquet(str(tmp_path / "out"))
    ids = [int(r.message_id) for r in out.select("message_id").collect()]
    assert sorted(ids) == list(range(3500))
    offsets = sorted(r.offset for r in out.select("offset").collect())
    assert offsets == list(range(3500))
    last = (tmp_path / "cp" / "offsets").iterdir()
    newest = max(last, key=lambda p: int(p.name) if p.name.isdigit() else -1)
    assert f'{{"stream": "{stream}", "offset": 3500}}' in newest.read_text()


def test_starting_offsets_latest_skips_what_is_there(
    spark: SparkSession,
    broker: BrokerUnderTest,
    stream: str,
    tmp_path: Path,
    protocol: dict[str, str],
) -> None:
    emit_records(broker.url, stream, range(100))
    _stream_into(spark, broker.url, stream, tmp_path, startingOffsets="latest", **protocol)
    emit_records(broker.url, stream, range(100, 150))
    _stream_into(spark, broker.url, stream, tmp_path, **protocol)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(int(r.message_id) for r in out.collect()) == list(range(100, 150))


def _failure(spark: SparkSession, **options: str) -> str:
    reader = spark.readStream.format("amqp")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    with pytest.raises(PySparkException) as info:
        query.awaitTermination(120)
    assert not query.isActive
    return str(info.value)


def test_a_missing_stream_stops_the_query_with_a_clear_error(
    spark: SparkSession, broker: BrokerUnderTest
) -> None:
    text = _failure(spark, url=broker.url, stream="no-such-stream-here")
    assert "stream 'no-such-stream-here' does not exist" in text
    assert "NOT_FOUND - no queue 'no-such-stream-here' in vhost '/'" in text


def test_a_missing_stream_stops_a_stream_protocol_read_too(
    spark: SparkSession, broker: BrokerUnderTest
) -> None:
    port = str(stream_port(broker))
    text = _failure(
        spark, url=broker.url, stream="no-such-stream-here", protocol="stream", streamPort=port
    )
    assert "stream 'no-such-stream-here' does not exist" in text


def test_protocol_auto_falls_back_to_amqp_when_the_stream_port_is_shut(
    spark: SparkSession, broker: BrokerUnderTest, stream: str, tmp_path: Path
) -> None:
    emit_records(broker.url, stream, range(20))
    _stream_into(spark, broker.url, stream, tmp_path, protocol="auto", streamPort=str(free_port()))
    out = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(int(r.message_id) for r in out.collect()) == list(range(20))


def test_a_wrong_url_stops_the_query_with_a_clear_error(spark: SparkSession) -> None:
    text = _failure(spark, url="amqp://guest:secret@127.0.0.1:1/", stream="logs")
    assert "cannot connect to amqp://guest:***@127.0.0.1:1/" in text
    assert "secret" not in text


def test_a_wrong_password_stops_the_query_with_a_clear_error(
    spark: SparkSession, broker: BrokerUnderTest
) -> None:
    url = f"amqp://guest:wrong@{broker.host}:{broker.port}/"
    text = _failure(spark, url=url, stream="logs")
    assert "ACCESS_REFUSED" in text


def test_a_classic_queue_is_not_read_as_a_stream(
    spark: SparkSession, broker: BrokerUnderTest
) -> None:
    name = f"classic-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(broker.pika_params())
    conn.channel().queue_declare(name)
    conn.close()
    try:
        emit_records(broker.url, name, range(3))
        text = _failure(spark, url=broker.url, stream=name)
        assert f"'{name}'" in text and "is not a stream" in text
    finally:
        delete_queue(broker, name)


def test_options_are_checked(spark: SparkSession) -> None:
    with pytest.raises(Exception, match="exactly one of the options stream"):
        spark.read.format("amqp").load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        reader = spark.read.format("amqp").option("stream", "s")
        reader.option("startingOffsets", "soon").load().collect()
