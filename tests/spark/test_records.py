"""Log-system records as typed columns; malformed bodies land in ``_corrupt``."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pika
from pyspark.sql import SparkSession

from leveret.spark.records import parse_log_records
from leveret.spark.schema import MESSAGE_SCHEMA
from tests.spark.samples import GOOD
from tests.support.brokers import BrokerUnderTest


def _row(offset: int, body: bytes, routing_key: str = "", **props: Any) -> tuple[Any, ...]:
    values: dict[str, Any] = dict.fromkeys(MESSAGE_SCHEMA.fieldNames())
    values.update(offset=offset, body=body, routing_key=routing_key, redelivered=False, **props)
    return tuple(values[f] for f in MESSAGE_SCHEMA.fieldNames())


def test_records_become_typed_columns_and_malformed_bodies_go_to_corrupt(
    spark: SparkSession,
) -> None:
    good = GOOD
    rows = [
        _row(0, good, "kern.warning", content_type="application/json"),
        _row(1, b'{"message": "m", "severity": "WARN", "pid": 3}'),
        _row(2, b'{"ts": "2024-05-01T12:00:00Z", "message": "m", "pid": "not a number"}'),
        _row(3, b'{"ts": "yesterday", "message": "m"}'),
        _row(4, b'{"message": "m", "severity": "loud"}'),
        _row(5, b'{"severity": "info"}'),
        _row(6, b"{truncated json"),
        _row(7, b"\xff\xfe not utf-8"),
        _row(8, b"info: Hello World!", "auth.error",
             timestamp=datetime(2024, 5, 2, 1, 0, tzinfo=UTC)),
        _row(9, b"plain text", "warning"),
        _row(10, b"error: disk full on /var", ""),  # the tutorial's "severity: message"
        _row(11, b"Warn : low memory", "logs"),
    ]  # fmt: skip
    out = {r.offset: r for r in parse_log_records(spark.createDataFrame(rows, MESSAGE_SCHEMA))
           .collect()}  # fmt: skip
    r = out[0]
    assert r._corrupt is None
    assert r.ts.replace(tzinfo=UTC) == datetime(2024, 5, 1, 23, 30, 0, 123456, tzinfo=UTC)
    assert r.date == date(2024, 5, 1)
    assert (r.severity, r.facility, r.host, r.app, r.pid) == ("warning", "kern", "h1", "a1", 12)
    assert (r.message, r.logger, r.exc) == ("disk almost full", "app.disk", "Traceback…")
    assert json.loads(r.extra) == {"id": 7, "tags": ["x"]}
    assert (out[1].severity, out[1].pid, out[1]._corrupt) == ("warning", 3, None)
    for bad in (2, 3, 4, 5, 6):
        assert out[bad]._corrupt == rows[bad][-1].decode(), bad
        assert out[bad].message is None and out[bad].severity is None
    assert out[7]._corrupt.startswith("base64:")
    assert (out[8].severity, out[8].facility, out[8].message) == (
        "error", "auth", "info: Hello World!")  # fmt: skip
    assert out[8].date == date(2024, 5, 2)
    assert (out[9].severity, out[9].facility, out[9]._corrupt) == ("warning", "user", None)
    assert (out[10].severity, out[10].message) == ("error", "error: disk full on /var")
    assert (out[11].severity, out[11].facility) == ("warning", "user")


def test_a_malformed_body_in_the_stream_lands_in_corrupt_in_the_lake(
    spark: SparkSession,
    broker: BrokerUnderTest,
    stream: str,
    tmp_path: Path,
    protocol: dict[str, str],
) -> None:
    from leveret.spark.pipeline import IngestConfig, start_ingest

    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    json_props = pika.BasicProperties(content_type="application/json")
    ch.basic_publish("", stream, b'{"message": "fine", "severity": "error"}', json_props)
    ch.basic_publish("", stream, b'{"message": "broken', json_props)
    conn.close()
    cfg = IngestConfig(url=broker.url, lake=tmp_path / "lake", checkpoint=tmp_path / "cp",
                       stream=stream, trigger="availableNow", protocol=protocol["protocol"],
                       stream_port=int(protocol.get("streamPort", 5552)))  # fmt: skip
    query = start_ingest(spark, cfg)
    query.awaitTermination(120)
    lake = spark.read.parquet(str(tmp_path / "lake"))
    rows = sorted(lake.collect(), key=lambda r: r.offset)
    assert [(r.message, r.severity, r._corrupt) for r in rows] == [
        ("fine", "error", None),
        (None, None, '{"message": "broken'),
    ]
