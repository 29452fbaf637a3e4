"""A data directory written by Leveret before streams took osiris's layout (the fixture:
a stream with three AMQP 0-9-1 messages, one published over the stream protocol, an
offset stored, one more 0-9-1 message, as that version wrote them) is converted at start:
nothing is lost, offsets and stored offsets stay, both protocols read it, appends go on."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pika
import pytest

import leveret

rstream = pytest.importorskip("rstream")

FIXTURE = Path(__file__).parent / "fixtures" / "old_stream_layout"
KW: dict[str, Any] = {"username": "guest", "password": "guest", "load_balancer_mode": True}


def consume_091(port: int, n: int) -> list[tuple[pika.BasicProperties, bytes]]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        got: list[tuple[pika.BasicProperties, bytes]] = []
        ch.basic_consume(
            "old-stream",
            lambda c, m, p, b: got.append((p, b)),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        return got
    finally:
        conn.close()


async def read_stream(port: int, n: int) -> tuple[list[tuple[int, bytes]], int]:
    got: list[tuple[int, bytes]] = []
    c = rstream.Consumer("127.0.0.1", port, **KW)
    await c.start()
    try:

        async def on_message(msg: Any, ctx: Any) -> None:
            got.append((ctx.offset, bytes(msg)))

        await c.subscribe(
            "old-stream",
            on_message,
            offset_specification=rstream.ConsumerOffsetSpecification(rstream.OffsetType.FIRST),
        )
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        stored = await c.query_offset("old-stream", "reader")
    finally:
        await c.close()
    return got, stored


def test_an_old_layout_stream_is_converted_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    stream_dir = data / "streams" / "%2F" / "old-stream"
    with caplog.at_level(logging.WARNING), leveret.Broker(data_dir=data) as broker:
        assert not list(stream_dir.glob("*.seg"))
        assert (stream_dir / "00000000000000000000.segment").read_bytes()[:8] == (
            b"OSIL\x00\x00\x00\x01"
        )
        got = consume_091(broker.port, 5)
        raw, stored = asyncio.run(read_stream(broker.stream_port, 5))
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "old-stream", b"after")
        conn.close()
        after = consume_091(broker.port, 6)
    assert any(
        "stream 'old-stream' in vhost '/': converted 5 messages" in r.getMessage()
        for r in caplog.records
    )
    assert [b for _, b in got] == [b"body-0", b"body-1", b"body-2", b"from-stream", b"body-4"]
    assert [p.headers["x-stream-offset"] for p, _ in got] == [0, 1, 2, 3, 4]
    p0 = got[0][0]
    assert (p0.content_type, p0.delivery_mode, p0.priority, p0.message_id, p0.timestamp) == (
        "text/plain",
        2,
        1,
        "m0",
        1700000000,
    )
    assert {k: v for k, v in p0.headers.items() if k != "x-stream-offset"} == {"n": 0, "s": "x"}
    p3 = got[3][0]
    assert (p3.message_id, p3.content_type, p3.headers["k"]) == ("sm", "application/json", "v")
    assert got[4][0].headers == {"late": True, "x-stream-offset": 4}
    assert [o for o, _ in raw] == [0, 1, 2, 3, 4]
    assert raw[0][1].endswith(b"\x00Su\xa0\x06body-0")
    assert b"\xa3\nx-exchange\xa1\x00" in raw[0][1]
    assert stored == 2
    assert [b for _, b in after][-1] == b"after"
    assert after[-1][0].headers["x-stream-offset"] == 5
