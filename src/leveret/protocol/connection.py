"""The server side of one AMQP 0-9-1 connection, sans-IO, on h11's rule: it speaks only
when asked.

- :meth:`ServerConnection.receive_data` only buffers bytes.
- :meth:`ServerConnection.next_event` parses and returns one event at a time
  (:data:`~leveret.protocol.events.NEED_DATA` when no complete one is buffered).
- The ``send_*`` methods are the only way bytes go out; :meth:`data_to_send` collects them.

The owner answers each event that asks for an answer (channel.open, channel.close,
connection.open, ...) before it asks for the next event, so replies keep request order
without any bookkeeping here. States move only through the tables in
:mod:`leveret.protocol.states`. The connection owns framing, the handshake order, channel
numbers and the assembly of basic.publish + content header + body frames; what methods
*mean* belongs to its owner.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from leveret.protocol import errors, spec
from leveret.protocol.errors import AMQPError
from leveret.protocol.events import (
    NEED_DATA,
    AccessRequestReceived,
    ChannelCloseOkReceived,
    ChannelCloseReceived,
    ChannelOpenReceived,
    ConnectionCloseOkReceived,
    ConnectionCloseReceived,
    ConnectionFailed,
    Event,
    HeaderReceived,
    MethodReceived,
    NeedData,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
    UnsupportedProtocol,
    UpdateSecretReceived,
)
from leveret.protocol.sansio import Machine, Output
from leveret.protocol.spec import BASIC as _BASIC
from leveret.protocol.spec import FRAME_BODY as _BODY
from leveret.protocol.spec import FRAME_END as _END
from leveret.protocol.spec import FRAME_END_BYTE as _END_BYTE
from leveret.protocol.spec import FRAME_HEAD_SIZE as _HEAD
from leveret.protocol.spec import FRAME_HEADER as _HEADER
from leveret.protocol.spec import FRAME_METHOD as _METHOD
from leveret.protocol.spec import FRAME_OVERHEAD as _OVERHEAD
from leveret.protocol.states import (
    CHANNEL_TRANSITIONS,
    CLOSE_UNDER_WAY,
    EXPECTED,
    OVER,
    READING,
    SILENT_FAILURE,
    TRANSITIONS,
    WINDING_DOWN,
    ChannelState,
    ChannelTrigger,
    LocalProtocolError,
    State,
    Trigger,
)
from leveret.protocol.texts import erlang_binary, frame_text

__all__ = ["ServerConnection", "State"]

_END_HEADER = spec.FRAME_END << 8 | spec.FRAME_HEADER
_END_BODY = spec.FRAME_END << 8 | spec.FRAME_BODY
_CONTENT_FRAMES = (_HEADER, _BODY)
_BASIC_WEIGHT_0 = spec.BASIC << 16  # a content header's class and weight, as one int
# A content header frame's head, class and weight, and body size, read at once
_content_head = struct.Struct(">BHIIQ")
_unpack_content_head = _content_head.unpack_from
_CONTENT_HEAD = _content_head.size
# basic.publish's mandatory and immediate bits
_BITS = ((False, False), (True, False), (False, True), (True, True))
# basic.publish's arguments (after the ticket) as publishers repeat them, decoded once:
# exchange, routing key, mandatory, immediate, and the two short strings as they came
_PUBLISHES: dict[bytes, tuple[str, str, bool, bool, bytes]] = {}
_PUBLISHES_SIZE = 4096


def _publish_fields(raw: bytes) -> tuple[str, str, bool, bool, bytes]:
    """Decode basic.publish's arguments (``raw``: the method payload after its index:
    ticket, exchange, routing key, bits), and remember them. Both the look-ahead path and
    the frame-by-frame one read a publish here."""
    fields = _PUBLISHES.get(raw)
    if fields is not None:
        return fields
    try:
        rp = 3 + raw[2]  # after the deprecated ticket (2) and the exchange
        bp = rp + 1 + raw[rp]
        fields = (raw[3:rp].decode(), raw[rp + 1 : bp].decode(), *_BITS[raw[bp] & 3], raw[2:bp])
    except (IndexError, UnicodeDecodeError) as exc:
        raise errors.frame_error(f"cannot decode {erlang_binary(raw)}").with_method(
            spec.BASIC, _PUBLISH & 0xFFFF
        ) from exc
    if len(_PUBLISHES) >= _PUBLISHES_SIZE:
        _PUBLISHES.clear()
    _PUBLISHES[raw] = fields
    return fields


_OPEN = State.OPEN
_AWAIT_HEADER = State.AWAIT_HEADER
_head = struct.Struct(">BHI")
_unpack_head = _head.unpack_from
_pack_head = _head.pack
_deliver_head = struct.Struct(">BHII").pack  # frame type, channel, size, method index
_tag_redelivered = struct.Struct(">QB").pack
_content_header = struct.Struct(">BHIHHQ").pack  # frame head + class, weight, body size
# A content header frame / body frame head, each led by the frame-end octet of the frame
# before it (one pack per frame on the delivery path): the two octets as one short.
_content_header_after = struct.Struct(">HHIHHQ").pack
_body_head_after = struct.Struct(">HHI").pack
_body_size = struct.Struct(">Q").unpack_from
_ack = struct.Struct(">BHIIQB").pack
_unpack_ack = struct.Struct(">QB").unpack_from
_unpack_class_weight = struct.Struct(">HH").unpack_from
_unpack_index = struct.Struct(">I").unpack_from

_PUBLISH = spec.BASIC_PUBLISH_INDEX
_ACK = spec.BASIC_ACK_INDEX
_DELIVER = spec.BASIC_DELIVER_INDEX
_Ack = commands.Basic.Ack
_new_ack = object.__new__
# PublishReceived is a named tuple: the hot path makes one in C, without its __new__
_new_publish: Callable[[type[PublishReceived], tuple[Any, ...]], PublishReceived]
_new_publish = tuple.__new__
# The size of a basic.ack method payload: index (4), delivery tag (8), bits (1).
_ACK_PAYLOAD_SIZE = 13

# Methods only a server sends: a client sending one gets "unimplemented method".
_SERVER_ONLY = frozenset(
    m.index
    for m in (
        commands.Channel.OpenOk,
        commands.Channel.CloseOk,  # as a request, i.e. not answering our close
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
# Connection methods a client may send once the connection is open, and that need no
# answer: they are read and ignored, as RabbitMQ does.
_IGNORED_WHEN_OPEN = frozenset(
    (
        spec.CONNECTION_BLOCKED_INDEX,
        spec.CONNECTION_UNBLOCKED_INDEX,
        spec.CONNECTION_UPDATE_SECRET_OK_INDEX,
    )
)


@dataclass(slots=True, eq=False)
class _Content:
    """A publish whose header and body frames are still arriving."""

    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    exchange_and_key: bytes
    properties: bytes | None = None
    body_size: int = 0
    received: int = 0
    chunks: list[bytes] = field(default_factory=list)

    def published(self, channel: int, body: bytes) -> PublishReceived:
        assert self.properties is not None
        return PublishReceived(
            channel,
            self.exchange,
            self.routing_key,
            self.mandatory,
            self.immediate,
            self.exchange_and_key,
            self.properties,
            body,
        )


class _Drop(Exception):
    """Input after which RabbitMQ closes the socket without a word."""


class _Broken(Exception):
    """Input that cannot be framed: nothing after it can be read."""

    def __init__(self, error: AMQPError) -> None:
        super().__init__(error.reply_text)
        self.error = error


def _unknown_frame(frame_type: int, payload: bytes) -> _Broken:
    return _Broken(errors.frame_error(frame_text(frame_type, payload, "unknown_frame")))


class ServerConnection(Machine[State, Trigger], Output):
    """One AMQP connection, seen from the broker."""

    TRANSITIONS = TRANSITIONS
    CLOSED = State.CLOSED
    DROP = Trigger.DROP

    def __init__(
        self,
        frame_max: int = spec.DEFAULT_FRAME_MAX,
        channel_max: int = spec.DEFAULT_CHANNEL_MAX,
        heartbeat: int = spec.DEFAULT_HEARTBEAT,
        frame_min: int = spec.FRAME_MIN_SIZE,
    ) -> None:
        self._state = State.AWAIT_HEADER
        # What the server offers in connection.tune; tune-ok narrows them.
        self.frame_offer = frame_max
        # The largest frame taken: until tune-ok, ?FRAME_MIN_SIZE (rabbit_reader's
        # initial_frame_max), so a larger start-ok is a frame error; then what tune-ok says.
        self.frame_max = frame_min
        self.frame_min = frame_min  # the least frame_max tune-ok may ask for
        self.channel_max = channel_max
        self.heartbeat = heartbeat
        self.client_properties: dict[str, Any] = {}
        # Immutable: a slice of it is the bytes an event carries, with no second copy.
        # The unparsed tail is copied once per read (less than a frame, as a rule).
        self._in = b""
        self._pos = 0  # read position in _in: bytes before it have been parsed
        self._out: list[bytes] = []
        self._channels: dict[int, ChannelState] = {}
        self.open_channels: set[int] = set()  # channels in state OPEN (the hot path's test)
        self._content: dict[int, _Content] = {}
        self._discard = False  # the byte stream broke: input is dropped unread

    # ------------------------------------------------------------------- state
    @property
    def closed(self) -> bool:
        """The conversation is over: the owner ends the TCP connection (at once when
        CLOSED; once the peer has ended its side when DRAINING)."""
        return self._state in OVER

    @property
    def closing(self) -> bool:
        """A close is under way (either side's) or done: no further close is sent."""
        return self._state in CLOSE_UNDER_WAY

    def _can(self, trigger: Trigger) -> bool:
        return trigger in TRANSITIONS[self._state]

    def _channel_move(self, channel: int, trigger: ChannelTrigger) -> None:
        current = self._channels.get(channel)
        moves = CHANNEL_TRANSITIONS[current]
        if trigger not in moves:
            state = current.name if current is not None else "FREE"
            raise LocalProtocolError(f"channel {channel}: {trigger.name} in state {state}")
        nxt = moves[trigger]
        if nxt is None:
            del self._channels[channel]
        else:
            self._channels[channel] = nxt
        if nxt is ChannelState.OPEN:
            self.open_channels.add(channel)
        else:
            self.open_channels.discard(channel)
            self._content.pop(channel, None)

    def channel_state(self, channel: int) -> ChannelState | None:
        return self._channels.get(channel)

    # ------------------------------------------------------------------ output
    def send_protocol_header(self) -> None:
        """Answer a header of another protocol with ours; the connection is over."""
        self._move(Trigger.SEND_PROTOCOL_HEADER)
        self._out.append(spec.PROTOCOL_HEADER)

    def send_start(
        self,
        server_properties: dict[str, Any],
        mechanisms: str = "AMQPLAIN PLAIN",
        locales: str = "en_US",
    ) -> None:
        self._move(Trigger.SEND_START)
        self._method(
            0,
            commands.Connection.Start(
                version_major=0,
                version_minor=9,
                server_properties=server_properties,
                mechanisms=mechanisms,
                locales=locales,
            ),
        )

    def send_tune(self) -> None:
        self._move(Trigger.SEND_TUNE)
        self._method(
            0,
            commands.Connection.Tune(
                channel_max=self.channel_max, frame_max=self.frame_offer, heartbeat=self.heartbeat
            ),
        )

    def send_open_ok(self) -> None:
        self._move(Trigger.SEND_OPEN_OK)
        self._method(0, commands.Connection.OpenOk())

    def send_close(self, error: AMQPError) -> None:
        """connection.close; from now on every frame but close / close-ok is dropped.
        A second close while one is pending is ignored."""
        if self._state in CLOSE_UNDER_WAY:
            return
        self._move(Trigger.SEND_CLOSE)
        self._method(
            0,
            commands.Connection.Close(
                reply_code=error.code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    def send_close_ok(self) -> None:
        self._move(Trigger.SEND_CLOSE_OK)
        self._method(0, commands.Connection.CloseOk())

    def send_update_secret_ok(self) -> None:
        self._move(Trigger.SEND_UPDATE_SECRET_OK)
        self._method(0, commands.Connection.UpdateSecretOk())

    def connection_lost(self) -> None:
        """The transport went away."""
        self._move(Trigger.LOST)
        self._channels.clear()
        self.open_channels.clear()
        self._content.clear()

    def send_channel_open_ok(self, channel: int) -> None:
        self._channel_move(channel, ChannelTrigger.SEND_OPEN_OK)
        self._method(channel, commands.Channel.OpenOk())

    def send_channel_close(self, channel: int, error: AMQPError) -> None:
        """channel.close; the channel's frames are dropped until its close-ok. A channel
        that is not open (closing already, or gone) is left as it is."""
        if self._channels.get(channel) is not ChannelState.OPEN or not self._sending():
            return
        self._channel_move(channel, ChannelTrigger.SEND_CLOSE)
        self._method(
            channel,
            commands.Channel.Close(
                reply_code=error.code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )

    def send_channel_close_ok(self, channel: int) -> None:
        self._channel_move(channel, ChannelTrigger.SEND_CLOSE_OK)
        self._method(channel, commands.Channel.CloseOk())

    def send_access_request_ok(self, channel: int) -> None:
        self._channel_move(channel, ChannelTrigger.SEND_ACCESS_REQUEST_OK)
        self._out.append(
            _pack_head(spec.FRAME_METHOD, channel, len(spec.ACCESS_REQUEST_OK_PAYLOAD))
            + spec.ACCESS_REQUEST_OK_PAYLOAD
            + spec.FRAME_END_BYTE
        )

    def _sending(self) -> bool:
        """Whether channel-level output may still go out (not after connection.close)."""
        return self._state is State.OPEN

    def _method(self, channel: int, method: spec.Method) -> None:
        self._out.append(spec.method_frame(channel, method))

    def send_method(self, channel: int, method: spec.Method) -> None:
        """A reply on an open channel (declare-ok, qos-ok, basic.cancel, ...)."""
        if self._state is State.OPEN:
            self._out.append(spec.method_frame(channel, method))

    def send_heartbeat(self) -> None:
        if self._state is not State.CLOSED:
            self._out.append(spec.HEARTBEAT_FRAME)

    def send_content(
        self, channel: int, method: spec.Method, properties: bytes, body: bytes
    ) -> None:
        """A content-bearing method (return, get-ok, deliver) with header and body."""
        if self._state is not State.OPEN:
            return
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
        chunk = self.frame_max - spec.FRAME_OVERHEAD
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

        ``consumer_tag`` is the tag encoded as a short string (length byte included).
        The session sends deliveries only on open channels of an open connection."""
        body_size = len(body)
        head = _deliver_head(
            _METHOD, channel, 13 + len(consumer_tag) + len(exchange_and_key), _DELIVER
        )
        if body_size and body_size <= self.frame_max - _OVERHEAD:
            self._out.extend(
                (
                    head,
                    consumer_tag,
                    _tag_redelivered(delivery_tag, redelivered),
                    exchange_and_key,
                    _content_header_after(
                        _END_HEADER, channel, 12 + len(properties), _BASIC, 0, body_size
                    ),
                    properties,
                    _body_head_after(_END_BODY, channel, body_size),
                    body,
                    _END_BYTE,
                )
            )
            return
        self._out.extend(
            (head, consumer_tag, _tag_redelivered(delivery_tag, redelivered), exchange_and_key)
        )
        self._out.append(_END_BYTE)
        self._append_content(channel, properties, body)

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self._out.append(
            _ack(
                spec.FRAME_METHOD,
                channel,
                _ACK_PAYLOAD_SIZE,
                _ACK,
                delivery_tag,
                1 if multiple else 0,
            )
            + spec.FRAME_END_BYTE
        )

    # ------------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Buffer bytes from the peer. Nothing is parsed until :meth:`next_event`."""
        if self._discard or self._state not in READING:
            return  # after the end, or after a broken stream: read and dropped
        self._buffer(data)

    def next_event(self) -> Event | NeedData:
        """The next complete event, or NEED_DATA."""
        state = self._state
        # (identity tests first: an Enum's hash, which set membership needs, is slow)
        if state is not _OPEN and (self._discard or state not in READING):
            return NEED_DATA
        if state is _AWAIT_HEADER:
            return self._header()
        buf = self._in
        end = len(buf)
        limit = self.frame_max
        open_channels = self.open_channels
        try:
            while True:
                pos = self._pos
                if end - pos < _HEAD:
                    return NEED_DATA
                frame_type, channel, size = _unpack_head(buf, pos)
                if size > limit:  # as rabbit_reader: FrameMax - 8 plus its 8-octet fudge
                    raise _Broken(
                        errors.frame_error(
                            frame_text(frame_type, b"", f"{{frame_too_large,{size},{limit - 8}}}")
                        )
                    )
                stop = pos + _HEAD + size
                if end < stop + 1:
                    return NEED_DATA
                if buf[stop] != _END:
                    raise _Broken(
                        errors.frame_error(
                            frame_text(
                                frame_type,
                                buf[pos + _HEAD : stop],
                                f"{{invalid_frame_end_marker,{buf[stop]}}}",
                            )
                        )
                    )
                if (
                    frame_type == _METHOD
                    and state is _OPEN
                    and channel in open_channels
                    and channel not in self._content
                    and size >= 4
                ):
                    index = _unpack_index(buf, pos + _HEAD)[0]
                    if index == _PUBLISH:
                        return self._fast_publish(buf, pos, stop, end, channel)
                    if index == _ACK and size == _ACK_PAYLOAD_SIZE:
                        # basic.ack, the other per-message method: built without pamqp's
                        # generic decoder (a tenth of the cost)
                        ack = _new_ack(_Ack)
                        ack.delivery_tag, bits = _unpack_ack(buf, pos + _HEAD + 4)
                        ack.multiple = bool(bits & 1)
                        self._pos = stop + 1
                        return MethodReceived(channel, ack)
                payload = buf[pos + _HEAD : stop]
                self._pos = stop + 1
                event = self._frame(frame_type, channel, payload)
                if event is not None:
                    return event
                if self._state is not state:
                    return NEED_DATA
        except _Broken as exc:
            return self._fail(exc.error, broken=True)
        except AMQPError as exc:
            return self._fail(exc, broken=False)
        except _Drop:
            self._move(Trigger.DROP)
            if state in WINDING_DOWN:
                return NEED_DATA  # the owner sees the connection closed
            return ConnectionFailed(errors.frame_error("connection dropped"), reply=False)
        except (UnicodeDecodeError, IndexError, struct.error) as exc:
            return self._fail(errors.frame_error(f"cannot decode frame: {exc}"), broken=True)

    def _header(self) -> Event | NeedData:
        buf = self._in
        if len(buf) < len(spec.PROTOCOL_HEADER):
            return NEED_DATA
        header = buf[: len(spec.PROTOCOL_HEADER)]
        self._pos = len(spec.PROTOCOL_HEADER)
        if header != spec.PROTOCOL_HEADER:
            # As RabbitMQ: the owner answers with the protocol we speak and hangs up.
            self._move(Trigger.RECV_BAD_HEADER)
            return UnsupportedProtocol(header)
        self._move(Trigger.RECV_HEADER)
        return HeaderReceived()

    def _fail(self, error: AMQPError, broken: bool) -> ConnectionFailed | NeedData:
        """The peer broke the protocol. Before tune-ok RabbitMQ just closes the socket;
        after it, the owner sends connection.close. In CLOSING (our close is out) bad
        input ends the connection without another event: the owner sees it closed."""
        state = self._state
        if state in WINDING_DOWN:
            self._move(Trigger.RECV_GARBAGE)
            return NEED_DATA
        reply = state not in SILENT_FAILURE
        if broken:
            # No frame boundary can be trusted any more: whatever follows is dropped.
            self._in = b""
            self._pos = 0
            self._discard = True
        # Otherwise the framing is intact: after the owner's connection.close the
        # frames that follow are read, and dropped, until the peer's close-ok.
        self._move(Trigger.RECV_GARBAGE)
        return ConnectionFailed(error, reply=reply)

    def _fast_publish(
        self, buf: bytes, pos: int, stop: int, end: int, channel: int
    ) -> Event | NeedData:
        """The hot path: basic.publish, and when they are already buffered its content
        header and single body frame, parsed in place."""
        raw = buf[pos + _HEAD + 4 : stop]  # after the method index
        fields = _PUBLISHES.get(raw)
        if fields is None:
            fields = _publish_fields(raw)
        exchange, routing_key, mandatory, immediate, exchange_and_key = fields
        pos = stop + 1
        # Look ahead: when the content header and its one body frame are buffered too,
        # the publish is read here at once; otherwise the general path assembles it.
        if end - pos >= _CONTENT_HEAD:
            ftype, hch, hsize, class_weight, body_size = _unpack_content_head(buf, pos)
            hstop = pos + _HEAD + hsize
            if (
                ftype == _HEADER
                and hch == channel
                and class_weight == _BASIC_WEIGHT_0
                and 14 <= hsize <= self.frame_max - _OVERHEAD
                and hstop < end
                and buf[hstop] == _END
            ):
                bpos = hstop + 1
                bstop = bpos + _HEAD + body_size
                body: bytes | None
                if body_size == 0:
                    body = b""
                    self._pos = bpos
                elif (
                    bstop < end  # so the body frame's head is here too
                    and _unpack_head(buf, bpos) == (_BODY, channel, body_size)
                    and body_size <= self.frame_max
                    and buf[bstop] == _END
                ):
                    body = buf[bpos + _HEAD : bstop]
                    self._pos = bstop + 1
                else:
                    body = None
                if body is not None:
                    return _new_publish(
                        PublishReceived,
                        (
                            channel,
                            exchange,
                            routing_key,
                            mandatory,
                            immediate,
                            exchange_and_key,
                            buf[pos + _HEAD + 12 : hstop],
                            body,
                        ),
                    )
        # The content is not all here (or comes in several frames): assemble it frame
        # by frame, through the general path.
        self._pos = pos
        self._content[channel] = _Content(
            exchange, routing_key, mandatory, immediate, exchange_and_key
        )
        return self.next_event()

    # -------------------------------------------------------------- frame kinds
    def _frame(self, frame_type: int, channel: int, payload: bytes) -> Event | None:
        if frame_type == _METHOD:
            return self._method_frame(channel, payload)
        if frame_type in _CONTENT_FRAMES:
            # A publish's content: dropped while the connection winds down or the channel
            # closes; without a publish before it, unexpected.
            if channel == 0:
                raise errors.unexpected_frame(frame_text(frame_type, payload))
            state = self._state
            # (identity test first: an Enum's hash, which set membership needs, is slow)
            if state is not _OPEN and state in WINDING_DOWN:
                return None
            if self._channels.get(channel) is ChannelState.CLOSING:
                return None
            content = self._content.get(channel)
            if content is None:
                raise errors.unexpected_frame("expected method frame, got non method frame instead")
            if frame_type == _HEADER:
                return self._header_frame(channel, payload, content)
            return self._body_frame(channel, payload, content)
        if frame_type == spec.FRAME_HEARTBEAT:
            if payload:
                raise _unknown_frame(frame_type, payload)
            if channel != 0:
                raise errors.unexpected_frame(frame_text(frame_type, payload))
            return None
        raise _unknown_frame(frame_type, payload)

    def _method_frame(self, channel: int, payload: bytes) -> Event | None:
        if len(payload) < 4:
            raise _Broken(
                errors.frame_error(frame_text(spec.FRAME_METHOD, payload, "unknown_frame"))
            )
        index = _unpack_index(payload, 0)[0]
        ids = (index >> 16, index & 0xFFFF)
        state = self._state
        if state in WINDING_DOWN and channel != 0:
            return None  # after connection.close, only close / close-ok count
        if index == spec.ACCESS_REQUEST_INDEX and channel in self.open_channels:
            return AccessRequestReceived(channel)
        if spec.method_class(index) is None:
            # RabbitMQ's reader dies on an unknown method: the socket just closes.
            raise _Drop()
        if channel == 0:
            return self._connection_method(index, payload)
        if state is not State.OPEN:
            raise errors.channel_error("expected 'channel.open'").with_method(*ids)
        content = self._content.get(channel)
        if content is not None:
            if content.properties is None:
                raise errors.unexpected_frame(
                    "expected content header for class 60, got non content header frame instead"
                ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
            raise errors.unexpected_frame(
                "expected content body, got non content body frame instead"
            ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
        channel_state = self._channels.get(channel)
        if channel_state is ChannelState.CLOSING:
            if index == spec.CHANNEL_CLOSE_OK_INDEX:
                self._channel_move(channel, ChannelTrigger.RECV_CLOSE_OK)
                return ChannelCloseOkReceived(channel)
            if index == spec.CHANNEL_CLOSE_INDEX:
                method = self._decode(payload, index)
                assert isinstance(method, commands.Channel.Close)
                self._channel_move(channel, ChannelTrigger.RECV_CLOSE)
                return ChannelCloseReceived(
                    channel, method.reply_code or 0, method.reply_text or ""
                )
            if index == spec.CHANNEL_OPEN_INDEX:
                raise errors.channel_error("second 'channel.open' seen").with_method(*ids)
            return None  # dropped until the close-ok
        if channel_state is None:
            if index == spec.CHANNEL_OPEN_INDEX:
                # As RabbitMQ, channel_max bounds how many are open, not their numbers.
                if len(self._channels) >= self.channel_max:
                    raise errors.not_allowed(
                        f"number of channels opened ({len(self._channels)}) has reached "
                        f"the negotiated channel_max ({self.channel_max})"
                    )
                self._channel_move(channel, ChannelTrigger.RECV_OPEN)
                return ChannelOpenReceived(channel)
            raise errors.channel_error("expected 'channel.open'").with_method(*ids)
        if index == _PUBLISH:
            self._start_publish(channel, payload)
            return None
        if index == spec.CHANNEL_OPEN_INDEX:
            raise errors.channel_error("second 'channel.open' seen").with_method(*ids)
        if index >> 16 == spec.CONNECTION or index in _SERVER_ONLY:
            raise errors.command_invalid("unimplemented method").with_method(*ids)
        method = self._decode(payload, index)
        if index == spec.CHANNEL_CLOSE_INDEX:
            assert isinstance(method, commands.Channel.Close)
            self._channel_move(channel, ChannelTrigger.RECV_CLOSE)
            return ChannelCloseReceived(channel, method.reply_code or 0, method.reply_text or "")
        return MethodReceived(channel, method)

    def _decode(self, payload: bytes, index: int) -> spec.Method:
        try:
            return spec.decode_method(payload)
        except Exception as exc:
            raise errors.frame_error(f"cannot decode {erlang_binary(payload[4:])}").with_method(
                index >> 16, index & 0xFFFF
            ) from exc

    def _start_publish(self, channel: int, payload: bytes) -> None:
        self._content[channel] = _Content(*_publish_fields(payload[4:]))

    def _header_frame(self, channel: int, payload: bytes, content: _Content) -> Event | None:
        if content.properties is not None:
            raise errors.unexpected_frame(
                "expected content body, got non content body frame instead"
            ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
        if len(payload) < 14:
            raise _Broken(
                errors.frame_error(frame_text(spec.FRAME_HEADER, payload, "unknown_frame"))
            )
        class_id, weight = _unpack_class_weight(payload, 0)
        if weight != 0:
            raise errors.unexpected_frame(
                "expected content header for class 60, got non content header frame instead"
            ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
        if class_id != spec.BASIC:
            raise errors.unexpected_frame(
                f"expected content header for class 60, got one for class {class_id} instead"
            ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
        (size,) = _body_size(payload, 4)
        content.properties = payload[12:]
        content.body_size = size
        if size == 0:
            del self._content[channel]
            return content.published(channel, b"")
        return None

    def _body_frame(self, channel: int, payload: bytes, content: _Content) -> Event | None:
        if content.properties is None:
            raise errors.unexpected_frame(
                "expected content header for class 60, got non content header frame instead"
            ).with_method(spec.BASIC, _PUBLISH & 0xFFFF)
        # As RabbitMQ: a body longer than announced is taken in silently and the channel
        # keeps waiting for content, so the next other frame is an error.
        content.received += len(payload)
        if content.received == content.body_size and not content.chunks:
            del self._content[channel]
            return content.published(channel, payload)
        content.chunks.append(payload)
        if content.received == content.body_size:
            del self._content[channel]
            return content.published(channel, b"".join(content.chunks))
        return None

    def _connection_method(self, index: int, payload: bytes) -> Event | None:
        state = self._state
        if state is State.DRAINING:
            if index == spec.CONNECTION_CLOSE_INDEX:
                return self._close_received(payload, index)
            return None
        if state is State.CLOSING:
            if index == spec.CONNECTION_CLOSE_OK_INDEX:
                self._move(Trigger.RECV_CLOSE_OK)
                return ConnectionCloseOkReceived()
            if index == spec.CONNECTION_CLOSE_INDEX:
                return self._close_received(payload, index)
            return None
        if index == spec.CONNECTION_CLOSE_INDEX:
            return self._close_received(payload, index)
        if state is State.OPEN:
            if index in _IGNORED_WHEN_OPEN:
                return None
            if index == spec.CONNECTION_UPDATE_SECRET_INDEX:
                method = self._decode(payload, index)
                assert isinstance(method, commands.Connection.UpdateSecret)
                secret = method.new_secret
                raw = secret.encode() if isinstance(secret, str) else bytes(secret or b"")
                return UpdateSecretReceived(raw, method.reason or "")
            raise errors.channel_error("unexpected method in connection state running").with_method(
                index >> 16, index & 0xFFFF
            )
        if index != EXPECTED.get(state):
            raise _Drop()
        method = self._decode(payload, index)
        if isinstance(method, commands.Connection.StartOk):
            self._move(Trigger.RECV_START_OK)
            self.client_properties = dict(method.client_properties or {})
            response = method.response
            raw = response.encode("latin-1") if isinstance(response, str) else bytes(response)
            return StartOkReceived(self.client_properties, method.mechanism, raw, method.locale)
        if isinstance(method, commands.Connection.TuneOk):
            # RabbitMQ drops, with no reply, a peer that asks for more than it offered or
            # for "no limit" (0).
            if not (self.frame_min <= method.frame_max <= self.frame_offer):
                raise _Drop()
            if not (0 < method.channel_max <= self.channel_max):
                raise _Drop()
            self._move(Trigger.RECV_TUNE_OK)
            self.frame_max = method.frame_max
            self.channel_max = method.channel_max
            self.heartbeat = method.heartbeat
            return TuneOkReceived(self.channel_max, self.frame_max, self.heartbeat)
        assert isinstance(method, commands.Connection.Open)
        self._move(Trigger.RECV_OPEN)
        return OpenReceived(method.virtual_host)

    def _close_received(self, payload: bytes, index: int) -> ConnectionCloseReceived:
        method = self._decode(payload, index)
        assert isinstance(method, commands.Connection.Close)
        self._move(Trigger.RECV_CLOSE)
        return ConnectionCloseReceived(
            method.reply_code or 0,
            method.reply_text or "",
            method.class_id or 0,
            method.method_id or 0,
        )
