"""The record schema, routing keys, sinks and error texts, without a broker."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pika.exceptions
import pytest

from leveret.logs.amqp import LogsError, describe, parameters, redact, routing_key, split_urls
from leveret.logs.reading import Envelope, read
from leveret.logs.record import (
    Record,
    check_facility,
    normalize_severity,
    rfc3339,
    severity_for_level,
)
from leveret.logs.sinks import FileSink, TerminalSink, format_line


def _record(message: str = "hello", **kw: object) -> Record:
    fields: dict[str, object] = dict(
        ts="2024-05-01T12:00:00.000001Z",
        severity="info",
        facility="user",
        host="h",
        app="a",
        pid=7,
        message=message,
    )
    fields.update(kw)
    return Record(**fields)  # type: ignore[arg-type]


def test_json_has_the_schema_fields_and_round_trips() -> None:
    r = _record(logger="app.db", exc="Traceback ...", extra={"user": "ann", "n": 3})
    doc = json.loads(r.to_json())
    assert doc == {
        "ts": "2024-05-01T12:00:00.000001Z",
        "severity": "info",
        "facility": "user",
        "host": "h",
        "app": "a",
        "pid": 7,
        "message": "hello",
        "logger": "app.db",
        "exc": "Traceback ...",
        "extra": {"user": "ann", "n": 3},
    }
    assert read(r.to_json(), Envelope(content_type="application/json")) == r


def test_optional_fields_are_left_out_and_the_line_has_no_newline() -> None:
    body = _record("two\nlines").to_json()
    assert b"\n" not in body
    assert set(json.loads(body)) == {"ts", "severity", "facility", "host", "app", "pid", "message"}


def test_unencodable_extra_values_become_their_repr() -> None:
    doc = json.loads(_record(extra={"obj": object}).to_json())
    assert doc["extra"]["obj"] == repr(object)


def test_ts_is_rfc3339_utc() -> None:
    ts = rfc3339(0)
    assert ts == "1970-01-01T00:00:00.000000Z"
    assert datetime.fromisoformat(rfc3339()).utcoffset() is not None


def test_severities_and_facilities() -> None:
    assert normalize_severity("WARN") == "warning"
    assert normalize_severity("Error") == "error"
    with pytest.raises(ValueError, match="unknown severity"):
        normalize_severity("loud")
    assert check_facility("kern") == "kern"
    for bad in ("", "a.b", "*", "#"):
        with pytest.raises(ValueError):
            check_facility(bad)
    assert [severity_for_level(n) for n in (5, 10, 20, 25, 30, 40, 50, 60)] == [
        "debug",
        "debug",
        "info",
        "warning",
        "warning",
        "error",
        "critical",
        "critical",
    ]


def test_routing_keys() -> None:
    assert routing_key("direct", "error", "kern") == "error"
    assert routing_key("topic", "error", "kern") == "kern.error"
    assert routing_key("fanout", "error", "kern") == "error"


def test_file_sink_rotates_at_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    line = len(_record("x" * 50).to_json()) + 1
    sink = FileSink(path, max_bytes=line * 3, backups=2)
    for i in range(10):
        sink.write(_record(f"{i}" + "x" * 49))
    sink.close()
    files = [path, path.with_name("logs.jsonl.1"), path.with_name("logs.jsonl.2")]
    assert not path.with_name("logs.jsonl.3").exists()
    counts = [len(f.read_text().splitlines()) for f in files]
    assert counts == [1, 3, 3]  # 10 records: 3 + 3 + 3 + 1, the oldest file dropped
    assert json.loads(path.read_text())["message"].startswith("9")


def test_file_sink_appends(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b'{"old":1}\n')
    sink = FileSink(path)
    sink.write(_record())
    sink.close()
    assert len(path.read_bytes().splitlines()) == 2


class _Buf:
    def __init__(self) -> None:
        self.data = b""

    def write(self, b: bytes) -> int:
        self.data += b
        return len(b)

    def flush(self) -> None:
        pass


def test_terminal_lines_are_coloured_by_severity() -> None:
    out = _Buf()
    sink = TerminalSink(out, colour=True)  # type: ignore[arg-type]
    sink.write(_record("boom", severity="error"))
    sink.write(_record("fine"))
    lines = out.data.decode().splitlines()
    assert lines[0].startswith("\x1b[31m") and lines[0].endswith("\x1b[0m")
    assert "\x1b" not in lines[1]
    assert format_line(_record("m", logger="db")) == (
        "2024-05-01T12:00:00.000001Z INFO     user h a[7] db: m"
    )
    plain = read(b"hi", Envelope())
    assert format_line(plain).endswith("INFO     user: hi")
    malformed = read(b'{"message": 5}', Envelope(timestamp=0))
    assert format_line(malformed) == '1970-01-01T00:00:00.000000Z MALFORMED {"message": 5}'
    sink.write(malformed)
    assert out.data.decode().splitlines()[2] == (
        '\x1b[35m1970-01-01T00:00:00.000000Z MALFORMED {"message": 5}\x1b[0m'
    )


def test_urls_are_checked_and_passwords_hidden() -> None:
    assert redact("amqp://guest:secret@host:5672/") == "amqp://guest:***@host:5672/"
    assert redact("amqp://host/") == "amqp://host/"
    for bad, why in [
        ("http://host/", "amqp://"),
        ("garbage", "amqp://"),
        ("amqp://:5672/", "no host"),
        ("amqp://h:port/", "invalid URL"),
        ("amqp://h/?heartbeat=x", "heartbeat"),
    ]:
        with pytest.raises(LogsError, match=why):
            parameters(bad)
    # found by a user: "Error: invalid URL not: ..." (the URL cut at its first space)
    with pytest.raises(LogsError) as exc:
        split_urls("not a url")
    assert str(exc.value) == "invalid URL 'not a url': it must start with amqp:// or amqps://"
    assert split_urls("amqp://a/ amqp://b/,amqp://c/") == ["amqp://a/", "amqp://b/", "amqp://c/"]


def test_client_failures_read_as_one_sentence() -> None:
    url = "amqp://guest:pw@h:1/"
    err = describe(
        pika.exceptions.ChannelClosedByBroker(406, "PRECONDITION_FAILED - inequivalent arg 'type'"),
        url,
    )
    assert str(err) == "PRECONDITION_FAILED - inequivalent arg 'type'"
    assert not err.transient
    err = describe(
        pika.exceptions.ProbableAuthenticationError(
            "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused'"
        ),
        url,
    )
    assert str(err) == "amqp://guest:***@h:1/: ACCESS_REFUSED - Login was refused"
    assert not err.transient
    err = describe(pika.exceptions.AMQPConnectionError(ConnectionRefusedError(111, "x")), url)
    assert err.transient and "cannot connect to amqp://guest:***@h:1/" in str(err)
    err = describe(pika.exceptions.ConnectionClosedByBroker(320, "CONNECTION_FORCED - x"), url)
    assert err.transient
    assert "pw" not in str(err)
