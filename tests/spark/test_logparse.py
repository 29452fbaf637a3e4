"""The Arrow parser of log records (``leveret.spark.logparse``), without Spark: what makes a
body a record, plain text or malformed, and that a record's fate does not depend on the
block it is parsed in (a block with malformed records is halved until they stand alone)."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.logs.reading import Envelope
from leveret.spark.logparse import Bodies, Messages, parse
from tests.spark.samples import GOOD
from tests.support.tiers import examples

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
    good = GOOD
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


@settings(max_examples=examples(40), deadline=None)
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


def test_the_brokers_events_are_facility_broker_records_that_say_who_did_what() -> None:
    """Messages of amq.rabbitmq.event (empty bodies, the event in the routing key, its
    details in headers) are records of facility ``broker``: host the ``node`` header, time
    ``timestamp_in_ms``, a failed login a warning, every header kept in ``extra``; the log
    records and plain texts beside them are parsed as before."""
    from leveret.spark.logparse import records_from_messages
    from leveret.spark.schema import LOG_ARROW_SCHEMA

    headers_type = pa.map_(pa.string(), pa.string())
    created = [
        ("name", "orders"),
        ("vhost", "/"),
        ("durable", "true"),
        ("user_who_performed_action", "guest"),
        ("timestamp_in_ms", "1764158400123"),
    ]
    failed = [
        ("connection_type", "network"),
        ("name", "mallory"),
        ("peer_host", "10.0.0.9"),
        ("timestamp_in_ms", "1764158401000"),
    ]
    opened = [("name", "127.0.0.1:5000 -> 127.0.0.1:5672"), ("user", "app"), ("vhost", "v1"),
              ("node", "rabbit@h1"), ("user_who_performed_action", "app")]  # fmt: skip
    batch = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array([0, 1, 2, 3, 4], pa.int64()),
            "exchange": pa.array(
                [
                    "amq.rabbitmq.event",
                    "logs",
                    "amq.rabbitmq.event",
                    "amq.rabbitmq.log",
                    "amq.rabbitmq.event",
                ]
            ),
            "routing_key": pa.array(
                [
                    "queue.created",
                    "kern.error",
                    "user.authentication.failure",
                    "warning",
                    "connection.created",
                ]
            ),
            "content_type": pa.array([None, None, None, "text/plain", None]),
            "timestamp": pa.array(
                [None, None, None, None, datetime(2026, 1, 1, tzinfo=UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
            "headers": pa.array(
                [created, None, failed, [("node", "rabbit@h1")], opened], headers_type
            ),
            "body": pa.array([b"", b'{"message": "disk"}', b"", b"w", b""]),
            "redelivered": pa.array([False] * 5),
            "message_id": pa.array([None] * 5, pa.string()),
        }
    )
    keep = ("offset", "routing_key", "redelivered", "message_id")
    schema = pa.schema(
        [*(batch.schema.field(k) for k in keep),
         *(f for f in LOG_ARROW_SCHEMA if f.name not in keep)]
    )  # fmt: skip
    (out,) = records_from_messages(iter([batch]), keep, schema)
    rows = {r["offset"]: r for r in out.to_pylist()}
    assert len(rows) == 5
    queue = rows[0]
    assert (queue["facility"], queue["severity"], queue["host"], queue["app"]) == (
        "broker", "info", "", "")  # fmt: skip
    assert queue["message"] == "queue.created name=orders vhost=/ by guest"
    assert queue["ts"] == datetime(2025, 11, 26, 12, 0, 0, 123000, tzinfo=UTC)
    assert queue["routing_key"] == "queue.created"
    assert json.loads(queue["extra"]) == dict(created)
    assert queue["_corrupt"] is None
    login = rows[2]
    assert (login["facility"], login["severity"]) == ("broker", "warning")
    assert login["message"] == "user.authentication.failure name=mallory by mallory from 10.0.0.9"
    assert login["ts"] == datetime(2025, 11, 26, 12, 0, 1, tzinfo=UTC)
    conn = rows[4]
    assert (conn["host"], conn["severity"]) == ("rabbit@h1", "info")
    assert conn["message"] == (
        "connection.created name=127.0.0.1:5000 -> 127.0.0.1:5672 vhost=v1 by app"
    )
    assert conn["ts"] == datetime(2026, 1, 1, tzinfo=UTC)  # no timestamp_in_ms: the property
    assert (rows[1]["facility"], rows[1]["message"], rows[1]["extra"]) == ("kern", "disk", None)
    assert (rows[3]["facility"], rows[3]["host"], rows[3]["message"]) == (
        "broker", "rabbit@h1", "w")  # fmt: skip


def test_a_batch_without_events_has_no_event_path() -> None:
    """Only messages of amq.rabbitmq.event are events: an empty body elsewhere stays an
    empty plain-text record, and ``broker_events`` finds none (no per-message work)."""
    from leveret.spark.logparse import broker_events

    exchanges = pa.array(["logs", "amq.rabbitmq.log", None])
    assert broker_events(exchanges, lambda i: {"node": "x"}) is None
    rows = _parse([(b"", "queue.created", None, None)])
    assert (rows[0]["facility"], rows[0]["message"], rows[0]["_corrupt"]) == ("queue", "", None)
    found = broker_events(pa.array(["amq.rabbitmq.event", "logs"]),
                          lambda i: {"timestamp_in_ms": 5, "ssl": False, "name": b"q"})  # fmt: skip
    assert found == {0: {"timestamp_in_ms": "5", "ssl": "false", "name": "q"}}


# ----------------------------------------------------------------- one reading of a record
# Every reader of a message (receive-logs, the dashboard's Logs view, the lake) must make
# the same record of it: the lake's Arrow parser is held to leveret.logs.reading's, which
# the others use, message for message.
_VALUES = st.sampled_from(
    [None, "", "x", "WARN", "error", "notice", "loud", 0, 7, -3, 2**63, 7.0, True, [1], {"a": 1}]
)
_TIMES = st.sampled_from(
    [
        "2026-10-01T12:00:00Z", "2026-10-01 12:00", "2026-10-01", "2026-10-01T12:00:00.5+02:00",
        "2026-10-01T12:00:00-0230", "2024-02-29T23:59:59.999999Z", "2023-02-29", "not a time",
        "2026-10-01T24:00", "2026-10-01T12:00:00.1234567Z", "0000-01-01T00:00:00Z", "", 5,
    ]
)  # fmt: skip


@st.composite
def _json_bodies(draw: st.DrawFn) -> bytes:
    doc: dict[str, Any] = {}
    for name in ("severity", "facility", "host", "app", "pid", "logger", "exc", "extra"):
        if draw(st.booleans()):
            doc[name] = draw(_VALUES)
    if draw(st.integers(0, 3)):
        doc["message"] = draw(st.one_of(st.text(max_size=12), _VALUES))
    if draw(st.booleans()):
        doc["ts"] = draw(_TIMES)
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    return draw(st.sampled_from([text, " \n" + text, text + "\n"])).encode()


_BODY = st.one_of(
    _json_bodies(),
    st.sampled_from(
        [
            b"error: disk full",
            b"notice: x",
            b"plain",
            b"",
            b"  ",
            b"{broken",
            b"[1, 2]",
            b'{"message": NaN}',
            b'{"message": "a", "message": "b"}',
            b"\xff\xfe",
            b"\t{}",
            b"2026-11-28 23:18:31.040518+00:00 [info] <0.230.0> started\n",
            b"2026-11-28 23:18:31+00:00 [error] <l> a\n2026-11-28 23:18:31+00:00 [error] <l> b\n",
        ]
    ),
    st.text(max_size=20).map(str.encode),
    st.binary(max_size=12),
)
_EVENT_HEADERS = st.dictionaries(
    st.sampled_from(["name", "vhost", "user", "node", "peer_host", "timestamp_in_ms", "x"]),
    st.one_of(st.text(max_size=6), st.sampled_from(["1764158400123", "junk"])),
    max_size=5,
)


@st.composite
def _messages(draw: st.DrawFn) -> tuple[bytes, Envelope]:
    from leveret.logs.reading import Envelope

    exchange = draw(st.sampled_from(["logs", "logs", "amq.rabbitmq.log", "amq.rabbitmq.event"]))
    stamp = draw(st.one_of(st.none(), st.just(1_700_000_000), st.integers(0, 2**33)))
    header = draw(st.sampled_from([None, None, "1700000000250", "1800000000000", "junk", "-5"]))
    headers: dict[str, Any] = {}
    if exchange == "amq.rabbitmq.event":
        headers = draw(_EVENT_HEADERS)
    elif exchange == "amq.rabbitmq.log" or draw(st.booleans()):
        headers = {"node": draw(st.sampled_from(["rabbit@h", ""]))}
    if header is not None:
        headers["timestamp_in_ms"] = header
    envelope = Envelope(
        routing_key=draw(st.sampled_from(["", "error", "kern.warning", "a.b", "notice", "x."])),
        exchange=exchange,
        content_type=draw(st.sampled_from([None, "application/json", "text/plain"])),
        headers=headers or None,
        timestamp=stamp,
        arrival_ms=draw(st.one_of(st.none(), st.integers(0, 2**42))),
    )
    body = b"" if exchange == "amq.rabbitmq.event" else draw(_BODY)
    return body, envelope


def _lake_rows(messages: list[tuple[bytes, Envelope]], arrival: bool) -> dict[int, dict[str, Any]]:
    from leveret.spark.logparse import broker_events, broker_nodes, header_times

    n = len(messages)
    exchange = pa.array([e.exchange for _, e in messages], pa.string())
    heads = [dict(e.headers or {}) for _, e in messages]
    ms, there = header_times([h.get("timestamp_in_ms") for h in heads])
    msgs = Messages(
        routing_key=pa.array([e.routing_key for _, e in messages], pa.string()),
        content_type=pa.array([e.content_type for _, e in messages], pa.string()),
        timestamp=np.array([e.timestamp or 0 for _, e in messages], np.int64),
        has_timestamp=np.array([e.timestamp is not None for _, e in messages], np.bool_),
        bodies=Bodies.join([b for b, _ in messages]),
        broker_node=broker_nodes(exchange, lambda i: heads[i].get("node")),
        broker_event=broker_events(exchange, lambda i: heads[i]),
        header_ms=ms,
        has_header_ms=there,
        arrival_ms=np.array([e.arrival_ms or 0 for _, e in messages], np.int64)
        if arrival
        else None,
    )
    keep = {
        "offset": pa.array(range(n), pa.int64()),
        "routing_key": msgs.routing_key,
        "redelivered": pa.array([False] * n),
        "message_id": pa.array([str(i) for i in range(n)]),
    }
    return {r["offset"]: r for r in parse(msgs, keep, now=NOW).to_pylist()}


def _as_lake_row(entry: Any) -> dict[str, Any]:
    from leveret.logs.reading import Malformed, parse_time

    us = parse_time(entry.ts)
    assert us is not None
    if isinstance(entry, Malformed):
        return {"ts": us, "_corrupt": entry.body}
    doc = entry.to_dict()
    extra = doc.get("extra")
    return {
        "ts": us,
        **{k: doc.get(k) for k in ("severity", "facility", "host", "app", "pid", "message")},
        "logger": doc.get("logger"),
        "exc": doc.get("exc"),
        "extra": extra
        if extra is None or isinstance(extra, str)
        else json.loads(json.dumps(extra)),
        "_corrupt": None,
    }


def _row(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("severity", "facility", "host", "app", "pid", "message",
                                "logger", "exc", "_corrupt")}  # fmt: skip
    out["ts"] = (row["ts"] - datetime(1970, 1, 1, tzinfo=UTC)) // _MICRO
    extra = row["extra"]
    if extra is not None:
        with contextlib.suppress(ValueError):  # a string extra is kept as it is
            extra = json.loads(extra)
    out["extra"] = extra
    if row["_corrupt"] is not None:
        return {"ts": out["ts"], "_corrupt": row["_corrupt"]}
    return out


_MICRO = timedelta(microseconds=1)


@settings(max_examples=examples(400), deadline=None)
@given(messages=st.lists(_messages(), min_size=1, max_size=12), arrival=st.booleans())
def test_the_lake_reads_every_message_as_every_other_reader_does(
    messages: list[tuple[bytes, Any]], arrival: bool
) -> None:
    from dataclasses import replace

    from leveret.logs.reading import read

    rows = _lake_rows(messages, arrival)
    for i, (body, envelope) in enumerate(messages):
        # the chunk path knows every message's arrival, the others none's
        envelope = replace(envelope, arrival_ms=(envelope.arrival_ms or 0) if arrival else None)
        expected = _as_lake_row(read(body, envelope, received=NOW))
        got = _row(rows[i])
        if isinstance(expected.get("extra"), str) and got.get("extra") != expected["extra"]:
            # a string extra: the lake keeps the text, which may itself be JSON
            got["extra"] = rows[i]["extra"]
        assert got == expected, (body, envelope)
