"""The writer: a DataFrame published through an exchange with confirms lands in a stream,
and reads back the same (batch and streaming)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pika
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.support.brokers import BrokerUnderTest


def _exchange_into(broker: BrokerUnderTest, stream: str) -> str:
    exchange = f"spark-x-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.exchange_declare(exchange, "topic", auto_delete=True)
    ch.queue_bind(stream, exchange, "app.#")
    conn.close()
    return exchange


def test_a_dataframe_round_trips_through_an_exchange_into_a_stream(
    spark: SparkSession, broker: BrokerUnderTest, stream: str
) -> None:
    exchange = _exchange_into(broker, stream)
    when = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    rows = [(f"app.{i % 3}", f"payload {i}", f"id-{i}", when, {"n": str(i)}) for i in range(500)]
    rows.append(("other.key", "not routed to the stream", "id-x", when, {}))
    df = spark.createDataFrame(
        rows, "key string, text string, id string, at timestamp, h map<string,string>"
    )
    (
        df.write.format("amqp")
        .option("url", broker.url)
        .option("exchange", exchange)
        .option("routingKeyColumn", "key")
        .option("bodyColumn", "text")
        .option("property.message_id", "id")
        .option("property.timestamp", "at")
        .option("headersColumn", "h")
        .option("property.content_type", "key")  # any column can feed any property
        .option("persistent", "true")
        .mode("append")
        .save()
    )
    back = spark.read.format("amqp").option("url", broker.url).option("stream", stream).load()
    got = sorted(back.collect(), key=lambda r: int(r.message_id.split("-")[1]))
    assert len(got) == 500
    for i, r in enumerate(got):
        assert r.exchange == exchange
        assert r.routing_key == f"app.{i % 3}"
        assert r.body == f"payload {i}".encode()
        assert r.message_id == f"id-{i}"
        assert r.timestamp.replace(tzinfo=UTC) == when
        assert r.headers["n"] == str(i)
        assert r.delivery_mode == 2
        assert r.content_type == f"app.{i % 3}"


def test_the_default_columns_of_a_read_are_a_valid_write(
    spark: SparkSession, broker: BrokerUnderTest, stream: str
) -> None:
    """Rows read from one stream can be written to another as they are (routing_key,
    body, properties and headers columns map by name)."""
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", stream, b"m%d" % i, pika.BasicProperties(message_id=str(i)))
    target = f"spark-copy-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(target, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    try:
        src = spark.read.format("amqp").option("url", broker.url).option("stream", stream)
        src.load().withColumn("routing_key", F.lit(target)).write.format("amqp").option(
            "url", broker.url
        ).mode("append").save()
        copy = spark.read.format("amqp").option("url", broker.url).option("stream", target)
        got = sorted((r.message_id, r.body) for r in copy.load().collect())
        assert got == sorted((str(i), b"m%d" % i) for i in range(20))
    finally:
        conn = pika.BlockingConnection(broker.pika_params())
        conn.channel().queue_delete(target)
        conn.close()


def test_the_streaming_writer_publishes_each_batch(
    spark: SparkSession, broker: BrokerUnderTest, stream: str, tmp_path: Path
) -> None:
    exchange = _exchange_into(broker, stream)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("\n".join(f'{{"k": "app.a", "v": "{i}"}}' for i in range(50)))
    query = (
        spark.readStream.schema("k string, v string")
        .json(str(src))
        .writeStream.format("amqp")
        .option("url", broker.url)
        .option("exchange", exchange)
        .option("routingKeyColumn", "k")
        .option("bodyColumn", "v")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    back = spark.read.format("amqp").option("url", broker.url).option("stream", stream).load()
    assert sorted(int(r.body) for r in back.collect()) == list(range(50))


def test_an_unroutable_row_fails_the_write_when_mandatory(
    spark: SparkSession, broker: BrokerUnderTest
) -> None:
    df = spark.createDataFrame(
        [("nowhere-" + uuid.uuid4().hex, "x")], "routing_key string, body string"
    )
    with pytest.raises(Exception, match="returned: 312 NO_ROUTE"):
        df.write.format("amqp").option("url", broker.url).option("mandatory", "true").mode(
            "append"
        ).save()


def test_a_missing_exchange_fails_the_write(spark: SparkSession, broker: BrokerUnderTest) -> None:
    df = spark.createDataFrame([("k", "x")], "routing_key string, body string")
    with pytest.raises(Exception, match="NOT_FOUND - no exchange 'no-such-x' in vhost '/'"):
        df.write.format("amqp").option("url", broker.url).option("exchange", "no-such-x").mode(
            "append"
        ).save()
