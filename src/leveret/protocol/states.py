"""Every state an AMQP 0-9-1 connection and its channels can be in, and every transition
between them: one table each. :class:`~leveret.protocol.connection.ServerConnection` moves
only through these tables, so a transition missing here cannot happen there.

A trigger is either something the peer sent (``RECV_*``) or something the owner told the
connection to send (``SEND_*``). A peer's trigger that the table does not allow is the
peer's protocol error; an owner's trigger that it does not allow is a bug in the owner
(:class:`LocalProtocolError`)."""

from __future__ import annotations

from enum import Enum, auto

from leveret.protocol import spec
from leveret.protocol.sansio import LocalProtocolError as LocalProtocolError


class State(Enum):
    AWAIT_HEADER = auto()  # nothing read yet
    HEADER_RECEIVED = auto()  # the owner is to send connection.start
    AWAIT_START_OK = auto()
    AUTHENTICATING = auto()  # start-ok read: the owner sends tune, or refuses
    AWAIT_TUNE_OK = auto()
    AWAIT_OPEN = auto()
    OPENING = auto()  # connection.open read: the owner sends open-ok, or refuses
    OPEN = auto()
    CLOSE_RECEIVED = auto()  # the peer sent connection.close: the owner sends close-ok
    CLOSING = auto()  # we sent connection.close and read only close / close-ok
    # We answered the peer's close: the conversation is over, but input is read until the
    # peer ends its side (a socket closed under unread input would reset), and a further
    # connection.close still gets its close-ok, as RabbitMQ's reader does.
    DRAINING = auto()
    FAILED = auto()  # the byte stream broke: nothing more is read; the owner closes
    CLOSED = auto()  # nothing more is sent or read: the owner ends the TCP connection


class Trigger(Enum):
    RECV_HEADER = auto()
    RECV_BAD_HEADER = auto()
    SEND_START = auto()
    SEND_PROTOCOL_HEADER = auto()  # the answer to a bad header
    RECV_START_OK = auto()
    SEND_TUNE = auto()
    RECV_TUNE_OK = auto()
    RECV_OPEN = auto()
    SEND_OPEN_OK = auto()
    RECV_CLOSE = auto()
    SEND_CLOSE_OK = auto()
    SEND_CLOSE = auto()
    RECV_CLOSE_OK = auto()
    SEND_UPDATE_SECRET_OK = auto()
    RECV_GARBAGE = auto()  # bytes that cannot be framed: read no further
    DROP = auto()  # end without a word, as RabbitMQ does for some handshake errors
    LOST = auto()  # the transport went away


S = State
T = Trigger

# (state, trigger) -> next state
TRANSITIONS: dict[State, dict[Trigger, State]] = {
    S.AWAIT_HEADER: {
        T.RECV_HEADER: S.HEADER_RECEIVED,
        T.RECV_BAD_HEADER: S.FAILED,
        T.DROP: S.CLOSED,
    },
    S.HEADER_RECEIVED: {T.SEND_START: S.AWAIT_START_OK, T.DROP: S.CLOSED},
    S.AWAIT_START_OK: {
        T.RECV_START_OK: S.AUTHENTICATING,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.RECV_GARBAGE: S.FAILED,
        T.DROP: S.CLOSED,
    },
    S.AUTHENTICATING: {
        T.SEND_TUNE: S.AWAIT_TUNE_OK,
        T.SEND_CLOSE: S.CLOSING,
        T.DROP: S.CLOSED,
    },
    S.AWAIT_TUNE_OK: {
        T.RECV_TUNE_OK: S.AWAIT_OPEN,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.SEND_CLOSE: S.CLOSING,
        T.RECV_GARBAGE: S.FAILED,
        T.DROP: S.CLOSED,
    },
    S.AWAIT_OPEN: {
        T.RECV_OPEN: S.OPENING,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.SEND_CLOSE: S.CLOSING,
        T.RECV_GARBAGE: S.FAILED,
        T.DROP: S.CLOSED,
    },
    S.OPENING: {
        T.SEND_OPEN_OK: S.OPEN,
        T.SEND_CLOSE: S.CLOSING,
        T.DROP: S.CLOSED,
    },
    S.OPEN: {
        T.SEND_UPDATE_SECRET_OK: S.OPEN,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.SEND_CLOSE: S.CLOSING,
        T.RECV_GARBAGE: S.FAILED,
        T.DROP: S.CLOSED,
    },
    S.CLOSE_RECEIVED: {T.SEND_CLOSE_OK: S.DRAINING, T.DROP: S.CLOSED},
    S.CLOSING: {
        T.RECV_CLOSE_OK: S.CLOSED,
        # both ends closed at once: answer, and the connection is done
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.RECV_GARBAGE: S.CLOSED,
        T.DROP: S.CLOSED,
    },
    S.DRAINING: {
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.RECV_GARBAGE: S.CLOSED,
        T.DROP: S.CLOSED,
    },
    S.FAILED: {
        T.SEND_CLOSE: S.CLOSING,
        T.SEND_PROTOCOL_HEADER: S.CLOSED,
        T.DROP: S.CLOSED,
    },
    S.CLOSED: {T.DROP: S.CLOSED},
}
# Losing the transport ends every state.
for _moves in TRANSITIONS.values():
    _moves[T.LOST] = S.CLOSED

# States in which the peer's input is read, frame by frame.
READING = frozenset(
    {S.AWAIT_HEADER, S.AWAIT_START_OK, S.AWAIT_TUNE_OK, S.AWAIT_OPEN, S.OPEN, S.CLOSING, S.DRAINING}
)
# States after which the owner ends the TCP connection (after DRAINING, once the peer has
# ended its side).
OVER = frozenset({S.DRAINING, S.CLOSED})
# States in which only connection.close / close-ok are read; everything else is dropped.
WINDING_DOWN = frozenset({S.CLOSING, S.DRAINING})
# States in which a close is under way or done: a further connection.close is not sent.
CLOSE_UNDER_WAY = frozenset({S.CLOSE_RECEIVED, S.CLOSING, S.DRAINING, S.CLOSED})
# The method each handshake state waits for: any other ends the connection without a word.
EXPECTED = {
    S.AWAIT_START_OK: spec.CONNECTION_START_OK_INDEX,
    S.AWAIT_TUNE_OK: spec.CONNECTION_TUNE_OK_INDEX,
    S.AWAIT_OPEN: spec.CONNECTION_OPEN_INDEX,
}
# Until tune-ok, RabbitMQ answers a broken byte stream by closing the socket, not with
# connection.close.
SILENT_FAILURE = frozenset({S.AWAIT_START_OK, S.AWAIT_TUNE_OK})


class ChannelState(Enum):
    OPEN = auto()
    CLOSE_RECEIVED = auto()  # the peer sent channel.close: the owner sends close-ok
    CLOSING = auto()  # we sent channel.close: frames are dropped until close-ok


class ChannelTrigger(Enum):
    RECV_OPEN = auto()
    SEND_OPEN_OK = auto()
    SEND_ACCESS_REQUEST_OK = auto()
    RECV_CLOSE = auto()
    SEND_CLOSE_OK = auto()
    SEND_CLOSE = auto()
    RECV_CLOSE_OK = auto()


CS = ChannelState
CT = ChannelTrigger

# (channel state or None for a free number, trigger) -> next state or None (free again)
CHANNEL_TRANSITIONS: dict[ChannelState | None, dict[ChannelTrigger, ChannelState | None]] = {
    None: {CT.RECV_OPEN: CS.OPEN},
    CS.OPEN: {
        CT.SEND_OPEN_OK: CS.OPEN,
        CT.SEND_ACCESS_REQUEST_OK: CS.OPEN,
        CT.RECV_CLOSE: CS.CLOSE_RECEIVED,
        CT.SEND_CLOSE: CS.CLOSING,
    },
    CS.CLOSE_RECEIVED: {CT.SEND_CLOSE_OK: None},
    # Both ends closed at once: the owner answers the peer's close, and the number stays
    # taken until the peer's close-ok.
    CS.CLOSING: {CT.RECV_CLOSE_OK: None, CT.RECV_CLOSE: CS.CLOSING, CT.SEND_CLOSE_OK: CS.CLOSING},
}
