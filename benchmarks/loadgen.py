"""A lean AMQP 0-9-1 load generator: blocking raw sockets, one OS process per role.

pamqp is used only for the handshake and the cold setup methods, and to encode one
publish (method + content header + body frames) once; the producer then sends a
pre-built buffer of ``batch`` publishes over and over. Consumers walk frame headers only
and count ``basic.deliver`` method frames; in ack mode they send one
``basic.ack(multiple=true)`` per ``ack_every`` deliveries, as real clients do.

Blocking sockets in dedicated processes beat asyncio/uvloop here: there is exactly one
socket per process, so an event loop only adds overhead (see ``--self-test`` in
fanout.py for the measured ceilings).

Workers talk to the orchestrator through shared memory only (a ``RawArray`` of
counters and a stop flag), so reporting progress costs one store per ``recv``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import time
from array import array
from collections import deque
from collections.abc import Sequence
from typing import Any

from pamqp import body as amqp_body
from pamqp import commands, frame, header
from pamqp.base import Frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072
RECV_BUFFER = 4 * 1024 * 1024
SOCKET_BUFFER = 4 * 1024 * 1024

# Layout of the shared counter array.
PUBLISHED = 0
CONFIRMED = 1
CONSUMER0 = 2  # consumer i counts into CONSUMER0 + i
N_COUNTERS = 8

_frame_head = struct.Struct(">BHI").unpack_from
_u32 = struct.Struct(">I").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_ack_frame = struct.Struct(">BHIIQBB").pack  # basic.ack + frame end

DELIVER = 0x003C003C
ACK = 0x003C0050
NACK = 0x003C0078
CONNECTION_CLOSE = 0x000A0032
CHANNEL_CLOSE = 0x00140028


class BrokerClosed(RuntimeError):
    """The broker closed the connection or a channel (reply text in the message)."""


def basic_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return _ack_frame(1, channel, 13, ACK, delivery_tag, 1 if multiple else 0, 0xCE)


def _tune_socket(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)


def hot_socket(sock: socket.socket, wake: float = 0.2) -> None:
    """Blocking mode for the hot loops, with a kernel receive timeout.

    A Python-level timeout (``settimeout``) makes CPython poll() before every recv and
    send: one extra syscall per call. ``SO_RCVTIMEO`` keeps plain blocking calls and
    still wakes a blocked ``recv`` (as BlockingIOError) so the stop flag is noticed."""
    sock.settimeout(None)
    usec = int(wake * 1_000_000)
    timeval = struct.pack("ll", usec // 1_000_000, usec % 1_000_000)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


def send_all(sock: socket.socket, data: memoryview, ctl: Any) -> bool:
    """``sendall`` that gives up (False) once the stop flag is set while the peer does
    not read (flow control): SO_SNDTIMEO wakes a blocked send."""
    send = sock.send
    total = len(data)
    sent = 0
    while sent < total:
        try:
            sent += send(data[sent:] if sent else data)  # nearly always all at once
        except (BlockingIOError, InterruptedError):
            if ctl[0]:
                return False
    return True


class SetupConnection:
    """A blocking AMQP client good enough for the handshake and cold methods."""

    def __init__(
        self,
        host: str,
        port: int,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        timeout: float = 10.0,
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        _tune_socket(self.sock)
        self.buf = bytearray()
        self.sock.sendall(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start)
        self.server_properties: dict[str, Any] = dict(start.server_properties or {})
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "leveret-bench",
                    "capabilities": {
                        "publisher_confirms": True,
                        "basic.nack": True,
                        "consumer_cancel_notify": True,
                    },
                },
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        tune = self.expect(commands.Connection.Tune)
        frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        self.send(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max or 2047, frame_max=frame_max, heartbeat=0
            ),
        )
        self.send(0, commands.Connection.Open(virtual_host=vhost))
        self.expect(commands.Connection.OpenOk)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def send(self, channel: int, method: Frame) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def expect(self, cls: type[Frame]) -> Any:
        while True:
            if len(self.buf) >= 7:
                size = _frame_head(self.buf, 0)[2]
                if len(self.buf) >= size + 8:
                    used, _channel, value = frame.unmarshal(bytes(self.buf[: size + 8]))
                    del self.buf[:used]
                    if isinstance(value, cls):
                        return value
                    if isinstance(value, (commands.Connection.Close, commands.Channel.Close)):
                        raise BrokerClosed(f"{value.reply_code} {value.reply_text}")
                    continue  # heartbeats, blocked/unblocked: not interesting here
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BrokerClosed(f"connection closed while waiting for {cls.__name__}")
            self.buf += chunk

    def rpc(self, method: Frame, reply: type[Frame]) -> Any:
        self.send(1, method)
        return self.expect(reply)

    def close(self) -> None:
        """connection.close, then wait briefly for close-ok (discarding deliveries)."""
        try:
            self.sock.settimeout(2.0)
            self.send(
                0,
                commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                ),
            )
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                if not self.sock.recv(RECV_BUFFER):
                    break
        except OSError:
            pass
        finally:
            self.sock.close()


def publish_unit(exchange: str, body_size: int, channel: int = 1) -> bytes:
    """One basic.publish with its content header and body, as bytes on the wire."""
    return (
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=""), channel)
        + frame.marshal(header.ContentHeader(0, body_size, commands.Basic.Properties()), channel)
        + frame.marshal(amqp_body.ContentBody(b"x" * body_size), channel)
    )


def deliver_unit(
    consumer_tag: str, exchange: str, delivery_tag: int, body_size: int, channel: int = 1
) -> bytes:
    """One basic.deliver as a broker sends it (for the self-test's canned stream)."""
    return (
        frame.marshal(
            commands.Basic.Deliver(
                consumer_tag=consumer_tag,
                delivery_tag=delivery_tag,
                exchange=exchange,
                routing_key="",
            ),
            channel,
        )
        + frame.marshal(header.ContentHeader(0, body_size, commands.Basic.Properties()), channel)
        + frame.marshal(amqp_body.ContentBody(b"x" * body_size), channel)
    )


# ----------------------------------------------------------------- hot loops
class FrameCounter:
    """Walks a byte stream frame by frame, reading headers only.

    Counts basic.deliver method frames, remembers the last delivery tag, and sums
    basic.ack/nack delivery tags for the publisher side. Raises :class:`BrokerClosed`
    on connection.close or channel.close."""

    __slots__ = ("acked_upto", "buf", "delivered", "end", "last_tag", "view")

    def __init__(self, leftover: bytes = b"") -> None:
        self.buf = bytearray(RECV_BUFFER + FRAME_MAX + 16)
        self.view = memoryview(self.buf)
        self.end = len(leftover)
        self.buf[: self.end] = leftover
        self.delivered = 0
        self.last_tag = 0
        self.acked_upto = 0

    def space(self) -> memoryview:
        return self.view[self.end :]

    def feed(self, n: int) -> None:
        """``n`` more bytes were received into :meth:`space`; parse every whole frame."""
        buf = self.buf
        end = self.end + n
        pos = 0
        delivered = 0
        last_deliver = -1
        head = _frame_head
        u32 = _u32
        while end - pos >= 7:
            ftype, _ch, size = head(buf, pos)
            nxt = pos + size + 8
            if nxt > end:
                break
            if ftype == 1:
                index = u32(buf, pos + 7)[0]
                if index == DELIVER:
                    delivered += 1
                    last_deliver = pos
                else:
                    self._method(index, pos, size)
            pos = nxt
        if last_deliver >= 0:
            ctag_len = buf[last_deliver + 11]
            self.last_tag = _u64(buf, last_deliver + 12 + ctag_len)[0]
            self.delivered += delivered
        rest = end - pos
        if rest:
            buf[:rest] = buf[pos:end]
        self.end = rest

    def _method(self, index: int, pos: int, size: int) -> None:
        buf = self.buf
        if index in (ACK, NACK):
            tag = _u64(buf, pos + 11)[0]
            if tag > self.acked_upto:
                self.acked_upto = tag
        elif index in (CONNECTION_CLOSE, CHANNEL_CLOSE):
            code = struct.unpack_from(">H", buf, pos + 11)[0]
            tlen = buf[pos + 13]
            text = bytes(buf[pos + 14 : pos + 14 + tlen]).decode(errors="replace")
            raise BrokerClosed(f"{code} {text}")


def consume_loop(
    sock: socket.socket,
    counter: FrameCounter,
    counts: Any,
    slot: int,
    ctl: Any,
    ack_every: int = 0,
    channel: int = 1,
    lowat: int = 0,
) -> None:
    """Count deliveries until ``ctl[0]`` is set; ack every ``ack_every`` (0: no-ack).

    ``lowat``: SO_RCVLOWAT in bytes; keep it well below what the broker can have in
    flight to this consumer (see :func:`safe_lowat`)."""
    hot_socket(sock)
    if lowat:
        # Wake up for a batch, not for every segment: fewer, larger reads cut the
        # generator's CPU (it shares the machine with the broker). A recv still returns
        # what it has when SO_RCVTIMEO expires, so a small tail never stalls for long.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
    recv_into = sock.recv_into
    acked = 0  # deliveries covered by the acks sent so far
    while not ctl[0]:
        try:
            n = recv_into(counter.space())
        except (BlockingIOError, InterruptedError):
            continue  # SO_RCVTIMEO: look at the stop flag
        if not n:
            if ctl[0]:
                return  # the peer hung up first at the end of the run
            raise BrokerClosed("connection closed by the broker")
        counter.feed(n)
        delivered = counter.delivered
        counts[slot] = delivered
        if ack_every and delivered - acked >= ack_every:
            acked = delivered
            sock.sendall(basic_ack(channel, counter.last_tag, True))


def publish_loop(
    sock: socket.socket,
    unit: bytes,
    batch: int,
    counts: Any,
    ctl: Any,
    consumer_slots: Sequence[int] = (),
    backlog: int = 0,
    confirm_window: int = 0,
    rate: float = 0.0,
    latencies: array | None = None,
) -> None:
    """Send ``batch`` publishes at a time until ``ctl[0]`` is set.

    ``backlog``: keep at most that many messages between the producer and the slowest
    consumer (read from the shared counters), so a broker without flow control is not
    flooded. ``confirm_window``: publisher confirms are on; keep at most that many
    unconfirmed. ``rate``: publish at most that many messages/s (0: as fast as allowed),
    waiting for confirms meanwhile. ``latencies``: with confirms, gets two numbers per
    batch: when it was sent and how long until the broker confirmed all of it
    (``time.monotonic()`` seconds)."""
    blob = memoryview(unit * batch)
    counter = FrameCounter()
    published = 0
    hot_socket(sock)
    recv_into = sock.recv_into
    dontwait = socket.MSG_DONTWAIT
    checks = 0
    sent: deque[tuple[int, float]] = deque()  # (last delivery tag, sent at) per batch
    monotonic = time.monotonic
    start = monotonic()

    def take(n: int) -> None:
        counter.feed(n)
        acked = counter.acked_upto
        counts[CONFIRMED] = acked
        if latencies is not None and sent and sent[0][0] <= acked:
            now = monotonic()
            while sent and sent[0][0] <= acked:
                _, at = sent.popleft()
                latencies.append(at)
                latencies.append(now - at)

    def receive(flags: int) -> int | None:
        """Read what the broker sent and take it: the bytes read (0: nothing was waiting,
        or a signal or SO_RCVTIMEO cut the wait short), None when the broker hung up as
        the run ended."""
        try:
            n = recv_into(counter.space(), 0, flags)
        except (BlockingIOError, InterruptedError):
            return 0
        if not n:
            if ctl[0]:
                return None
            raise BrokerClosed("connection closed by the broker")
        take(n)
        return n

    while not ctl[0]:
        if rate:
            # Paced: wait for the next send time, reading confirms as they come.
            while (wait := start + published / rate - monotonic()) > 0:
                if not select.select([sock], [], [], wait)[0]:
                    break
                if receive(dontwait) is None:
                    return
        if confirm_window:
            # Drain acks without blocking; block only while the window is full.
            while True:
                full = published - counter.acked_upto + batch > confirm_window
                got = receive(0 if full else dontwait)
                if got is None:
                    return
                if not full:
                    break
                if not got and ctl[0]:
                    return
        else:
            checks += 1
            if checks >= 64:  # notice connection.close / channel.close now and then
                checks = 0
                if receive(dontwait) is None:
                    return
        if backlog and consumer_slots:
            while published - min(counts[s] for s in consumer_slots) > backlog:
                if ctl[0]:
                    return
                time.sleep(0.001)
        if latencies is not None:
            sent.append((published + batch, monotonic()))
        if not send_all(sock, blob, ctl):
            return
        published += batch
        counts[PUBLISHED] = published


def safe_lowat(body_size: int, in_flight: int, cap: int = 16384) -> int:
    """A receive low-water mark well below the bytes a broker can have in flight to a
    consumer: ``in_flight`` deliveries of at least ``body_size + 60`` bytes each."""
    lowat = min(cap, in_flight * (body_size + 60) // 4)
    return lowat if lowat >= 1024 else 0


# ------------------------------------------------------------------ workers
def _worker_init() -> None:
    # The orchestrator owns Ctrl-C: it sets the stop flag or terminates us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _report_error(status: Any, role: str, exc: BaseException) -> None:
    with contextlib.suppress(Exception):
        status.put(("error", role, f"{type(exc).__name__}: {exc}"))


def consumer_worker(
    host: str,
    port: int,
    exchange: str,
    slot: int,
    prefetch: int,
    ack_every: int,
    lowat: int,
    counts: Any,
    ctl: Any,
    status: Any,
) -> None:
    """Declare a server-named exclusive queue bound to ``exchange`` and count deliveries.

    ``prefetch`` 0 means a no-ack consumer; otherwise manual acks with that prefetch."""
    _worker_init()
    role = f"consumer{slot - CONSUMER0}"
    conn: SetupConnection | None = None
    try:
        conn = SetupConnection(host, port)
        conn.rpc(
            commands.Exchange.Declare(exchange=exchange, exchange_type="fanout", auto_delete=True),
            commands.Exchange.DeclareOk,
        )
        ok = conn.rpc(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk)
        conn.rpc(
            commands.Queue.Bind(queue=ok.queue, exchange=exchange, routing_key=""),
            commands.Queue.BindOk,
        )
        if prefetch:
            conn.rpc(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
        conn.rpc(
            commands.Basic.Consume(queue=ok.queue, no_ack=not prefetch), commands.Basic.ConsumeOk
        )
        counter = FrameCounter(bytes(conn.buf))
        counter.feed(0)
        status.put(("ready", role, os.getpid()))
        consume_loop(
            conn.sock, counter, counts, slot, ctl, ack_every if prefetch else 0, lowat=lowat
        )
    except BaseException as exc:
        _report_error(status, role, exc)
        raise SystemExit(1) from None
    finally:
        if conn is not None:
            conn.close()


def producer_worker(
    host: str,
    port: int,
    exchange: str,
    body_size: int,
    batch: int,
    confirm_window: int,
    backlog: int,
    consumer_slots: Sequence[int],
    counts: Any,
    ctl: Any,
    status: Any,
    rate: float = 0.0,
) -> None:
    """With confirms, reports ``("latency", "producer", samples)`` on ``status`` at the end:
    see :func:`publish_loop`'s ``latencies``."""
    _worker_init()
    conn: SetupConnection | None = None
    try:
        conn = SetupConnection(host, port)
        conn.rpc(
            commands.Exchange.Declare(exchange=exchange, exchange_type="fanout", auto_delete=True),
            commands.Exchange.DeclareOk,
        )
        if confirm_window:
            conn.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)
        status.put(("ready", "producer", os.getpid()))
        latencies = array("d") if confirm_window else None
        publish_loop(
            conn.sock,
            publish_unit(exchange, body_size),
            batch,
            counts,
            ctl,
            consumer_slots,
            backlog,
            confirm_window,
            rate,
            latencies,
        )
        if latencies is not None:
            status.put(("latency", "producer", latencies.tobytes()))
    except BaseException as exc:
        _report_error(status, "producer", exc)
        raise SystemExit(1) from None
    finally:
        if conn is not None:
            conn.close()


# ------------------------------------------------------------ self-test peers
def sink_worker(listener: socket.socket, ack_unit: int, ctl: Any, status: Any) -> None:
    """A fake broker that discards what it reads. With ``ack_unit`` > 0 it also confirms:
    every ``ack_unit`` bytes received are one publish, acked with multiple=true."""
    _worker_init()
    try:
        sock, _ = listener.accept()
        _tune_socket(sock)
        hot_socket(sock)
        buf = bytearray(RECV_BUFFER)
        view = memoryview(buf)
        total = 0
        acked = 0
        while not ctl[0]:
            try:
                n = sock.recv_into(view)
            except (BlockingIOError, InterruptedError):
                continue
            if not n:
                break
            total += n
            if ack_unit:
                upto = total // ack_unit
                if upto > acked:
                    acked = upto
                    sock.sendall(basic_ack(1, upto, True))
        sock.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the producer hung up first at the end of the run
    except BaseException as exc:
        _report_error(status, "sink", exc)


def source_worker(listener: socket.socket, stream: bytes, ctl: Any, status: Any) -> None:
    """A fake broker that blasts a canned stream of deliveries and ignores acks."""
    _worker_init()
    try:
        sock, _ = listener.accept()
        _tune_socket(sock)
        hot_socket(sock)
        buf = bytearray(65536)
        view = memoryview(stream)
        while send_all(sock, view, ctl) and not ctl[0]:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
        sock.close()
    except (BrokenPipeError, ConnectionResetError):
        pass
    except BaseException as exc:
        _report_error(status, "source", exc)


def self_test_producer(
    port: int, unit: bytes, batch: int, confirm_window: int, counts: Any, ctl: Any, status: Any
) -> None:
    _worker_init()
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        _tune_socket(sock)
        status.put(("ready", "producer", os.getpid()))
        publish_loop(sock, unit, batch, counts, ctl, confirm_window=confirm_window)
        sock.close()
    except (BrokenPipeError, ConnectionResetError):
        pass
    except BaseException as exc:
        _report_error(status, "producer", exc)


def self_test_consumer(
    port: int, ack_every: int, lowat: int, counts: Any, ctl: Any, status: Any
) -> None:
    _worker_init()
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        _tune_socket(sock)
        status.put(("ready", "consumer0", os.getpid()))
        with contextlib.suppress(BrokerClosed):
            consume_loop(sock, FrameCounter(), counts, CONSUMER0, ctl, ack_every, lowat=lowat)
        sock.close()
    except (BrokenPipeError, ConnectionResetError):
        pass
    except BaseException as exc:
        _report_error(status, "consumer0", exc)


def parse_rate(stream: bytes, per_stream: int, seconds: float = 1.0) -> float:
    """Deliveries/s :class:`FrameCounter` parses from memory (no sockets at all)."""
    counter = FrameCounter()
    chunk = len(stream)
    start = time.perf_counter()
    deadline = start + seconds
    rounds = 0
    while time.perf_counter() < deadline:
        for _ in range(10):
            counter.space()[:chunk] = stream
            counter.feed(chunk)
        rounds += 10
    elapsed = time.perf_counter() - start
    assert counter.delivered == rounds * per_stream
    return counter.delivered / elapsed
