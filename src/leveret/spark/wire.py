"""A lean AMQP 0-9-1 consumer for reading a stream queue, on one blocking socket.

Why not pika here: pika's pure-Python frame handling costs 45-70 µs per delivery (three
frames each, an object and a callback per frame), which held an executor's read of a stream
to 14-17k messages/s. Reading a stream needs only a handful of methods, so this module
speaks them itself: pamqp encodes and decodes the cold handshake methods, and the hot path
works on large buffers:

- the socket is read with ``recv_into`` into one buffer, megabytes at a time;
- :func:`walk` steps over the frames of whole deliveries (``basic.deliver``, content
  header, body) with ``struct`` and notes only where each delivery starts, a few
  operations per message;
- everything else (the offsets, routing keys, properties, bodies) is taken out of the
  block by :mod:`leveret.spark.frames` with numpy, column by column, for thousands of
  deliveries at once.

A delivery is handed out only once all its frames are in; a block ends at the first frame
that is not part of a delivery (a heartbeat, ``channel.close``, ``basic.cancel``), which is
then dealt with on its own. Failures are raised as the pika exceptions the rest of the
package already turns into plain sentences (``leveret.logs.amqp.describe``), so both paths
fail with the same words. TLS (``amqps://``) is spoken through an ``ssl.SSLContext``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pika.exceptions
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from leveret.protocol import frames

_FRAME_HEAD = frames.HEAD
_METHOD_HEAD = frames.METHOD_HEAD
_CONTENT_HEAD = frames.CONTENT_HEAD
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_FRAME_END = frames.END
_METHOD = frames.METHOD  # the frame types, as names local to the hot loop's module
_BODY = frames.BODY
_DELIVER = frames.BASIC_DELIVER
_FRAME_MAX = frames.DEFAULT_FRAME_MAX
_RECV = 1 << 22
_MIN_BUFFER = 1 << 23
_TARGET = 1 << 22  # a block is what the socket has ready, up to about this many bytes

_PRODUCT: dict[str, Any] = {
    "product": "leveret.spark",
    "capabilities": {
        "consumer_cancel_notify": True,
        "basic.nack": True,
        "connection.blocked": False,
        "authentication_failure_close": True,
    },
}

Positions = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Deliveries:
    """Whole deliveries as they came off the wire: ``data`` holds their frames back to
    back, ``starts`` where each delivery's ``basic.deliver`` frame begins, ``bodies`` every
    body followed by a newline (a body of several frames joined), in delivery order."""

    data: bytes
    starts: Positions
    bodies: bytes
    multi: frozenset[int] = frozenset()  # deliveries whose body came in several frames

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def last_tag(self) -> int:
        """The delivery tag of the last delivery (to ack everything up to it)."""
        p = int(self.starts[-1]) + 11  # frame head (7), class and method (4)
        p += 1 + self.data[p]  # consumer tag
        tag: int = _U64.unpack_from(self.data, p)[0]
        return tag


def walk(
    buf: memoryview, pos: int, end: int, limit: int, single: int = 0
) -> tuple[int, list[int], list[Any], list[int]]:
    """The deliveries complete in ``buf[pos:end]``, at most ``limit``: (where the walk
    stopped, where each delivery starts, each body (a slice of ``buf``, or bytes when it
    came in several frames), which deliveries had several body frames). It stops at an
    incomplete delivery or at a frame that does not start one.

    A body of at most ``single`` bytes (the largest one frame carries) is taken to be one
    frame without reading that frame's header: :func:`check_block` verifies it for the
    whole block at once, and a block that fails is walked again with ``single=0``."""
    unpack_method = _METHOD_HEAD.unpack_from
    unpack_content = _CONTENT_HEAD.unpack_from
    unpack_head = _FRAME_HEAD.unpack_from
    starts: list[int] = []
    bodies: list[Any] = []
    multi: list[int] = []
    append = starts.append
    body = bodies.append
    n = 0
    while n < limit and end - pos >= 11:
        ftype, _channel, size, method = unpack_method(buf, pos)
        if ftype != _METHOD or method != _DELIVER:
            break
        h = pos + 8 + size
        if end - h < 19:
            break
        htype, _channel, hsize, body_size = unpack_content(buf, h)
        if htype != 2:
            raise pika.exceptions.StreamLostError("malformed delivery from the broker")
        b = h + 8 + hsize
        if body_size == 0:
            nxt = b
            if nxt > end:
                break
            body(b"")
        elif body_size <= single:
            nxt = b + 8 + body_size
            if nxt > end:
                break
            body(buf[b + 7 : nxt - 1])
        else:
            if end - b < 7:
                break
            btype, _channel, bsize = unpack_head(buf, b)
            nxt = b + 8 + bsize
            if bsize == body_size and btype == _BODY:
                if nxt > end:
                    break
                body(buf[b + 7 : nxt - 1])
            else:  # a body in several frames
                joined = _join_body(buf, b, end, body_size)
                if joined is None:
                    break
                nxt, whole = joined
                body(whole)
                multi.append(n)
        append(pos)
        pos = nxt
        n += 1
    return pos, starts, bodies, multi


def _join_body(buf: memoryview, p: int, end: int, size: int) -> tuple[int, bytes] | None:
    """A body of ``size`` bytes in frames from ``p``: (where it ends, the body), or None
    when not all its frames are in."""
    parts = []
    got = 0
    while got < size:
        if end - p < 7:
            return None
        btype, _channel, bsize = _FRAME_HEAD.unpack_from(buf, p)
        if btype != 3:
            raise pika.exceptions.StreamLostError("malformed delivery from the broker")
        if p + 8 + bsize > end:
            return None
        if buf[p + 7 + bsize] != _FRAME_END:
            raise pika.exceptions.StreamLostError("malformed frame from the broker")
        parts.append(bytes(buf[p + 7 : p + 7 + bsize]))
        got += bsize
        p += 8 + bsize
    if got != size:
        raise pika.exceptions.StreamLostError("malformed delivery from the broker")
    return p, b"".join(parts)


def check_block(data: bytes, starts: Positions, multi: frozenset[int]) -> bool:
    """Whether every delivery of a block is well formed where the walk did not look: each
    method and content header frame ends with the frame-end octet, and each one-frame
    body is one body frame of the body size the header gave, frame end included."""
    if not len(starts):
        return True
    a = np.frombuffer(data, np.uint8)
    h = starts + 8 + be32(a, starts + 3)
    b = h + 8 + be32(a, h + 3)
    ok = (a[h - 1] == _FRAME_END) & (a[h] == frames.HEADER)
    ok &= a[np.minimum(b, len(a)) - 1] == _FRAME_END
    body_size = be64(a, h + 11)
    one = body_size > 0
    if multi:
        one[list(multi)] = False
    bs, size = b[one], body_size[one]
    if len(bs):
        in_block = bs + 8 + size <= len(a)
        ok[one] &= in_block
        bs, size = bs[in_block], size[in_block]
        good = (a[bs] == frames.BODY) & (be32(a, bs + 3) == size) & (a[bs + 7 + size] == _FRAME_END)
        ok[np.flatnonzero(one)[in_block]] &= good
    return bool(ok.all())


def be16(a: npt.NDArray[np.uint8], pos: Positions) -> Positions:
    """Big-endian unsigned 16-bit integers at ``pos``."""
    out: Positions = a[pos[:, None] + np.arange(2)].view(">u2").ravel().astype(np.int64)
    return out


def be32(a: npt.NDArray[np.uint8], pos: Positions) -> Positions:
    """Big-endian unsigned 32-bit integers at ``pos``."""
    out: Positions = a[pos[:, None] + np.arange(4)].view(">u4").ravel().astype(np.int64)
    return out


def be64(a: npt.NDArray[np.uint8], pos: Positions) -> Positions:
    """Big-endian 64-bit integers at ``pos`` (read as signed)."""
    out: Positions = a[pos[:, None] + np.arange(8)].view(">i8").ravel().astype(np.int64)
    return out


def consume_frame(queue: str, offset: int) -> bytes:
    """``basic.consume`` with ``x-stream-offset`` as a signed 64-bit integer (type ``l``),
    which both brokers accept for a numeric offset."""
    key = b"x-stream-offset"
    table = bytes([len(key)]) + key + b"l" + struct.pack(">q", offset)
    raw_queue = queue.encode()
    payload = (
        _U32.pack(frames.BASIC_CONSUME)
        + b"\x00\x00"  # reserved-1
        + bytes([len(raw_queue)])
        + raw_queue
        + b"\x00"  # consumer tag: the broker's
        + b"\x00"  # no-local, no-ack, exclusive, no-wait: all off
        + _U32.pack(len(table))
        + table
    )
    return _FRAME_HEAD.pack(frames.METHOD, 1, len(payload)) + payload + frames.END_BYTE


def ack_frame(delivery_tag: int) -> bytes:
    """``basic.ack(multiple=true)`` on channel 1."""
    payload = _U32.pack(frames.BASIC_ACK) + _U64.pack(delivery_tag) + b"\x01"
    return _FRAME_HEAD.pack(frames.METHOD, 1, len(payload)) + payload + frames.END_BYTE


class StreamConsumer:
    """One connection, one channel, one consumer on a stream."""

    def __init__(
        self,
        host: str,
        port: int,
        vhost: str,
        username: str,
        password: str,
        prefetch: int,
        *,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        """Connect, open channel 1 and set its prefetch; ``consume`` starts the consumer."""
        self._buf = bytearray(_MIN_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not consumed yet
        self._end = 0  # end of the bytes received
        self._frame_max = _FRAME_MAX
        sock = socket.create_connection((host, port), timeout=timeout)
        self._sock: socket.socket = sock
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            if ssl_context is not None:
                self._sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            self._handshake(vhost, username, password)
            self._call(commands.Channel.Open(), commands.Channel.OpenOk, channel=1)
            self._call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk, channel=1)
        except BaseException:
            self.close()
            raise

    def consume(self, queue: str, offset: int) -> None:
        """Start consuming ``queue`` (a stream) at ``offset``."""
        self._send(consume_frame(queue, offset))
        self._expect(commands.Basic.ConsumeOk, stage="consume")

    # ------------------------------------------------------------------ buffer

    def _fill(self) -> None:
        """Receive what the socket has (waiting up to its timeout); TimeoutError when
        nothing came, StreamLostError when the connection is gone."""
        size = len(self._buf)
        if self._end + _RECV > size:
            live = self._end - self._start
            if live + _RECV > size:  # a big message: grow
                self._view.release()
                grown = bytearray(max(2 * size, live + _RECV))
                grown[:live] = self._buf[self._start : self._end]
                self._buf = grown
                self._view = memoryview(grown)
            else:
                self._buf[:live] = self._buf[self._start : self._end]
            self._start, self._end = 0, live
        try:
            n = self._sock.recv_into(self._view[self._end : self._end + _RECV])
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            raise
        except OSError as exc:
            raise pika.exceptions.StreamLostError(f"Stream connection lost: {exc!r}") from None
        if not n:
            raise pika.exceptions.StreamLostError("Stream connection lost")
        self._end += n

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise pika.exceptions.StreamLostError(f"Stream connection lost: {exc!r}") from None

    # ------------------------------------------------------------------ cold path

    def _next_frame(self) -> tuple[int, Any] | None:
        """The next frame, decoded by pamqp, if it is all in the buffer."""
        if self._end - self._start < 8:
            return None
        size = _U32.unpack_from(self._buf, self._start + 3)[0]
        stop = self._start + 8 + size
        if stop > self._end:
            return None
        if self._buf[stop - 1] != _FRAME_END:
            raise pika.exceptions.StreamLostError("malformed frame from the broker")
        consumed, channel, value = pframe.unmarshal(bytes(self._buf[self._start : stop]))
        self._start += consumed
        return channel, value

    def _expect(self, kind: type, *, stage: str) -> Any:
        """The next method, which must be ``kind``; a close from the broker is raised as
        the pika exception for it."""
        while True:
            got = self._next_frame()
            if got is None:
                try:
                    self._fill()
                except pika.exceptions.StreamLostError:
                    self._lost(stage)
                continue
            value = got[1]
            if isinstance(value, kind):
                return value
            self._raise_close(value, stage)

    def _lost(self, stage: str) -> None:
        if stage == "login":
            raise pika.exceptions.ProbableAuthenticationError(
                "Client was disconnected at a connection stage indicating a "
                "probable authentication error"
            ) from None
        if stage == "open":
            raise pika.exceptions.ProbableAccessDeniedError(
                "Client was disconnected at a connection stage indicating a "
                "probable denial of access to the specified virtual host"
            ) from None
        if stage == "start":
            raise pika.exceptions.IncompatibleProtocolError("no connection.start") from None
        raise pika.exceptions.StreamLostError("Stream connection lost") from None

    def _raise_close(self, value: Any, stage: str) -> None:
        if isinstance(value, commands.Connection.Close):
            code, text = value.reply_code, value.reply_text
            with contextlib.suppress(OSError):
                self._sock.sendall(pframe.marshal(commands.Connection.CloseOk(), 0))
            if stage == "login" and code == 403:
                raise pika.exceptions.ProbableAuthenticationError(
                    f"ConnectionClosedByBroker: ({code}) '{text}'"
                )
            if stage == "open" and code in (403, 530):
                raise pika.exceptions.ProbableAccessDeniedError(
                    f"ConnectionClosedByBroker: ({code}) '{text}'"
                )
            raise pika.exceptions.ConnectionClosedByBroker(code, text)
        if isinstance(value, commands.Channel.Close):
            raise pika.exceptions.ChannelClosedByBroker(value.reply_code, value.reply_text)
        if isinstance(value, commands.Basic.Cancel):
            raise pika.exceptions.ConsumerCancelled("the broker cancelled the consumer")
        # anything else (a heartbeat, a stray method) is skipped

    def _call(self, method: Any, reply: type, *, channel: int) -> Any:
        self._send(pframe.marshal(method, channel))
        return self._expect(reply, stage="channel")

    def _handshake(self, vhost: str, username: str, password: str) -> None:
        self._send(pframe.marshal(pheader.ProtocolHeader(), 0))
        start = self._expect(commands.Connection.Start, stage="start")
        if "PLAIN" not in str(start.mechanisms).split():
            raise pika.exceptions.AuthenticationError("PLAIN")
        self._send(
            pframe.marshal(
                commands.Connection.StartOk(
                    client_properties=_PRODUCT,
                    mechanism="PLAIN",
                    response=f"\0{username}\0{password}",
                    locale="en_US",
                ),
                0,
            )
        )
        tune = self._expect(commands.Connection.Tune, stage="login")
        frame_max = min(tune.frame_max or _FRAME_MAX, _FRAME_MAX)
        self._frame_max = frame_max
        self._send(
            pframe.marshal(
                commands.Connection.TuneOk(
                    channel_max=tune.channel_max, frame_max=frame_max, heartbeat=0
                ),
                0,
            )
        )
        self._send(pframe.marshal(commands.Connection.Open(virtual_host=vhost), 0))
        self._expect(commands.Connection.OpenOk, stage="open")

    # ------------------------------------------------------------------ hot path

    def read(self, wait: float, limit: int = 1 << 20) -> Deliveries | None:
        """The next block of whole deliveries (at most ``limit``): what is buffered, else
        what arrives within ``wait`` seconds; None when nothing did. A delivery is consumed
        from the buffer only once all its frames are in, so a quiet spell in the middle of
        one loses nothing."""
        self._sock.settimeout(wait)
        while True:
            self._top_up(wait)
            block = self._walk(limit, self._frame_max - 8)
            if block is not None and not check_block(block.data, block.starts, block.multi):
                block = self._walk(limit, 0)  # look at every frame this time
                if block is None or not check_block(block.data, block.starts, block.multi):
                    raise pika.exceptions.StreamLostError("malformed frame from the broker")
            if block is not None:
                self._start += len(block.data)
                return block
            # nothing whole at the front: a frame of another kind, or more bytes needed
            if self._end - self._start >= 8 and (self._buf[self._start] != 1 or self._is_other()):
                got = self._next_frame()
                if got is not None:
                    self._raise_close(got[1], "")
                    continue
            try:
                self._fill()
            except TimeoutError:
                return None

    def _walk(self, limit: int, single: int) -> Deliveries | None:
        """The whole deliveries at the front of the buffer (not consumed yet), if any."""
        base = self._start
        pos, starts, parts, several = walk(self._view, base, self._end, limit, single)
        if not starts:
            return None
        data = bytes(self._view[base:pos])
        parts.append(b"")  # a newline after the last body too
        bodies = b"\n".join(parts)
        del parts  # slices of the buffer: it may move or grow only without them
        offsets = np.array(starts, dtype=np.int64) - base
        return Deliveries(data, offsets, bodies, frozenset(several))

    def _top_up(self, wait: float) -> None:
        """Take what the socket already has, without waiting, up to about _TARGET bytes:
        larger blocks cost less per delivery further on."""
        if self._end - self._start >= _TARGET:
            return
        self._sock.settimeout(0.0)
        try:
            while self._end - self._start < _TARGET:
                self._fill()
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            pass
        finally:
            self._sock.settimeout(wait)

    def _is_other(self) -> bool:
        """Whether the method frame at the front is not a ``basic.deliver``."""
        if self._end - self._start < 11:
            return False
        return bool(_METHOD_HEAD.unpack_from(self._buf, self._start)[3] != _DELIVER)

    def ack(self, delivery_tag: int) -> None:
        """Acknowledge everything up to ``delivery_tag`` (on a stream: returns credit)."""
        self._send(ack_frame(delivery_tag))

    def close(self) -> None:
        """Close the connection without cancelling the consumer first (a cancel would make
        a client reject what it buffers; on a stream that is a 540)."""
        sock = self._sock
        with contextlib.suppress(OSError, ValueError):
            sock.settimeout(1.0)
            sock.sendall(pframe.marshal(commands.Connection.Close(200, "Normal shutdown", 0, 0), 0))
            if isinstance(sock, ssl.SSLSocket):
                sock = sock.unwrap()
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):  # until the broker's close-ok and end of stream
                pass
        with contextlib.suppress(OSError):
            sock.close()
        with contextlib.suppress(OSError):
            self._sock.close()
