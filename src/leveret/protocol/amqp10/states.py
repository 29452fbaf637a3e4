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
from typing import TypeVar

from leveret.protocol.sansio import LocalProtocolError as LocalProtocolError


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


_E = TypeVar("_E", bound=Enum)
_T = TypeVar("_T", bound=Enum)


def endpoint_transitions(
    states: type[_E], triggers: type[_T]
) -> dict[_E | None, dict[_T, _E | None]]:
    """The life of a session or a link, one graph for both: (state or None for a free
    channel or handle, trigger) -> next state or None (free again).

    ``states``, in order: begun/attached by the peer (server: the owner answers); by us
    (waits for the peer's answer); mapped/attached; ended/detached by the peer (the owner
    answers); by us (the endpoint's frames are dropped until the peer's answer).
    ``triggers``, in order: the peer's begin/attach, ours, the peer's end/detach, ours."""
    by_peer, by_us, up, ended_by_peer, ended_by_us = states
    recv_open, send_open, recv_end, send_end = triggers
    return {
        None: {recv_open: by_peer, send_open: by_us},
        # (a refused link is attached first, then detached, as RabbitMQ does)
        by_peer: {send_open: up},
        by_us: {recv_open: up, send_end: ended_by_us, recv_end: ended_by_peer},
        up: {recv_end: ended_by_peer, send_end: ended_by_us},
        ended_by_peer: {send_end: None},
        ended_by_us: {recv_end: None},
    }


# A session's states and a link's, in endpoint_transitions' order
SessionState = Enum("SessionState", "BEGIN_RECEIVED BEGIN_SENT MAPPED END_RECEIVED END_SENT")
SessionTrigger = Enum("SessionTrigger", "RECV_BEGIN SEND_BEGIN RECV_END SEND_END")
LinkState = Enum("LinkState", "ATTACH_RECEIVED ATTACH_SENT ATTACHED DETACH_RECEIVED DETACH_SENT")
LinkTrigger = Enum("LinkTrigger", "RECV_ATTACH SEND_ATTACH RECV_DETACH SEND_DETACH")

SESSION_TRANSITIONS: dict[SessionState | None, dict[SessionTrigger, SessionState | None]] = (
    endpoint_transitions(SessionState, SessionTrigger)
)
LINK_TRANSITIONS: dict[LinkState | None, dict[LinkTrigger, LinkState | None]] = (
    endpoint_transitions(LinkState, LinkTrigger)
)
