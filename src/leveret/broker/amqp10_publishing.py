"""The publishing half of an AMQP 1.0 connection (RabbitMQ 4.2's incoming links): a
publisher's attach, its transfers into an exchange, their outcomes, and its credit.

What a publisher sends unsettled is confirmed (the ``accepted`` outcome) once it is on
disk: the server calls :meth:`Publishing.flush_confirms` after the batch's sync, as for
AMQP 0-9-1's confirms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker import amqp10_addresses as addresses
from leveret.broker import operations
from leveret.broker.amqp10_common import (
    INCOMING_WINDOW,
    Amqp10Base,
    LinkError,
    LinkSession,
    SessionError,
    condition,
)
from leveret.broker.amqp10_links import MAX_LINK_CREDIT, PublisherLink
from leveret.broker.amqp10_message import Amqp10Error, Parsed, parse, size_error, user_id_error
from leveret.broker.message import Message
from leveret.broker.operations.topics import authorize_topic
from leveret.broker.reply_to import REPLY_PREFIX
from leveret.broker.routing import ROUTED, UNROUTED
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10.types import Symbol
from leveret.protocol.errors import AMQPError

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.vhost import VirtualHost


class _Unroutable(Exception):
    """A message the target cannot take (lookup_target's errors)."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


def _replies_to_someone(vhost: VirtualHost, key: str) -> bool:
    """Whether a routing key names a live direct reply-to consumer (RabbitMQ 4.2's volatile
    queue); an address it cannot decode names none."""
    if not key.startswith(REPLY_PREFIX) or vhost.replies is None:
        return False
    try:
        return vhost.replies.resolve(key) is not None
    except AMQPError:
        return False


def _no_exchange(name: str, vhost: str) -> d.Error:
    return d.Error(d.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")


def _internal(name: str, vhost: str) -> d.Error:
    return d.Error(
        d.UNAUTHORIZED_ACCESS,
        f"forbidden to publish to internal exchange '{name}' in vhost '{vhost}'",
    )


class Publishing(Amqp10Base):
    """Links on which the client sends."""

    def _attach_publisher(self, session: LinkSession, handle: int, attach: Any) -> None:
        target = attach.target
        address = target.address if isinstance(target, d.Target) else None
        vhost = self.vhost_obj
        assert vhost is not None
        try:
            dest = addresses.target(address)
            exchange = None
            if dest.exchange is not None:
                name = dest.exchange
                operations.check_access(vhost, self.actor, "write", "exchange", name)
                exchange = vhost.exchanges.get(name)
                if exchange is None:
                    raise LinkError(_no_exchange(name, vhost.name))
                if exchange.internal:
                    raise LinkError(_internal(name, vhost.name))
                if dest.declare:  # a v1 /queue/Q target: the queue, declared if missing
                    assert dest.queue is not None
                    self._declare_v1(dest.queue, bool(getattr(target, "durable", 0)))
                if (
                    dest.queue is not None
                    and dest.queue not in vhost.queues
                    # a volatile queue exists while its reply consumer lives (v4.2.9
                    # rabbit_db_queue:exists)
                    and not _replies_to_someone(vhost, dest.queue)
                ):
                    raise LinkError(
                        d.Error(d.NOT_FOUND, f"no queue '{dest.queue}' in vhost '{vhost.name}'")
                    )
        except (addresses.BadAddress, AMQPError, LinkError) as exc:
            return self._refuse_attach(session.channel, handle, attach, exc)
        settled = attach.snd_settle_mode == d.SenderSettleMode.SETTLED
        max_size = vhost.max_message_size
        link = PublisherLink(
            session.channel, handle, attach.name, address, exchange, dest.routing_key,
            settled, max_size,
        )  # fmt: skip
        session.publishers[handle] = link
        self.conn.send_attach(
            session.channel,
            handle,
            source=attach.source,
            target=target,
            snd_settle_mode=attach.snd_settle_mode,
            rcv_settle_mode=d.ReceiverSettleMode.FIRST,
            max_message_size=max_size,
        )
        self.conn.grant_credit(session.channel, handle, MAX_LINK_CREDIT)

    def _transfer(self, e: ev.TransferReceived) -> None:
        """A message in, checked and routed in RabbitMQ 4.2's order: the link's
        max-message-size, the sections, the target (the link's, or the message's ``to``
        on the anonymous terminus; ``x-cc`` for more keys), the user-id, the topic
        permissions, the interceptors; then its outcome."""
        session = self.sessions[e.channel]
        link = session.publishers.get(e.handle)
        if link is None:
            raise LinkError(d.Error(d.NOT_IMPLEMENTED, "transfers on this link are not supported"))
        size = len(e.payload)
        if size > link.max_message_size:  # RabbitMQ 4.2 ends the session
            raise SessionError(size_error(size, link.max_message_size).error)
        try:
            parsed = parse(e.payload)
        except Amqp10Error as exc:
            raise (SessionError if exc.ends_session else LinkError)(exc.error) from None
        vhost = self.vhost_obj
        assert vhost is not None
        anonymous = link.exchange is None
        try:
            exchange, key = self._destination(link, parsed)
            if parsed.cc_error is not None:
                raise _Unroutable(parsed.cc_error.error)
        except _Unroutable as exc:
            return self._unroutable(session, link, e, exc.error, anonymous)
        assert self.user is not None
        if parsed.user_id is not None:
            user = self.user
            refused = user_id_error(parsed.user_id, user.name, "impersonator" in user.tags)
            if refused is not None:
                raise LinkError(refused.error)
        message: Message = parsed.message(exchange.name, key)
        if vhost.topic_permissions:
            try:
                for routing_key in message.routing_keys:
                    authorize_topic(vhost, exchange, self.user.name, routing_key, "write")
            except AMQPError as exc:
                raise SessionError(condition(exc)) from None
        interceptors = vhost.interceptors
        if interceptors is not None:
            message = interceptors.intercept(message, vhost.node)
        replied = (
            exchange is vhost.default_exchange
            and key.startswith(REPLY_PREFIX)
            and _replies_to_someone(vhost, key)
        )
        try:
            result = vhost.publish_to(exchange, message, False)
        except AMQPError:  # a reply address this broker cannot decode: nobody's
            result = UNROUTED
        if replied and not result.routed:  # a volatile queue took it (at most once)
            result = ROUTED
        link.published += 1
        session.figures.published(result.routed)
        if result.congested:
            for holder in result.congested:
                holder.hold(self.flow_holder)
        if not e.settled:
            if not result.routed:
                self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.RELEASED)
                session.figures.confirm += 1
            elif result.refused:
                self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.Rejected())
            else:
                session.confirms.append(e.delivery_id)
                self.needs_sync = True
        self._credit_publisher(session, link)

    def _destination(self, link: PublisherLink, parsed: Parsed) -> tuple[Exchange, str]:
        """The exchange and routing key of one message (rabbit_amqp_session's
        lookup_target). Raises _Unroutable."""
        vhost = self.vhost_obj
        assert vhost is not None
        exchange = link.exchange
        key = link.routing_key
        if exchange is None:  # the anonymous terminus: the message's own address
            to = parsed.to
            if to is None:
                raise _Unroutable(
                    d.Error(
                        d.PRECONDITION_FAILED,
                        "anonymous terminus requires 'to' address to be set",
                    )
                )
            target = addresses.parse_v2_string(to)
            if target is None:
                raise _Unroutable(d.Error(d.PRECONDITION_FAILED, f"bad 'to' address string: {to}"))
            name, key, _ = target
            try:
                operations.check_access(vhost, self.actor, "write", "exchange", name)
            except AMQPError as exc:
                raise SessionError(condition(exc)) from None
            exchange = vhost.exchanges.get(name)
            if exchange is None:
                raise _Unroutable(_no_exchange(name, vhost.name))
            if exchange.internal:
                raise SessionError(_internal(name, vhost.name))
        elif key is addresses.SUBJECT:
            key = parsed.subject or ""
        assert isinstance(key, str)
        return exchange, key

    def _unroutable(
        self,
        session: LinkSession,
        link: PublisherLink,
        e: ev.TransferReceived,
        error: d.Error,
        anonymous: bool,
    ) -> None:
        """A message with nowhere to go. On the anonymous terminus an unsettled one is
        rejected with the error and the link goes on, a settled one detaches it (the
        error's info names the delivery-tag); on a link of a fixed target it is released
        and the link detached (the anonymous terminus's routing errors, as RabbitMQ
        4.2)."""
        if anonymous and not e.settled:
            self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.Rejected(error))
            self._credit_publisher(session, link)
            return
        if anonymous:
            info = {Symbol("delivery-tag"): e.delivery_tag}
            raise LinkError(d.Error(error.condition, error.description, info))
        if not e.settled:
            self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.RELEASED)
        raise LinkError(error)

    def _credit_publisher(self, session: LinkSession, link: PublisherLink) -> None:
        """Credit again once half is used (and the session's window with it)."""
        own = self.conn.link(session.channel, link.handle)
        pending = len(session.confirms) + session.waiting_count
        if own.credit <= MAX_LINK_CREDIT // 2 and pending < MAX_LINK_CREDIT:
            self.conn.grant_credit(session.channel, link.handle, MAX_LINK_CREDIT)
        session.received += 1
        if session.received >= INCOMING_WINDOW // 2 and not self.blocked:
            session.received = 0
            self.conn.send_session_flow(session.channel, INCOMING_WINDOW)

    def flush_confirms(self) -> None:
        """What was published is on disk: the ``accepted`` outcomes go out, a range at a
        time."""
        self.needs_sync = False
        for channel, session in self.sessions.items():
            if session.waiting:
                self.release_confirms(1 << 62, session)
            ids, session.confirms = session.confirms, []
            self._accepted(channel, session, ids)

    def defer_confirms(self, generation: int) -> None:
        """The outcomes of what was published so far wait for the store's ``generation``
        to be on disk (its fsync runs in a thread: group commit, as AMQP 0-9-1's
        confirms)."""
        self.needs_sync = False
        for session in self.sessions.values():
            if session.confirms:
                session.waiting.append((generation, session.confirms))
                session.waiting_count += len(session.confirms)
                session.confirms = []

    def release_confirms(self, durable: int, only: LinkSession | None = None) -> None:
        """The store is on disk up to ``durable``: the outcomes that waited for it go out."""
        for channel, session in self.sessions.items():
            if only is not None and session is not only:
                continue
            while session.waiting and session.waiting[0][0] <= durable:
                _, ids = session.waiting.pop(0)
                session.waiting_count -= len(ids)
                self._accepted(channel, session, ids)

    def _accepted(self, channel: int, session: LinkSession, ids: list[int]) -> None:
        if not ids:
            return
        session.figures.confirm += len(ids)
        first = last = ids[0]
        for did in ids[1:]:
            if did == (last + 1) & 0xFFFF_FFFF:
                last = did
                continue
            self.conn.send_disposition(channel, True, first, last, state=d.ACCEPTED)
            first = last = did
        self.conn.send_disposition(channel, True, first, last, state=d.ACCEPTED)

    @property
    def pending_confirms(self) -> bool:
        return self.needs_sync
