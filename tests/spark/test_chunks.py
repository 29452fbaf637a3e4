"""Osiris chunks to rows (:mod:`leveret.spark.chunks`), in memory: entries and sub-entry
batches, the range's bounds, the CRC check, and messages of another shape."""

from __future__ import annotations

import json
import struct

import pytest

from leveret.protocol.stream import amqp10
from leveret.protocol.stream.chunk import build, simple_entries
from leveret.spark.chunks import Columns
from leveret.spark.client import AmqpSourceError


def _message(i: int, exchange: str = "logs", key: str = "app.info") -> bytes:
    """An AMQP 0-9-1 message as RabbitMQ 3.10 stores it in a stream."""
    annotations = ("map", [(("symbol", "x-routing-key"), ("string", key)),
                           (("symbol", "x-exchange"), ("string", exchange))])  # fmt: skip
    null = ("null", None)
    props = [("string", f"m{i}"), *[null] * 5, ("symbol", "application/json"), null, null,
             ("timestamp", 1_700_000_000_000 + i)]  # fmt: skip
    app = ("map", [(("string", "n"), ("int", i))])
    body = b'{"severity":"error","message":"record %d"}' % i
    return (
        amqp10.section(amqp10.MESSAGE_ANNOTATIONS, annotations)
        + amqp10.section(amqp10.PROPERTIES, ("list", props))
        + amqp10.section(amqp10.APPLICATION_PROPERTIES, app)
        + amqp10.section(amqp10.DATA, ("binary", body))
    )


def _deliver(chunk: bytes) -> bytes:
    return struct.pack(">HHB", 8, 1, 1) + chunk


def _sub_batch(messages: list[bytes]) -> bytes:
    inner = simple_entries(messages)
    return struct.pack(">BHII", 0x80, len(messages), len(inner), len(inner)) + inner


def test_simple_entries_and_sub_batches_in_range_order() -> None:
    data = simple_entries([_message(10), _message(11)]) + _sub_batch(
        [_message(12), _message(13), _message(14)]
    )
    chunk = build(10, 0, data, entries=3, records=5)
    cols = Columns(full=True)
    assert cols.add_chunk(_deliver(chunk), 11, 14) == (10, 15)
    assert cols.offsets == [11, 12, 13]
    batch = cols.messages().to_pylist()
    assert [r["message_id"] for r in batch] == ["m11", "m12", "m13"]
    first = batch[0]
    assert (first["exchange"], first["routing_key"], first["content_type"]) == (
        "logs",
        "app.info",
        "application/json",
    )
    assert first["timestamp"].timestamp() == 1_700_000_000
    assert dict(first["headers"]) == {"n": "11", "x-stream-offset": "11"}
    assert first["body"] == b'{"severity":"error","message":"record 11"}'
    records = Columns(full=False)
    records.add_chunk(_deliver(chunk), 0, 100)
    logs = records.records().to_pylist()
    assert [r["message"] for r in logs] == [f"record {i}" for i in range(10, 15)]
    assert {r["severity"] for r in logs} == {"error"}
    assert [r["offset"] for r in logs] == list(range(10, 15))


def test_a_chunk_whose_crc_does_not_match_is_refused() -> None:
    chunk = bytearray(build(0, 0, simple_entries([_message(0)]), entries=1))
    chunk[-1] ^= 0xFF
    with pytest.raises(AmqpSourceError, match="CRC32"):
        Columns(full=True).add_chunk(_deliver(bytes(chunk)), 0, 1)


def test_a_message_of_another_shape_goes_through_the_general_decoder() -> None:
    # a long descriptor (0x80) and an amqp-value body, as another producer may write
    msg = b"\x00\x80" + struct.pack(">Q", 0x77) + amqp10.encode(("string", "plain text"))
    chunk = build(0, 0, simple_entries([msg]), entries=1)
    cols = Columns(full=True)
    cols.add_chunk(_deliver(chunk), 0, 1)
    (row,) = cols.messages().to_pylist()
    assert row["body"] == b"plain text" and row["exchange"] is None


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_compressed_sub_entry_batches_are_opened(kind: str) -> None:
    """As a producer with compression publishes them (rstream, the Java client): the
    records of a gzip or zstd sub-entry batch, in order; other codecs are refused."""
    import gzip

    import pyarrow as pa

    messages = [_message(i) for i in range(20, 25)]
    inner = simple_entries(messages)
    code, packed = (
        (1, gzip.compress(inner)) if kind == "gzip" else (4, pa.Codec("zstd").compress(inner))
    )
    packed = bytes(packed)
    entry = struct.pack(">BHII", 0x80 | (code << 4), 5, len(inner), len(packed)) + packed
    chunk = build(20, 0, entry, entries=1, records=5)
    cols = Columns(full=False)
    assert cols.add_chunk(_deliver(chunk), 21, 100) == (20, 25)
    logs = cols.records().to_pylist()
    assert [r["message"] for r in logs] == [f"record {i}" for i in range(21, 25)]
    assert [r["offset"] for r in logs] == list(range(21, 25))
    snappy = struct.pack(">BHII", 0x80 | (2 << 4), 5, len(inner), len(packed)) + packed
    with pytest.raises(AmqpSourceError, match="type 2"):
        Columns(full=False).add_chunk(_deliver(build(20, 0, snappy, entries=1, records=5)), 0, 99)


def test_the_brokers_events_in_a_chunk_are_facility_broker_records() -> None:
    """An event of amq.rabbitmq.event as a stream stores it (empty body, the details in the
    application properties) becomes a record from its headers; a log record beside it
    stays one."""
    key = (("symbol", "x-routing-key"), ("string", "queue.deleted"))
    exchange = (("symbol", "x-exchange"), ("string", "amq.rabbitmq.event"))
    annotations = ("map", [key, exchange])
    null = ("null", None)
    props = [*[null] * 9, ("timestamp", 1_700_000_000_000)]
    app = ("map", [(("string", "name"), ("string", "orders")),
                   (("string", "vhost"), ("string", "/")),
                   (("string", "user_who_performed_action"), ("string", "admin")),
                   (("string", "timestamp_in_ms"), ("long", 1_700_000_000_250))])  # fmt: skip
    event = (
        amqp10.section(amqp10.MESSAGE_ANNOTATIONS, annotations)
        + amqp10.section(amqp10.PROPERTIES, ("list", props))
        + amqp10.section(amqp10.APPLICATION_PROPERTIES, app)
        + amqp10.section(amqp10.DATA, ("binary", b""))
    )
    chunk = build(0, 0, simple_entries([_message(0), event]), entries=2)
    cols = Columns(full=False)
    cols.add_chunk(_deliver(chunk), 0, 100)
    rows = {r["offset"]: r for r in cols.records().to_pylist()}
    assert rows[0]["message"] == "record 0"
    deleted = rows[1]
    assert (deleted["facility"], deleted["severity"], deleted["message"]) == (
        "broker", "info", "queue.deleted name=orders vhost=/ by admin")  # fmt: skip
    assert deleted["ts"].timestamp() == 1_700_000_000.25
    assert json.loads(deleted["extra"])["timestamp_in_ms"] == "1700000000250"
