"""Events an AMQP 1.0 connection hands its owner, one at a time, for either role.

An event that asks for an answer names it in its docstring; the owner answers before it
asks for the next event, so replies keep the order of the requests (an owner that answers
later, after asking a queue, still answers through the same commands). ``channel`` is the
session's local channel and ``handle`` the link's local handle: the numbers the owner's
commands take. A server answers on the numbers the peer chose, so there they are the
peer's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from leveret.protocol.amqp10.definitions import Error
from leveret.protocol.amqp10.performatives import Attach, Begin, Open
from leveret.protocol.sansio import NEED_DATA as NEED_DATA
from leveret.protocol.sansio import NeedData as NeedData


# ---------------------------------------------------------------- connection
@dataclass(frozen=True, slots=True)
class SaslHeaderReceived:
    """The peer asked for SASL (``AMQP 3 1 0 0``). Server's answer:
    ``send_sasl_mechanisms``."""


@dataclass(frozen=True, slots=True)
class UnsupportedProtocol:
    """A header this connection does not serve (AMQP 1.0 without SASL, TLS, or another
    protocol). Server's answer: ``refuse`` (RabbitMQ names the header it wants and hangs
    up)."""

    header: bytes


@dataclass(frozen=True, slots=True)
class SaslMechanismsReceived:
    """Client: the server's mechanisms. Answer: ``send_sasl_init``."""

    mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SaslInitReceived:
    """Server: the client's mechanism and first response. Answer: ``send_sasl_outcome``
    (or ``send_sasl_challenge``)."""

    mechanism: str
    initial_response: bytes
    hostname: str | None


@dataclass(frozen=True, slots=True)
class SaslChallengeReceived:
    """Client. Answer: ``send_sasl_response``."""

    challenge: bytes


@dataclass(frozen=True, slots=True)
class SaslResponseReceived:
    """Server. Answer: ``send_sasl_outcome`` (or another challenge)."""

    response: bytes


@dataclass(frozen=True, slots=True)
class SaslOutcomeReceived:
    """Client: ``code`` 0 is success (then ``send_amqp_header``); any other ends the
    connection."""

    code: int
    additional_data: bytes | None


@dataclass(frozen=True, slots=True)
class AmqpHeaderReceived:
    """``AMQP 0 1 0 0`` after SASL. Server's answer: ``send_amqp_header``."""


@dataclass(frozen=True, slots=True)
class OpenReceived:
    """The peer's open. Server's answer: ``send_open`` (then ``send_close`` to refuse).
    ``max_frame_size`` and ``channel_max`` are already in force for what is sent."""

    open: Open


@dataclass(frozen=True, slots=True)
class CloseReceived:
    """The peer closed the connection. Answer: ``send_close`` (unless ours went first)."""

    error: Error | None


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The peer broke the protocol; the connection reads nothing more of it.

    ``reply``: the owner sends ``send_close(error)`` (RabbitMQ's close frame carries the
    error); otherwise it ends the TCP connection without a word (``drop``), as RabbitMQ
    does for bytes that cannot be framed."""

    error: Error
    reply: bool


# ------------------------------------------------------------------ sessions
@dataclass(frozen=True, slots=True)
class BeginReceived:
    """A session began. Server: answer ``send_begin(channel, ...)``. Client: the answer
    to ours; the session is mapped."""

    channel: int
    begin: Begin


@dataclass(frozen=True, slots=True)
class EndReceived:
    """The peer ended a session. Answer: ``send_end(channel)``, unless ``complete``:
    it answers ours, and the channel is free now."""

    channel: int
    error: Error | None
    complete: bool = False


@dataclass(frozen=True, slots=True)
class SessionFailed:
    """The peer broke a session's rules (window, handles). Answer:
    ``send_end(channel, error)``; the session's frames are dropped until the peer's end."""

    channel: int
    error: Error


# --------------------------------------------------------------------- links
@dataclass(frozen=True, slots=True)
class AttachReceived:
    """The peer attached a link. Server: answer ``send_attach`` on the same handle
    (then ``send_detach`` with an error to refuse it). Client: the answer to ours."""

    channel: int
    handle: int
    attach: Attach


@dataclass(frozen=True, slots=True)
class DetachReceived:
    """The peer detached a link. Answer: ``send_detach(channel, handle, closed)``,
    unless ``complete``: it answers ours, and the handle is free now."""

    channel: int
    handle: int
    closed: bool
    error: Error | None
    complete: bool = False


@dataclass(frozen=True, slots=True)
class LinkFailed:
    """The peer broke a link's rules (credit, a continuation transfer's fields). Answer:
    ``send_detach(channel, handle, closed=True, error=error)``."""

    channel: int
    handle: int
    error: Error


@dataclass(frozen=True, slots=True)
class FlowReceived:
    """A flow frame. The session's window is already applied. For a link (``handle`` set)
    whose local end sends, ``credit`` is what may be sent now (the peer's credit less what
    is in flight), ``drain`` asks to use it up or give it back (``drained``); for a link
    whose local end receives, ``available`` is the peer's count of waiting messages.
    ``echo``: the peer asks for our flow state (``send_link_flow`` / ``send_session_flow``)."""

    channel: int
    handle: int | None
    credit: int | None
    delivery_count: int | None
    available: int | None
    drain: bool
    echo: bool
    properties: dict[Any, Any] | None


class TransferReceived(NamedTuple):
    """A whole delivery on a link whose local end receives: ``payload`` is the message's
    bytes, assembled from every transfer of a multi-frame delivery. ``settled``: the
    sender settled it (no disposition is expected). A named tuple: one is made per
    message, cheaply; it is as immutable as the frozen dataclasses."""

    channel: int
    handle: int
    delivery_id: int
    delivery_tag: bytes
    settled: bool
    payload: bytes
    message_format: int
    state: Any  # a DeliveryState, or None
    rcv_settle_mode: int | None
    batchable: bool

    def __repr__(self) -> str:
        return (
            f"TransferReceived(channel={self.channel}, handle={self.handle}, "
            f"delivery_id={self.delivery_id}, settled={self.settled}, "
            f"payload={len(self.payload)} bytes)"
        )


@dataclass(frozen=True, slots=True)
class TransferAborted:
    """The sender aborted a multi-frame delivery: what came of it is dropped."""

    channel: int
    handle: int
    delivery_id: int | None


@dataclass(frozen=True, slots=True)
class DispositionReceived:
    """The peer's disposition of deliveries ``first``..``last`` (inclusive, serial
    numbers): ``role`` is the peer's (receiver: it settles what we sent)."""

    channel: int
    role: bool
    first: int
    last: int
    settled: bool
    state: Any  # Accepted, Rejected, Released, Modified, Received..., or None
    batchable: bool


Event = (
    SaslHeaderReceived
    | UnsupportedProtocol
    | SaslMechanismsReceived
    | SaslInitReceived
    | SaslChallengeReceived
    | SaslResponseReceived
    | SaslOutcomeReceived
    | AmqpHeaderReceived
    | OpenReceived
    | CloseReceived
    | ConnectionFailed
    | BeginReceived
    | EndReceived
    | SessionFailed
    | AttachReceived
    | DetachReceived
    | LinkFailed
    | FlowReceived
    | TransferReceived
    | TransferAborted
    | DispositionReceived
)
