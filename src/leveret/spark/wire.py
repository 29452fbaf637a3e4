"""A lean AMQP 0-9-1 consumer for reading a stream queue, on one blocking socket.

Why not pika here: benchmarks/pipeline.py measured pika's pure-Python frame handling at
45-70 µs per delivery (three frames each, an object and a callback per frame), which held
an executor's read of a stream to 14-17k messages/s. Reading a stream needs only a handful
of methods, so this module speaks them itself: pamqp encodes and decodes the cold handshake
methods, and the hot loop walks the frames of ``basic.deliver`` + content header + body with
``struct`` on one receive buffer, decoding only the properties the schema keeps.

Failures are raised as the pika exceptions the rest of the package already turns into plain
sentences (``leveret.logs.amqp.describe``), so both paths fail with the same words.
TLS (``amqps://``) is not spoken here; callers use pika for it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pika.exceptions
from pamqp import commands, decode
from pamqp import frame as pframe
from pamqp import header as pheader

_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_ID = struct.Struct(">HH")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_CONTENT_HEAD = struct.Struct(">HHQH")  # class, weight, body size, first property flags
_FRAME_END = 0xCE
_DELIVER = (60 << 16) | 60
_FRAME_MAX = 131072
_RECV = 1 << 20

_PRODUCT: dict[str, Any] = {
    "product": "leveret.spark",
    "capabilities": {
        "consumer_cancel_notify": True,
        "basic.nack": True,
        "connection.blocked": False,
        "authentication_failure_close": True,
    },
}


class Properties:
    """The message properties of one delivery, under pika's ``BasicProperties`` names."""

    __slots__ = (
        "app_id",
        "cluster_id",
        "content_encoding",
        "content_type",
        "correlation_id",
        "delivery_mode",
        "expiration",
        "headers",
        "message_id",
        "priority",
        "reply_to",
        "timestamp",
        "type",
        "user_id",
    )

    def __init__(self) -> None:
        self.content_type = self.content_encoding = self.correlation_id = None
        self.reply_to = self.expiration = self.message_id = self.type = None
        self.user_id = self.app_id = self.cluster_id = None
        self.delivery_mode = self.priority = self.timestamp = None
        self.headers: dict[str, Any] | None = None


# property flag bit -> (attribute, kind): s shortstr, t table, o octet, q u64
_PROPERTY_BITS = (
    (15, "content_type", "s"),
    (14, "content_encoding", "s"),
    (13, "headers", "t"),
    (12, "delivery_mode", "o"),
    (11, "priority", "o"),
    (10, "correlation_id", "s"),
    (9, "reply_to", "s"),
    (8, "expiration", "s"),
    (7, "message_id", "s"),
    (6, "timestamp", "q"),
    (5, "type", "s"),
    (4, "user_id", "s"),
    (3, "app_id", "s"),
    (2, "cluster_id", "s"),
)


def decode_properties(flags: int, data: bytes | bytearray | memoryview, pos: int) -> Properties:
    """The properties that follow the content header's flags at ``pos``."""
    props = Properties()
    for bit, name, kind in _PROPERTY_BITS:
        if not flags & (1 << bit):
            continue
        if kind == "s":
            n = data[pos]
            value: Any = bytes(data[pos + 1 : pos + 1 + n]).decode("utf-8", "replace")
            pos += 1 + n
        elif kind == "t":
            size = _U32.unpack_from(data, pos)[0]
            value = decode.field_table(bytes(data[pos : pos + 4 + size]))[1]
            pos += 4 + size
        elif kind == "o":
            value = data[pos]
            pos += 1
        else:
            value = _U64.unpack_from(data, pos)[0]
            pos += 8
        setattr(props, name, value)
    return props


def _shortstr(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


def _method_frame(channel: int, payload: bytes) -> bytes:
    return _FRAME_HEAD.pack(1, channel, len(payload)) + payload + b"\xce"


def consume_frame(queue: str, offset: int) -> bytes:
    """``basic.consume`` with ``x-stream-offset`` as a signed 64-bit integer (type ``l``),
    which both brokers accept for a numeric offset."""
    key = b"x-stream-offset"
    table = bytes([len(key)]) + key + b"l" + struct.pack(">q", offset)
    payload = (
        _METHOD_ID.pack(60, 20)
        + b"\x00\x00"
        + _shortstr(queue)
        + _shortstr("")
        + b"\x00"  # no-local, no-ack, exclusive, no-wait: all off
        + _U32.pack(len(table))
        + table
    )
    return _method_frame(1, payload)


def ack_frame(delivery_tag: int) -> bytes:
    """``basic.ack(multiple=true)`` on channel 1."""
    return _method_frame(1, _METHOD_ID.pack(60, 80) + _U64.pack(delivery_tag) + b"\x01")


Delivery = tuple[int, str, str, bool, Properties, bytes]  # tag, exchange, key, redelivered


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
    ) -> None:
        """Connect, open channel 1 and set its prefetch; ``consume`` starts the consumer."""
        self._buf = bytearray()
        self._pos = 0
        self._sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            self._handshake(vhost, username, password)
            self._call(commands.Channel.Open(), commands.Channel.OpenOk, channel=1)
            self._call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk, channel=1)
        except BaseException:
            self.close()
            raise

    def consume(self, queue: str, offset: int) -> None:
        """Start consuming ``queue`` (a stream) at ``offset``."""
        self._sock.sendall(consume_frame(queue, offset))
        self._expect(commands.Basic.ConsumeOk, stage="consume")

    # ------------------------------------------------------------------ cold path

    def _recv(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        try:
            data = self._sock.recv(_RECV)
        except TimeoutError:
            raise
        except OSError as exc:
            raise pika.exceptions.StreamLostError(f"Stream connection lost: {exc!r}") from None
        if not data:
            raise EOFError
        self._buf += data

    def _next_frame(self) -> tuple[int, Any]:
        while True:
            if len(self._buf) - self._pos >= 8:
                size = _U32.unpack_from(self._buf, self._pos + 3)[0]
                end = self._pos + 8 + size
                if len(self._buf) >= end:
                    consumed, channel, value = pframe.unmarshal(bytes(self._buf[self._pos : end]))
                    self._pos += consumed
                    return channel, value
            self._recv()

    def _expect(self, kind: type, *, stage: str) -> Any:
        """The next method, which must be ``kind``; a close from the broker is raised as
        the pika exception for it."""
        while True:
            try:
                _channel, value = self._next_frame()
            except EOFError:
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
                raise pika.exceptions.StreamLostError("Stream connection lost") from None
            if isinstance(value, kind):
                return value
            self._raise_close(value, stage)

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
        self._sock.sendall(pframe.marshal(method, channel))
        return self._expect(reply, stage="channel")

    def _handshake(self, vhost: str, username: str, password: str) -> None:
        self._sock.sendall(pframe.marshal(pheader.ProtocolHeader(), 0))
        try:
            start = self._expect(commands.Connection.Start, stage="start")
        except pika.exceptions.StreamLostError:
            raise pika.exceptions.IncompatibleProtocolError("no connection.start") from None
        if "PLAIN" not in str(start.mechanisms).split():
            raise pika.exceptions.AuthenticationError("PLAIN")
        self._sock.sendall(
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
        self._sock.sendall(
            pframe.marshal(
                commands.Connection.TuneOk(
                    channel_max=tune.channel_max, frame_max=frame_max, heartbeat=0
                ),
                0,
            )
        )
        self._sock.sendall(pframe.marshal(commands.Connection.Open(virtual_host=vhost), 0))
        self._expect(commands.Connection.OpenOk, stage="open")

    # ------------------------------------------------------------------ hot path

    def deliveries(self, wait: float) -> Iterator[Delivery]:
        """Deliveries as they are decoded, until the socket has been quiet for ``wait``
        seconds. A message is consumed from the buffer only once all its frames are in, so
        stopping (or a quiet spell) in the middle of one loses nothing."""
        self._sock.settimeout(wait)
        unpack_head = _FRAME_HEAD.unpack_from
        unpack_method = _METHOD_ID.unpack_from
        unpack_u64 = _U64.unpack_from
        unpack_content = _CONTENT_HEAD.unpack_from
        while True:
            buf = self._buf
            pos = self._pos
            end = len(buf)
            pending: tuple[int, str, str, bool] | None = None
            props: Properties | None = None
            remaining = 0
            parts: list[bytes] = []
            while end - pos >= 7:
                ftype, _channel, size = unpack_head(buf, pos)
                stop = pos + 7 + size
                if stop >= end:  # incomplete: its frame-end octet would be at ``stop``
                    break
                if buf[stop] != _FRAME_END:
                    raise pika.exceptions.StreamLostError("malformed frame from the broker")
                start = pos + 7
                pos = stop + 1
                if ftype == 1:
                    cls, meth = unpack_method(buf, start)
                    if (cls << 16) | meth != _DELIVER:
                        self._raise_close(pframe.unmarshal(bytes(buf[start - 7 : pos]))[2], "")
                        if pending is None:
                            self._pos = pos
                        continue
                    p = start + 4
                    p += 1 + buf[p]  # consumer tag
                    tag = unpack_u64(buf, p)[0]
                    redelivered = bool(buf[p + 8] & 1)
                    p += 9
                    n = buf[p]
                    exchange = bytes(buf[p + 1 : p + 1 + n]).decode()
                    p += 1 + n
                    n = buf[p]
                    key = bytes(buf[p + 1 : p + 1 + n]).decode()
                    pending = (tag, exchange, key, redelivered)
                    continue
                if ftype == 2 and pending is not None:
                    _cls, _weight, remaining, flags = unpack_content(buf, start)
                    props = decode_properties(flags, buf, start + 14)
                    parts = []
                    if remaining:
                        continue
                elif ftype == 3 and props is not None and pending is not None:
                    parts.append(bytes(buf[start:stop]))
                    remaining -= size
                    if remaining > 0:
                        continue
                else:
                    if pending is None:  # a heartbeat or a stray frame: skipped
                        self._pos = pos
                    continue
                # a whole message: consumed from the buffer before it is handed out
                self._pos = pos
                body = b"" if not parts else parts[0] if len(parts) == 1 else b"".join(parts)
                assert pending is not None and props is not None
                yield (*pending, props, body)
                pending = props = None
                buf = self._buf
            try:
                self._recv()
            except TimeoutError:
                return
            except EOFError:
                raise pika.exceptions.StreamLostError("Stream connection lost") from None

    def ack(self, delivery_tag: int) -> None:
        """Acknowledge everything up to ``delivery_tag`` (on a stream: returns credit)."""
        try:
            self._sock.sendall(ack_frame(delivery_tag))
        except OSError as exc:
            raise pika.exceptions.StreamLostError(f"Stream connection lost: {exc!r}") from None

    def close(self) -> None:
        """Close the connection without cancelling the consumer first (a cancel would make
        a client reject what it buffers; on a stream that is a 540)."""
        sock = self._sock
        with contextlib.suppress(OSError):
            sock.settimeout(1.0)
            sock.sendall(pframe.marshal(commands.Connection.Close(200, "Normal shutdown", 0, 0), 0))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(_RECV):  # until the broker's close-ok and end of stream
                pass
        with contextlib.suppress(OSError):
            sock.close()
