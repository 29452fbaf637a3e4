"""Every reader reads a message the same way: ``leveret receive-logs`` (its file and its
terminal), the dashboard's Logs view and the lake (read here as the ingest's executors read
the stream, without Spark). Found by a user: one plain-text record shown at three times (its
arrival in the receiver, its parse in the lake, the moment the view opened), broker events
shown as ``info binding ''`` in the view, and bodies that are not records written to the
receiver's file as invented records."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pika
import pytest

import leveret
from leveret.spark.chunkreader import read_chunk_range
from leveret.spark.client import stream_tail
from leveret.spark.pipeline import ensure_log_stream
from tests.logs.conftest import Receiver, read_records

pytestmark = pytest.mark.slow

MALFORMED = [
    b'{"message": 5, "tag": "CORRUPTJSON"}',
    b'{"ts": "not a time", "message": "when?"}',
    b"\x00\xffbinary\xfe",
]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[leveret.Broker]:
    """A broker as ``leveret up`` runs it: arrival times stamped, the event exchange on,
    and the ``logs`` exchange feeding the lake's stream and the broker's events with it."""
    with leveret.Broker(
        management=True,
        data_dir=tmp_path / "data",
        message_interceptors="set_header_timestamp=false",
        plugins="rabbitmq_event_exchange",
    ) as b:
        ensure_log_stream(b.url)
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        conn.channel().queue_bind("logs", "amq.rabbitmq.event", "binding.*")
        conn.close()
        yield b


def _history(broker: leveret.Broker, until: str, seconds: float = 30) -> list[dict[str, Any]]:
    """The records the Logs view opens with (``/api/logs/stream``), up to one whose
    message or malformed body holds ``until``."""
    u = urlparse(broker.management_url)
    assert u.hostname is not None and u.port is not None
    auth = base64.b64encode(b"guest:guest").decode()
    with socket.create_connection((u.hostname, u.port)) as sock:
        sock.sendall(
            "GET /api/logs/stream?vhost=%2F&exchange=logs HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Basic {auth}\r\n\r\n".encode()
        )
        sock.settimeout(0.5)
        buf, got = b"", []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):  # past the chunked encoding's lengths
                    if line.startswith(b"data: "):
                        got += json.loads(line[6:])["records"]
            if any(until in (r.get("message") or r.get("_corrupt") or "") for r in got):
                return got
    raise AssertionError(f"the view never showed {until!r}: {got[-3:]}")


def _lake(broker: leveret.Broker) -> list[dict[str, Any]]:
    """The stream's records as the ingest writes them into the lake."""
    rows: list[dict[str, Any]] = []
    for batch in read_chunk_range(
        broker.url, "logs", 0, _end(broker), stream_port=broker.stream_port, records=True
    ):
        rows += batch.to_pylist()
    return sorted(rows, key=lambda r: r["offset"])


def _end(broker: leveret.Broker) -> int:
    """The stream's tail, as the ingest's driver asks for it."""
    return stream_tail(broker.url, "logs", wait=10)


def _publish(broker: leveret.Broker, *bodies: bytes) -> None:
    """As the tutorial's emit_log.py: plain bodies to the fanout exchange, no time."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish(exchange="logs", routing_key="", body=body)
    conn.close()


def _us(ts: Any) -> int:
    if isinstance(ts, str):
        ts = __import__("datetime").datetime.fromisoformat(ts)
    return int(ts.timestamp() * 1_000_000)


def test_a_plain_text_record_has_one_time_in_every_reader(
    broker: leveret.Broker, tmp_path: Path
) -> None:
    out = tmp_path / "archive.jsonl"
    receiver = Receiver(["--url", broker.url, "--to", str(out)])
    try:
        receiver.wait_ready()
        _publish(broker, b"error: TSCHECK plain text")
        for _ in range(300):
            if read_records(out):
                break
            time.sleep(0.05)
        time.sleep(1.5)  # read later than it arrived: every reader still gives its arrival
        view = [r for r in _history(broker, "TSCHECK") if "TSCHECK" in (r.get("message") or "")]
        lake = [r for r in _lake(broker) if "TSCHECK" in (r["message"] or "")]
        (archived,) = read_records(out)
    finally:
        receiver.stop()
    assert len(view) == len(lake) == 1
    times = {_us(archived["ts"]), _us(view[0]["ts"]), _us(lake[0]["ts"])}
    assert len(times) == 1, (archived["ts"], view[0]["ts"], lake[0]["ts"])
    assert archived["severity"] == view[0]["severity"] == lake[0]["severity"] == "error"


def test_what_is_not_a_record_is_kept_whole_by_the_receiver_as_by_the_lake(
    broker: leveret.Broker, tmp_path: Path
) -> None:
    out = tmp_path / "archive.jsonl"
    receiver = Receiver(["--url", broker.url, "--to", str(out)])
    screen = Receiver(["--url", broker.url], tty=True)
    try:
        receiver.wait_ready()
        screen.wait_ready()
        _publish(broker, *MALFORMED)
        deadline = time.monotonic() + 60
        while len(read_records(out)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        archived = read_records(out)
        while len(screen.lines()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = [line.decode() for line in screen.lines()]
    finally:
        receiver.stop()
        screen.stop()
    lake = [r for r in _lake(broker) if r["_corrupt"] is not None]
    assert (
        [r["_corrupt"] for r in archived]
        == [r["_corrupt"] for r in lake]
        == [
            MALFORMED[0].decode(),
            MALFORMED[1].decode(),
            "base64:" + base64.b64encode(MALFORMED[2]).decode(),
        ]
    )
    assert [set(r) for r in archived] == [{"ts", "_corrupt"}] * 3
    assert [_us(r["ts"]) for r in archived] == [_us(r["ts"]) for r in lake]
    assert all(" MALFORMED " in line for line in lines), lines
    assert 'MALFORMED {"message": 5, "tag": "CORRUPTJSON"}' in lines[0]


def test_the_view_reads_the_brokers_events_as_the_lake_does(broker: leveret.Broker) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare("orders", "direct")
    ch.queue_declare("billing")
    ch.queue_bind("billing", "orders", "paid")
    conn.close()
    _publish(broker, b"after the binding")
    view = _history(broker, "after the binding")
    lake = _lake(broker)

    def bindings(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (r["facility"], r["severity"], r["message"], _us(r["ts"]))
            for r in rows
            if "source_name=orders" in (r.get("message") or "")
        ]

    assert bindings(view) == bindings(lake)
    ((facility, severity, message, _),) = bindings(view)
    assert (facility, severity) == ("broker", "info")
    assert message == (
        "binding.created source_name=orders destination_name=billing vhost=/ by guest"
    )
