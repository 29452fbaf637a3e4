"""A session's and a link's endpoint state (part 2.5.6 and 2.6.7), and how each incoming
session frame changes it: windows, transfer and delivery ids, credit and delivery counts,
and the assembly of multi-frame deliveries.

What the frames *mean* (which queue, which exchange) is the owner's; what they do to the
numbers is here, so the owner reads credit and windows and never computes them. Every
sequence number is a 32-bit serial number (RFC 1982), added modulo 2**32.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from leveret.protocol.amqp10.definitions import (
    DETACH_FORCED,
    INVALID_FIELD,
    TRANSFER_LIMIT_EXCEEDED,
    UNATTACHED_HANDLE,
    WINDOW_VIOLATION,
    Error,
)
from leveret.protocol.amqp10.events import (
    DispositionReceived,
    FlowReceived,
    TransferAborted,
    TransferReceived,
)
from leveret.protocol.amqp10.frames import UINT_MAX
from leveret.protocol.amqp10.performatives import Disposition, Flow
from leveret.protocol.amqp10.states import LinkState, SessionState

SERIAL = 1 << 32


def add(a: int, b: int) -> int:
    """Serial-number addition."""
    return (a + b) % SERIAL


def diff(a: int, b: int) -> int:
    """``a - b`` for serial numbers, in -2**31 .. 2**31 - 1."""
    d = (a - b) % SERIAL
    return d - SERIAL if d >= 1 << 31 else d


class SessionViolation(Exception):
    """A session rule broken by the peer: the session ends with ``error``."""

    def __init__(self, error: Error) -> None:
        super().__init__(error.description)
        self.error = error


class LinkViolation(Exception):
    """A link rule broken by the peer: the link detaches with ``error``."""

    def __init__(self, handle: int, error: Error) -> None:
        super().__init__(error.description)
        self.handle = handle
        self.error = error


@dataclass(slots=True, eq=False)
class Link:
    """One link endpoint. ``role`` is the local end's: False sends (the peer receives),
    True receives. ``credit`` is, for a sending end, what may still be sent; for a
    receiving end, what the peer may still send."""

    name: str
    handle: int
    role: bool
    state: LinkState
    remote_handle: int | None = None
    delivery_count: int = 0
    initial_delivery_count: int = 0
    credit: int = 0
    drain: bool = False
    available: int | None = None
    snd_settle_mode: int = 2  # mixed
    rcv_settle_mode: int = 0  # first
    max_message_size: int | None = None  # the peer's limit for what we send
    # a multi-frame delivery being received: its first frame's fields and the pieces
    partial_id: int | None = None
    partial_tag: bytes = b""
    partial_settled: bool = False
    partial_format: int = 0
    partial_state: object = None
    partial_rcv_settle_mode: int | None = None
    partial_chunks: list[bytes] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Session:
    """One session endpoint, addressed by its local channel."""

    channel: int
    state: SessionState
    remote_channel: int | None = None
    next_outgoing_id: int = 0
    outgoing_window: int = UINT_MAX
    next_incoming_id: int = 0
    incoming_window: int = 0
    remote_incoming_window: int = 0
    remote_outgoing_window: int = 0
    handle_max: int = UINT_MAX
    remote_handle_max: int = UINT_MAX
    next_delivery_id: int = 0
    window_margin: int = 0  # transfers past our window tolerated (RabbitMQ's default 0)
    links: dict[int, Link] = field(default_factory=dict)  # by local handle
    remote_links: dict[int, Link] = field(default_factory=dict)  # by the peer's handle
    # transfer frames held back while the peer's incoming window is closed
    blocked: deque[bytes] = field(default_factory=deque)

    # ------------------------------------------------------------ windows
    def flow_fields(self) -> tuple[int | None, int, int, int]:
        """next-incoming-id, incoming-window, next-outgoing-id, outgoing-window, as a
        flow frame carries them (the window never below 0 on the wire)."""
        mapped = self.state is not SessionState.BEGIN_SENT
        return (
            self.next_incoming_id if mapped else None,
            max(0, self.incoming_window),
            self.next_outgoing_id,
            self.outgoing_window,
        )

    def link_by_remote(self, remote_handle: int) -> Link:
        link = self.remote_links.get(remote_handle)
        if link is None:
            raise SessionViolation(
                Error(UNATTACHED_HANDLE, f"Unattached link handle: {remote_handle}")
            )
        return link

    # ------------------------------------------------------------ incoming
    def on_flow(self, flow: Flow) -> FlowReceived | None:
        """Apply a flow: the session's window, then the link's credit."""
        next_incoming = flow.next_incoming_id
        if next_incoming is None:
            # The peer has not yet seen our begin's next-outgoing-id: our first, 0.
            next_incoming = 0
        elif diff(next_incoming, self.next_outgoing_id) > 0:
            raise SessionViolation(
                Error(
                    WINDOW_VIOLATION,
                    f"next-incoming-id from FLOW ({next_incoming}) leads next-outgoing-id "
                    f"({self.next_outgoing_id})",
                )
            )
        window = diff(add(next_incoming, flow.incoming_window), self.next_outgoing_id)
        self.remote_incoming_window = max(0, window)
        self.remote_outgoing_window = flow.outgoing_window
        self.next_incoming_id = flow.next_outgoing_id
        if flow.handle is None:
            return FlowReceived(
                self.channel, None, None, None, None, False, bool(flow.echo), flow.properties
            )
        link = self.link_by_remote(flow.handle)
        if link.state is LinkState.DETACH_SENT:
            return None
        if not link.role:  # we send: the peer's credit, less what is in flight
            peer_count = flow.delivery_count
            if peer_count is None:
                # the peer has not seen our attach yet: it counts from our initial count
                peer_count = link.initial_delivery_count
            credit = flow.link_credit or 0
            link.credit = max(0, diff(add(peer_count, credit), link.delivery_count))
            link.drain = bool(flow.drain)
            return FlowReceived(
                self.channel,
                link.handle,
                link.credit,
                link.delivery_count,
                None,
                link.drain,
                bool(flow.echo),
                flow.properties,
            )
        # we receive: the sender tells its delivery-count (a drain may have advanced it)
        if flow.delivery_count is not None:
            limit = add(link.delivery_count, link.credit)
            link.delivery_count = flow.delivery_count
            link.credit = max(0, diff(limit, flow.delivery_count))
        link.available = flow.available
        return FlowReceived(
            self.channel,
            link.handle,
            None,
            link.delivery_count,
            flow.available,
            bool(flow.drain),
            bool(flow.echo),
            flow.properties,
        )

    def on_transfer_frame(self) -> None:
        """Account one incoming transfer frame against our window (2.5.6)."""
        window = self.incoming_window - 1
        if window < -self.window_margin:
            raise SessionViolation(
                Error(
                    WINDOW_VIOLATION,
                    f"incoming window violation (tolerated excess tranfers: {self.window_margin})",
                )
            )
        self.incoming_window = window
        self.next_incoming_id = add(self.next_incoming_id, 1)
        self.remote_outgoing_window -= 1

    def on_transfer(
        self,
        link: Link,
        delivery_id: int | None,
        delivery_tag: bytes | None,
        message_format: int | None,
        settled: bool | None,
        more: bool,
        rcv_settle_mode: int | None,
        state: object,
        aborted: bool,
        batchable: bool,
        payload: bytes,
    ) -> TransferReceived | TransferAborted | None:
        """One transfer frame on a link whose local end receives: a whole delivery when
        it is the last (or only) frame of one, nothing while more are to come."""
        handle = link.handle
        first_id = link.partial_id
        if aborted:
            link.partial_id = None
            link.partial_chunks = []
            aborted_id = first_id if first_id is not None else delivery_id
            return TransferAborted(self.channel, handle, aborted_id)
        if first_id is None:
            if delivery_id is None:
                raise LinkViolation(
                    handle, Error(INVALID_FIELD, "delivery-id of the first transfer is missing")
                )
            if more:
                link.partial_id = delivery_id
                link.partial_tag = delivery_tag or b""
                link.partial_settled = bool(settled)
                link.partial_format = message_format or 0
                link.partial_state = state
                link.partial_rcv_settle_mode = rcv_settle_mode
                link.partial_chunks = [payload]
                return None
            self._count_delivery(link)
            return TransferReceived(
                self.channel,
                handle,
                delivery_id,
                delivery_tag or b"",
                bool(settled),
                payload,
                message_format or 0,
                state,
                rcv_settle_mode,
                batchable,
            )
        # a continuation: its delivery-id and settled, when given, match the first's
        if delivery_id is not None and delivery_id != first_id:
            raise LinkViolation(
                handle,
                Error(
                    INVALID_FIELD,
                    f"delivery-id of continuation transfer ({{uint,{delivery_id}}}) differs "
                    f"from delivery-id on first transfer ({first_id})",
                ),
            )
        if settled is not None and settled != link.partial_settled and not (settled and not more):
            raise LinkViolation(
                handle,
                Error(
                    INVALID_FIELD,
                    f"field 'settled' of continuation transfer ({str(settled).lower()}) "
                    "differs from (interpreted) field 'settled' on first transfer "
                    f"({str(link.partial_settled).lower()})",
                ),
            )
        link.partial_chunks.append(payload)
        if more:
            return None
        chunks = link.partial_chunks
        link.partial_id = None
        link.partial_chunks = []
        self._count_delivery(link)
        return TransferReceived(
            self.channel,
            handle,
            first_id,
            link.partial_tag,
            link.partial_settled or bool(settled),
            b"".join(chunks),
            link.partial_format,
            state if state is not None else link.partial_state,
            link.partial_rcv_settle_mode,
            batchable,
        )

    def _count_delivery(self, link: Link) -> None:
        """A whole delivery arrived: it takes a credit (RabbitMQ checks it on the last
        frame of a delivery)."""
        if link.credit <= 0:
            raise LinkViolation(link.handle, Error(TRANSFER_LIMIT_EXCEEDED))
        link.credit -= 1
        link.delivery_count = add(link.delivery_count, 1)

    def on_disposition(self, disposition: Disposition) -> DispositionReceived:
        last = disposition.last if disposition.last is not None else disposition.first
        return DispositionReceived(
            self.channel,
            disposition.role,
            disposition.first,
            last,
            bool(disposition.settled),
            disposition.state,
            bool(disposition.batchable),
        )


# The error a link gets when its session ends under it (for owners that report it).
SESSION_ENDED = Error(DETACH_FORCED, "session ended")
