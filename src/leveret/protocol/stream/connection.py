"""The server side of one stream-protocol connection, sans-IO.

Bytes go in with :meth:`ServerConnection.receive_data`; :meth:`next_event` hands out one
event per frame; the owner answers through the ``send_*`` methods and takes the bytes
with :meth:`data_to_send`. The connection only parses and keeps the phase: which
commands a phase takes is one table, and every reply is its owner's decision."""

from __future__ import annotations

import struct
from enum import Enum, auto

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
    CLOSED = auto()


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
        ev.UnknownFrame,
        ev.FrameTooLarge,
    ),
    Phase.CLOSING: (ev.CloseResponse, ev.Close),
    Phase.CLOSED: (),
}


class ServerConnection:
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
    def receive_data(self, data: bytes) -> None:
        if self.phase is Phase.CLOSED:
            return
        self._buf += data

    def next_event(self) -> ev.Event | ev.NeedData:
        while True:
            if self.phase is Phase.CLOSED:
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
            if isinstance(event, ev.PeerProperties):
                self.phase = Phase.AUTHENTICATING
            elif isinstance(event, ev.Tune):
                self.frame_max = event.frame_max
                self.heartbeat = event.heartbeat
                self.phase = Phase.OPENING
            elif isinstance(event, ev.CloseResponse):
                self.phase = Phase.CLOSED
            return event
        return self._fail(f"{type(event).__name__} not expected while {self.phase.name}")

    def _fail(self, reason: str) -> ev.ConnectionFailed:
        self.phase = Phase.CLOSED
        return ev.ConnectionFailed(reason)

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    # ----------------------------------------------------------------- output
    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        return out

    def has_output(self) -> bool:
        return bool(self._out)

    def send(self, data: bytes) -> None:
        """A frame made by :mod:`leveret.protocol.stream.encode`, queued as it is."""
        self._out.append(data)

    def send_tune(self) -> None:
        self.phase = Phase.TUNING
        self._out.append(encode.tune(self.frame_max, self.heartbeat))

    def send_open(self, correlation_id: int, code: int, properties: dict[str, str]) -> None:
        self._out.append(encode.open_response(correlation_id, code, properties))
        self.phase = Phase.OPEN if code == Code.OK else Phase.CLOSED

    def send_close(self, code: int, reason: str) -> None:
        """Close from our side: the client answers with a close response."""
        if self.phase in (Phase.CLOSING, Phase.CLOSED):
            return
        self._correlation += 1
        self._out.append(encode.close(self._correlation, code, reason))
        self.phase = Phase.CLOSING

    def send_close_response(self, correlation_id: int) -> None:
        self._out.append(encode.response(0x0016, correlation_id, Code.OK))
        self.phase = Phase.CLOSED

    def send_heartbeat(self) -> None:
        self._out.append(encode.heartbeat())

    def drop(self) -> None:
        """End without a word."""
        self.phase = Phase.CLOSED

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    def buffered(self) -> int:
        """Bytes received and not yet taken as events (flow control reads this)."""
        return len(self._buf) - self._pos
