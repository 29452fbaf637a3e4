"""The publishing half of an AMQP 1.0 connection (RabbitMQ 4.2's incoming links): a
publisher's attach, its transfers into an exchange, their outcomes, and its credit.

What a publisher sends unsettled is confirmed (the ``accepted`` outcome) once it is on
disk: the server calls :meth:`Publishing.flush_confirms` after the batch's sync, as for
AMQP 0-9-1's confirms."""

from __future__ import annotations

from typing import Any

from leveret.broker import amqp10_addresses as addresses
from leveret.broker import operations
from leveret.broker.amqp10_common import (
    INCOMING_WINDOW,
    Amqp10Base,
    LinkError,
    LinkSession,
    condition,
)
from leveret.broker.amqp10_links import MAX_LINK_CREDIT, PublisherLink
from leveret.broker.message import Message
from leveret.broker.queues.stream_amqp091 import to_amqp091
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.errors import AMQPError


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
                    raise LinkError(
                        d.Error(d.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost.name}'")
                    )
                if exchange.internal:
                    raise LinkError(
                        d.Error(
                            d.UNAUTHORIZED_ACCESS,
                            f"forbidden to publish to internal exchange '{name}' in vhost "
                            f"'{vhost.name}'",
                        )
                    )
                if dest.queue is not None and dest.queue not in vhost.queues:
                    raise LinkError(
                        d.Error(d.NOT_FOUND, f"no queue '{dest.queue}' in vhost '{vhost.name}'")
                    )
        except addresses.BadAddress as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
        except AMQPError as exc:
            return self._refuse_attach(session.channel, handle, attach, condition(exc))
        except LinkError as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
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
        session = self.sessions[e.channel]
        link = session.publishers.get(e.handle)
        if link is None:
            raise LinkError(d.Error(d.NOT_IMPLEMENTED, "transfers on this link are not supported"))
        if len(e.payload) > link.max_message_size:
            raise LinkError(
                d.Error(
                    d.MESSAGE_SIZE_EXCEEDED,
                    f"message size ({len(e.payload)} bytes) > maximum message size "
                    f"({link.max_message_size} bytes)",
                )
            )
        vhost = self.vhost_obj
        assert vhost is not None
        exchange = link.exchange
        routing_key = link.routing_key
        try:
            _, properties, body = to_amqp091(e.payload, "")
        except ValueError:
            raise LinkError(d.Error(d.DECODE_ERROR, "message has no body")) from None
        if exchange is None or routing_key is addresses.SUBJECT:
            raise LinkError(
                d.Error(
                    d.NOT_IMPLEMENTED,
                    "routing by the message's 'to' or subject is not supported yet",
                )
            )
        assert isinstance(routing_key, str)
        message = Message.from_parts(exchange.name, routing_key, properties, body)
        try:
            exchange, message = operations.authorize_publish(
                vhost, self.actor, exchange.name, message
            )
        except AMQPError as exc:
            raise LinkError(condition(exc)) from None
        result = vhost.publish_to(exchange, message, False)
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

    def _credit_publisher(self, session: LinkSession, link: PublisherLink) -> None:
        """Credit again once half is used (and the session's window with it)."""
        own = self.conn.link(session.channel, link.handle)
        if own.credit <= MAX_LINK_CREDIT // 2 and len(session.confirms) < MAX_LINK_CREDIT:
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
            ids = session.confirms
            if not ids:
                continue
            session.confirms = []
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
