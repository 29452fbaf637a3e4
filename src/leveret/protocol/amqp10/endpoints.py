"""The session and link commands of an AMQP 1.0 connection, for either role: begin and
end, attach and detach, credit and flow, transfers (split to the peer's max-frame-size and
held back while its window is shut) and dispositions. :class:`Endpoints` is the base of
:class:`~leveret.protocol.amqp10.connection.Connection`, which adds framing, input and the
connection's own frames."""

from __future__ import annotations

from typing import Any, TypedDict

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.definitions import ACCEPTED, RELEASED, Composite, Error
from leveret.protocol.amqp10.frames import FRAME_AMQP, UINT_MAX, performative_frame
from leveret.protocol.amqp10.performatives import Attach, Begin, Detach, Disposition, End, Flow
from leveret.protocol.amqp10.session import Link, Session, add
from leveret.protocol.amqp10.states import (
    LINK_TRANSITIONS,
    SESSION_TRANSITIONS,
    LinkState,
    LinkTrigger,
    LocalProtocolError,
    SessionState,
    SessionTrigger,
)
from leveret.protocol.sansio import Output

__all__ = ["AttachOptions", "BeginOptions", "Endpoints"]


class BeginOptions(TypedDict, total=False):
    """A begin's optional fields, as both roles' ``send_begin`` take them (keywords)."""

    outgoing_window: int  # default: 4294967295
    handle_max: int | None
    next_outgoing_id: int  # default: 0
    offered_capabilities: tuple[str, ...] | None
    desired_capabilities: tuple[str, ...] | None
    properties: dict[Any, Any] | None


class AttachOptions(TypedDict, total=False):
    """An attach's optional fields, as both roles' ``send_attach`` take them (keywords).
    ``initial_delivery_count`` counts for a sending end only."""

    source: Any
    target: Any
    snd_settle_mode: int | None
    rcv_settle_mode: int | None
    initial_delivery_count: int | None
    max_message_size: int | None
    offered_capabilities: tuple[str, ...] | None
    desired_capabilities: tuple[str, ...] | None
    properties: dict[Any, Any] | None


class Endpoints(Output):
    """Sessions and links: their commands and the state they keep."""

    def __init__(self, window_margin: int = 0) -> None:
        self.window_margin = window_margin
        # The peer's max-frame-size, from its open: transfers are split to it.
        self.remote_max_frame_size = UINT_MAX
        self._out: list[bytes] = []
        self._sessions: dict[int, Session] = {}  # by local channel
        self._remote_channels: dict[int, int] = {}  # the peer's channel -> ours

    def session(self, channel: int) -> Session:
        """A session by its local channel (its numbers are read, never written, outside)."""
        session = self._sessions.get(channel)
        if session is None:
            raise LocalProtocolError(f"no session on channel {channel}")
        return session

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def link(self, channel: int, handle: int) -> Link:
        link = self.session(channel).links.get(handle)
        if link is None:
            raise LocalProtocolError(f"no link with handle {handle} on channel {channel}")
        return link

    def _frame(self, channel: int, performative: Composite, frame_type: int = FRAME_AMQP) -> None:
        self._out.append(performative_frame(channel, performative, frame_type))

    # ---------------------------------------------------------------- sessions
    def _session_move(self, session: Session, trigger: SessionTrigger) -> None:
        moves = SESSION_TRANSITIONS[session.state]
        if trigger not in moves:
            raise LocalProtocolError(
                f"channel {session.channel}: {trigger.name} in state {session.state.name}"
            )
        nxt = moves[trigger]
        if nxt is None:
            del self._sessions[session.channel]
            if session.remote_channel is not None:
                self._remote_channels.pop(session.remote_channel, None)
        else:
            session.state = nxt

    def _new_session(self, channel: int, state: SessionState) -> Session:
        session = Session(channel, state, window_margin=self.window_margin)
        self._sessions[channel] = session
        return session

    def _begin(self, session: Session, incoming_window: int, options: BeginOptions) -> None:
        """Our begin, for a session in its state after SEND_BEGIN: its windows and its
        handle-max (the highest handle the peer may use) take effect."""
        outgoing_window = options.get("outgoing_window", UINT_MAX)
        next_outgoing_id = options.get("next_outgoing_id", 0)
        handle_max = options.get("handle_max")
        session.incoming_window = incoming_window
        session.outgoing_window = outgoing_window
        session.next_outgoing_id = next_outgoing_id
        if handle_max is not None:
            session.handle_max = handle_max
        self._frame(
            session.channel,
            Begin(
                session.remote_channel if self._answers_begin() else None,
                next_outgoing_id,
                incoming_window,
                outgoing_window,
                handle_max,
                options.get("offered_capabilities"),
                options.get("desired_capabilities"),
                options.get("properties"),
            ),
        )

    def _answers_begin(self) -> bool:
        """The server answers a begin (remote-channel set); the client starts one."""
        return False

    def send_end(self, channel: int, error: Error | None = None) -> None:
        """End a session, or answer the peer's end. Its links go with it."""
        session = self.session(channel)
        self._session_move(session, SessionTrigger.SEND_END)
        session.blocked.clear()
        self._frame(channel, End(error))

    def send_session_flow(
        self, channel: int, incoming_window: int | None = None, echo: bool = False
    ) -> None:
        """A flow for the session alone: our incoming window (reopened, or shut with 0)."""
        session = self.session(channel)
        if incoming_window is not None:
            session.incoming_window = incoming_window
        self._frame(channel, Flow(*session.flow_fields(), echo=echo or None))

    # ------------------------------------------------------------------- links
    def _link_move(self, session: Session, link: Link, trigger: LinkTrigger) -> None:
        moves = LINK_TRANSITIONS[link.state]
        if trigger not in moves:
            raise LocalProtocolError(
                f"channel {session.channel} handle {link.handle}: {trigger.name} in state "
                f"{link.state.name}"
            )
        nxt = moves[trigger]
        if nxt is None:
            session.links.pop(link.handle, None)
            if link.remote_handle is not None:
                session.remote_links.pop(link.remote_handle, None)
        else:
            link.state = nxt

    def _attach(self, session: Session, link: Link, options: AttachOptions) -> None:
        """Our attach, for a link in its state after SEND_ATTACH: a sending end's
        ``initial_delivery_count`` and the settle modes take effect."""
        role = link.role
        initial_delivery_count = options.get("initial_delivery_count") if not role else None
        if not role:
            link.delivery_count = link.initial_delivery_count = initial_delivery_count or 0
        snd_settle_mode = options.get("snd_settle_mode")
        rcv_settle_mode = options.get("rcv_settle_mode")
        if snd_settle_mode is not None:
            link.snd_settle_mode = snd_settle_mode
        if rcv_settle_mode is not None:
            link.rcv_settle_mode = rcv_settle_mode
        self._frame(
            session.channel,
            Attach(
                link.name,
                link.handle,
                role,
                snd_settle_mode,
                rcv_settle_mode,
                options.get("source"),
                options.get("target"),
                None,
                None,
                initial_delivery_count,
                options.get("max_message_size"),
                options.get("offered_capabilities"),
                options.get("desired_capabilities"),
                options.get("properties"),
            ),
        )

    def send_detach(
        self, channel: int, handle: int, closed: bool = True, error: Error | None = None
    ) -> None:
        """Detach a link (``closed``: for good), or answer the peer's detach."""
        session = self.session(channel)
        link = self.link(channel, handle)
        self._link_move(session, link, LinkTrigger.SEND_DETACH)
        link.partial_id = None
        link.partial_chunks = []
        self._frame(channel, Detach(handle, closed or None, error))

    def grant_credit(
        self, channel: int, handle: int, credit: int, drain: bool = False, echo: bool = False
    ) -> None:
        """A link whose local end receives: the peer may send ``credit`` more deliveries."""
        session = self.session(channel)
        link = self.link(channel, handle)
        if not link.role:
            raise LocalProtocolError(f"handle {handle} sends: it is not given credit")
        link.credit = credit
        link.drain = drain
        self._frame(
            channel,
            Flow(
                *session.flow_fields(),
                handle,
                link.delivery_count,
                credit,
                None,
                drain or None,
                echo or None,
            ),
        )

    def send_link_flow(
        self, channel: int, handle: int, available: int | None = None, echo: bool = False
    ) -> None:
        """A link whose local end sends: our delivery-count and the credit left (the answer
        to an echo, or news of ``available`` messages)."""
        session = self.session(channel)
        link = self.link(channel, handle)
        self._frame(
            channel,
            Flow(
                *session.flow_fields(),
                handle,
                link.delivery_count,
                link.credit,
                available,
                link.drain or None,
                echo or None,
            ),
        )

    def drained(self, channel: int, handle: int, available: int | None = None) -> None:
        """A sending end asked to drain has nothing more: the credit left is used up
        (delivery-count advances by it) and the flow says so."""
        link = self.link(channel, handle)
        if link.role:
            raise LocalProtocolError(f"handle {handle} receives: it does not drain")
        link.delivery_count = add(link.delivery_count, link.credit)
        link.credit = 0
        link.drain = True
        self.send_link_flow(channel, handle, available)

    def send_transfer(
        self,
        channel: int,
        handle: int,
        payload: bytes,
        delivery_tag: bytes,
        settled: bool = False,
        message_format: int = 0,
    ) -> int:
        """A delivery on a link whose local end sends: takes one credit, and returns its
        delivery-id. Split into frames of the peer's max-frame-size; frames past the
        peer's incoming window wait in the session until a flow opens it."""
        session = self._sessions[channel]
        link = session.links[handle]
        if link.credit <= 0 or link.role or link.state is not LinkState.ATTACHED:
            raise LocalProtocolError(f"handle {handle}: no credit, or not a sending link")
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & 0xFFFF_FFFF
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) & 0xFFFF_FFFF
        pieces = frames.transfer_frames(
            channel,
            handle,
            delivery_id,
            delivery_tag,
            payload,
            self.remote_max_frame_size,
            settled or None,
            message_format,
        )
        if session.blocked or session.remote_incoming_window < len(pieces):
            session.blocked.extend(pieces)
            self._flush(session)
        else:
            session.remote_incoming_window -= len(pieces)
            session.next_outgoing_id = (session.next_outgoing_id + len(pieces)) & 0xFFFF_FFFF
            self._out.extend(pieces)
        return delivery_id

    def _flush(self, session: Session) -> None:
        """Transfer frames held back, as far as the peer's window now allows."""
        blocked = session.blocked
        while blocked and session.remote_incoming_window > 0:
            self._out.append(blocked.popleft())
            session.remote_incoming_window -= 1
            session.next_outgoing_id = add(session.next_outgoing_id, 1)

    def send_disposition(
        self,
        channel: int,
        role: bool,
        first: int,
        last: int | None = None,
        settled: bool = True,
        state: Any = None,
        batchable: bool = False,
    ) -> None:
        """Settle or update deliveries ``first``..``last`` (``role``: ours, True when we
        received them)."""
        if channel not in self._sessions:
            self.session(channel)  # raises
        last = None if last == first else last
        if settled and not batchable and (state is ACCEPTED or state is RELEASED):
            outcome = frames.OUTCOME_BYTES["accepted" if state is ACCEPTED else "released"]
            self._out.append(frames.settled_disposition_frame(channel, role, first, last, outcome))
            return
        self._frame(
            channel, Disposition(role, first, last, settled or None, state, batchable or None)
        )
