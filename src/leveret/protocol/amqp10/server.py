"""The server role of an AMQP 1.0 connection: it reads the SASL header, offers the
mechanisms, takes the outcome from its owner, answers the AMQP header, and answers the
peer's open, begins and attaches on the numbers the peer chose (as RabbitMQ does).

A typical owner::

    conn = ServerConnection()
    conn.receive_data(data)
    while not isinstance(event := conn.next_event(), NeedData):
        match event:
            case SaslHeaderReceived():
                conn.send_sasl_mechanisms(("PLAIN", "ANONYMOUS"))
            case SaslInitReceived():
                conn.send_sasl_outcome(SaslCode.OK)
            case AmqpHeaderReceived():
                conn.send_amqp_header()
            case OpenReceived():
                conn.send_open("leveret")
            ...
    sock.send(conn.data_to_send())
"""

from __future__ import annotations

from typing import Unpack

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.connection import Connection, ConnectionViolation
from leveret.protocol.amqp10.definitions import (
    FRAMING_ERROR,
    NOT_ALLOWED,
    Composite,
    Error,
    SaslCode,
)
from leveret.protocol.amqp10.endpoints import AttachOptions, BeginOptions
from leveret.protocol.amqp10.events import (
    NEED_DATA,
    AmqpHeaderReceived,
    BeginReceived,
    ConnectionFailed,
    Event,
    NeedData,
    SaslHeaderReceived,
    SaslInitReceived,
    SaslResponseReceived,
    UnsupportedProtocol,
)
from leveret.protocol.amqp10.performatives import (
    Attach,
    Begin,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)
from leveret.protocol.amqp10.session import Link, Session
from leveret.protocol.amqp10.states import (
    SERVER_TRANSITIONS,
    SESSION_TRANSITIONS,
    LinkState,
    LinkTrigger,
    LocalProtocolError,
    SessionState,
    SessionTrigger,
    State,
    Trigger,
)

__all__ = ["ServerConnection"]


class ServerConnection(Connection):
    """One AMQP 1.0 connection, seen from the broker."""

    TRANSITIONS = SERVER_TRANSITIONS
    START = State.AWAIT_SASL_HEADER
    CHANNEL_MAX = frames.DEFAULT_CHANNEL_MAX

    # --------------------------------------------------------------- handshake
    def _header(self) -> Event | NeedData | None:
        header = self._take_header()
        if header is None:
            return NEED_DATA
        if self._state is State.AWAIT_SASL_HEADER:
            if header == frames.SASL_HEADER:
                self._move(Trigger.RECV_SASL_HEADER)
                return SaslHeaderReceived()
            # As RabbitMQ 4: anything else (AMQP 1.0 without SASL included) gets the SASL
            # header and the socket closes.
            self._bad_header()
            return UnsupportedProtocol(header)
        if header == frames.AMQP_HEADER:
            self._move(Trigger.RECV_AMQP_HEADER)
            return AmqpHeaderReceived()
        self._bad_header()
        return ConnectionFailed(
            Error(FRAMING_ERROR, f"expected the AMQP 1.0 header, got {header!r}"), reply=False
        )

    def refuse(self) -> None:
        """Answer an unsupported header: the SASL header we want, then the end."""
        self._move(Trigger.SEND_REFUSAL)
        self._out.append(frames.SASL_HEADER)

    def send_sasl_mechanisms(self, mechanisms: tuple[str, ...] | list[str]) -> None:
        """The SASL header and the mechanisms offered, in order of preference."""
        self._move(Trigger.SEND_MECHANISMS)
        self._out.append(frames.SASL_HEADER)
        self._send_sasl(SaslMechanisms(tuple(mechanisms)))

    def send_sasl_challenge(self, challenge: bytes) -> None:
        self._move(Trigger.SEND_CHALLENGE)
        self._send_sasl(SaslChallenge(challenge))

    def send_sasl_outcome(self, code: int, additional_data: bytes | None = None) -> None:
        """The outcome: OK moves on to the AMQP header; any other code ends the
        connection (the owner closes the socket once this is written)."""
        ok = code == SaslCode.OK
        self._move(Trigger.SEND_OUTCOME_OK if ok else Trigger.SEND_OUTCOME_FAILED)
        self._send_sasl(SaslOutcome(int(code), additional_data))

    def _sasl_frame(self, performative: Composite) -> Event | None:
        if self._state is State.AWAIT_SASL_INIT and isinstance(performative, SaslInit):
            self._move(Trigger.RECV_INIT)
            return SaslInitReceived(
                performative.mechanism,
                performative.initial_response or b"",
                performative.hostname,
            )
        if self._state is State.AWAIT_SASL_RESPONSE and isinstance(performative, SaslResponse):
            self._move(Trigger.RECV_RESPONSE)
            return SaslResponseReceived(performative.response)
        raise self._unexpected_sasl(performative)

    # ---------------------------------------------------------------- sessions
    def _answers_begin(self) -> bool:
        return True

    def _begin_received(self, channel: int, begin: Begin) -> Event | None:
        if channel in self._sessions:
            raise ConnectionViolation(
                Error(NOT_ALLOWED, f"session already begun on channel {channel}")
            )
        state = SESSION_TRANSITIONS[None][SessionTrigger.RECV_BEGIN]
        assert state is SessionState.BEGIN_RECEIVED
        # A server answers on the peer's channel number: local and remote are one.
        self._mapped(self._new_session(channel, state), channel, begin)
        return BeginReceived(channel, begin)

    def send_begin(
        self, channel: int, *, incoming_window: int, **options: Unpack[BeginOptions]
    ) -> None:
        """Answer the peer's begin on its channel: our windows and our handle-max (the
        highest handle the peer may use)."""
        session = self.session(channel)
        self._session_move(session, SessionTrigger.SEND_BEGIN)
        self._begin(session, incoming_window, options)

    # ------------------------------------------------------------------- links
    def _link_for_attach(self, session: Session, attach: Attach) -> Link | None:
        if attach.handle in session.remote_links or attach.handle in session.links:
            raise self._in_use(session, attach.handle)
        # The server answers on the peer's handle; its end has the other role.
        return Link(attach.name, attach.handle, not attach.role, LinkState.ATTACH_RECEIVED)

    def send_attach(self, channel: int, handle: int, **options: Unpack[AttachOptions]) -> None:
        """Answer the peer's attach on its handle. A sending end (the peer receives)
        gives ``initial_delivery_count``; to refuse a link, attach with a null source or
        target and then ``send_detach`` with the error (as RabbitMQ does)."""
        session = self.session(channel)
        link = self.link(channel, handle)
        if link.remote_handle is None:
            raise LocalProtocolError(f"handle {handle} was not attached by the peer")
        self._link_move(session, link, LinkTrigger.SEND_ATTACH)
        self._attach(session, link, options)
