"""``leveret.spark.wire``: the lean stream consumer the Spark reader uses, over real sockets
on both brokers, and its frame walker fed a byte stream cut at arbitrary points."""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pika
import pika.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.spark.frames import Fields
from leveret.spark.reader import message_batch
from leveret.spark.wire import StreamConsumer
from tests.spark.conftest import declare_stream, delete_queue
from tests.support.brokers import BrokerUnderTest
from tests.support.tiers import examples


def _consumer(broker: BrokerUnderTest, password: str = "guest") -> StreamConsumer:
    return StreamConsumer(broker.host, broker.port, "/", "guest", password, 100)


def _read(consumer: StreamConsumer, n: int) -> list[dict[str, Any]]:
    """``n`` deliveries as message rows (``format("amqp")``'s columns)."""
    got: list[dict[str, Any]] = []
    for _ in range(200):
        block = consumer.read(0.1)
        if block is None:
            continue
        consumer.ack(block.last_tag)
        fields = Fields(block)
        offsets = fields.offsets()
        got += message_batch(fields, offsets, np.arange(len(block))).to_pylist()
        if len(got) >= n:
            return got
    return got


def test_properties_headers_and_multi_frame_bodies(broker: BrokerUnderTest) -> None:
    stream = f"wire-{uuid.uuid4().hex[:8]}"
    declare_stream(broker, stream)
    big = bytes(range(256)) * 1200  # 307,200 bytes: three body frames at frame_max 131072
    when = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8",
        headers={"s": "text", "i": 7, "b": True, "big": 2**40},
        delivery_mode=2, priority=3, correlation_id="c-1", reply_to="r",
        expiration="60000", message_id="m-1", timestamp=int(when.timestamp()), type="log",
        user_id="guest", app_id="app",
    )  # fmt: skip
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", stream, big, props)
    ch.basic_publish("", stream, b"")
    ch.basic_publish("", stream, b"third", pika.BasicProperties(headers={"k": b"v"}))
    conn.close()
    consumer = _consumer(broker)
    try:
        consumer.consume(stream, 0)
        first, empty, third = _read(consumer, 3)
    finally:
        consumer.close()
        delete_queue(broker, stream)
    assert (first["offset"], first["exchange"], first["routing_key"]) == (0, "", stream)
    assert (first["redelivered"], first["body"]) == (False, big)
    headers = dict(first["headers"])
    assert headers.pop("x-stream-offset") == "0"
    assert headers == {"s": "text", "i": "7", "b": "true", "big": str(2**40)}
    assert (first["content_type"], first["content_encoding"]) == ("application/json", "utf-8")
    assert (first["delivery_mode"], first["priority"]) == (2, 3)
    assert (first["correlation_id"], first["reply_to"], first["expiration"]) == (
        "c-1", "r", "60000")  # fmt: skip
    assert (first["message_id"], first["type"], first["user_id"], first["app_id"]) == (
        "m-1", "log", "guest", "app")  # fmt: skip
    assert first["timestamp"] == when
    assert empty["body"] == b"" and empty["content_type"] is None
    assert empty["headers"] == [("x-stream-offset", "1")]
    assert third["body"] == b"third" and dict(third["headers"])["k"] == "v"


def test_a_missing_stream_and_a_refused_login_fail_as_pika_would(
    broker: BrokerUnderTest,
) -> None:
    consumer = _consumer(broker)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            consumer.consume("no-such-stream-here", 0)
    finally:
        consumer.close()
    assert info.value.reply_code == 404
    assert info.value.reply_text == "NOT_FOUND - no queue 'no-such-stream-here' in vhost '/'"
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        _consumer(broker, password="wrong")
    assert "ACCESS_REFUSED" in str(refused.value)


def _frame(ftype: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, 1, len(payload)) + payload + b"\xce"


def _delivery(tag: int, body: bytes, frame_max: int) -> bytes:
    deliver = struct.pack(">HH", 60, 60) + b"\x03ctg" + struct.pack(">QB", tag, 0)
    deliver += b"\x02ex" + b"\x03key"
    table = b"\x0fx-stream-offset" + b"l" + struct.pack(">q", tag - 1)
    props = struct.pack(">H", 0x2000) + struct.pack(">I", len(table)) + table  # headers only
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    out = _frame(1, deliver) + _frame(2, header)
    for i in range(0, len(body), frame_max):
        out += _frame(3, body[i : i + frame_max])
    return out + _frame(8, b"") if tag % 3 == 0 else out  # a heartbeat now and then


@settings(max_examples=examples(30), deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=40),
)
def test_the_frame_walker_loses_nothing_however_the_bytes_arrive(
    bodies: list[bytes], cuts: list[int]
) -> None:
    # the byte stream is written in pieces of arbitrary sizes, with quiet spells between
    # them: read() returns on each and must resume mid-message without loss
    data = b"".join(_delivery(i + 1, b, frame_max=100) for i, b in enumerate(bodies))
    ours, theirs = socket.socketpair()
    consumer = StreamConsumer.__new__(StreamConsumer)
    consumer._sock, consumer._buf = ours, bytearray(1 << 12)
    consumer._view, consumer._start, consumer._end = memoryview(consumer._buf), 0, 0
    # bodies come in frames of 100 bytes, a broker's right though neither broker does it
    # below frame_max: blocks with such bodies fail the one-frame check and are walked
    # again frame by frame
    consumer._frame_max = 131072
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        n = cuts[len(pieces) % len(cuts)]
        pieces.append(data[i : i + n])
        i += n
    gate = threading.Semaphore(0)

    def writer() -> None:
        for piece in pieces:
            gate.acquire()
            theirs.sendall(piece)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    got: list[tuple[int, bytes, int]] = []

    def take(wait: float) -> bool:
        block = consumer.read(wait)
        if block is None:
            return False
        fields = Fields(block)
        rows = message_batch(fields, fields.offsets(), np.arange(len(block))).to_pylist()
        assert block.last_tag == len(got) + len(rows)
        for row in rows:
            assert (row["exchange"], row["routing_key"]) == ("ex", "key")
            got.append((len(got) + 1, row["body"], row["offset"]))
        return True

    try:
        for _ in pieces:
            gate.release()
            while take(0.005):
                pass
        # the writer has every piece by now; on a busy machine it may not have sent the
        # last ones yet: let it finish, then read what is left
        t.join(5)
        while len(got) < len(bodies) and take(0.05):
            pass
    finally:
        t.join(5)
        ours.close()
        theirs.close()
    assert got == [(i + 1, b, i) for i, b in enumerate(bodies)]


def test_the_offset_is_found_wherever_the_headers_table_has_it() -> None:
    """Alone (the usual case), among headers sorted by name (RabbitMQ) or after them
    (Leveret): every way gives the offset, and the other headers are kept."""
    from pamqp import encode

    def delivery(tag: int, table: bytes, body: bytes) -> bytes:
        deliver = struct.pack(">HH", 60, 60) + b"\x03ctg" + struct.pack(">QB", tag, 1)
        deliver += b"\x00" + b"\x04logs"
        props = struct.pack(">H", 0x2000 | 0x0080) + table + b"\x02m" + str(tag).encode()[:1]
        header = struct.pack(">HHQ", 60, 0, len(body)) + props
        return _frame(1, deliver) + _frame(2, header) + _frame(3, body)

    def table(*items: tuple[str, Any]) -> bytes:
        out: bytes = encode.field_table(dict(items))
        return out

    raw = b"".join([
        delivery(1, table(("x-stream-offset", 40)), b"a"),
        delivery(2, table(("aa", "x"), ("x-stream-offset", 41), ("zz", 1)), b"b"),
        delivery(3, table(("k", "x-stream-offsetl"), ("x-stream-offset", 42)), b"c"),
    ])  # fmt: skip
    from leveret.spark.wire import Deliveries, walk

    pos, starts, bodies, multi = walk(memoryview(raw), 0, len(raw), 100)
    assert pos == len(raw) and not multi
    block = Deliveries(raw, np.array(starts, np.int64), b"\n".join([*map(bytes, bodies), b""]))
    fields = Fields(block)
    offsets = fields.offsets()
    assert list(offsets) == [40, 41, 42]
    assert block.last_tag == 3
    rows = message_batch(fields, offsets, np.arange(3)).to_pylist()
    assert [r["redelivered"] for r in rows] == [True] * 3
    assert [r["body"] for r in rows] == [b"a", b"b", b"c"]
    assert [r["routing_key"] for r in rows] == ["logs"] * 3
    assert dict(rows[1]["headers"]) == {"aa": "x", "x-stream-offset": "41", "zz": "1"}
    assert dict(rows[2]["headers"]) == {"k": "x-stream-offsetl", "x-stream-offset": "42"}


def test_a_stream_is_read_over_tls(leveret: BrokerUnderTest, tmp_path: Path) -> None:
    """``amqps://``: the lean consumer speaks TLS (through a TLS-terminating proxy here,
    since neither test broker listens for TLS), verifying the server as pika would."""
    import selectors
    import ssl
    import subprocess
    from urllib.parse import quote

    from leveret.spark.reader import read_stream_range

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-days", "1", "-keyout", str(key),
         "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def relay(raw: socket.socket) -> None:
        with (
            server_ctx.wrap_socket(raw, server_side=True) as tls,
            socket.create_connection((leveret.host, leveret.port)) as up,
        ):
            sel = selectors.DefaultSelector()
            sel.register(tls, selectors.EVENT_READ, up)
            sel.register(up, selectors.EVENT_READ, tls)
            while True:
                for key_, _ in sel.select():
                    src, dst = key_.fileobj, key_.data
                    data = src.recv(1 << 16)  # type: ignore[union-attr]
                    while isinstance(src, ssl.SSLSocket) and src.pending():
                        data += src.recv(src.pending())
                    if not data:
                        return
                    dst.sendall(data)

    def serve() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=relay, args=(raw,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    stream = f"wire-tls-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    try:
        from tests.spark.conftest import emit_records

        emit_records(leveret.url, stream, range(500))
        options = quote(repr({"ca_certs": str(cert), "server_hostname": "localhost"}))
        url = f"amqps://guest:guest@localhost:{port}/?ssl_options={options}"
        rows = [r for b in read_stream_range(url, stream, 0, 500) for r in b.to_pylist()]
        assert [r["offset"] for r in rows] == list(range(500))
        assert [r["message_id"] for r in rows] == [str(i) for i in range(500)]
    finally:
        listener.close()
        delete_queue(leveret, stream)
