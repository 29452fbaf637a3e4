"""The Arrow parser of log records (``leveret.spark.logparse``), without Spark: what makes a
body a record, plain text or malformed, and that a record's fate does not depend on the
block it is parsed in (a block with malformed records is halved until they stand alone)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.logs.record import Record
from leveret.spark.logparse import Bodies, Messages, parse

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()


def _parse(rows: list[tuple[bytes, str, str | None, int | None]]) -> dict[int, dict[str, Any]]:
    """(body, routing key, content type, timestamp) per message -> rows by offset."""
    n = len(rows)
    msgs = Messages(
        routing_key=pa.array([r[1] for r in rows], pa.string()),
        content_type=pa.array([r[2] for r in rows], pa.string()),
        timestamp=np.array([r[3] or 0 for r in rows], np.int64),
        has_timestamp=np.array([r[3] is not None for r in rows], np.bool_),
        bodies=Bodies.join([r[0] for r in rows]),
    )
    keep = {
        "offset": pa.array(range(n), pa.int64()),
        "routing_key": msgs.routing_key,
        "redelivered": pa.array([False] * n),
        "message_id": pa.array([str(i) for i in range(n)]),
    }
    batch = parse(msgs, keep, now=NOW)
    assert batch.num_rows == n
    return {r["offset"]: r for r in batch.to_pylist()}


def test_records_plain_text_and_malformed_bodies() -> None:
    good = Record(
        ts="2024-05-01T23:30:00.123456Z", severity="warning", facility="kern", host="h1",
        app="a1", pid=12, message="disk almost full", logger="app.disk", exc="Traceback…",
        extra={"id": 7, "tags": ["x"]},
    ).to_json()  # fmt: skip
    rows = [
        (good, "kern.warning", "application/json", None),
        (b'{"message": "m", "severity": "WARN", "pid": 3}', "", None, None),
        (b'{"ts": "2024-05-01T12:00:00Z", "message": "m", "pid": "not a number"}', "", None,
         None),
        (b'{"ts": "yesterday", "message": "m"}', "", None, None),
        (b'{"message": "m", "severity": "loud"}', "", None, None),
        (b'{"severity": "info"}', "", None, None),
        (b"{truncated json", "", None, None),
        (b"\xff\xfe not utf-8", "", None, None),
        (b"info: Hello World!", "auth.error", None, 1714611600),
        (b"plain text", "warning", None, None),
        (b"error: disk full on /var", "", None, None),
        (b"Warn : low memory", "logs", None, None),
        (b'  {"message": "spaced", "ts": "2024-05-01T12:00:00+02:00"}', "", None, None),
        (b"", "", "application/json", None),
        (b'{"message": "a"}{"message": "b"}', "", None, None),
        (b'{\n  "message": "pretty",\n  "extra": "text"\n}', "", None, None),
        (b'{"message": 5}', "", None, None),
        (b"[1, 2]", "", "application/json", None),
        (b'{"message": "m", "message": "twice"}', "", None, None),
    ]  # fmt: skip
    out = _parse(rows)
    r = out[0]
    assert r["_corrupt"] is None
    assert r["ts"] == datetime(2024, 5, 1, 23, 30, 0, 123456, tzinfo=UTC)
    assert r["date"] == date(2024, 5, 1)
    assert (r["severity"], r["facility"], r["host"], r["app"], r["pid"]) == (
        "warning", "kern", "h1", "a1", 12)  # fmt: skip
    assert (r["message"], r["logger"], r["exc"]) == ("disk almost full", "app.disk", "Traceback…")
    assert json.loads(r["extra"]) == {"id": 7, "tags": ["x"]}
    assert (out[1]["severity"], out[1]["pid"], out[1]["facility"]) == ("warning", 3, "user")
    assert out[1]["ts"] == datetime.fromtimestamp(NOW, UTC)  # no ts: the time of parsing
    for bad in (2, 3, 4, 5, 6, 13, 14, 16, 17, 18):
        assert out[bad]["_corrupt"] == rows[bad][0].decode(), bad
        assert out[bad]["message"] is None and out[bad]["severity"] is None, bad
        assert out[bad]["date"] == date(2026, 1, 2), bad
    assert out[7]["_corrupt"] == "base64://4gbm90IHV0Zi04"
    assert (out[8]["severity"], out[8]["facility"], out[8]["message"]) == (
        "error", "auth", "info: Hello World!")  # fmt: skip
    assert out[8]["date"] == date(2024, 5, 2)  # the message's timestamp property
    assert (out[9]["severity"], out[9]["facility"]) == ("warning", "user")
    assert (out[10]["severity"], out[10]["message"]) == ("error", "error: disk full on /var")
    assert out[11]["severity"] == "warning"  # "logs" names no severity: the prefix does
    assert out[12]["ts"] == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert (out[15]["message"], out[15]["extra"]) == ("pretty", "text")


_BODIES = st.one_of(
    st.builds(
        lambda m, sev, pid: json.dumps(
            {"message": m, **({"severity": sev} if sev else {}), **({"pid": pid} if pid else {})}
        ).encode(),
        st.text(max_size=20),
        st.sampled_from([None, "info", "ERROR", "warn", "loud"]),
        st.one_of(st.none(), st.integers(1, 99999), st.just("x")),
    ),
    st.sampled_from([b"{broken", b"plain words", b"error: x", b'{"severity": "info"}', b"\xff"]),
    st.binary(max_size=30),
)


@settings(max_examples=40, deadline=None)
@given(bodies=st.lists(_BODIES, min_size=1, max_size=40))
def test_a_records_fate_does_not_depend_on_its_block(bodies: list[bytes]) -> None:
    together = _parse([(b, "", None, None) for b in bodies])
    for i, body in enumerate(bodies):
        alone = _parse([(body, "", None, None)])[0]
        assert {**together[i], "offset": 0, "message_id": "0"} == alone, body


def test_the_brokers_own_log_is_facility_broker_with_its_node_as_host() -> None:
    """Records of amq.rabbitmq.log (RabbitMQ's log.exchange: the level as routing key, a
    ``node`` header) are facility ``broker``, host the node; other exchanges' are not."""
    from leveret.spark.logparse import records_from_messages
    from leveret.spark.schema import LOG_ARROW_SCHEMA

    headers_type = pa.map_(pa.string(), pa.string())
    batch = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "exchange": pa.array(["amq.rabbitmq.log", "logs", "amq.rabbitmq.log"]),
            "routing_key": pa.array(["error", "kern.error", "warning"]),
            "content_type": pa.array(["text/plain", None, "text/plain"]),
            "timestamp": pa.array([None, None, None], pa.timestamp("us", tz="UTC")),
            "headers": pa.array([[("node", "rabbit@h1")], [("node", "x")], None], headers_type),
            "body": pa.array([b"2026-11-22 [error] <0.1.0> refused", b"disk", b"w"]),
            "redelivered": pa.array([False] * 3),
            "message_id": pa.array([None, None, None], pa.string()),
            "_": pa.array([0, 0, 0]),
        }
    )
    keep = ("offset", "routing_key", "redelivered", "message_id")
    schema = pa.schema([LOG_ARROW_SCHEMA.field(n) for n in LOG_ARROW_SCHEMA.names])
    schema = pa.schema(
        [*(batch.schema.field(k) for k in keep), *(f for f in schema if f.name not in keep)]
    )
    (out,) = records_from_messages(iter([batch]), keep, schema)
    rows = {r["offset"]: r for r in out.to_pylist()}
    assert (rows[0]["facility"], rows[0]["host"], rows[0]["severity"]) == (
        "broker", "rabbit@h1", "error")  # fmt: skip
    assert (rows[1]["facility"], rows[1]["host"]) == ("kern", "")
    assert (rows[2]["facility"], rows[2]["host"], rows[2]["severity"]) == (
        "broker", "", "warning")  # fmt: skip
