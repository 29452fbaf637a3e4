"""Every state of an AMQP 1.0 connection (for each role), session and link, and every
transition between them: one table each. The connection moves only through these tables,
so a transition missing here cannot happen there.

A trigger is either something the peer sent (``RECV_*``) or something the owner told the
connection to send (``SEND_*``). A peer's trigger that a table does not allow is the peer's
protocol error; an owner's trigger that it does not allow is a bug in the owner
(:class:`LocalProtocolError`).
"""

from __future__ import annotations

from enum import Enum, auto


class State(Enum):
    START = auto()  # client: nothing sent yet
    AWAIT_SASL_HEADER = auto()  # server: nothing read; client: its SASL header is out
    SASL_HEADER_RECEIVED = auto()  # server: the owner sends the mechanisms
    AWAIT_SASL_MECHANISMS = auto()  # client
    MECHANISMS_RECEIVED = auto()  # client: the owner sends sasl-init
    AWAIT_SASL_INIT = auto()  # server
    AUTHENTICATING = auto()  # server: init or response read; the owner sends the outcome
    AWAIT_SASL_RESPONSE = auto()  # server: a challenge is out
    AWAIT_SASL_OUTCOME = auto()  # client
    CHALLENGED = auto()  # client: the owner sends sasl-response
    OUTCOME_RECEIVED = auto()  # client: authenticated; the owner sends the AMQP header
    AWAIT_AMQP_HEADER = auto()
    AMQP_HEADER_RECEIVED = auto()  # server: the owner sends the AMQP header
    AWAIT_OPEN = auto()  # headers exchanged, no open either way
    OPEN_RECEIVED = auto()  # server: the owner sends open (and close, to refuse)
    OPEN_SENT = auto()  # client: waits for the server's open
    OPEN = auto()
    CLOSE_RECEIVED = auto()  # the owner answers with close
    CLOSE_SENT = auto()  # ours is out: only the peer's close is read, the rest dropped
    FAILED = auto()  # the peer broke the protocol: nothing more is read
    CLOSED = auto()  # nothing more is sent or read: the owner ends the TCP connection


class Trigger(Enum):
    SEND_SASL_HEADER = auto()
    RECV_SASL_HEADER = auto()
    RECV_BAD_HEADER = auto()
    SEND_REFUSAL = auto()  # the header we speak, in answer to another
    SEND_MECHANISMS = auto()
    RECV_MECHANISMS = auto()
    SEND_INIT = auto()
    RECV_INIT = auto()
    SEND_CHALLENGE = auto()
    RECV_CHALLENGE = auto()
    SEND_RESPONSE = auto()
    RECV_RESPONSE = auto()
    SEND_OUTCOME_OK = auto()
    SEND_OUTCOME_FAILED = auto()
    RECV_OUTCOME_OK = auto()
    RECV_OUTCOME_FAILED = auto()
    SEND_AMQP_HEADER = auto()
    RECV_AMQP_HEADER = auto()
    SEND_OPEN = auto()
    RECV_OPEN = auto()
    SEND_CLOSE = auto()
    RECV_CLOSE = auto()
    RECV_GARBAGE = auto()  # input that breaks the protocol: read no further
    DROP = auto()  # end without a word
    LOST = auto()  # the transport went away


S = State
T = Trigger

_ENDING = {
    S.OPEN: {T.RECV_CLOSE: S.CLOSE_RECEIVED, T.SEND_CLOSE: S.CLOSE_SENT, T.RECV_GARBAGE: S.FAILED},
    S.CLOSE_RECEIVED: {T.SEND_CLOSE: S.CLOSED},
    S.CLOSE_SENT: {T.RECV_CLOSE: S.CLOSED, T.RECV_GARBAGE: S.CLOSED},
    # After a failure a close frame goes out when the framing is intact; RabbitMQ then
    # waits for the peer's close as after any close of its own.
    S.FAILED: {T.SEND_CLOSE: S.CLOSE_SENT, T.SEND_REFUSAL: S.CLOSED},
    S.CLOSED: {},
}

# (state, trigger) -> next state, for the server
SERVER_TRANSITIONS: dict[State, dict[Trigger, State]] = {
    S.AWAIT_SASL_HEADER: {T.RECV_SASL_HEADER: S.SASL_HEADER_RECEIVED, T.RECV_BAD_HEADER: S.FAILED},
    S.SASL_HEADER_RECEIVED: {T.SEND_MECHANISMS: S.AWAIT_SASL_INIT},
    S.AWAIT_SASL_INIT: {T.RECV_INIT: S.AUTHENTICATING, T.RECV_GARBAGE: S.FAILED},
    S.AUTHENTICATING: {
        T.SEND_OUTCOME_OK: S.AWAIT_AMQP_HEADER,
        # RabbitMQ sends the failed outcome and closes the socket
        T.SEND_OUTCOME_FAILED: S.CLOSED,
        T.SEND_CHALLENGE: S.AWAIT_SASL_RESPONSE,
    },
    S.AWAIT_SASL_RESPONSE: {T.RECV_RESPONSE: S.AUTHENTICATING, T.RECV_GARBAGE: S.FAILED},
    S.AWAIT_AMQP_HEADER: {T.RECV_AMQP_HEADER: S.AMQP_HEADER_RECEIVED, T.RECV_BAD_HEADER: S.FAILED},
    S.AMQP_HEADER_RECEIVED: {T.SEND_AMQP_HEADER: S.AWAIT_OPEN},
    S.AWAIT_OPEN: {
        T.RECV_OPEN: S.OPEN_RECEIVED,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.RECV_GARBAGE: S.FAILED,
    },
    S.OPEN_RECEIVED: {T.SEND_OPEN: S.OPEN, T.SEND_CLOSE: S.CLOSE_SENT},
    **_ENDING,
}

# (state, trigger) -> next state, for the client
CLIENT_TRANSITIONS: dict[State, dict[Trigger, State]] = {
    S.START: {T.SEND_SASL_HEADER: S.AWAIT_SASL_HEADER},
    S.AWAIT_SASL_HEADER: {T.RECV_SASL_HEADER: S.AWAIT_SASL_MECHANISMS, T.RECV_BAD_HEADER: S.FAILED},
    S.AWAIT_SASL_MECHANISMS: {T.RECV_MECHANISMS: S.MECHANISMS_RECEIVED, T.RECV_GARBAGE: S.FAILED},
    S.MECHANISMS_RECEIVED: {T.SEND_INIT: S.AWAIT_SASL_OUTCOME},
    S.AWAIT_SASL_OUTCOME: {
        T.RECV_CHALLENGE: S.CHALLENGED,
        T.RECV_OUTCOME_OK: S.OUTCOME_RECEIVED,
        T.RECV_OUTCOME_FAILED: S.CLOSED,
        T.RECV_GARBAGE: S.FAILED,
    },
    S.CHALLENGED: {T.SEND_RESPONSE: S.AWAIT_SASL_OUTCOME},
    S.OUTCOME_RECEIVED: {T.SEND_AMQP_HEADER: S.AWAIT_AMQP_HEADER},
    S.AWAIT_AMQP_HEADER: {T.RECV_AMQP_HEADER: S.AWAIT_OPEN, T.RECV_BAD_HEADER: S.FAILED},
    S.AWAIT_OPEN: {T.SEND_OPEN: S.OPEN_SENT},
    S.OPEN_SENT: {
        T.RECV_OPEN: S.OPEN,
        T.RECV_CLOSE: S.CLOSE_RECEIVED,
        T.SEND_CLOSE: S.CLOSE_SENT,
        T.RECV_GARBAGE: S.FAILED,
    },
    **_ENDING,
}
for _table in (SERVER_TRANSITIONS, CLIENT_TRANSITIONS):
    for _state in State:
        _moves = _table.setdefault(_state, {})
        _moves[T.DROP] = S.CLOSED
        _moves[T.LOST] = S.CLOSED

# States in which the peer's bytes are read.
READING = frozenset(
    {
        S.AWAIT_SASL_HEADER,
        S.AWAIT_SASL_MECHANISMS,
        S.AWAIT_SASL_INIT,
        S.AWAIT_SASL_RESPONSE,
        S.AWAIT_SASL_OUTCOME,
        S.AWAIT_AMQP_HEADER,
        S.AWAIT_OPEN,
        S.OPEN_SENT,
        S.OPEN,
        S.CLOSE_SENT,
    }
)
# States in which a protocol header is next on the wire.
HEADER_STATES = frozenset({S.AWAIT_SASL_HEADER, S.AWAIT_AMQP_HEADER})
# States in which SASL frames are read.
SASL_STATES = frozenset(
    {S.AWAIT_SASL_MECHANISMS, S.AWAIT_SASL_INIT, S.AWAIT_SASL_RESPONSE, S.AWAIT_SASL_OUTCOME}
)
# States in which AMQP frames are sent and read, sessions included.
AMQP_OPEN = frozenset({S.OPEN, S.OPEN_SENT, S.OPEN_RECEIVED})
# A close is under way or done: no further close is sent.
CLOSE_UNDER_WAY = frozenset({S.CLOSE_RECEIVED, S.CLOSE_SENT, S.CLOSED})


class SessionState(Enum):
    BEGIN_RECEIVED = auto()  # server: the owner sends begin
    BEGIN_SENT = auto()  # client: waits for the peer's begin
    MAPPED = auto()
    END_RECEIVED = auto()  # the owner sends end
    END_SENT = auto()  # the session's frames are dropped until the peer's end


class SessionTrigger(Enum):
    RECV_BEGIN = auto()
    SEND_BEGIN = auto()
    RECV_END = auto()
    SEND_END = auto()


SS = SessionState
ST = SessionTrigger

# (session state or None for a free channel, trigger) -> next state or None (free again)
SESSION_TRANSITIONS: dict[SessionState | None, dict[SessionTrigger, SessionState | None]] = {
    None: {ST.RECV_BEGIN: SS.BEGIN_RECEIVED, ST.SEND_BEGIN: SS.BEGIN_SENT},
    SS.BEGIN_RECEIVED: {ST.SEND_BEGIN: SS.MAPPED},
    SS.BEGIN_SENT: {
        ST.RECV_BEGIN: SS.MAPPED,
        ST.SEND_END: SS.END_SENT,
        ST.RECV_END: SS.END_RECEIVED,
    },
    SS.MAPPED: {ST.RECV_END: SS.END_RECEIVED, ST.SEND_END: SS.END_SENT},
    SS.END_RECEIVED: {ST.SEND_END: None},
    SS.END_SENT: {ST.RECV_END: None},
}


class LinkState(Enum):
    ATTACH_RECEIVED = auto()  # server: the owner sends attach
    ATTACH_SENT = auto()  # waits for the peer's attach
    ATTACHED = auto()
    DETACH_RECEIVED = auto()  # the owner sends detach
    DETACH_SENT = auto()  # the link's frames are dropped until the peer's detach


class LinkTrigger(Enum):
    RECV_ATTACH = auto()
    SEND_ATTACH = auto()
    RECV_DETACH = auto()
    SEND_DETACH = auto()


LS = LinkState
LT = LinkTrigger

# (link state or None for a free handle, trigger) -> next state or None (free again)
LINK_TRANSITIONS: dict[LinkState | None, dict[LinkTrigger, LinkState | None]] = {
    None: {LT.RECV_ATTACH: LS.ATTACH_RECEIVED, LT.SEND_ATTACH: LS.ATTACH_SENT},
    # a refused link: the owner may detach before attaching (RabbitMQ attaches, then detaches)
    LS.ATTACH_RECEIVED: {LT.SEND_ATTACH: LS.ATTACHED},
    LS.ATTACH_SENT: {
        LT.RECV_ATTACH: LS.ATTACHED,
        LT.RECV_DETACH: LS.DETACH_RECEIVED,
        LT.SEND_DETACH: LS.DETACH_SENT,
    },
    LS.ATTACHED: {LT.RECV_DETACH: LS.DETACH_RECEIVED, LT.SEND_DETACH: LS.DETACH_SENT},
    LS.DETACH_RECEIVED: {LT.SEND_DETACH: None},
    LS.DETACH_SENT: {LT.RECV_DETACH: None},
}


class LocalProtocolError(Exception):
    """The owner asked the connection to send something its state does not allow."""
