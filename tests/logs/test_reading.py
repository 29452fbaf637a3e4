"""How a message becomes a record (:mod:`leveret.logs.reading`): plain text, JSON records,
malformed bodies kept whole, the broker's events and log lines, and a record's one time."""

from __future__ import annotations

import json
from pathlib import Path

from leveret.logs.reading import (
    Envelope,
    Malformed,
    format_time,
    message_time,
    parse_time,
    read,
)
from leveret.logs.record import Record, rfc3339
from leveret.logs.sinks import FileSink

T = 1_700_000_000  # a time, in seconds
RECEIVED = T + 30.5


def _read(body: bytes, **kw: object) -> Record | Malformed:
    return read(body, Envelope(**kw), received=RECEIVED)  # type: ignore[arg-type]


def _record(body: bytes, **kw: object) -> Record:
    entry = _read(body, **kw)
    assert isinstance(entry, Record), entry
    return entry


def test_plain_text_is_a_message_with_severity_from_the_key_else_its_prefix() -> None:
    r = _record(b"info: Hello World!", content_type="text/plain")
    assert (r.message, r.severity, r.facility) == ("info: Hello World!", "info", "user")
    assert _record(b"disk full", routing_key="error").severity == "error"
    r = _record(b"oops", routing_key="kern.critical")
    assert (r.severity, r.facility) == ("critical", "kern")
    # the tutorial's emit_log.py sends "severity: message" texts through a fanout exchange
    assert _record(b"error: disk full on /var").severity == "error"
    assert _record(b"  WARN : low memory").severity == "warning"
    assert _record(b"Critical: fire", routing_key="kern.x").severity == "critical"
    assert _record(b"notice: syslog's level").severity == "info"
    assert _record(b"errors: none").severity == "info"
    assert _record(b"note: error: x").severity == "info"
    # a routing key that names a severity says more than the text
    assert _record(b"info: Hello World!", routing_key="auth.error").severity == "error"


def test_a_json_record_has_typed_fields_and_canonical_time() -> None:
    r = _record(
        b'{"ts": "2026-10-01T12:00:00+02:00", "severity": "WARN", "message": "m", "pid": 3,'
        b' "extra": [1, "x"], "other": {"ignored": true}}'
    )
    assert (r.ts, r.severity, r.pid, r.extra) == (
        "2026-10-01T10:00:00.000000Z",
        "warning",
        3,
        [1, "x"],
    )
    r = _record(b'{"message": "m", "host": null, "facility": null}', routing_key="kern.error")
    assert (r.host, r.facility, r.severity) == ("", "kern", "error")


def test_what_is_not_a_record_is_kept_whole_never_invented() -> None:
    # seen by a user: these became "INFO user:" records with an empty message or a ts of
    # "not a time" in receive-logs' file, and binary bytes replacement characters
    for body in (
        b'{"message": 5, "tag": "CORRUPTJSON"}',
        b'{"ts": "not a time", "message": "m"}',
        b'{"message": "m", "severity": "loud"}',
        b'{"message": "m", "pid": "7"}',
        b'{"message": "m", "pid": 7.0}',
        b'{"message": "m", "message": "twice"}',
        b'{"severity": "info"}',
        b'{"a": 1}',
        b"{truncated json",
        b'{"message": NaN}',
        b"   ",
    ):
        entry = _read(body, content_type="application/json")
        assert entry == Malformed(format_time(int(RECEIVED * 1e6)), body.decode()), body
    entry = _read(b"\xff\xfe binary")
    assert isinstance(entry, Malformed) and entry.body == "base64://4gYmluYXJ5"
    assert isinstance(_read(b"[1, 2]", content_type="application/json"), Malformed)
    # plain text that merely looks like JSON to nobody stays plain text
    assert _record(b"[1, 2]").message == "[1, 2]"


def test_a_file_keeps_a_malformed_body_as_the_lake_does(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "out.jsonl")
    sink.write(_read(b'{"message": 5, "tag": "CORRUPTJSON"}'))
    sink.write(_read(b"\x00\xff"))
    sink.close()
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == [
        {
            "ts": format_time(int(RECEIVED * 1e6)),
            "_corrupt": '{"message": 5, "tag": "CORRUPTJSON"}',
        },
        {"ts": format_time(int(RECEIVED * 1e6)), "_corrupt": "base64:AP8="},
    ]


def test_a_record_has_one_time_whoever_reads_it() -> None:
    us = T * 1_000_000
    # nothing: when the reader got it
    assert message_time(Envelope(), 5) == 5
    # the broker's arrival time: a stream chunk's, or the interceptor's header (ms)
    assert message_time(Envelope(arrival_ms=T * 1000 + 7), 5) == us + 7000
    header = {"timestamp_in_ms": T * 1000 + 250}
    assert message_time(Envelope(headers=header, arrival_ms=1), 5) == us + 250_000
    assert message_time(Envelope(headers={"timestamp_in_ms": str(T * 1000)}), 5) == us
    # the interceptor sets the timestamp property to the same second: the header is finer
    assert message_time(Envelope(headers=header, timestamp=T), 5) == us + 250_000
    # a producer's own timestamp property wins over the arrival time
    assert message_time(Envelope(headers=header, timestamp=T - 60), 5) == us - 60_000_000
    assert message_time(Envelope(timestamp=T, arrival_ms=1), 5) == us
    # junk in the header is not a time
    assert message_time(Envelope(headers={"timestamp_in_ms": "soon"}), 5) == 5
    assert message_time(Envelope(headers={"timestamp_in_ms": True}), 5) == 5
    # plain text and records without ts take it; a record's own ts wins
    assert _record(b"plain", headers=header).ts == format_time(us + 250_000)
    assert _record(b'{"message": "m"}', headers=header).ts == format_time(us + 250_000)
    assert _record(b'{"message": "m", "ts": "2026-01-01"}', headers=header).ts == (
        "2026-01-01T00:00:00.000000Z"
    )


def test_the_brokers_events_are_facility_broker_records_that_say_who_did_what() -> None:
    headers = {
        "name": b"orders", "vhost": b"/", "user_who_performed_action": b"guest",
        "node": b"rabbit@h", "timestamp_in_ms": T * 1000, "x-stream-offset": 12,
    }  # fmt: skip
    r = _record(b"", exchange="amq.rabbitmq.event", routing_key="queue.created", headers=headers)
    assert (r.facility, r.host, r.severity, r.message, r.ts) == (
        "broker", "rabbit@h", "info", "queue.created name=orders vhost=/ by guest",
        format_time(T * 1_000_000),
    )  # fmt: skip
    assert r.extra == {
        "name": "orders", "vhost": "/", "user_who_performed_action": "guest",
        "node": "rabbit@h", "timestamp_in_ms": str(T * 1000),
    }  # fmt: skip
    failed = _record(
        b"",
        exchange="amq.rabbitmq.event",
        routing_key="user.authentication.failure",
        headers={"name": b"mallory", "peer_host": b"10.0.0.9"},
    )
    assert (failed.severity, failed.message) == (
        "warning",
        "user.authentication.failure name=mallory by mallory from 10.0.0.9",
    )
    binding = _record(
        b"",
        exchange="amq.rabbitmq.event",
        routing_key="binding.created",
        headers={"source_name": b"logs", "destination_name": b"q", "vhost": b"/"},
    )
    assert binding.message == "binding.created source_name=logs destination_name=q vhost=/"


def test_a_line_of_the_brokers_own_log_keeps_its_time_not_its_prefix() -> None:
    body = (
        b"2026-11-28 23:18:31.040518+00:00 [warning] <leveret.server.amqp> missed heartbeats\n"
        b"2026-11-28 23:18:31.040518+00:00 [warning] <leveret.server.amqp> from 10.0.0.1\n"
    )
    r = _record(body, exchange="amq.rabbitmq.log", routing_key="warning",
                headers={"node": b"rabbit@h"}, timestamp=T)  # fmt: skip
    assert (r.ts, r.severity, r.facility, r.host, r.logger, r.message) == (
        "2026-11-28T23:18:31.040518Z", "warning", "broker", "rabbit@h", "leveret.server.amqp",
        "missed heartbeats\nfrom 10.0.0.1",
    )  # fmt: skip
    # RabbitMQ's own levels are severities too
    assert _record(b"x", exchange="amq.rabbitmq.log", routing_key="notice").severity == "info"
    assert _record(b"x", exchange="amq.rabbitmq.log", routing_key="alert").severity == "critical"


def test_times_parse_as_the_lake_parses_them_and_print_as_rfc3339() -> None:
    assert parse_time("2026-10-01T12:00:00.1Z") == parse_time("2026-10-01 12:00:00.100000")
    assert parse_time("2026-10-01T12:00:00-0230") == parse_time("2026-10-01T14:30:00Z")
    assert parse_time("2024-02-29") is not None
    for bad in ("2023-02-29", "2026-10-01T24:00:00Z", "2026-10-01t12:00:00z", "2026-10-01Z",
                "2026-10-01T12:00:00.1234567Z", "20261001T120000Z", " 2026-10-01"):  # fmt: skip
        assert parse_time(bad) is None, bad
    assert format_time(0) == rfc3339(0)
    # years Arrow takes but no reader of the lake can (0, or past 9999 by an offset)
    assert parse_time("0000-01-01T00:00:00Z") is None
    assert parse_time("9999-12-31T23:59:59-01:00") is None
    assert parse_time("0001-01-01T00:00:00Z") is not None
    assert format_time(-1) == "1969-12-31T23:59:59.999999Z"
