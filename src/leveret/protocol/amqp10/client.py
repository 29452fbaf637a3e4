"""The client role of an AMQP 1.0 connection (h11's way: one codec, both sides): it sends
the SASL header, answers the mechanisms, sends the AMQP header and its open, and starts
sessions and links on numbers it picks. The tests drive a server connection with it, in
memory, without sockets.
"""

from __future__ import annotations

from typing import Unpack

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.connection import Connection, ConnectionViolation
from leveret.protocol.amqp10.definitions import FRAMING_ERROR, Composite, Error, SaslCode
from leveret.protocol.amqp10.endpoints import AttachOptions, BeginOptions
from leveret.protocol.amqp10.events import (
    NEED_DATA,
    AmqpHeaderReceived,
    BeginReceived,
    Event,
    NeedData,
    SaslChallengeReceived,
    SaslMechanismsReceived,
    SaslOutcomeReceived,
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
    CLIENT_TRANSITIONS,
    LinkState,
    LocalProtocolError,
    SessionState,
    SessionTrigger,
    State,
    Trigger,
)

__all__ = ["ClientConnection"]


class ClientConnection(Connection):
    """One AMQP 1.0 connection, seen from a client."""

    TRANSITIONS = CLIENT_TRANSITIONS
    START = State.START
    CHANNEL_MAX = 0xFFFF

    # --------------------------------------------------------------- handshake
    def send_sasl_header(self) -> None:
        self._move(Trigger.SEND_SASL_HEADER)
        self._out.append(frames.SASL_HEADER)

    def send_sasl_init(
        self, mechanism: str, initial_response: bytes | None = None, hostname: str | None = None
    ) -> None:
        self._move(Trigger.SEND_INIT)
        self._send_sasl(SaslInit(mechanism, initial_response, hostname))

    def send_sasl_response(self, response: bytes) -> None:
        self._move(Trigger.SEND_RESPONSE)
        self._send_sasl(SaslResponse(response))

    def _header(self) -> Event | NeedData | None:
        header = self._take_header()
        if header is None:
            return NEED_DATA
        expected = (
            frames.SASL_HEADER if self._state is State.AWAIT_SASL_HEADER else frames.AMQP_HEADER
        )
        if header != expected:
            self._bad_header()
            return UnsupportedProtocol(header)
        if expected is frames.SASL_HEADER:
            self._move(Trigger.RECV_SASL_HEADER)
            return None
        self._move(Trigger.RECV_AMQP_HEADER)
        return AmqpHeaderReceived()

    def _sasl_frame(self, performative: Composite) -> Event | None:
        state = self._state
        if state is State.AWAIT_SASL_MECHANISMS and isinstance(performative, SaslMechanisms):
            self._move(Trigger.RECV_MECHANISMS)
            return SaslMechanismsReceived(tuple(performative.sasl_server_mechanisms))
        if state is State.AWAIT_SASL_OUTCOME:
            if isinstance(performative, SaslChallenge):
                self._move(Trigger.RECV_CHALLENGE)
                return SaslChallengeReceived(performative.challenge)
            if isinstance(performative, SaslOutcome):
                ok = performative.code == SaslCode.OK
                self._move(Trigger.RECV_OUTCOME_OK if ok else Trigger.RECV_OUTCOME_FAILED)
                return SaslOutcomeReceived(performative.code, performative.additional_data)
        raise self._unexpected_sasl(performative)

    # ---------------------------------------------------------------- sessions
    def send_begin(self, *, incoming_window: int, **options: Unpack[BeginOptions]) -> int:
        """Begin a session on the lowest free channel, and return it."""
        limit = min(self.remote_channel_max, self.channel_max)
        channel = next((c for c in range(limit + 1) if c not in self._sessions), None)
        if channel is None:
            raise LocalProtocolError("every channel is taken")
        # (the table's first move, from a free channel, is SEND_BEGIN -> BEGIN_SENT)
        self._begin(self._new_session(channel, SessionState.BEGIN_SENT), incoming_window, options)
        return channel

    def _begin_received(self, channel: int, begin: Begin) -> Event | None:
        local = begin.remote_channel
        session = self._sessions.get(local) if local is not None else None
        if session is None or session.state is not SessionState.BEGIN_SENT:
            raise ConnectionViolation(
                Error(FRAMING_ERROR, f"begin on channel {channel} answers no begin of ours")
            )
        self._mapped(session, channel, begin)
        self._session_move(session, SessionTrigger.RECV_BEGIN)
        return BeginReceived(session.channel, begin)

    # ------------------------------------------------------------------- links
    def send_attach(
        self, channel: int, *, name: str, role: bool, **options: Unpack[AttachOptions]
    ) -> int:
        """Attach a link (``role``: False sends, True receives) on the lowest free
        handle, and return it."""
        session = self.session(channel)
        limit = min(session.remote_handle_max, session.handle_max)
        handle = next((h for h in range(limit + 1) if h not in session.links), None)
        if handle is None:
            raise LocalProtocolError("every handle is taken")
        # (the table's first move, from a free handle, is SEND_ATTACH -> ATTACH_SENT)
        link = Link(name, handle, role, LinkState.ATTACH_SENT)
        session.links[handle] = link
        self._attach(session, link, options)
        return handle

    def _link_for_attach(self, session: Session, attach: Attach) -> Link | None:
        for link in session.links.values():
            if link.name == attach.name and link.state is LinkState.ATTACH_SENT:
                # the answer to ours: it arrives with the peer's handle
                link.remote_handle = attach.handle
                session.remote_links[attach.handle] = link
                return link
        raise self._in_use(session, attach.handle)
