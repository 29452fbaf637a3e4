"""The server side of one AMQP 0-9-1 connection, sans-IO.

Feed it bytes with :meth:`ServerConnection.receive_data`; it returns events. Tell it what
to send with the ``send_*`` methods; collect the bytes with :meth:`data_to_send`.
It owns framing, the handshake order, channel open/close bookkeeping and the assembly of
basic.publish + content header + body frames. Authentication, vhosts and everything the
methods *mean* belong to its owner.
"""

from __future__ import annotations

import struct
from enum import Enum, auto
from typing import Any

from pamqp import commands, decode

from leveret.protocol import errors, spec
from leveret.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionCloseOkReceived,
    ConnectionCloseReceived,
    ConnectionFailed,
    Event,
    MethodReceived,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
)

_head = struct.Struct(">BHI")
_unpack_head = _head.unpack_from
_pack_head = _head.pack
_deliver_head = struct.Struct(">BHII").pack  # frame type, channel, size, method index
_tag_redelivered = struct.Struct(">QB").pack
_content_header = struct.Struct(">BHIHHQ").pack  # frame head + class, weight, body size
# The same, each led by the frame-end octet of the frame before it (one pack per frame).
_content_header_after = struct.Struct(">HHIHHQ").pack
_body_head = struct.Struct(">HHI").pack
_body_size = struct.Struct(">Q").unpack_from
_ack = struct.Struct(">BHIIQB").pack
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_PUBLISH = spec.BASIC_PUBLISH_INDEX
_PUBLISH_BYTES = _PUBLISH.to_bytes(4, "big")
_Ack = commands.Basic.Ack
_ACK_BYTES = _Ack.index.to_bytes(4, "big")
_new_ack = object.__new__
_unpack_ack = struct.Struct(">QB").unpack_from
_CHANNEL_OPEN = commands.Channel.Open.index
_CHANNEL_CLOSE = commands.Channel.Close.index
_CHANNEL_CLOSE_OK = commands.Channel.CloseOk.index
_CONNECTION_CLASS = spec.CONNECTION
_CONNECTION_CLOSE = commands.Connection.Close.index
_CONNECTION_CLOSE_OK = commands.Connection.CloseOk.index
# access.request (deprecated, gone from pamqp's spec): RabbitMQ answers request-ok, ticket 1.
_ACCESS_REQUEST = 0x001E000A
_ACCESS_REQUEST_OK = b"\x00\x1e\x00\x0b\x00\x01"
# Methods only a server sends: a client sending one gets "unimplemented method".
_SERVER_ONLY = frozenset(
    m.index
    for m in (
        commands.Channel.OpenOk,
        commands.Exchange.DeclareOk,
        commands.Exchange.DeleteOk,
        commands.Exchange.BindOk,
        commands.Exchange.UnbindOk,
        commands.Queue.DeclareOk,
        commands.Queue.BindOk,
        commands.Queue.UnbindOk,
        commands.Queue.PurgeOk,
        commands.Queue.DeleteOk,
        commands.Basic.QosOk,
        commands.Basic.ConsumeOk,
        commands.Basic.Deliver,
        commands.Basic.GetOk,
        commands.Basic.GetEmpty,
        commands.Basic.Return,
        commands.Basic.RecoverOk,
        commands.Tx.SelectOk,
        commands.Tx.CommitOk,
        commands.Tx.RollbackOk,
        commands.Confirm.SelectOk,
    )
)


class State(Enum):
    AWAIT_HEADER = auto()
    AWAIT_START_OK = auto()
    AWAIT_TUNE_OK = auto()
    AWAIT_OPEN = auto()
    OPEN = auto()
    CLOSING = auto()  # we sent connection.close and wait for close-ok
    CLOSED = auto()


class _Content:
    """A publish whose header and body frames are still arriving."""

    __slots__ = (
        "body_size",
        "chunks",
        "exchange",
        "exchange_and_key",
        "immediate",
        "mandatory",
        "properties",
        "received",
        "routing_key",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        mandatory: bool,
        immediate: bool,
        exchange_and_key: bytes,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.exchange_and_key = exchange_and_key
        self.properties: bytes | None = None
        self.body_size = 0
        self.received = 0
        self.chunks: list[bytes] = []


class ServerConnection:
    """One AMQP connection, seen from the broker."""

    def __init__(
        self,
        server_properties: dict[str, Any],
        mechanisms: str = "AMQPLAIN PLAIN",
        locales: str = "en_US",
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
    ) -> None:
        self.state = State.AWAIT_HEADER
        self.server_properties = server_properties
        self.mechanisms = mechanisms
        self.locales = locales
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = heartbeat
        self.client_properties: dict[str, Any] = {}
        self._in = bytearray()
        self._out: list[bytes] = []
        self.open_channels: set[int] = set()
        self._closing_channels: set[int] = set()
        self._content: dict[int, _Content] = {}
        self.close_after_flush = False  # the owner should close the socket once flushed
        # receive_data stopped early to keep replies in order: call it again (with b"")
        # once the events it returned have been handled.
        self.input_pending = False

    # ------------------------------------------------------------------ output
    def data_to_send(self) -> bytes:
        out = self._out
        if not out:
            return b""
        data = b"".join(out)
        out.clear()
        return data

    def has_output(self) -> bool:
        return bool(self._out)

    def send_method(self, channel: int, method: spec.Method) -> None:
        self._out.append(spec.method_frame(channel, method))

    def send_raw(self, data: bytes) -> None:
        self._out.append(data)

    def send_heartbeat(self) -> None:
        self._out.append(HEARTBEAT_FRAME)

    def send_content(
        self, channel: int, method: spec.Method, properties: bytes, body: bytes
    ) -> None:
        """A content-bearing method (return, get-ok, deliver) with header and body."""
        self._out.append(spec.method_frame(channel, method))
        self._append_content(channel, properties, body)

    def _append_content(self, channel: int, properties: bytes, body: bytes) -> None:
        out = self._out
        size = len(body)
        out.append(
            _content_header(spec.FRAME_HEADER, channel, 12 + len(properties), spec.BASIC, 0, size)
        )
        out.append(properties)
        out.append(spec.FRAME_END_BYTE)
        if not size:
            return
        chunk = self.frame_max - 8
        if size <= chunk:
            out.append(_pack_head(spec.FRAME_BODY, channel, size))
            out.append(body)
            out.append(spec.FRAME_END_BYTE)
            return
        view = memoryview(body)
        for start in range(0, size, chunk):
            piece = view[start : start + chunk]
            out.append(_pack_head(spec.FRAME_BODY, channel, len(piece)))
            out.append(bytes(piece))
            out.append(spec.FRAME_END_BYTE)

    def send_deliver(
        self,
        channel: int,
        consumer_tag: bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None:
        """The hot path: basic.deliver spliced from pre-encoded pieces.

        ``consumer_tag`` is the tag encoded as a short string (length byte included)."""
        body_size = len(body)
        if body_size and body_size <= self.frame_max - 8:
            self._out.extend(
                (
                    _deliver_head(
                        1, channel, 13 + len(consumer_tag) + len(exchange_and_key), 0x003C003C
                    ),
                    consumer_tag,
                    _tag_redelivered(delivery_tag, redelivered),
                    exchange_and_key,
                    _content_header_after(0xCE02, channel, 12 + len(properties), 60, 0, body_size),
                    properties,
                    _body_head(0xCE03, channel, body_size),
                    body,
                    b"\xce",
                )
            )
            return
        self._out.extend(
            (
                _deliver_head(
                    1, channel, 13 + len(consumer_tag) + len(exchange_and_key), 0x003C003C
                ),
                consumer_tag,
                _tag_redelivered(delivery_tag, redelivered),
                exchange_and_key,
                b"\xce",
            )
        )
        self._append_content(channel, properties, body)

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self._out.append(
            _ack(spec.FRAME_METHOD, channel, 13, 0x003C0050, delivery_tag, 1 if multiple else 0)
            + spec.FRAME_END_BYTE
        )

    def start(self) -> None:
        """Send connection.start; called once the protocol header checked out."""
        self.send_method(
            0,
            commands.Connection.Start(
                version_major=0,
                version_minor=9,
                server_properties=self.server_properties,
                mechanisms=self.mechanisms,
                locales=self.locales,
            ),
        )

    def send_tune(self) -> None:
        self.state = State.AWAIT_TUNE_OK
        self.send_method(
            0,
            commands.Connection.Tune(
                channel_max=self.channel_max, frame_max=self.frame_max, heartbeat=self.heartbeat
            ),
        )

    def send_open_ok(self) -> None:
        self.state = State.OPEN
        self.send_method(0, commands.Connection.OpenOk())

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Send connection.close; every later frame but close/close-ok is ignored."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.send_method(
            0,
            commands.Connection.Close(
                reply_code=code, reply_text=text[:255], class_id=class_id, method_id=method_id
            ),
        )
        self.state = State.CLOSING

    def fail(self, error: errors.AMQPError) -> None:
        self.close(error.code, error.reply_text, error.class_id, error.method_id)

    def close_channel(self, channel: int, error: errors.AMQPError) -> None:
        """Send channel.close; the channel ignores everything until close-ok."""
        if channel not in self.open_channels:
            return
        self.open_channels.discard(channel)
        self._content.pop(channel, None)
        self._closing_channels.add(channel)
        self.send_method(
            channel,
            commands.Channel.Close(
                reply_code=error.code,
                reply_text=error.reply_text[:255],
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    # ------------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        self.input_pending = False
        if self.state is State.CLOSED:
            return events
        buf = self._in
        buf += data
        if self.state is State.AWAIT_HEADER:
            if len(buf) < 8:
                return events
            header = bytes(buf[:8])
            del buf[:8]
            if header != spec.PROTOCOL_HEADER:
                # As RabbitMQ: answer with the protocol we speak and hang up.
                self._out.append(spec.PROTOCOL_HEADER)
                self.state = State.CLOSED
                self.close_after_flush = True
                return events
            self.state = State.AWAIT_START_OK
            self.start()
        pos = 0
        end = len(buf)
        limit = self.frame_max
        content = self._content
        open_channels = self.open_channels
        try:
            while end - pos >= 7:
                frame_type, channel, size = _unpack_head(buf, pos)
                if size > limit:
                    raise errors.frame_error(
                        frame_text(frame_type, b"", f"{{frame_too_large,{size},{limit - 8}}}")
                    )
                stop = pos + 7 + size
                if end < stop + 1:
                    break
                if buf[stop] != 0xCE:
                    raise errors.frame_error(
                        frame_text(
                            frame_type,
                            bytes(buf[pos + 7 : stop]),
                            f"{{invalid_frame_end_marker,{buf[stop]}}}",
                        )
                    )
                if (
                    frame_type == 1
                    and buf[pos + 7 : pos + 11] == _PUBLISH_BYTES
                    and channel in open_channels
                    and channel not in content
                    and self.state is State.OPEN
                ):
                    pos = self._fast_publish(buf, pos, stop, end, channel, events)
                    continue
                if (
                    frame_type == 1
                    and size == 13
                    and buf[pos + 7 : pos + 11] == _ACK_BYTES
                    and channel in open_channels
                    and channel not in content
                    and self.state is State.OPEN
                ):
                    # basic.ack, the other per-message method: built without pamqp's
                    # generic decoder (a tenth of the cost)
                    ack = _new_ack(_Ack)
                    ack.delivery_tag, bits = _unpack_ack(buf, pos + 11)
                    ack.multiple = bool(bits & 1)
                    events.append(MethodReceived(channel, ack))
                    pos = stop + 1
                    continue
                if (
                    frame_type == 1
                    and events
                    and size >= 4
                    and self._answers_itself(channel, buf, pos)
                    and _owner_pending(events)
                ):
                    # This method is answered here and now, but the owner has yet to
                    # answer the methods before it: stop, so replies keep request order
                    # (e.g. basic.cancel-ok before channel.close-ok, as RabbitMQ).
                    self.input_pending = True
                    break
                payload = bytes(buf[pos + 7 : stop])
                pos = stop + 1
                self._frame(frame_type, channel, payload, events)
                if self.state is State.CLOSED:
                    break
        except errors.AMQPError as exc:
            self._protocol_failure(exc, events)
        except _Drop:
            self._in.clear()
            self.state = State.CLOSED
            self.close_after_flush = True
            events.append(ConnectionFailed(errors.frame_error("connection dropped")))
        except (UnicodeDecodeError, IndexError, struct.error) as exc:
            self._protocol_failure(errors.frame_error(f"cannot decode frame: {exc}"), events)
        else:
            del buf[:pos]
        return events

    @staticmethod
    def _answers_itself(channel: int, buf: bytearray, pos: int) -> bool:
        """Whether the method frame at ``pos`` is a channel's method that this class
        answers itself, not the owner: channel.open, channel.close, access.request."""
        if channel == 0:
            return False
        index = int.from_bytes(buf[pos + 7 : pos + 11], "big")
        return index in (_CHANNEL_OPEN, _CHANNEL_CLOSE, _ACCESS_REQUEST)

    def _fast_publish(
        self, buf: bytearray, pos: int, stop: int, end: int, channel: int, events: list[Event]
    ) -> int:
        """The hot path: basic.publish, and when they are already buffered its content
        header and single body frame, parsed in place. Returns the new read position."""
        p = pos + 13  # frame head (7) + method index (4) + deprecated ticket (2)
        elen = buf[p]
        rp = p + 1 + elen
        rlen = buf[rp]
        bp = rp + 1 + rlen
        if bp >= stop:
            raise errors.syntax_error("malformed basic.publish").with_method(60, 40)
        exchange = buf[p + 1 : rp].decode()
        routing_key = buf[rp + 1 : bp].decode()
        bits = buf[bp]
        exchange_and_key = bytes(buf[p:bp])
        pos = stop + 1
        if end - pos >= 7:
            ftype, hch, hsize = _unpack_head(buf, pos)
            hstop = pos + 7 + hsize
            if (
                ftype == 2
                and hch == channel
                and hsize >= 14
                and hsize + 8 <= self.frame_max
                and hstop < end
                and buf[hstop] == 0xCE
            ):
                (body_size,) = _body_size(buf, pos + 11)
                if body_size == 0:
                    events.append(
                        PublishReceived(
                            channel,
                            exchange,
                            routing_key,
                            bool(bits & 1),
                            bool(bits & 2),
                            exchange_and_key,
                            bytes(buf[pos + 19 : hstop]),
                            b"",
                        )
                    )
                    return int(hstop) + 1
                bpos = hstop + 1
                if end - bpos >= 7:
                    btype, bch, bsize = _unpack_head(buf, bpos)
                    bstop = bpos + 7 + bsize
                    if (
                        btype == 3
                        and bch == channel
                        and bsize == body_size
                        and bstop < end
                        and buf[bstop] == 0xCE
                    ):
                        events.append(
                            PublishReceived(
                                channel,
                                exchange,
                                routing_key,
                                bool(bits & 1),
                                bool(bits & 2),
                                exchange_and_key,
                                bytes(buf[pos + 19 : hstop]),
                                bytes(buf[bpos + 7 : bstop]),
                            )
                        )
                        return int(bstop) + 1
        # The content is split across reads: assemble it frame by frame.
        self._content[channel] = _Content(
            exchange, routing_key, bool(bits & 1), bool(bits & 2), exchange_and_key
        )
        return pos

    def _protocol_failure(self, exc: errors.AMQPError, events: list[Event]) -> None:
        """The byte stream can no longer be trusted: send connection.close (or, before the
        handshake finished, nothing) and read no further."""
        self._in.clear()
        if self.state in (State.AWAIT_START_OK, State.AWAIT_TUNE_OK):
            self.close_after_flush = True
        else:
            self.fail(exc)
        self.state = State.CLOSED
        events.append(ConnectionFailed(exc))

    def _frame(self, frame_type: int, channel: int, payload: bytes, events: list[Event]) -> None:
        if frame_type == spec.FRAME_METHOD:
            self._method_frame(channel, payload, events)
        elif frame_type == spec.FRAME_HEADER:
            if channel == 0:
                raise errors.unexpected_frame(frame_text(2, payload))
            self._header_frame(channel, payload, events)
        elif frame_type == spec.FRAME_BODY:
            if channel == 0:
                raise errors.unexpected_frame(frame_text(3, payload))
            self._body_frame(channel, payload, events)
        elif frame_type == spec.FRAME_HEARTBEAT:
            if payload:
                raise errors.frame_error(frame_text(8, payload, "unknown_frame"))
            if channel != 0:
                raise errors.unexpected_frame(frame_text(8, payload))
        else:
            raise errors.frame_error(frame_text(frame_type, payload, "unknown_frame"))

    def _method_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) < 4:
            raise errors.frame_error(frame_text(1, payload, "unknown_frame"))
        index = int.from_bytes(payload[:4], "big")
        ids = (index >> 16, index & 0xFFFF)
        if index == _ACCESS_REQUEST and channel in self.open_channels:
            self._out.append(_pack_head(1, channel, 6) + _ACCESS_REQUEST_OK + b"\xce")
            return
        if spec.method_class(index) is None:
            # RabbitMQ's reader dies on an unknown method: the socket just closes.
            raise _Drop()
        state = self.state
        if channel == 0:
            self._connection_method(index, payload, events)
            return
        if state is State.CLOSING:
            return
        if state is not State.OPEN:
            raise errors.channel_error("expected 'channel.open'").with_method(*ids)
        content = self._content.get(channel)
        if content is not None:
            if content.properties is None:
                raise errors.unexpected_frame(
                    "expected content header for class 60, got non content header frame instead"
                ).with_method(60, 40)
            raise errors.unexpected_frame(
                "expected content body, got non content body frame instead"
            ).with_method(60, 40)
        if channel in self._closing_channels:
            if index == _CHANNEL_CLOSE_OK:
                self._closing_channels.discard(channel)
                events.append(ChannelClosed(channel, by_client=False))
            elif index == _CHANNEL_CLOSE:
                # Both sides closed at once: answer; the number stays taken until close-ok.
                self.send_method(channel, commands.Channel.CloseOk())
            elif index == _CHANNEL_OPEN:
                raise errors.channel_error("second 'channel.open' seen").with_method(20, 10)
            return
        if channel not in self.open_channels:
            if index == _CHANNEL_OPEN:
                # As RabbitMQ, channel_max bounds how many are open, not their numbers.
                if len(self.open_channels) >= self.channel_max:
                    raise errors.not_allowed(
                        f"number of channels opened ({len(self.open_channels)}) has reached "
                        f"the negotiated channel_max ({self.channel_max})"
                    )
                self.open_channels.add(channel)
                self.send_method(channel, commands.Channel.OpenOk())
                events.append(ChannelOpened(channel))
                return
            raise errors.channel_error("expected 'channel.open'").with_method(*ids)
        if index == _PUBLISH:
            self._start_publish(channel, payload)
            return
        if index == _CHANNEL_OPEN:
            raise errors.channel_error("second 'channel.open' seen").with_method(*ids)
        if (
            index >> 16 == _CONNECTION_CLASS
            or index in _SERVER_ONLY
            or index == (_CHANNEL_CLOSE_OK)
        ):
            raise errors.command_invalid("unimplemented method").with_method(*ids)
        method = self._decode(payload, index)
        if index == _CHANNEL_CLOSE:
            self.open_channels.discard(channel)
            self.send_method(channel, commands.Channel.CloseOk())
            events.append(ChannelClosed(channel, by_client=True))
            return
        events.append(MethodReceived(channel, method))

    def _decode(self, payload: bytes, index: int) -> spec.Method:
        try:
            return spec.decode_method(payload)
        except Exception as exc:
            raise errors.frame_error(f"cannot decode {erlang_binary(payload[4:])}").with_method(
                index >> 16, index & 0xFFFF
            ) from exc

    def _start_publish(self, channel: int, payload: bytes) -> None:
        try:
            pos = 6  # index (4) + deprecated ticket (2)
            elen = payload[pos]
            exchange = payload[pos + 1 : pos + 1 + elen].decode()
            rpos = pos + 1 + elen
            rlen = payload[rpos]
            routing_key = payload[rpos + 1 : rpos + 1 + rlen].decode()
            bits = payload[rpos + 1 + rlen]
        except (IndexError, UnicodeDecodeError) as exc:
            raise errors.frame_error(f"cannot decode {erlang_binary(payload[4:])}").with_method(
                60, 40
            ) from exc
        self._content[channel] = _Content(
            exchange, routing_key, bool(bits & 1), bool(bits & 2), payload[pos : rpos + 1 + rlen]
        )

    def _header_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        if self.state is State.CLOSING or channel in self._closing_channels:
            return
        content = self._content.get(channel)
        if content is None:
            raise errors.unexpected_frame("expected method frame, got non method frame instead")
        if content.properties is not None:
            raise errors.unexpected_frame(
                "expected content body, got non content body frame instead"
            ).with_method(60, 40)
        if len(payload) < 14:
            raise errors.frame_error(frame_text(2, payload, "unknown_frame"))
        class_id, weight = struct.unpack_from(">HH", payload, 0)
        if weight != 0:
            raise errors.unexpected_frame(
                "expected content header for class 60, got non content header frame instead"
            ).with_method(60, 40)
        if class_id != 60:
            raise errors.unexpected_frame(
                f"expected content header for class 60, got one for class {class_id} instead"
            ).with_method(60, 40)
        (size,) = _body_size(payload, 4)
        content.properties = payload[12:]
        content.body_size = size
        if size == 0:
            del self._content[channel]
            events.append(self._published(channel, content, b""))

    def _body_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        if self.state is State.CLOSING or channel in self._closing_channels:
            return
        content = self._content.get(channel)
        if content is None:
            raise errors.unexpected_frame("expected method frame, got non method frame instead")
        if content.properties is None:
            raise errors.unexpected_frame(
                "expected content header for class 60, got non content header frame instead"
            ).with_method(60, 40)
        # As RabbitMQ: a body longer than announced is taken in silently and the channel
        # keeps waiting for content, so the next other frame is an error.
        content.received += len(payload)
        if content.received == content.body_size and not content.chunks:
            del self._content[channel]
            events.append(self._published(channel, content, payload))
            return
        content.chunks.append(payload)
        if content.received == content.body_size:
            del self._content[channel]
            events.append(self._published(channel, content, b"".join(content.chunks)))

    @staticmethod
    def _published(channel: int, c: _Content, body: bytes) -> PublishReceived:
        assert c.properties is not None
        return PublishReceived(
            channel,
            c.exchange,
            c.routing_key,
            c.mandatory,
            c.immediate,
            c.exchange_and_key,
            c.properties,
            body,
        )

    def _connection_method(self, index: int, payload: bytes, events: list[Event]) -> None:
        state = self.state
        ids = (index >> 16, index & 0xFFFF)
        if state is State.CLOSING:
            if index == _CONNECTION_CLOSE_OK:
                self.state = State.CLOSED
                self.close_after_flush = True
                events.append(ConnectionCloseOkReceived())
            elif index == _CONNECTION_CLOSE:
                self.send_method(0, commands.Connection.CloseOk())
            return
        expected = {
            State.AWAIT_START_OK: commands.Connection.StartOk.index,
            State.AWAIT_TUNE_OK: commands.Connection.TuneOk.index,
            State.AWAIT_OPEN: commands.Connection.Open.index,
        }.get(state)
        if index == _CONNECTION_CLOSE:
            method = self._decode(payload, index)
            assert isinstance(method, commands.Connection.Close)
            self.send_method(0, commands.Connection.CloseOk())
            self.state = State.CLOSED
            self.close_after_flush = True
            events.append(
                ConnectionCloseReceived(
                    method.reply_code or 0,
                    method.reply_text or "",
                    method.class_id or 0,
                    method.method_id or 0,
                )
            )
            return
        if state is State.OPEN:
            if index in (
                commands.Connection.Blocked.index,
                commands.Connection.Unblocked.index,
                commands.Connection.UpdateSecretOk.index,
            ):
                return
            if index == commands.Connection.UpdateSecret.index:
                self._decode(payload, index)
                # As RabbitMQ with its internal users: their state cannot expire, so
                # rabbit_access_control:update_state accepts any new secret as it is.
                self.send_method(0, commands.Connection.UpdateSecretOk())
                return
            raise errors.channel_error("unexpected method in connection state running").with_method(
                *ids
            )
        if index != expected:
            raise _Drop()
        method = self._decode(payload, index)
        if isinstance(method, commands.Connection.StartOk):
            self.client_properties = dict(method.client_properties or {})
            response = method.response
            raw = response.encode("latin-1") if isinstance(response, str) else bytes(response)
            events.append(
                StartOkReceived(self.client_properties, method.mechanism, raw, method.locale)
            )
        elif isinstance(method, commands.Connection.TuneOk):
            # RabbitMQ drops, with no reply, a peer that asks for more than it offered or
            # for "no limit" (0).
            if not (spec.FRAME_MIN_SIZE <= method.frame_max <= self.frame_max):
                raise _Drop()
            if not (0 < method.channel_max <= self.channel_max):
                raise _Drop()
            self.frame_max = method.frame_max
            self.channel_max = method.channel_max
            self.heartbeat = method.heartbeat
            self.state = State.AWAIT_OPEN
            events.append(TuneOkReceived(self.channel_max, self.frame_max, self.heartbeat))
        elif isinstance(method, commands.Connection.Open):
            events.append(OpenReceived(method.virtual_host))


def _owner_pending(events: list[Event]) -> bool:
    """Whether some event still waits for the owner to act (and maybe answer) on it."""
    return any(type(e) is MethodReceived or type(e) is PublishReceived for e in events)


class _Drop(Exception):
    """Input after which RabbitMQ closes the socket without a word."""


def erlang_binary(data: bytes) -> str:
    """A binary as Erlang's ``~p`` prints it: ``<<"text">>`` when every byte is
    printable Latin-1, ``<<0,60,0,10>>`` otherwise."""
    if data and all(32 <= b <= 126 or 160 <= b <= 255 or b in _ERL_ESCAPES for b in data):
        text = "".join(_ERL_ESCAPES.get(b, chr(b)) for b in data)
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


_ERL_ESCAPES = {
    34: '\\"',
    92: "\\\\",
    10: "\\n",
    13: "\\r",
    9: "\\t",
    11: "\\v",
    8: "\\b",
    12: "\\f",
    27: "\\e",
}


def frame_text(frame_type: int, payload: bytes, reason: str | None = None) -> str:
    """RabbitMQ's description of a bad frame."""
    which = "all" if len(payload) <= 16 else "first 16"
    text = f"type {frame_type}, {which} octets = {erlang_binary(payload[:16])}"
    return f"{text}: {reason}" if reason is not None else text


def decode_amqplain(response: bytes) -> dict[str, Any]:
    """AMQPLAIN's response is a field table without its leading length."""
    table: dict[str, Any] = decode.field_table(len(response).to_bytes(4, "big") + response)[1]
    return table
