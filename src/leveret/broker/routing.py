"""Routing and publishing in a virtual host: the one path every publish takes once
:mod:`leveret.broker.operations` has checked it (:meth:`Routing.publish_to`, whether it came
over AMQP, from a transaction's commit or from the management API), the routing itself
(exchange-to-exchange bindings, alternate exchanges, CC/BCC, direct reply-to), the
firehose trace, and dead-lettering. A part of :class:`~leveret.broker.vhost.VirtualHost`,
whose exchanges and queues it routes between."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.broker.container import as_held
from leveret.broker.deadletter import dead_lettered, death_queues, deaths, is_cycle
from leveret.broker.exchanges import DefaultExchange, Exchange
from leveret.broker.message import Message
from leveret.broker.ports import WriteStalls
from leveret.broker.queues import Accepted, Queue
from leveret.broker.reply_to import REPLY_PREFIX, DirectReplyTo, ReplyConsumer, is_reply_address
from leveret.broker.trace import TRACE_EXCHANGE, Tap, deliver_trace, publish_trace
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.compat import RabbitMQ
    from leveret.broker.ports import FlowHolder

log = logging.getLogger(__name__)


class PublishResult:
    """What became of one published message."""

    __slots__ = ("congested", "refused", "returned", "routed", "unstorable")

    def __init__(
        self,
        routed: bool = False,
        returned: bool = False,
        refused: bool = False,
        unstorable: bool = False,
        congested: tuple[FlowHolder, ...] = (),
    ) -> None:
        self.routed = routed  # it reached at least one queue
        self.returned = returned  # mandatory and unroutable: basic.return it
        self.refused = refused  # a queue refused it (x-overflow reject-publish): nack it
        self.unstorable = unstorable  # a stream cannot store it: RabbitMQ's channel dies
        self.congested = congested  # consumers' connections that cannot drain

    def __repr__(self) -> str:
        flags = [n for n in ("routed", "returned", "refused", "unstorable") if getattr(self, n)]
        return f"PublishResult({', '.join(flags)})"


_YES = Accepted.YES

# The common answers, shared and never changed.
ROUTED = PublishResult(routed=True)
UNROUTED = PublishResult()
RETURNED = PublishResult(returned=True)


class Routing:
    """What a virtual host routes between, and how."""

    name: str
    node: str
    tracing: bool
    exchanges: dict[str, Exchange]
    queues: dict[str, Queue]
    default_exchange: DefaultExchange
    replies: DirectReplyTo | None
    compat: RabbitMQ
    _cycles_logged: set[tuple[str, ...]]

    # ------------------------------------------------------------------ routing
    def route(self, exchange: Exchange, message: Message) -> list[Queue]:
        """Queues a message published to ``exchange`` reaches, following
        exchange-to-exchange bindings and alternate exchanges, each queue once. A
        message with CC or BCC keys is routed with each of its keys."""
        if message.cc:
            out: dict[Queue, None] = {}
            for key in message.routing_keys:
                for q in self._route_key(exchange, message.keyed(key)):
                    out[q] = None
            return list(out)
        return self._route_key(exchange, message)

    def _route_key(self, exchange: Exchange, message: Message) -> list[Queue]:
        if not exchange.exchange_bindings:
            dests = exchange.route(message)
            if dests or exchange.alternate is None:
                return dests  # type: ignore[return-value]
        out: dict[Queue, None] = {}
        self._route_into(exchange, message, out, {exchange.name})
        return list(out)

    def _route_into(
        self, exchange: Exchange, message: Message, out: dict[Queue, None], seen: set[str]
    ) -> None:
        before = len(out)
        for d in exchange.route(message):
            if isinstance(d, Queue):
                out[d] = None
            elif d.name not in seen:
                seen.add(d.name)
                self._route_into(d, message, out, seen)  # type: ignore[arg-type]
        if len(out) == before:
            ae_name = exchange.alternate
            if ae_name is not None and ae_name not in seen:
                ae = self.exchanges.get(ae_name)
                if ae is not None:
                    seen.add(ae_name)
                    self._route_into(ae, message, out, seen)

    def _reply_targets(self, exchange: Exchange, message: Message) -> list[ReplyConsumer]:
        """The direct reply-to consumers a message to the default exchange is addressed
        to (RabbitMQ's default exchange hands these to channels, never to queues)."""
        if exchange is not self.default_exchange or self.replies is None:
            return []
        out: list[ReplyConsumer] = []
        for key in sorted(set(message.routing_keys)):
            if is_reply_address(key):
                if self.compat.v4 and not self.replies.addresses_a_channel(key):
                    continue  # RabbitMQ 4 finds no such queue: nothing crashes
                target = self.replies.resolve(key)
                if target is not None:
                    out.append(target)
        return out

    def _routes_to_reply_address(self, exchange: Exchange, message: Message) -> bool:
        """RabbitMQ 4.2: a publish to the default exchange whose key is a reply address
        that decodes is routed, whether or not its requester is still there, and so never
        returned (release-notes/4.2.0.md, "Mandatory flag in Direct Reply-To")."""
        if exchange is not self.default_exchange or self.replies is None:
            return False
        replies = self.replies
        return any(
            is_reply_address(k) and replies.addresses_a_channel(k) for k in message.routing_keys
        )

    def publish_to(
        self,
        exchange: Exchange,
        message: Message,
        mandatory: bool,
        tap: Tap | None = None,
        routed: list[Queue] | None = None,
    ) -> PublishResult:
        """Route an authorized message and enqueue it. With tracing on, the publish is
        traced as ``tap``. A transaction's commit passes the queues it was ``routed`` to
        when it was published (see :meth:`route_names`), and no ``tap``: it was traced
        then."""
        if self.compat.v4:
            message = as_held(message)
        if routed is not None:
            queues = routed
        else:
            if exchange is self.default_exchange and (
                message.cc or message.routing_key.startswith(REPLY_PREFIX)
            ):
                # reply addresses reach channels, never queues (no queue has such a name)
                for target in self._reply_targets(exchange, message):
                    target.deliver_reply(message)
            if message.cc or exchange.exchange_bindings:
                queues = self.route(exchange, message)
            else:  # route's common case, without its calls
                queues = exchange.route(message)  # type: ignore[assignment]
                if not queues and exchange.alternate is not None:
                    queues = self.route(exchange, message)
        exchange.published_in += 1
        if self.tracing and tap is not None:
            self._trace_publish(exchange, message, queues, tap)
        if not queues:
            if exchange is self.default_exchange:
                # RabbitMQ counts a publish to the default exchange out to the queue
                # its routing key names, whether or not it exists
                exchange.published_out += 1
            if mandatory and self.compat.v4 and self._routes_to_reply_address(exchange, message):
                return ROUTED
            return RETURNED if mandatory else UNROUTED
        exchange.published_out += len(queues)
        uneven: list[tuple[Queue, Accepted]] | None = None
        for q in queues:
            accepted = q.enqueue(message)
            if accepted is not _YES:
                if uneven is None:
                    uneven = []
                uneven.append((q, accepted))
        if uneven is None:
            return ROUTED
        refused = unstorable = False
        congested: list[FlowHolder] = []
        for q, accepted in uneven:
            if accepted is Accepted.BACKLOG or accepted is Accepted.HOLD:
                if accepted is Accepted.HOLD:
                    congested.append(q.flow)
                if WriteStalls.count:  # else no consumer's connection holds it back
                    holder = q.congested()
                    if holder is not None:
                        congested.append(holder)
            elif accepted is Accepted.REFUSED:
                refused = True
            else:
                unstorable = True
        if not (refused or unstorable or congested):
            return ROUTED
        return PublishResult(True, False, refused, unstorable, tuple(congested))

    def route_names(self, exchange: Exchange, message: Message, tap: Tap) -> list[str]:
        """Route a transactional publish when it is published, as RabbitMQ 3.10 does
        (rabbit_exchange:route in basic.publish; the commit only delivers): the names
        of the queues it is to reach, looked up again at the commit with
        :meth:`queues_named` (a queue deleted in between is skipped, and one declared in
        between under a name the default exchange routes to is reached, as RabbitMQ's
        default exchange routes to every key's name, existing or not). Replies to
        direct reply-to addresses go out now, and the publish is traced now."""
        queues: list[Queue]
        if exchange is self.default_exchange:
            if message.cc or message.routing_key.startswith(REPLY_PREFIX):
                reply = as_held(message) if self.compat.v4 else message
                for target in self._reply_targets(exchange, reply):
                    target.deliver_reply(reply)
            names = list(
                dict.fromkeys(k for k in message.routing_keys if not k.startswith(REPLY_PREFIX))
            )
            queues = []  # the trace names the keys
        else:
            queues = self.route(exchange, message)
            names = [q.name for q in queues]
        if self.tracing:
            self._trace_publish(exchange, message, queues, tap)
        return names

    def queues_named(self, names: list[str]) -> list[Queue]:
        """The queues of ``names`` that exist now."""
        queues = self.queues
        return [q for name in names if (q := queues.get(name)) is not None]

    # --------------------------------------------------------------------- trace
    def _trace_publish(
        self, exchange: Exchange, message: Message, queues: list[Queue], tap: Tap
    ) -> None:
        if exchange is self.default_exchange:
            # RabbitMQ's default exchange names a queue for every key, existing or not
            names = [k for k in message.routing_keys if not k.startswith(REPLY_PREFIX)]
        else:
            names = [q.name for q in queues]
        trace = publish_trace(message, names, self.name, tap, self.node)
        if trace is not None:
            self._publish_trace(trace)

    def trace_delivery(self, queue: str, message: Message, redelivered: bool, tap: Tap) -> None:
        trace = deliver_trace(message, queue, redelivered, self.name, tap, self.node)
        if trace is not None:
            self._publish_trace(trace)

    def _publish_trace(self, trace: Message) -> None:
        self.publish_internal(TRACE_EXCHANGE, trace)

    def publish_internal(self, exchange_name: str, message: Message) -> None:
        """The broker publishes a message of its own (a trace, a log line): routed and
        enqueued, nobody to confirm or return it to (rabbit_basic:publish)."""
        exchange = self.exchanges.get(exchange_name)
        if exchange is not None:
            if self.compat.v4:
                message = as_held(message)
            for q in self.route(exchange, message):
                q.enqueue(message)

    # ------------------------------------------------------------ dead-lettering
    def dead_letter(self, queue: Queue, message: Message, reason: str) -> list[Accepted]:
        """Republish a queue's dead letter through its dead-letter exchange, as
        rabbit_dead_letter: what each queue it reached answered (none when it went
        nowhere)."""
        dlx_name = queue.dead_letter_exchange
        if dlx_name is None:
            return []
        dlx = self.exchanges.get(dlx_name)
        if dlx is None:
            return []
        letter = dead_lettered(
            message,
            queue.name,
            reason,
            dlx.name,
            queue.dead_letter_routing_key,
            v4=self.compat.v4,
        )
        try:
            queues = self.route(dlx, letter)
            if dlx is self.default_exchange:
                for target in self._reply_targets(dlx, letter):
                    target.deliver_reply(letter)
        except errors.AMQPError:
            return []  # an address RabbitMQ cannot decode: its queue process fails
        if reason != "rejected":
            history = deaths(letter)
            kept = []
            for q in queues:
                if is_cycle(q.name, history):
                    self._log_cycle([q.name, *death_queues(history)])
                else:
                    kept.append(q)
            queues = kept
        return [q.enqueue(letter) for q in queues]

    def _log_cycle(self, names: list[str]) -> None:
        key = tuple(names)
        if key in self._cycles_logged:
            return
        self._cycles_logged.add(key)
        shown = ",".join(f'<<"{n}">>' for n in names)
        log.warning(
            "Message dropped. Dead-letter queues cycle detected: [%s]\n"
            "This cycle will NOT be reported again.",
            shown,
        )
