"""``format("amqp")`` and ``leveret pipeline ingest`` on a super stream: its partitions found
by the stream protocol's Partitions command and by its exchange's bindings (both brokers,
and a super stream made with CreateSuperStream in the RabbitMQ 4.2 mode), a batch read of
every partition, and the ingest exactly-once per partition across a kill -9 of its driver.

The ingest run emits LEVERET_SPARK_SUPER_RECORDS records (40,000 by default) over four
partitions, through the super stream's exchange as ``leveret emit-log --super-stream``
routes them: each app's records to the partition its name hashes to."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pyspark.sql import SparkSession

from leveret.logs.superstream import partition_index
from leveret.spark.client import AmqpSourceError, Outgoing, publish
from leveret.spark.options import ReadOptions
from leveret.spark.superstream import discover, share
from tests.spark.conftest import emit_records, record_body, stream_port
from tests.spark.test_ingest import _finish, _ingest, _killed_while
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management, start_leveret
from tests.support.ports import free_port
from tests.support.rabbitmq42 import broker_42
from tests.support.streamclient import RawStreamClient

RECORDS = int(os.environ.get("LEVERET_SPARK_SUPER_RECORDS", "40000"))
PARTITIONS = 4
APPS = [f"app-{i}" for i in range(13)]


def test_the_read_limit_is_shared_among_the_partitions_that_want_records() -> None:
    assert share({"a": 100, "b": 100, "c": 100, "d": 100}, 100) == dict.fromkeys("abcd", 25)
    # a partition that wants little leaves the rest to the others, all of the limit used
    assert share({"a": 10, "b": 3, "c": 0}, 8) == {"a": 5, "b": 3, "c": 0}
    assert share({"a": 10, "b": 3, "c": 50}, 40) == {"a": 10, "b": 3, "c": 27}
    assert share({"a": 5, "b": 5}, 100) == {"a": 5, "b": 5}
    assert sum(share({"a": 9, "b": 9, "c": 9}, 2).values()) == 2


def _drop(broker: BrokerUnderTest, exchange: str, queues: list[str]) -> None:
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.exchange_delete(exchange)
    for q in queues:
        ch.queue_delete(q)
    conn.close()


def test_partitions_are_found_by_the_partitions_command_and_by_the_bindings(
    broker: BrokerUnderTest,
) -> None:
    """A super stream bound by hand, its partitions out of name order, one bound without
    an order, and a classic queue bound too: both ways give RabbitMQ's order, streams only."""
    port = stream_port(broker)
    if broker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.skip("the reference RabbitMQ's management plugin cannot be enabled here")
    name = f"ss-{uuid.uuid4().hex[:8]}"
    order = {"eu": 2, "us": 0, "ap": 1}
    queues = [f"{name}-{k}" for k in (*order, "late", "classic")]
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    for key, n in order.items():
        ch.queue_declare(f"{name}-{key}", durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_bind(f"{name}-{key}", name, key, arguments={"x-stream-partition-order": n})
    ch.queue_declare(f"{name}-late", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind(f"{name}-late", name, "late")
    ch.queue_declare(f"{name}-classic", durable=True)
    ch.queue_bind(f"{name}-classic", name, "classic", arguments={"x-stream-partition-order": 3})
    conn.close()
    want = [f"{name}-us", f"{name}-ap", f"{name}-eu", f"{name}-late"]
    try:
        by_command = ReadOptions.parse(
            {"url": broker.url, "superStream": name, "streamPort": str(port)}
        )
        assert discover(by_command) == want
        # no stream port answers: the exchange's bindings, from the management API
        by_bindings = ReadOptions.parse(
            {"url": broker.url, "superStream": name, "streamPort": str(free_port()),
             "managementUrl": broker.http_url}
        )  # fmt: skip
        assert discover(by_bindings) == want
        for opts in (by_command, by_bindings):
            missing = ReadOptions.parse({**_raw(opts), "superStream": f"{name}-nope"})
            with pytest.raises(AmqpSourceError, match="does not exist"):
                discover(missing)
    finally:
        _drop(broker, name, queues)


def _raw(opts: ReadOptions) -> dict[str, str]:
    out = {"url": opts.url, "streamPort": str(opts.stream_port)}
    if opts.management_url:
        out["managementUrl"] = opts.management_url
    return out


def test_a_super_stream_made_with_create_super_stream_is_read_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Leveret in its RabbitMQ 4.2 mode: CreateSuperStream over the stream protocol, then a
    batch read of every partition (the stream protocol, and AMQP 0-9-1)."""
    b = broker_42(tmp_path / "data")
    try:
        client = RawStreamClient("127.0.0.1", b.stream_port)
        assert client.handshake() == 0x01
        from leveret.protocol.stream import events as ev
        from leveret.protocol.stream.spec import Key

        parts = ("inv-amer", "inv-emea", "inv-apac")
        create = ev.CreateSuperStream(client.next_id(), "inv", parts, ("amer", "emea", "apac"),
                                      {})  # fmt: skip
        assert client.request(create, Key.CREATE_SUPER_STREAM)[0] == 0x01
        client.sock.close()
        for k, stream in enumerate(parts):
            emit_records(b.url, stream, range(k * 1000, k * 1000 + 300 + k))
        for protocol in ("stream", "amqp"):
            rows = (
                spark.read.format("amqp").option("url", b.url).option("superStream", "inv")
                .option("streamPort", str(b.stream_port)).option("protocol", protocol)
                .option("records", "log").load().select("message_id", "offset").collect()
            )  # fmt: skip
            ids = Counter(int(r.message_id) for r in rows)
            want = {i for k in range(3) for i in range(k * 1000, k * 1000 + 300 + k)}
            assert set(ids) == want and max(ids.values()) == 1, protocol
    finally:
        b.stop()


def emit_super(url: str, name: str, ids: range) -> int:
    """Records through the super stream's exchange, each with the binding key of the
    partition its app hashes to (as emit-log --super-stream routes them), confirmed."""
    items = []
    for i in ids:
        app = APPS[i % len(APPS)]
        key = str(partition_index(app, PARTITIONS))
        props = pika.BasicProperties(content_type="application/json", message_id=str(i))
        items.append(Outgoing(name, key, record_body(i, app=app), props))
    return publish(url, items, window=2000, mandatory=True)


@pytest.fixture
def own_leveret(tmp_path: Path) -> Iterator[BrokerUnderTest]:
    b = start_leveret(tmp_path / "leveret-data")
    yield b
    b.stop()


def test_super_stream_ingest_is_exactly_once_per_partition_across_a_driver_kill(
    spark: SparkSession, own_leveret: BrokerUnderTest, tmp_path: Path
) -> None:
    """The ingest makes the super stream, reads its four partitions, is killed -9 after two
    batches while records keep coming, and a restart resumes each partition where its
    last committed batch ended; a fifth partition bound in between is read from its start."""
    broker, name = own_leveret, f"logs-{uuid.uuid4().hex[:6]}"
    lake, half, per_trigger = tmp_path / "lake", RECORDS // 2, max(1000, RECORDS // 10)
    source = ["--super-stream", name, "--partitions", str(PARTITIONS),
              "--stream-port", str(broker.stream_port)]  # fmt: skip
    # the super stream is made by the ingest: the first records wait until it is there
    proc = _ingest(broker.url, tmp_path, *source, trigger="200ms", per_trigger=per_trigger)
    deadline = time.monotonic() + 120
    while not _exists(broker, name):
        assert proc.poll() is None and time.monotonic() < deadline, "no super stream made"
        time.sleep(0.1)
    emit_super(broker.url, name, range(half))
    rest = range(half, RECORDS)
    killed_at = _killed_while(proc, lake, lambda: emit_super(broker.url, name, rest))
    assert killed_at * per_trigger < RECORDS, "killed too late"

    extra = f"{name}-{PARTITIONS}"  # a partition bound after the checkpoint was made
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.queue_declare(extra, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind(extra, name, str(PARTITIONS), arguments={"x-stream-partition-order": 4})
    conn.close()
    late = range(RECORDS, RECORDS + 1000)
    emit_records(broker.url, extra, late)
    _finish(_ingest(broker.url, tmp_path, *source, trigger="availableNow",
                    per_trigger=per_trigger))  # fmt: skip

    rows = spark.read.parquet(str(lake)).select("message_id", "routing_key", "offset",
                                                "app", "_corrupt").collect()  # fmt: skip
    ids = Counter(int(r.message_id) for r in rows)
    assert set(ids) == set(range(RECORDS + len(late))), "a record is missing"
    assert [i for i, n in ids.items() if n != 1] == []
    assert all(r._corrupt is None for r in rows)
    # each partition's offsets once each, from 0 up: nothing of a partition read twice
    offsets: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        if int(r.message_id) < RECORDS:  # through the exchange: the key names the partition
            assert r.routing_key == str(partition_index(r.app, PARTITIONS)), r
            offsets[r.routing_key].append(r.offset)
        else:
            offsets["extra"].append(r.offset)
    assert sorted(offsets) == ["0", "1", "2", "3", "extra"]
    for key, seen in offsets.items():
        assert sorted(seen) == list(range(len(seen))), key
    # the checkpoint's last offsets: each partition's end
    logs = tmp_path / "checkpoint" / "offsets"
    last = max((p for p in logs.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    held = json.loads(last.read_text().splitlines()[-1])
    assert held == {
        "superStream": name,
        "partitions": {
            **{f"{name}-{k}": len(offsets[str(k)]) for k in range(PARTITIONS)},
            extra: len(late),
        },
    }


def _exists(broker: BrokerUnderTest, exchange: str) -> bool:
    conn = pika.BlockingConnection(broker.pika_params())
    try:
        conn.channel().exchange_declare(exchange, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()
