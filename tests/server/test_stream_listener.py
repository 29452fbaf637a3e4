"""The stream protocol listener's tracking (stored offsets, named publishers' last
publishing ids) survives a restart."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from leveret.protocol.stream import events as ev
from tests.support.brokers import start_leveret
from tests.support.streamclient import RawStreamClient

PUBLISH_CONFIRM = 0x0003


def new_stream(c: RawStreamClient) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    assert c.request(ev.Create(c.next_id(), name, {}), 0x0D)[0] == 1
    return name


def test_tracking_survives_a_restart() -> None:
    data = Path(tempfile.mkdtemp(prefix="leveret-stream-"))
    broker = start_leveret(data)
    try:
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        assert c.handshake() == 1
        stream = new_stream(c)
        assert c.request(ev.DeclarePublisher(c.next_id(), 1, "writer", stream), 0x01)[0] == 1
        c.send(ev.Publish(1, [(10, b"a"), (11, b"b")], []))
        got = c.frame(timeout=10)
        assert got is not None and got[0] == PUBLISH_CONFIRM
        c.send(ev.StoreOffset("reader", stream, 1))
        # answered after the store offset before it: the offset is taken by then
        c.request(ev.QueryOffset(c.next_id(), "reader", stream), 0x0B)
        c.close()
    finally:
        broker.stop()
    broker = start_leveret(data)
    try:
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        assert c.handshake() == 1
        code, rest = c.request(ev.QueryOffset(c.next_id(), "reader", stream), 0x0B)
        assert (code, int.from_bytes(rest, "big")) == (1, 1)
        code, rest = c.request(ev.QueryPublisherSequence(c.next_id(), "writer", stream), 0x05)
        assert (code, int.from_bytes(rest, "big")) == (1, 11)
        code, rest = c.request(ev.QueryOffset(c.next_id(), "nobody", stream), 0x0B)
        assert code == 19  # no offset
        c.close()
    finally:
        broker.stop()


def test_stream_settings_from_env_and_file(tmp_path: Path) -> None:
    from leveret.server.config import Config, ConfigError

    c = Config.load(None, env={})
    assert (c.stream_port, c.stream_tls_port, c.stream_listener) == (5552, 5551, True)
    c = Config.load(
        None,
        env={
            "LEVERET_STREAM_PORT": "0",
            "LEVERET_STREAM_LISTENER": "false",
            "LEVERET_STREAM_ADVERTISED_HOST": "broker-1",
        },
    )
    assert (c.stream_port, c.stream_listener, c.stream_advertised_host) == (0, False, "broker-1")
    path = tmp_path / "leveret.toml"
    path.write_text('[server]\nstream_port = 6552\nstream_advertised_host = "b2"\n')
    c = Config.load(path, env={})
    assert (c.stream_port, c.stream_advertised_host) == (6552, "b2")
    path.write_text("[server]\nstream_port = 70000\n")
    try:
        Config.load(path, env={})
    except ConfigError as exc:
        assert "stream_port" in str(exc)
    else:
        raise AssertionError("a port above 65535 was taken")


def test_a_subscriber_that_does_not_read_costs_bounded_memory(tmp_path: Path) -> None:
    """A subscriber with all the credit it wants that never reads: the broker stops
    reading the stream for it once its socket buffer is full, however long the stream."""
    import socket
    import time

    import leveret
    from leveret.server.stream import StreamEdge

    with leveret.Broker(data_dir=tmp_path) as broker:
        writer = RawStreamClient(broker.host, broker.stream_port)
        assert writer.handshake() == 1
        stream = new_stream(writer)
        assert writer.request(ev.DeclarePublisher(writer.next_id(), 1, "", stream), 0x01)[0] == 1
        body = b"x" * 10_000
        for batch in range(100):  # 100 chunks of 20 records: 20 MB
            writer.send(ev.Publish(1, [(batch * 20 + i, body) for i in range(20)], []))
            got = writer.frame(timeout=10)
            assert got is not None and got[0] == PUBLISH_CONFIRM
        reader = RawStreamClient(broker.host, broker.stream_port)
        assert reader.handshake() == 1
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        assert (
            reader.request(ev.Subscribe(reader.next_id(), 1, stream, 1, 0, 65535, {}), 0x07)[0] == 1
        )
        time.sleep(1.0)  # the reader reads nothing more from here on
        server = broker._server
        assert server is not None
        protocols = [p for p in server.state.connections if isinstance(p, StreamEdge)]
        buffered = [
            p.transport.get_write_buffer_size() for p in protocols if p.transport is not None
        ]
        subs = [sub for p in protocols if p.session for sub in p.session.subscriptions.values()]
        assert len(subs) == 1
        assert subs[0].offset < 2000, "the whole stream was read for a reader that does not read"
        assert max(buffered) < 6 * 1024 * 1024
        reader.close()
        writer.close()


def test_tracking_is_read_back_from_the_log_after_a_restart() -> None:
    """rstream stores an offset (a tracking chunk, which takes an offset) and a named
    publisher publishes (its sequence in the chunk's trailer); after a restart both are
    read back from the stream's own files (no tracking.json beside them), and the next
    message takes the offset after the last chunk."""
    import asyncio

    import pytest

    rstream = pytest.importorskip("rstream")
    kw = {"username": "guest", "password": "guest", "load_balancer_mode": True}
    data = Path(tempfile.mkdtemp(prefix="leveret-stream-"))
    name = f"s-{uuid.uuid4().hex[:10]}"

    async def before(port: int) -> None:
        async with rstream.Producer("127.0.0.1", port, **kw) as p:
            await p.create_stream(name)
            await p.send_wait(name, b"m0")
            c = rstream.Consumer("127.0.0.1", port, **kw)
            await c.start()
            await c.store_offset(name, "reader", 0)
            for _ in range(100):
                if await c.query_offset(name, "reader") == 0:
                    break
                await asyncio.sleep(0.05)
            await c.close()
        async with rstream.Producer("127.0.0.1", port, **kw) as p:  # a publisher of its own
            msg = rstream.AMQPMessage(body=b"m2")
            msg.publishing_id = 5
            await p.send_batch(name, [msg], publisher_name="named")
            await asyncio.sleep(0.3)

    async def after(port: int) -> tuple[int, int, list[int]]:
        c = rstream.Consumer("127.0.0.1", port, **kw)
        await c.start()
        got: list[int] = []
        try:
            stored = await c.query_offset(name, "reader")
            async with rstream.Producer("127.0.0.1", port, **kw) as p:
                locator = await p.default_client
                seq = await locator.query_publisher_sequence(name, "named")
                await p.send_wait(name, b"m3")

            async def on_message(msg: object, ctx: rstream.MessageContext) -> None:
                got.append(ctx.offset)

            spec = rstream.ConsumerOffsetSpecification(rstream.OffsetType.FIRST)
            await c.subscribe(name, on_message, offset_specification=spec)
            for _ in range(100):
                if len(got) >= 3:
                    break
                await asyncio.sleep(0.05)
        finally:
            await c.close()
        return stored, seq, got

    broker = start_leveret(data)
    try:
        asyncio.run(asyncio.wait_for(before(broker.stream_port), 30))
    finally:
        broker.stop()
    assert not list(data.rglob("tracking.json"))
    broker = start_leveret(data)
    try:
        stored, seq, offsets = asyncio.run(asyncio.wait_for(after(broker.stream_port), 30))
    finally:
        broker.stop()
    assert (stored, seq) == (0, 5)
    assert offsets == [0, 2, 3]  # offset 1: the tracking chunk of the stored offset
