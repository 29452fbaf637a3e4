"""Brokers of a test's own for backlogs larger than memory: Leveret or a RabbitMQ node,
each given a memory high watermark a fixed headroom above its own idle footprint (the
two brokers idle at very different sizes: ~60 MB and ~130 MB), killable with -9 and
restartable on the same data; and the clients that fill and drain them."""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame, header

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.mgmt import Api
from tests.support.rabbitmq import RabbitNode, rss_of
from tests.support.rawclient import PROTOCOL_HEADER

MiB = 1024 * 1024


class Node:
    """A broker of the test's own."""

    kind = ""
    host = "127.0.0.1"
    port = 0
    http_url = ""
    watermark = 0

    def rss(self) -> int:
        raise NotImplementedError

    def kill9(self) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"


class LeveretNode(Node):
    kind = "leveret"

    def __init__(
        self, data_dir: Path | None, headroom: int | None, extra: list[str] | None = None
    ) -> None:
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="leveret-backlog-"))
        self.extra = list(extra or [])
        if headroom is not None:
            idle = start_leveret(self.data_dir, self.extra)
            time.sleep(0.5)
            self.watermark = rss_of(self._pid(idle)) + headroom
            idle.stop()
            self.extra += ["--vm-memory-high-watermark", f"{self.watermark // 1024}KiB"]
        self.broker: BrokerUnderTest = start_leveret(self.data_dir, self.extra)
        self._sync()

    @staticmethod
    def _pid(b: BrokerUnderTest) -> int:
        assert b.process is not None
        return b.process.pid

    def _sync(self) -> None:
        self.port = self.broker.port
        self.http_url = self.broker.http_url

    def rss(self) -> int:
        return rss_of(self._pid(self.broker))

    @property
    def log(self) -> list[str]:
        return self.broker.log

    def kill9(self) -> None:
        self.broker.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.broker = start_leveret(self.data_dir, self.extra, timeout=120)
        self._sync()

    def close(self) -> None:
        self.broker.stop()


class RabbitMQNode(Node):
    kind = "rabbitmq"

    def __init__(
        self,
        base: Path | None,
        headroom: int | None,
        management: bool = False,
        config: dict[str, str] | None = None,
    ) -> None:
        self.node = RabbitNode(base, config=config, management=management).start()
        self.port = self.node.port
        self.http_url = self.node.http_url
        if headroom is not None:
            self.watermark = self.node.rss() + headroom
            self._apply()

    def _apply(self) -> None:
        if self.watermark:
            self.node.ctl("set_vm_memory_high_watermark", "absolute", str(self.watermark))

    def set_headroom(self, headroom: int) -> None:
        """A watermark ``headroom`` above what the node holds now."""
        self.watermark = self.node.rss() + headroom
        self._apply()

    def rss(self) -> int:
        return self.node.rss()

    def kill9(self) -> None:
        self.node.kill9()

    def restart(self) -> None:
        self.node.start()
        self._apply()  # a runtime setting: gone with the node

    def close(self) -> None:
        self.node.close()


def body_of(i: int, size: int) -> bytes:
    """Message ``i``'s body: its number, then a byte pattern of its own."""
    head = b"%010d:" % i
    return (
        head
        + bytes((i * 7 + k) % 251 for k in range(61)) * ((size - len(head)) // 61)
        + b"." * ((size - len(head)) % 61)
    )


@dataclass
class Published:
    confirmed: int = 0  # every message below this number was confirmed
    sent: int = 0
    blocked: list[str] = field(default_factory=list)
    unblocked: int = 0
    peak_rss: int = 0


class Publisher:
    """A raw AMQP publisher: pipelines publishes to the default exchange, with publisher
    confirms (multiple acks understood), and notes connection.blocked."""

    def __init__(self, node: Node, queue: str, confirms: bool = True) -> None:
        self.sock = socket.create_connection((node.host, node.port), timeout=120)
        self.buf = b""
        self.queue = queue
        self.confirms = confirms
        self.result = Published()
        self.sock.sendall(PROTOCOL_HEADER)
        self._expect(commands.Connection.Start)
        self._send(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "backlog-test",
                    "capabilities": {"connection.blocked": True, "publisher_confirms": True},
                },
                mechanism="PLAIN",
                response="\0guest\0guest",
                locale="en_US",
            ),
        )
        tune = self._expect(commands.Connection.Tune)
        self.frame_max = tune.frame_max
        self._send(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
            ),
        )
        self._send(0, commands.Connection.Open(virtual_host="/"))
        self._expect(commands.Connection.OpenOk)
        self._send(1, commands.Channel.Open())
        self._expect(commands.Channel.OpenOk)
        if confirms:
            self._send(1, commands.Confirm.Select())
            self._expect(commands.Confirm.SelectOk)

    def _send(self, channel: int, method: Any) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def _recv(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        self.buf += chunk

    def _buffered(self) -> Iterator[Any]:
        """The whole frames in the buffer, each taken out of it as it is yielded."""
        while len(self.buf) >= 7:
            (size,) = struct.unpack_from(">I", self.buf, 3)
            if len(self.buf) < size + 8:
                return
            used, _, value = frame.unmarshal(self.buf)
            self.buf = self.buf[used:]
            yield value

    def _frames(self) -> Iterator[Any]:
        while True:
            yield from self._buffered()
            self._recv()

    def _poll(self) -> None:
        """Read and note whatever the broker has sent, without waiting."""
        while select.select([self.sock], [], [], 0)[0]:
            self._recv()
        for value in self._buffered():
            self._note(value)

    def _expect(self, cls: type) -> Any:
        for value in self._frames():
            self._note(value)
            if isinstance(value, cls):
                return value
        raise AssertionError("unreachable")

    def _note(self, value: Any) -> None:
        if isinstance(value, commands.Connection.Blocked):
            self.result.blocked.append(value.reason)
        elif isinstance(value, commands.Connection.Unblocked):
            self.result.unblocked += 1
        elif isinstance(value, commands.Basic.Ack):
            # one queue: confirms come in publish order, so a tag confirms all below it
            self.result.confirmed = max(self.result.confirmed, value.delivery_tag)
        elif isinstance(value, commands.Basic.Nack):
            raise AssertionError(f"nacked: {value.delivery_tag}")
        elif isinstance(value, (commands.Connection.Close, commands.Channel.Close)):
            raise AssertionError(f"closed: {value.reply_code} {value.reply_text}")

    def declare(self, durable: bool, arguments: dict[str, Any] | None = None) -> None:
        self._send(
            1, commands.Queue.Declare(queue=self.queue, durable=durable, arguments=arguments or {})
        )
        self._expect(commands.Queue.DeclareOk)

    def delete_queue(self) -> None:
        self._send(1, commands.Queue.Delete(queue=self.queue))
        self._expect(commands.Queue.DeleteOk)

    def publish(
        self,
        count: int,
        size: int,
        persistent: bool,
        sample: Callable[[], int] | None = None,
        window: int = 256,
        start: int = 0,
        wait: bool = True,
    ) -> Published:
        """Publish messages start..start+count-1 (the first publish on the channel is
        message 0); with confirms, keep at most ``window`` of them unconfirmed and wait
        for the last confirm."""
        props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key=self.queue), 1)
        res = self.result
        frames = self._frames()
        for i in range(start, start + count):
            body = body_of(i, size)
            parts = [method, frame.marshal(header.ContentHeader(0, len(body), props), 1)]
            step = self.frame_max - 8
            for k in range(0, len(body), step):
                parts.append(frame.marshal(pbody.ContentBody(body[k : k + step]), 1))
            self.sock.sendall(b"".join(parts))
            res.sent = i + 1
            if self.confirms:
                while res.sent - res.confirmed > window:
                    self._note(next(frames))
            elif i % 64 == 0:
                self._poll()  # notice connection.blocked
            if sample is not None and i % 64 == 0:
                res.peak_rss = max(res.peak_rss, sample())
        if self.confirms and wait:
            while res.confirmed < start + count:
                self._note(next(frames))
        return res

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def drain(
    node: Node,
    queue: str,
    count: int,
    size: int,
    prefetch: int = 500,
    sample: Callable[[], int] | None = None,
) -> tuple[list[int], int, bool]:
    """Consume ``count`` messages with manual acks: the message numbers in the order
    they came, the peak RSS sampled meanwhile, and whether every body was intact."""
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters(node.host, node.port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    seen: list[int] = []
    intact = True
    peak = 0
    for method, _, body in ch.consume(queue, inactivity_timeout=60):
        if method is None:
            break
        n = int(body[:10])
        intact = intact and body == body_of(n, size)
        seen.append(n)
        if len(seen) % 64 == 0 or len(seen) == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
            if sample is not None:
                peak = max(peak, sample())
        if len(seen) == count:
            break
    ch.cancel()
    conn.close()
    return seen, peak, intact


def queue_depth(node: Node, queue: str) -> int:
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters(node.host, node.port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def node_figures(
    api: Api, until: Callable[[dict[str, Any]], bool] = lambda n: True, timeout: float = 30
) -> dict[str, Any]:
    """/api/nodes's entry, once it has the disk figures and ``until`` holds (RabbitMQ's
    management collects node figures every 5 s)."""
    deadline = time.monotonic() + timeout
    while True:
        me: dict[str, Any] = api.get("/api/nodes")[0]
        if "disk_free_alarm" in me and "mem_limit" in me and until(me):
            return me
        if time.monotonic() > deadline:
            raise AssertionError(f"node figures: {me}")
        time.sleep(0.5)
