"""One AMQP 1.0 connection, sans-IO, on h11's rule: it speaks only when asked.

- :meth:`Connection.receive_data` only buffers bytes.
- :meth:`Connection.next_event` parses and returns one event at a time
  (:data:`~leveret.protocol.amqp10.events.NEED_DATA` when no complete one is buffered).
- The ``send_*`` methods (and ``grant_credit``, ``drained``, ``refuse``) are the only way
  bytes go out; :meth:`Connection.data_to_send` collects them.

This module holds what both roles share: framing, open and close, sessions, links,
transfers and dispositions. :mod:`~leveret.protocol.amqp10.server` and
:mod:`~leveret.protocol.amqp10.client` add the handshake of each side. States move only
through the tables in :mod:`~leveret.protocol.amqp10.states`; window and credit arithmetic
is :mod:`~leveret.protocol.amqp10.session`'s.
"""

from __future__ import annotations

from typing import Any

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.definitions import (
    DECODE_ERROR,
    FRAME_SIZE_TOO_SMALL,
    FRAMING_ERROR,
    HANDLE_IN_USE,
    ILLEGAL_STATE,
    NOT_ALLOWED,
    UNATTACHED_HANDLE,
    Composite,
    Error,
)
from leveret.protocol.amqp10.endpoints import Endpoints
from leveret.protocol.amqp10.events import (
    NEED_DATA,
    AttachReceived,
    CloseReceived,
    ConnectionFailed,
    DetachReceived,
    EndReceived,
    Event,
    LinkFailed,
    NeedData,
    OpenReceived,
    SessionFailed,
)
from leveret.protocol.amqp10.frames import (
    FRAME_AMQP,
    FRAME_SASL,
    UINT_MAX,
    unpack_head,
)
from leveret.protocol.amqp10.performatives import (
    PERFORMATIVES,
    SASL_FRAMES,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Open,
    Transfer,
    decode_performative,
    read_transfer,
)
from leveret.protocol.amqp10.session import Link, LinkViolation, Session, SessionViolation
from leveret.protocol.amqp10.states import (
    AMQP_OPEN,
    CLOSE_UNDER_WAY,
    HEADER_STATES,
    LINK_TRANSITIONS,
    READING,
    SASL_STATES,
    LinkState,
    LinkTrigger,
    SessionState,
    SessionTrigger,
    State,
    Trigger,
)
from leveret.protocol.amqp10.types import DecodeError
from leveret.protocol.sansio import Machine

__all__ = ["Connection", "ConnectionViolation"]

_TRANSFER = b"\x00\x53\x14"
_OPEN = State.OPEN
_ATTACH_RECEIVED = LinkState.ATTACH_RECEIVED
assert LINK_TRANSITIONS[None][LinkTrigger.RECV_ATTACH] is _ATTACH_RECEIVED


class ConnectionViolation(Exception):
    """The peer broke the connection's rules: it closes with ``error``."""

    def __init__(self, error: Error, broken: bool = False, silent: bool = False) -> None:
        super().__init__(error.description)
        self.error = error
        self.broken = broken  # no frame boundary can be trusted: read nothing more
        self.silent = silent  # RabbitMQ closes the socket without a close frame


class Connection(Endpoints, Machine[State, Trigger]):
    """The parts of an AMQP 1.0 connection both roles share."""

    # The role's: its table, the state it starts in and the channel-max it offers unless
    # told otherwise.
    TRANSITIONS: dict[State, dict[Trigger, State]]
    START: State
    CHANNEL_MAX: int
    CLOSED = State.CLOSED
    DROP = Trigger.DROP

    def __init__(
        self,
        max_frame_size: int = frames.DEFAULT_MAX_FRAME_SIZE,
        channel_max: int | None = None,
        window_margin: int = 0,
    ) -> None:
        super().__init__(window_margin)
        self._state = self.START
        # Our limits (what our open says): frames and channels the peer may send us.
        self.max_frame_size = max_frame_size
        self.channel_max = self.CHANNEL_MAX if channel_max is None else channel_max
        # The peer's limits, from its open: what we may send.
        self.remote_channel_max = 0xFFFF
        self.remote_idle_time_out: int | None = None
        self.remote_open: Open | None = None
        self._open_sent = False
        self._in = b""
        self._pos = 0
        self._discard = False

    # ------------------------------------------------------------------- state
    @property
    def closed(self) -> bool:
        """Nothing more is sent or read: the owner ends the TCP connection."""
        return self._state is State.CLOSED

    @property
    def closing(self) -> bool:
        return self._state in CLOSE_UNDER_WAY

    # ------------------------------------------------------------------ output
    def send_amqp_header(self) -> None:
        """``AMQP 0 1 0 0``: the server's answer to the client's, or the client's after
        a successful SASL outcome."""
        self._move(Trigger.SEND_AMQP_HEADER)
        self._out.append(frames.AMQP_HEADER)

    def send_open(
        self,
        container_id: str,
        *,
        hostname: str | None = None,
        max_frame_size: int | None = None,
        channel_max: int | None = None,
        idle_time_out: int | None = None,
        offered_capabilities: tuple[str, ...] | None = None,
        desired_capabilities: tuple[str, ...] | None = None,
        properties: dict[Any, Any] | None = None,
    ) -> None:
        """Our open. ``max_frame_size`` and ``channel_max`` (default: the connection's)
        become the limits the peer's frames are held to."""
        self._move(Trigger.SEND_OPEN)
        if max_frame_size is not None:
            self.max_frame_size = max_frame_size
        if channel_max is not None:
            self.channel_max = channel_max
        self._open_sent = True
        self._frame(
            0,
            Open(
                container_id,
                hostname,
                self.max_frame_size,
                self.channel_max,
                idle_time_out,
                None,
                None,
                offered_capabilities,
                desired_capabilities,
                properties,
            ),
        )

    def send_close(self, error: Error | None = None) -> None:
        """Close, or answer the peer's. A second close is not sent."""
        if self._state in CLOSE_UNDER_WAY and self._state is not State.CLOSE_RECEIVED:
            return
        self._move(Trigger.SEND_CLOSE)
        self._frame(0, Close(error))
        self._sessions.clear()
        self._remote_channels.clear()

    def send_heartbeat(self) -> None:
        """An empty frame (idle-time-out keeps the connection alive with these)."""
        if self._state in AMQP_OPEN or self._state is State.CLOSE_SENT:
            self._out.append(frames.HEARTBEAT)

    def connection_lost(self) -> None:
        self._move(Trigger.LOST)
        self._sessions.clear()
        self._remote_channels.clear()

    # ------------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Buffer bytes from the peer. Nothing is parsed until :meth:`next_event`."""
        state = self._state
        # (identity first: an enum's hash is a Python call in 3.11)
        if self._discard or (state is not _OPEN and state not in READING):
            return
        self._buffer(data)

    def next_event(self) -> Event | NeedData:
        """The next complete event, or NEED_DATA."""
        state = self._state
        if state is not _OPEN and (self._discard or state not in READING):
            return NEED_DATA
        try:
            while True:
                if self._state is not _OPEN and self._state in HEADER_STATES:
                    header_event = self._header()
                    if header_event is not None:
                        return header_event
                    continue
                buf = self._in
                pos = self._pos
                if len(buf) - pos < 8:
                    return NEED_DATA
                size, doff, frame_type, channel = unpack_head(buf, pos)
                sasl = self._state is not _OPEN and self._state in SASL_STATES
                if size < 8 or doff < 2 or doff * 4 > size:
                    raise ConnectionViolation(
                        Error(FRAMING_ERROR, f"malformed frame header (size {size}, doff {doff})"),
                        broken=True,
                        silent=True,
                    )
                if frame_type != (FRAME_SASL if sasl else FRAME_AMQP):
                    raise ConnectionViolation(
                        Error(FRAMING_ERROR, f"unexpected frame type {frame_type}"),
                        broken=True,
                        silent=True,
                    )
                if size > self.max_frame_size:
                    raise ConnectionViolation(
                        Error(
                            FRAMING_ERROR,
                            f"frame size ({size} bytes) > maximum frame size "
                            f"({self.max_frame_size} bytes)",
                        ),
                        broken=True,
                    )
                end = pos + size
                if len(buf) < end:
                    return NEED_DATA
                self._pos = end
                if size == doff * 4:
                    continue  # an empty frame: a heartbeat
                body = buf[pos + doff * 4 : end]
                if sasl:
                    event = self._sasl_frame(decode_performative(body, 0, SASL_FRAMES)[0])
                else:
                    event = self._amqp_frame(channel, body)
                if event is not None:
                    return event
                if self._state is not _OPEN and self._state not in READING:
                    return NEED_DATA
        except ConnectionViolation as exc:
            return self._fail(exc.error, exc.broken, exc.silent)
        except DecodeError as exc:
            return self._fail(Error(DECODE_ERROR, str(exc)), broken=False, silent=False)

    def _fail(self, error: Error, broken: bool, silent: bool) -> ConnectionFailed | NeedData:
        """The peer broke the protocol. A close frame carries the error once our open is
        out (RabbitMQ: once the connection runs); before, the socket just closes. When
        the framing still holds, the frames after it are read (and dropped) until the
        peer's close; when it broke, nothing more is read."""
        if self._state is State.CLOSE_SENT:
            self._move(Trigger.RECV_GARBAGE)
            return NEED_DATA
        if broken:
            self._in = b""
            self._pos = 0
            self._discard = True
        reply = self._open_sent and not silent
        self._move(Trigger.RECV_GARBAGE)
        return ConnectionFailed(error, reply=reply)

    def _header(self) -> Event | NeedData | None:
        """A protocol header, when 8 bytes are buffered."""
        raise NotImplementedError

    def _take_header(self) -> bytes | None:
        """The 8 bytes of a protocol header, taken from the input once all are there."""
        pos = self._pos
        if len(self._in) - pos < frames.HEADER_SIZE:
            return None
        self._pos = pos + frames.HEADER_SIZE
        return self._in[pos : self._pos]

    def _bad_header(self) -> None:
        """A header this role does not take: nothing more is read."""
        self._move(Trigger.RECV_BAD_HEADER)
        self._discard = True

    def _sasl_frame(self, performative: Composite) -> Event | None:
        """A SASL frame the peer sent: the role's event, or an error when out of turn."""
        raise NotImplementedError

    def _send_sasl(self, frame: Composite) -> None:
        self._frame(0, frame, FRAME_SASL)

    def _channel_beyond_max(self, channel: int) -> ConnectionViolation:
        return ConnectionViolation(
            Error(
                FRAMING_ERROR,
                f"channel number ({channel}) exceeds maximum channel number ({self.channel_max})",
            )
        )

    @staticmethod
    def _unexpected_sasl(performative: Any) -> ConnectionViolation:
        """A SASL frame out of turn: RabbitMQ's reader dies on it, the socket just
        closes."""
        return ConnectionViolation(
            Error(NOT_ALLOWED, f"unexpected SASL frame {type(performative).__name__}"),
            broken=True,
            silent=True,
        )

    def _amqp_frame(self, channel: int, body: bytes) -> Event | None:
        if body[:3] == _TRANSFER and self._state is _OPEN:
            return self._transfer(channel, body)
        performative, _end = decode_performative(body, 0, PERFORMATIVES)
        if isinstance(performative, Open):
            return self._open_received(performative)
        if isinstance(performative, Close):
            self._move(Trigger.RECV_CLOSE)
            self._sessions.clear()
            self._remote_channels.clear()
            return CloseReceived(performative.error)
        if self._state is State.CLOSE_SENT:
            return None  # after our close only the peer's close counts
        if self._state not in AMQP_OPEN:
            raise ConnectionViolation(
                Error(ILLEGAL_STATE, f"{type(performative).__name__.lower()} before open")
            )
        if channel > self.channel_max:
            raise self._channel_beyond_max(channel)
        if isinstance(performative, Begin):
            return self._begin_received(channel, performative)
        local = self._remote_channels.get(channel)
        if local is None:
            return None  # as RabbitMQ: frames for a channel without a session are dropped
        session = self._sessions[local]
        if isinstance(performative, End):
            return self._end_received(session, performative)
        if session.state is SessionState.END_SENT:
            return None
        try:
            if isinstance(performative, Attach):
                return self._attach_received(session, performative)
            if isinstance(performative, Flow):
                event = session.on_flow(performative)
                if session.blocked:
                    self._flush(session)
                return event
            if isinstance(performative, Transfer):
                t = performative
                return self._transfer_fields(
                    session, t.handle, t.delivery_id, t.delivery_tag, t.message_format,
                    t.settled, t.more, t, body[_end:],
                )  # fmt: skip
            if isinstance(performative, Disposition):
                return session.on_disposition(performative)
            assert isinstance(performative, Detach)
            return self._detach_received(session, performative)
        except SessionViolation as exc:
            return SessionFailed(session.channel, exc.error)
        except LinkViolation as exc:
            return self._link_failed(session, exc)

    def _open_received(self, performative: Open) -> Event:
        size = performative.max_frame_size
        if size is not None and size < frames.MIN_MAX_FRAME_SIZE:
            raise ConnectionViolation(
                Error(
                    FRAME_SIZE_TOO_SMALL,
                    f"max_frame_size ({size}) < minimum maximum frame size "
                    f"({frames.MIN_MAX_FRAME_SIZE})",
                )
            )
        if self.remote_open is not None:  # a second open: the peer broke the protocol
            raise ConnectionViolation(Error(ILLEGAL_STATE, "open after open"))
        self._move(Trigger.RECV_OPEN)
        self.remote_open = performative
        self.remote_max_frame_size = UINT_MAX if size is None else size
        if performative.channel_max is not None:
            self.remote_channel_max = performative.channel_max
        self.remote_idle_time_out = performative.idle_time_out
        return OpenReceived(performative)

    def _begin_received(self, channel: int, begin: Begin) -> Event | None:
        raise NotImplementedError

    def _mapped(self, session: Session, channel: int, begin: Begin) -> None:
        """The peer's begin read: its numbers become the session's view of the peer."""
        session.remote_channel = channel
        self._remote_channels[channel] = session.channel
        session.next_incoming_id = begin.next_outgoing_id
        session.remote_incoming_window = begin.incoming_window
        session.remote_outgoing_window = begin.outgoing_window
        if begin.handle_max is not None:
            session.remote_handle_max = begin.handle_max

    def _end_received(self, session: Session, end: End) -> EndReceived:
        complete = session.state is SessionState.END_SENT
        self._session_move(session, SessionTrigger.RECV_END)
        return EndReceived(session.channel, end.error, complete)

    def _attach_received(self, session: Session, attach: Attach) -> Event | None:
        handle = attach.handle
        if handle > session.handle_max:
            raise SessionViolation(
                Error(
                    FRAMING_ERROR,
                    f"link handle value ({handle}) exceeds maximum link handle value "
                    f"({session.handle_max})",
                )
            )
        link = self._link_for_attach(session, attach)
        if link is None:
            return None
        if link.remote_handle is None:  # a new link: it takes the handle
            link.remote_handle = handle
            session.remote_links[handle] = link
            session.links[link.handle] = link
            link.state = _ATTACH_RECEIVED
        else:
            self._link_move(session, link, LinkTrigger.RECV_ATTACH)
        if attach.role is False and attach.initial_delivery_count is not None:
            # the peer sends: its deliveries count from here
            link.delivery_count = attach.initial_delivery_count
        if link.role is False:
            link.max_message_size = attach.max_message_size or None
        return AttachReceived(session.channel, link.handle, attach)

    def _link_for_attach(self, session: Session, attach: Attach) -> Link | None:
        """The link a peer's attach opens (a new one, without a remote handle yet) or
        answers (ours, waiting for it); None: the attach is dropped."""
        raise NotImplementedError

    def _in_use(self, session: Session, handle: int) -> SessionViolation:
        return SessionViolation(Error(HANDLE_IN_USE, f"Handle {handle} in use"))

    def _detach_received(self, session: Session, detach: Detach) -> Event | None:
        link = session.link_by_remote(detach.handle)
        complete = link.state is LinkState.DETACH_SENT
        self._link_move(session, link, LinkTrigger.RECV_DETACH)
        return DetachReceived(
            session.channel, link.handle, bool(detach.closed), detach.error, complete
        )

    def _link_failed(self, session: Session, exc: LinkViolation) -> LinkFailed | None:
        link = session.links.get(exc.handle)
        if link is not None:
            link.partial_id = None
            link.partial_chunks = []
        return LinkFailed(session.channel, exc.handle, exc.error)

    # ------------------------------------------------------------ transfers in
    def _transfer(self, channel: int, body: bytes) -> Event | None:
        """The hot path: a transfer frame, its performative read field by field
        (:func:`read_transfer`; the general decoder for any other shape)."""
        fast = read_transfer(body)
        if fast is None:
            t, end = decode_performative(body, 0, PERFORMATIVES)
            assert isinstance(t, Transfer)
            handle, delivery_id, tag = t.handle, t.delivery_id, t.delivery_tag
            fmt, settled, more = t.message_format, t.settled, t.more
            rest: Transfer | None = t
        else:
            handle, delivery_id, tag, fmt, settled, more, end = fast
            rest = None
        if channel > self.channel_max:
            raise self._channel_beyond_max(channel)
        local = self._remote_channels.get(channel)
        if local is None:
            return None
        session = self._sessions[local]
        if session.state is SessionState.END_SENT:
            return None
        try:
            return self._transfer_fields(
                session, handle, delivery_id, tag, fmt, settled, more, rest, body[end:]
            )
        except SessionViolation as exc:
            return SessionFailed(session.channel, exc.error)
        except LinkViolation as exc:
            return self._link_failed(session, exc)

    def _transfer_fields(
        self,
        session: Session,
        handle: int,
        delivery_id: int | None,
        tag: bytes | None,
        fmt: int | None,
        settled: bool | None,
        more: bool | None,
        rest: Transfer | None,
        payload: bytes,
    ) -> Event | None:
        """A transfer's fields (``rest``: the whole performative, for the fields after
        ``more``; None when it has none)."""
        session.on_transfer_frame()
        link = session.remote_links.get(handle)
        if link is None or not link.role:
            raise SessionViolation(Error(UNATTACHED_HANDLE, f"Unknown link handle: {handle}"))
        if link.state is not LinkState.ATTACHED:
            return None  # a detach is under way: what is in flight is dropped
        if rest is None:
            return session.on_transfer(
                link, delivery_id, tag, fmt, settled, bool(more), None, None, False, False,
                payload,
            )  # fmt: skip
        return session.on_transfer(
            link, delivery_id, tag, fmt, settled, bool(more), rest.rcv_settle_mode,
            rest.state, bool(rest.aborted), bool(rest.batchable), payload,
        )  # fmt: skip
