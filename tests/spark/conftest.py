"""Spark tests: ONE local[2] SparkSession for the whole run, shared by every test, and
helpers that make streams and publish log records on the broker under test."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark.sql import SparkSession  # noqa: E402

from tests.support.brokers import BrokerUnderTest  # noqa: E402


@pytest.fixture(scope="session")
def _spark_session() -> Iterator[SparkSession]:
    from leveret.spark import register

    # the workers run this interpreter, as the pipeline's own sessions do
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("leveret-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def spark(_spark_session: SparkSession) -> SparkSession:
    """The run's one SparkSession, made the active session of the JVM thread that serves
    this test's Python thread. Spark looks a Python data source up for a *write* in the
    active session only (``DataSource.lookupDataSource`` reads
    ``SparkSession.getActiveSession``; a read goes through the session it is called on),
    and a JVM thread py4j serves a Python thread from has none unless it is set: seen as
    ``DATA_SOURCE_NOT_FOUND: amqp`` on a write right after a read of the same session."""
    jvm = _spark_session.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(_spark_session._jsparkSession)
    return _spark_session


def declare_stream(broker: BrokerUnderTest, name: str) -> None:
    """Declare a stream queue, or skip when the broker refuses streams (406): Leveret did
    before stream queues landed."""
    import pika
    import pika.exceptions

    conn = pika.BlockingConnection(broker.pika_params())
    try:
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 406 and broker.name == "leveret":
            pytest.skip(f"Leveret refuses x-queue-type stream: {exc.reply_text}")
        raise
    finally:
        if conn.is_open:
            conn.close()


def filled_stream(broker: BrokerUnderTest, prefix: str, total: int) -> str:
    """A stream queue of the test's own (``prefix`` and a random suffix) holding the records
    numbered 0 to ``total`` - 1; its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    declare_stream(broker, name)
    emit_records(broker.url, name, range(total))
    return name


def delete_queue(broker: BrokerUnderTest, name: str) -> None:
    import pika

    conn = pika.BlockingConnection(broker.pika_params())
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


@pytest.fixture
def stream(broker: BrokerUnderTest) -> Iterator[str]:
    """A fresh stream queue on the broker under test, deleted afterwards."""
    name = f"spark-{uuid.uuid4().hex[:10]}"
    declare_stream(broker, name)
    yield name
    delete_queue(broker, name)


def stream_port(broker: BrokerUnderTest) -> int:
    """The broker's stream-protocol port (RabbitMQ's rabbitmq_stream plugin is enabled on
    demand), or skip."""
    if broker.stream_port:
        return broker.stream_port
    if broker.name == "rabbitmq":
        from tests.support.brokers import RABBITMQ_STREAM_PORT, ensure_rabbitmq_stream

        if ensure_rabbitmq_stream():
            return RABBITMQ_STREAM_PORT
    pytest.skip(f"{broker.name} does not serve the stream protocol here")


@pytest.fixture(params=["amqp", "stream"])
def protocol(request: pytest.FixtureRequest, broker: BrokerUnderTest) -> dict[str, str]:
    """The reader options that pick how executors read a stream: AMQP 0-9-1 consumers, or
    RabbitMQ's stream protocol on the broker's stream port."""
    if request.param == "amqp":
        return {"protocol": "amqp"}
    return {"protocol": "stream", "streamPort": str(stream_port(broker))}


def record_body(i: int, severity: str = "info", app: str = "app", host: str = "host") -> bytes:
    """A log-system record whose ``extra.id`` (and message id) is ``i``."""
    doc = {
        "ts": datetime.now(UTC).isoformat(timespec="microseconds")[:-6] + "Z",
        "severity": severity,
        "facility": "user",
        "host": host,
        "app": app,
        "pid": 4242,
        "message": f"record {i}",
        "extra": {"id": i},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def emit_records(url: str, queue: str, ids: range | list[int], severity: str = "info") -> int:
    """Publish one record per id to ``queue`` through the default exchange, confirmed."""
    import pika

    from leveret.spark.client import Outgoing, publish

    items = (
        Outgoing(
            "",
            queue,
            record_body(i, severity),
            pika.BasicProperties(content_type="application/json", message_id=str(i)),
        )
        for i in ids
    )
    return publish(url, items, window=2000)
