"""The server side of one stream-protocol connection, sans-IO.

Bytes go in with :meth:`ServerConnection.receive_data`; :meth:`next_event` hands out one
event per frame; the owner answers through the ``send_*`` methods and takes the bytes
with :meth:`data_to_send`. The connection only parses and keeps the phase: which
commands a phase takes is one table, and every reply is its owner's decision."""

from __future__ import annotations

import struct
from enum import Enum, auto

from leveret.protocol.sansio import Output
from leveret.protocol.stream import encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.frames import FrameError, decode
from leveret.protocol.stream.spec import DEFAULT_FRAME_MAX, HANDSHAKE_FRAME_MAX, Code

_U32 = struct.Struct(">I")


class Phase(Enum):
    PEER_PROPERTIES = auto()  # waiting for the client's peer properties
    AUTHENTICATING = auto()  # SASL handshake and authenticate
    TUNING = auto()  # our tune is out, waiting for the client's
    OPENING = auto()  # waiting for open
    OPEN = auto()
    CLOSING = auto()  # our close is out, waiting for its response
    # we answered the peer's close: the conversation is over; the owner ends the socket
    # once the peer has ended its side
    DRAINING = auto()
    CLOSED = auto()


class Trigger(Enum):
    RECV_PEER_PROPERTIES = auto()
    SEND_TUNE = auto()
    RECV_TUNE = auto()
    SEND_OPEN_OK = auto()
    SEND_OPEN_REFUSED = auto()
    SEND_CLOSE = auto()
    RECV_CLOSE_RESPONSE = auto()
    SEND_CLOSE_RESPONSE = auto()
    FAIL = auto()  # the peer broke the protocol before the connection was open
    DROP = auto()  # end without a word


P = Phase
T = Trigger
#: (phase, trigger) -> next phase: the connection moves only through this table.
TRANSITIONS: dict[Phase, dict[Trigger, Phase]] = {
    P.PEER_PROPERTIES: {T.RECV_PEER_PROPERTIES: P.AUTHENTICATING},
    P.AUTHENTICATING: {T.SEND_TUNE: P.TUNING},
    P.TUNING: {T.RECV_TUNE: P.OPENING},
    P.OPENING: {T.RECV_TUNE: P.OPENING, T.SEND_OPEN_OK: P.OPEN, T.SEND_OPEN_REFUSED: P.CLOSED},
    P.OPEN: {T.SEND_CLOSE: P.CLOSING, T.SEND_CLOSE_RESPONSE: P.DRAINING},
    P.CLOSING: {T.RECV_CLOSE_RESPONSE: P.CLOSED, T.SEND_CLOSE_RESPONSE: P.DRAINING},
    P.DRAINING: {},
    P.CLOSED: {},
}
for _phase, _moves in TRANSITIONS.items():
    _moves[T.DROP] = P.CLOSED
    if _phase is not P.OPEN:
        _moves.setdefault(T.FAIL, P.CLOSED)
    # a close of ours before the connection is open (a frame too large, a protocol error)
    if _phase in (P.PEER_PROPERTIES, P.AUTHENTICATING, P.TUNING, P.OPENING):
        _moves.setdefault(T.SEND_CLOSE, P.CLOSING)


class LocalProtocolError(RuntimeError):
    """The owner asked for a move its phase does not allow: a bug in the owner."""


# What each phase takes; a heartbeat is taken in every phase. Before the connection is
# open anything else ends it (RabbitMQ's reader fails the connection); once open, a
# command it does not know is answered with a close (unknown frame).
_TAKES: dict[Phase, tuple[type, ...]] = {
    Phase.PEER_PROPERTIES: (ev.PeerProperties,),
    Phase.AUTHENTICATING: (ev.SaslHandshake, ev.SaslAuthenticate),
    Phase.TUNING: (ev.Tune,),
    Phase.OPENING: (ev.Open, ev.Tune),
    Phase.OPEN: (
        ev.Close,
        ev.Metadata,
        ev.Create,
        ev.Delete,
        ev.DeclarePublisher,
        ev.Publish,
        ev.QueryPublisherSequence,
        ev.DeletePublisher,
        ev.Subscribe,
        ev.Credit,
        ev.Unsubscribe,
        ev.StoreOffset,
        ev.QueryOffset,
        ev.Route,
        ev.Partitions,
        ev.ConsumerUpdateResponse,
        ev.ExchangeCommandVersions,
        ev.StreamStats,
        ev.CreateSuperStream,
        ev.DeleteSuperStream,
        ev.UnknownFrame,
        ev.FrameTooLarge,
    ),
    Phase.CLOSING: (ev.CloseResponse, ev.Close),
    Phase.DRAINING: (),
    Phase.CLOSED: (),
}
#: the phases in which nothing more is read
_OVER = frozenset((Phase.DRAINING, Phase.CLOSED))


#: the peer's frames that move the connection
_RECEIVED: dict[type, Trigger] = {
    ev.PeerProperties: Trigger.RECV_PEER_PROPERTIES,
    ev.Tune: Trigger.RECV_TUNE,
    ev.CloseResponse: Trigger.RECV_CLOSE_RESPONSE,
}


class ServerConnection(Output):
    def __init__(self, frame_max: int = DEFAULT_FRAME_MAX, heartbeat: int = 60) -> None:
        self.phase = Phase.PEER_PROPERTIES
        self.frame_max = frame_max  # what we offer, then what was agreed
        self.heartbeat = heartbeat
        self._buf = bytearray()
        self._pos = 0
        self._out: list[bytes] = []
        self._skip = 0  # bytes of an oversized frame still to drop
        self._correlation = 0

    # ------------------------------------------------------------------ input
    def _move(self, trigger: Trigger) -> None:
        nxt = TRANSITIONS[self.phase].get(trigger)
        if nxt is None:
            raise LocalProtocolError(f"{trigger.name} while {self.phase.name}")
        self.phase = nxt

    def receive_data(self, data: bytes) -> None:
        if self.phase in _OVER:
            return
        self._buf += data

    def next_event(self) -> ev.Event | ev.NeedData:
        while True:
            if self.phase in _OVER:
                return ev.NEED_DATA
            buf = self._buf
            pos = self._pos
            if self._skip:
                n = min(self._skip, len(buf) - pos)
                self._skip -= n
                pos = self._pos = pos + n
                if self._skip:
                    self._compact()
                    return ev.NEED_DATA
            if len(buf) - pos < 4:
                self._compact()
                return ev.NEED_DATA
            (size,) = _U32.unpack_from(buf, pos)
            limit = self.frame_max if self.phase is Phase.OPEN else HANDSHAKE_FRAME_MAX
            if limit and size > limit:
                self._pos = pos + 4
                self._skip = size
                return self._check(ev.FrameTooLarge(size))
            if len(buf) - pos - 4 < size:
                self._compact()
                return ev.NEED_DATA
            body = bytes(buf[pos + 4 : pos + 4 + size])
            self._pos = pos + 4 + size
            try:
                event = decode(body)
            except FrameError as exc:
                if self.phase is Phase.OPEN:
                    key = int.from_bytes(body[:2], "big") if len(body) >= 2 else 0
                    return ev.UnknownFrame(key, 1)
                return self._fail(f"malformed frame: {exc}")
            if isinstance(event, ev.Heartbeat):
                continue  # only keeps the connection alive: the owner sees the bytes arrive
            return self._check(event)

    def _check(self, event: ev.Event) -> ev.Event:
        if isinstance(event, _TAKES[self.phase]):
            trigger = _RECEIVED.get(type(event))
            if trigger is not None:
                self._move(trigger)
            if isinstance(event, ev.Tune):
                self.frame_max = event.frame_max
                self.heartbeat = event.heartbeat
            return event
        return self._fail(f"{type(event).__name__} not expected while {self.phase.name}")

    def _fail(self, reason: str) -> ev.ConnectionFailed:
        self._move(Trigger.FAIL if self.phase is not Phase.OPEN else Trigger.DROP)
        return ev.ConnectionFailed(reason)

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    # ----------------------------------------------------------------- output
    def send(self, data: bytes) -> None:
        """A frame made by :mod:`leveret.protocol.stream.encode`, queued as it is."""
        self._out.append(data)

    def send_tune(self) -> None:
        self._move(Trigger.SEND_TUNE)
        self._out.append(encode.tune(self.frame_max, self.heartbeat))

    def send_open(self, correlation_id: int, code: int, properties: dict[str, str]) -> None:
        self._move(Trigger.SEND_OPEN_OK if code == Code.OK else Trigger.SEND_OPEN_REFUSED)
        self._out.append(encode.open_response(correlation_id, code, properties))

    def send_close(self, code: int, reason: str) -> None:
        """Close from our side: the client answers with a close response."""
        if Trigger.SEND_CLOSE not in TRANSITIONS[self.phase]:
            return  # a close is under way, or the conversation is over
        self._move(Trigger.SEND_CLOSE)
        self._correlation += 1
        self._out.append(encode.close(self._correlation, code, reason))

    def send_close_response(self, correlation_id: int) -> None:
        self._move(Trigger.SEND_CLOSE_RESPONSE)
        self._out.append(encode.response(0x0016, correlation_id, Code.OK))

    def send_heartbeat(self) -> None:
        self._out.append(encode.heartbeat())

    def drop(self) -> None:
        """End without a word."""
        self._move(Trigger.DROP)

    @property
    def open(self) -> bool:
        return self.phase is Phase.OPEN

    @property
    def closed(self) -> bool:
        """Nothing more is read: the owner ends the socket (after the peer's end of it,
        when ``draining``)."""
        return self.phase in _OVER

    @property
    def draining(self) -> bool:
        """We answered the peer's close: its end of the socket comes next."""
        return self.phase is Phase.DRAINING

    def buffered(self) -> int:
        """Bytes received and not yet taken as events (flow control reads this)."""
        return len(self._buf) - self._pos
