"""The ``/management`` link pairs of an AMQP 1.0 connection (RabbitMQ 4.2's
rabbit_amqp_session, after OASIS Link Pair CS01): two links of one name, each attached
with the property ``paired`` true, on which the client sends requests (settled, to the
node's address ``/management``) and receives the responses (from it). The requests
themselves are :mod:`leveret.broker.amqp10_management`'s.

A mixin of :class:`~leveret.broker.amqp10_session.Amqp10Session`, which calls it from a
few marked places: an attach to or from ``/management`` (:meth:`_attach_pair`), every
event while the connection has pairs (:meth:`_pair_event`: the pairs' transfers, flows,
detaches and failures), a session's end and the connection's close.

As RabbitMQ: the client's requests get 8 credits (again once 4 are used); a response goes
out only under the client's credit on the other half, and a request without it, on a
pair half attached, unsettled or too large ends the session. Queues a pair declares
exclusive are the connection's, deleted when it closes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NoReturn

from leveret.broker.amqp10_common import INCOMING_WINDOW, Amqp10Base, SessionError
from leveret.broker.amqp10_management import Node, SessionEnd, handle_request
from leveret.broker.queues import Queue
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10.types import Symbol

log = logging.getLogger(__name__)

#: the management node's address
ADDRESS = "/management"
#: the credit a client's request link gets, and gets again once half is used
#: (RabbitMQ 4.2's MAX_MANAGEMENT_LINK_CREDIT)
MAX_CREDIT = 8


@dataclass(eq=False)
class _Pair:
    """One pair by its links' name: the client's terminus address, and the handle of
    each half (None: not attached)."""

    terminus: str | None
    incoming: int | None = None  # the client sends requests on it
    outgoing: int | None = None  # the client receives responses on it


@dataclass(eq=False)
class PairSession:
    """One AMQP session's pairs, and the name of each of their links by handle."""

    pairs: dict[str, _Pair] = field(default_factory=dict)
    incoming: dict[int, str] = field(default_factory=dict)
    outgoing: dict[int, str] = field(default_factory=dict)


def _paired(properties: Any) -> bool:
    """check_paired: the symbol ``paired`` set to boolean true."""
    if not isinstance(properties, dict):
        return False
    return any(isinstance(k, Symbol) and k == "paired" and v is True for k, v in properties.items())


def _validate(attach: Any) -> d.Error | None:
    """rabbit_amqp_session:validate_attach, run before any attach is looked at."""
    if attach.unsettled or attach.incomplete_unsettled:
        return d.Error(d.NOT_IMPLEMENTED, "Link recovery not supported")
    if (
        attach.rcv_settle_mode == d.ReceiverSettleMode.SECOND
        and attach.snd_settle_mode != d.SenderSettleMode.SETTLED
    ):
        return d.Error(d.NOT_IMPLEMENTED, "rcv-settle-mode second not supported")
    return None


class ManagementLinks(Amqp10Base):
    """The management link pairs of a connection's sessions."""

    link_pairs: dict[int, PairSession]  # by channel (the session sets it up)
    owned_queues: list[Queue]  # exclusive queues declared through a pair

    # ------------------------------------------------------------------ attach
    def _attach_pair(self, channel: int, handle: int, attach: Any) -> bool:
        """An attach of one half of a pair: answered (or refused) here, True. False for
        any other attach: RabbitMQ's management clauses take a client's sender only in
        snd-settle-mode settled with target ``/management``, its receiver with source
        ``/management``; the other attaches go on to the other clauses."""
        source, target = attach.source, attach.target
        if not isinstance(source, d.Source) or not isinstance(target, d.Target):
            return False
        client_receives = bool(attach.role)
        if client_receives:
            if source.address != ADDRESS:
                return False
            terminus = target.address
        else:
            if (
                target.address != ADDRESS
                or attach.snd_settle_mode != d.SenderSettleMode.SETTLED
                or attach.initial_delivery_count is None
            ):
                return False
            terminus = source.address
        error = _validate(attach)
        if error is None and not _paired(attach.properties):
            error = d.Error(
                d.INVALID_FIELD, "Link property 'paired' is not set to boolean value 'true'"
            )
        session = self.link_pairs.setdefault(channel, PairSession())
        if error is None:
            error = self._join(session, attach.name, terminus, handle, client_receives)
        if error is not None:
            log.warning("refusing link '%s': %s", attach.name, error.description)
            self._refuse_attach(channel, handle, attach, error)
            if not session.pairs:
                del self.link_pairs[channel]
            return True
        # we send settled either way; sending, from delivery count 0 and as the client
        # settles, up to its size; receiving, first-settled, up to the vhost's size
        if client_receives:
            rcv_settle_mode = attach.rcv_settle_mode
            delivery_count: int | None = 0
            max_message_size = attach.max_message_size
        else:
            vhost = self.vhost_obj
            assert vhost is not None
            rcv_settle_mode = d.ReceiverSettleMode.FIRST
            delivery_count = None
            max_message_size = vhost.max_message_size
        self.conn.send_attach(
            channel,
            handle,
            source=source,
            target=target,
            snd_settle_mode=d.SenderSettleMode.SETTLED,
            rcv_settle_mode=rcv_settle_mode,
            initial_delivery_count=delivery_count,
            max_message_size=max_message_size,
            properties=attach.properties,
        )
        if not client_receives:
            self.conn.grant_credit(channel, handle, MAX_CREDIT)
        return True

    @staticmethod
    def _join(
        session: PairSession, name: str, terminus: str | None, handle: int, outgoing: bool
    ) -> d.Error | None:
        """The half joins its pair (or starts one); an error when the name is a pair's
        that cannot take it (the same half again, or another terminus)."""
        pair = session.pairs.get(name)
        if pair is None:
            pair = session.pairs[name] = _Pair(terminus)
        else:
            # the other half attached, this one not, and the same terminus
            mine, other = (
                (pair.outgoing, pair.incoming) if outgoing else (pair.incoming, pair.outgoing)
            )
            if pair.terminus != terminus or mine is not None or other is None:
                return d.Error(
                    d.PRECONDITION_FAILED,
                    f"received invalid attach for management link pair '{name}' (terminus "
                    f"{pair.terminus!r}, halves {pair.incoming}/{pair.outgoing})",
                )
        if outgoing:
            pair.outgoing = handle
            session.outgoing[handle] = name
        else:
            pair.incoming = handle
            session.incoming[handle] = name
        return None

    # ------------------------------------------------------------------ events
    def _pair_event(self, event: Any) -> bool:
        """An event on one of the pairs' links: handled here (True); False for any other."""
        session = self.link_pairs.get(getattr(event, "channel", -1))
        if session is None:
            return False
        handle = getattr(event, "handle", None)
        kind = type(event)
        if handle in session.incoming:
            if kind is ev.TransferReceived:
                self._request(event, session)
            elif kind is ev.DetachReceived:
                self._pair_detached(event, session)
            elif kind is ev.LinkFailed:
                if event.error.condition == d.TRANSFER_LIMIT_EXCEEDED:
                    own = self.conn.link(event.channel, event.handle)
                    self._end_with(
                        event.channel,
                        d.Error(
                            d.TRANSFER_LIMIT_EXCEEDED,
                            f"insufficient credit ({own.credit}) for management link from "
                            "client to RabbitMQ",
                        ),
                    )
                else:  # a request in several frames: RabbitMQ's session crashes on it
                    self._end_with(event.channel, d.Error(d.INTERNAL_ERROR, "{badmatch,true}"))
            # a flow for the client's sending half tells what it has: nothing to answer
            return kind in (ev.TransferReceived, ev.DetachReceived, ev.LinkFailed,
                            ev.FlowReceived, ev.TransferAborted)  # fmt: skip
        if handle in session.outgoing:
            if kind is ev.FlowReceived:
                if event.drain:
                    self.conn.drained(event.channel, event.handle, 0)
                elif event.echo:
                    self.conn.send_link_flow(event.channel, event.handle, 0)
            elif kind is ev.DetachReceived:
                self._pair_detached(event, session)
            elif kind is ev.LinkFailed:
                self._end_with(event.channel, event.error)
            return kind in (ev.FlowReceived, ev.DetachReceived, ev.LinkFailed)
        return False

    def _pair_detached(self, e: ev.DetachReceived, session: PairSession) -> None:
        """maybe_detach_mgmt_link: the half goes; the pair with it once both have."""
        name = session.incoming.pop(e.handle, None)
        if name is None:
            name = session.outgoing.pop(e.handle)
        pair = session.pairs[name]
        if pair.incoming == e.handle:
            pair.incoming = None
        else:
            pair.outgoing = None
        if pair.incoming is None and pair.outgoing is None:
            del session.pairs[name]
        if not session.pairs:
            self.link_pairs.pop(e.channel, None)
        if not e.complete:
            self.conn.send_detach(e.channel, e.handle, e.closed)

    @staticmethod
    def _end_with(channel: int, error: d.Error) -> NoReturn:
        """RabbitMQ's session exits: it ends with ``error`` (the session's table ends
        it)."""
        log.warning("closing session on channel %s: %s", channel, error.description)
        raise SessionError(error)

    def _end_pairs(self, channel: int) -> None:
        """A session ended: its pairs with it."""
        self.link_pairs.pop(channel, None)

    def _close_pairs(self) -> None:
        """The connection closes: the exclusive queues it declared go."""
        self.link_pairs.clear()
        vhost = self.vhost_obj
        owned, self.owned_queues = self.owned_queues, []
        if vhost is None:
            return
        for q in owned:
            if not q.deleted:
                vhost.remove_queue(q)

    # ---------------------------------------------------------------- requests
    def _request(self, e: ev.TransferReceived, session: PairSession) -> None:
        """incoming_mgmt_link_transfer: the checks, the request, the response on the
        other half, and credit again for requests."""
        channel = e.channel
        pair = session.pairs[session.incoming[e.handle]]
        vhost = self.vhost_obj
        assert vhost is not None
        self._window_used(channel)
        if not e.settled:  # `true = Settled`: only settled requests
            self._end_with(channel, d.Error(d.INTERNAL_ERROR, "{badmatch,false}"))
        if pair.outgoing is None:
            self._end_with(
                channel,
                d.Error(
                    d.PRECONDITION_FAILED, "received transfer on half open management link pair"
                ),
            )
        out = self.conn.link(channel, pair.outgoing)
        if out.credit <= 0:
            self._end_with(
                channel,
                d.Error(
                    d.PRECONDITION_FAILED,
                    f"insufficient credit ({out.credit}) for management link from RabbitMQ to "
                    "client",
                ),
            )
        size_error = _size_error(len(e.payload), vhost.max_message_size)
        if size_error is not None:
            self._end_with(channel, size_error)
        node = Node(vhost, self.actor, self.broker.node_name, self._own)
        try:
            response = handle_request(e.payload, node)
        except SessionEnd as end:
            self._end_with(channel, end.error)
        size_error = _size_error(len(response), out.max_message_size)
        if size_error is not None:
            self._end_with(channel, size_error)
        self.conn.send_transfer(channel, pair.outgoing, response, b"", settled=True)
        if self.conn.link(channel, e.handle).credit <= MAX_CREDIT // 2:
            self.conn.grant_credit(channel, e.handle, MAX_CREDIT)

    def _own(self, q: Queue) -> None:
        """An exclusive queue a pair declared: the connection's (those deleted since are
        forgotten)."""
        self.owned_queues = [x for x in self.owned_queues if not x.deleted]
        self.owned_queues.append(q)

    def _window_used(self, channel: int) -> None:
        """A transfer took one of the session's incoming window: opened again once half
        is used, as for a publisher's transfers."""
        session = self.sessions[channel]
        session.received += 1
        if session.received >= INCOMING_WINDOW // 2 and not self.blocked:
            session.received = 0
            self.conn.send_session_flow(channel, INCOMING_WINDOW)


def _size_error(size: int, limit: int | None) -> d.Error | None:
    """validate_message_size: none for no limit (0 or unset)."""
    if not limit or size <= limit:
        return None
    return d.Error(
        d.MESSAGE_SIZE_EXCEEDED,
        f"message size ({size} bytes) > maximum message size ({limit} bytes)",
    )
