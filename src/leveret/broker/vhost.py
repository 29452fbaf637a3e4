"""A virtual host: its exchanges, queues and bindings, and the rules RabbitMQ applies to
declaring, deleting, binding, routing and publishing.

:meth:`VirtualHost.publish` is the one path every publish takes, whether it came over
AMQP, from a transaction's commit or from the management API: the checks, the routing
and the queues' answers, returned as a :class:`PublishResult`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from leveret.broker import errors as rabbit
from leveret.broker.arguments import (
    EXCHANGE_EQUIVALENCE_KEYS,
    QUEUE_EQUIVALENCE_KEYS,
    assert_args_equivalence,
    text,
    wire_type,
)
from leveret.broker.deadletter import dead_lettered
from leveret.broker.entry import now_ms
from leveret.broker.events import Event, Observers
from leveret.broker.exchanges import EXCHANGE_TYPES, Binding, DefaultExchange, Exchange
from leveret.broker.message import Message
from leveret.broker.queues import (
    QUEUE_TYPES,
    Accepted,
    ClassicQueue,
    Queue,
    StreamQueue,
    queue_type_name,
)
from leveret.protocol import errors, spec

if TYPE_CHECKING:
    from leveret.broker.ports import ConnectionInfo, FlowHolder, Storage
    from leveret.broker.users import Permission

log = logging.getLogger(__name__)

BUILTIN_EXCHANGES = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
    ("amq.topic", "topic", False),
)

_EXPIRATION_FLAG = 0x01  # byte 0 of the property flags: expiration (0x0100)
_USER_ID_FLAG = 0x10  # byte 1: user-id (0x0010)


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


def not_default(exchange_name: str) -> None:
    """rabbit_channel:check_not_default_exchange."""
    if exchange_name == "":
        raise errors.access_refused("operation not permitted on the default exchange")


def exchange_type(type_name: str) -> type[Exchange]:
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise errors.command_invalid(f"unknown exchange type '{type_name}'")
    return cls


class VirtualHost:
    def __init__(
        self,
        name: str,
        description: str = "",
        tags: list[str] | None = None,
        observers: Observers | None = None,
        storage: Storage | None = None,
        max_message_size: int = spec.DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        self.name = name
        self.description = description
        self.tags = list(tags or [])
        self.observers = observers or Observers()
        self.storage = storage
        self.max_message_size = max_message_size
        self.queues: dict[str, Queue] = {}
        self.default_exchange = DefaultExchange(name, self.queues.get)
        self.exchanges: dict[str, Exchange] = {"": self.default_exchange}
        for xname, xtype, internal in BUILTIN_EXCHANGES:
            self.exchanges[xname] = EXCHANGE_TYPES[xtype](
                xname, name, durable=True, internal=internal
            )
        # (kind, name) of destination -> bindings pointing at it, for cascading deletes
        self._incoming: dict[tuple[str, str], dict[tuple[Any, ...], Binding]] = {}

    # ---------------------------------------------------------------- exchanges
    def get_exchange(self, name: str) -> Exchange:
        x = self.exchanges.get(name)
        if x is None:
            raise rabbit.no_exchange(name, self.name)
        return x

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[Exchange, bool]:
        """Declare (non-passive). Returns the exchange and whether it is new."""
        cls = exchange_type(type_name)
        arguments = arguments.copy() if arguments else {}
        existing = self.exchanges.get(name)
        if existing is None:
            if name.startswith("amq."):
                raise rabbit.reserved_name("exchange", name)
            ae = arguments.get("alternate-exchange")
            if ae is not None and not isinstance(ae, (str, bytes)):
                raise errors.precondition_failed(
                    f"invalid type '{wire_type(arguments, 'alternate-exchange')}' for arg "
                    "'alternate-exchange' in "
                    f"exchange '{name}' in vhost '{self.name}'"
                )
            x = cls(
                name,
                self.name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
            self.exchanges[name] = x
            if durable:
                self.observers.emit(Event.DEFINITION_CHANGED, x)
            return x, True
        self.assert_exchange_equivalence(
            existing, type_name, durable, auto_delete, internal, arguments
        )
        return existing, False

    def assert_exchange_equivalence(
        self,
        x: Exchange,
        type_name: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        checks = (
            ("type", type_name, x.type_name),
            ("durable", durable, x.durable),
            ("auto_delete", auto_delete, x.auto_delete),
            ("internal", internal, x.internal),
        )
        for field, received, current in checks:
            if received != current:
                raise rabbit.inequivalent_flag(
                    "exchange", x.name, self.name, field, received, current
                )
        err = assert_args_equivalence(
            "exchange", x.name, self.name, x.arguments, arguments, EXCHANGE_EQUIVALENCE_KEYS
        )
        if err is not None:
            raise err

    def delete_exchange(self, name: str, if_unused: bool = False) -> bool:
        x = self.exchanges.get(name)
        if x is None:
            return False
        if if_unused and (x.bindings or self._incoming.get(("exchange", name))):
            raise errors.precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(x)
        return True

    def _remove_exchange(self, x: Exchange) -> None:
        del self.exchanges[x.name]
        for binding in list(x.bindings.values()):
            self._forget_incoming(binding)
        x.bindings.clear()
        for binding in list(self._incoming.pop(("exchange", x.name), {}).values()):
            src = self.exchanges.get(binding.source)
            if src is not None:
                src.unbind(binding.key)
                self._maybe_auto_delete(src)
        if x.durable:
            self.observers.emit(Event.DEFINITION_CHANGED, x)

    def _maybe_auto_delete(self, x: Exchange) -> None:
        if x.auto_delete and not x.bindings and x.name in self.exchanges:
            self._remove_exchange(x)

    # ------------------------------------------------------------------- queues
    def get_queue(self, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None:
            raise rabbit.no_queue(name, self.name)
        return q

    def declare_queue(
        self,
        name: str,
        durable: bool = False,
        exclusive_owner: ConnectionInfo | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[Queue, bool]:
        """Declare (non-passive). Returns the queue and whether it is new."""
        arguments = arguments.copy() if arguments else {}
        existing = self.queues.get(name)
        if existing is not None:
            self.assert_queue_equivalence(
                existing, durable, exclusive_owner, auto_delete, arguments
            )
            existing.last_used = now_ms()
            return existing, False
        kind = QUEUE_TYPES.get(queue_type_name(arguments), ClassicQueue)
        kind.validate(name, self.name, durable, exclusive_owner is not None, auto_delete, arguments)
        q: Queue
        if kind is StreamQueue:
            if self.storage is None:
                raise errors.not_implemented("stream queues need a data directory")
            stream_log = self.storage.open_stream(self.name, name, arguments)
            q = StreamQueue(name, self.name, arguments, stream_log)
        else:
            store = None
            if durable and self.storage is not None:
                store = self.storage.queue_store(self.name, name)
            q = ClassicQueue(
                name,
                self.name,
                durable=durable,
                exclusive_owner=exclusive_owner,
                auto_delete=auto_delete,
                arguments=arguments,
                dead_letters=self,
                store=store,
            )
        self.queues[name] = q
        self.observers.emit(Event.QUEUE_CREATED, q)
        if q.durable:
            self.observers.emit(Event.DEFINITION_CHANGED, q)
        return q, True

    def assert_queue_equivalence(
        self,
        q: Queue,
        durable: bool,
        owner: ConnectionInfo | None,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        if q.exclusive_owner is not owner:
            raise rabbit.exclusive_locked(q.name, self.name)
        if q.durable != durable:
            raise rabbit.inequivalent_flag(
                "queue", q.name, self.name, "durable", durable, q.durable
            )
        if q.auto_delete != auto_delete:
            raise rabbit.inequivalent_flag(
                "queue", q.name, self.name, "auto_delete", auto_delete, q.auto_delete
            )
        err = assert_args_equivalence(
            "queue", q.name, self.name, q.arguments, arguments, QUEUE_EQUIVALENCE_KEYS
        )
        if err is not None:
            raise err

    def delete_queue(self, q: Queue, if_unused: bool = False, if_empty: bool = False) -> int:
        self.check_queue_delete(q, if_unused, if_empty)
        return self.remove_queue(q)

    def check_queue_delete(self, q: Queue, if_unused: bool, if_empty: bool) -> None:
        """Raise what queue.delete with these flags would refuse with."""
        if if_unused and q.consumers:
            raise errors.precondition_failed(f"queue '{q.name}' in vhost '{self.name}' in use")
        if if_empty and q.message_count:
            raise errors.precondition_failed(f"queue '{q.name}' in vhost '{self.name}' not empty")

    def remove_queue(self, q: Queue) -> int:
        """Delete a queue with no checks: its bindings go, its consumers are cancelled.
        Returns how many messages were ready in it."""
        if self.queues.get(q.name) is not q:
            return 0
        del self.queues[q.name]
        for binding in list(self._incoming.pop(("queue", q.name), {}).values()):
            src = self.exchanges.get(binding.source)
            if src is not None:
                src.unbind(binding.key)
                self._maybe_auto_delete(src)
        consumers = list(q.consumers)
        q.consumers.clear()
        count = q.delete()
        for consumer in consumers:
            consumer.cancelled()
        self.observers.emit(Event.QUEUE_DELETED, q)
        if q.durable:
            self.observers.emit(Event.DEFINITION_CHANGED, q)
        return count

    # ----------------------------------------------------------------- bindings
    def _forget_incoming(self, binding: Binding) -> None:
        dest = binding.destination
        incoming = self._incoming.get((dest.kind, dest.name))
        if incoming is not None:
            incoming.pop((binding.source, *binding.key), None)
            if not incoming:
                del self._incoming[(dest.kind, dest.name)]

    def bind(
        self,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
    ) -> bool:
        binding = Binding(
            source.name, destination, routing_key, arguments.copy() if arguments else {}
        )
        if not source.bind(binding):
            return False
        self._incoming.setdefault((destination.kind, destination.name), {})[
            (source.name, *binding.key)
        ] = binding
        if source.durable and destination.durable:
            self.observers.emit(Event.DEFINITION_CHANGED, binding)
        return True

    def unbind(
        self,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
    ) -> bool:
        probe = Binding(
            source.name, destination, routing_key, arguments.copy() if arguments else {}
        )
        removed = source.unbind(probe.key)
        if removed is None:
            return False
        self._forget_incoming(removed)
        if source.durable and destination.durable:
            self.observers.emit(Event.DEFINITION_CHANGED, removed)
        self._maybe_auto_delete(source)
        return True

    def bindings(self) -> list[Binding]:
        out: list[Binding] = []
        for x in self.exchanges.values():
            out.extend(x.bindings.values())
        return out

    # ------------------------------------------------------------------ routing
    def route(self, exchange: Exchange, message: Message) -> list[Queue]:
        """Queues a message published to ``exchange`` reaches, following
        exchange-to-exchange bindings and alternate exchanges, each queue once."""
        if not exchange.exchange_bindings:
            dests = exchange.route(message)
            if dests or "alternate-exchange" not in exchange.arguments:
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
            ae = exchange.arguments.get("alternate-exchange")
            ae_name = text(ae) if isinstance(ae, (str, bytes)) else None
            if ae_name is not None and ae_name not in seen:
                ae = self.exchanges.get(ae_name)
                if ae is not None:
                    seen.add(ae_name)
                    self._route_into(ae, message, out, seen)

    def expire(self) -> None:
        """Drop expired messages at queue heads, and queues unused for their x-expires."""
        t = now_ms()
        for q in list(self.queues.values()):
            q.expire()
            expires = q.expires
            if (
                expires is not None
                and not q.consumers
                and q.exclusive_owner is None
                and t - q.last_used >= expires
            ):
                self.remove_queue(q)

    # ------------------------------------------------------------ authorisation
    # The checks rabbit_channel makes before it declares, deletes or binds, in its order;
    # AMQP's session and the management API (which RabbitMQ runs through the same
    # channel code) both call them.
    def check_access(
        self, permission: Permission | None, username: str, what: str, kind: str, name: str
    ) -> None:
        """rabbit_access_control:check_resource_access: ``what`` (configure, write, read)
        on a resource; the default exchange is checked under the name 'amq.default'."""
        if kind == "exchange" and name == "":
            name = "amq.default"
        if permission is None or not permission.allows(what, name):
            raise rabbit.access_refused(kind, name, self.name, username)

    def authorize_exchange_declare(
        self,
        name: str,
        type_name: str,
        arguments: dict[str, Any],
        username: str,
        permission: Permission | None,
    ) -> None:
        """exchange.declare (not passive): the type, the default exchange, configure; for
        a new exchange, its name and its alternate exchange (read on the exchange being
        declared, write on the alternate)."""
        exchange_type(type_name)
        not_default(name)
        self.check_access(permission, username, "configure", "exchange", name)
        if name in self.exchanges:
            return
        if name.startswith("amq."):
            raise rabbit.reserved_name("exchange", name)
        ae = arguments.get("alternate-exchange")
        if ae is None:
            return
        if not isinstance(ae, (str, bytes)):
            raise errors.precondition_failed(
                f"invalid type '{wire_type(arguments, 'alternate-exchange')}' for arg "
                f"'alternate-exchange' in exchange '{name}' in vhost '{self.name}'"
            )
        self.check_access(permission, username, "read", "exchange", name)
        self.check_access(permission, username, "write", "exchange", text(ae))

    def authorize_queue_declare(
        self,
        name: str,
        arguments: dict[str, Any],
        username: str,
        permission: Permission | None,
        server_named: bool = False,
    ) -> None:
        """queue.declare (not passive): the reserved prefix (unless the server named
        it), configure; for a new queue, its dead-letter exchange (read on the queue,
        write on the exchange) before any other argument is looked at."""
        if not server_named and name.startswith("amq."):
            raise rabbit.reserved_name("queue", name)
        self.check_access(permission, username, "configure", "queue", name)
        if name in self.queues:
            return
        dlx = arguments.get("x-dead-letter-exchange")
        if dlx is None:
            return
        if not isinstance(dlx, (str, bytes)):
            raise errors.precondition_failed(
                f"invalid type '{wire_type(arguments, 'x-dead-letter-exchange')}' for arg "
                f"'x-dead-letter-exchange' in queue '{name}' in vhost '{self.name}'"
            )
        self.check_access(permission, username, "read", "queue", name)
        self.check_access(permission, username, "write", "exchange", text(dlx))

    def authorize_binding(
        self,
        source: str,
        dest_kind: str,
        destination: str,
        username: str,
        permission: Permission | None,
    ) -> None:
        """Binding and unbinding (rabbit_channel:binding_action): write on the
        destination, neither end the default exchange, read on the source."""
        self.check_access(permission, username, "write", dest_kind, destination)
        if dest_kind == "exchange":
            not_default(destination)
        not_default(source)
        self.check_access(permission, username, "read", "exchange", source)

    # ------------------------------------------------------------------ publish
    def authorize_publish(
        self, exchange_name: str, message: Message, username: str, permission: Permission | None
    ) -> Exchange:
        """Every check RabbitMQ makes of a publish, in its order (size, write permission,
        the exchange, internal, user-id, expiration): the exchange to route through."""
        if len(message.body) > self.max_message_size:
            raise errors.precondition_failed(
                f"message size {len(message.body)} is larger than configured max size "
                f"{self.max_message_size}"
            )
        self.check_access(permission, username, "write", "exchange", exchange_name)
        exchange = self.exchanges.get(exchange_name)
        if exchange is None:
            raise rabbit.no_exchange(exchange_name, self.name)
        if exchange.internal:
            raise errors.access_refused(
                f"cannot publish to internal exchange '{exchange_name}' in vhost '{self.name}'"
            )
        props = message.properties
        if props[0] & _EXPIRATION_FLAG or (len(props) > 2 and props[1] & _USER_ID_FLAG):
            _check_properties(message, username)
        return exchange

    def publish(
        self,
        exchange_name: str,
        message: Message,
        mandatory: bool = False,
        username: str = "",
        permission: Permission | None = None,
    ) -> PublishResult:
        """Check, route and enqueue one message: the one path of every publish."""
        exchange = self.authorize_publish(exchange_name, message, username, permission)
        return self.publish_to(exchange, message, mandatory)

    def publish_to(self, exchange: Exchange, message: Message, mandatory: bool) -> PublishResult:
        """Route an authorized message and enqueue it (a transaction's commit routes
        what it authorized earlier)."""
        queues = self.route(exchange, message)
        if not queues:
            return RETURNED if mandatory else UNROUTED
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
            if accepted is Accepted.BACKLOG:
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

    # ------------------------------------------------------------ dead-lettering
    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish a queue's dead letter through its dead-letter exchange."""
        if not isinstance(queue, ClassicQueue) or queue.dead_letter_exchange is None:
            return
        dlx = self.exchanges.get(queue.dead_letter_exchange)
        if dlx is None:
            return
        letter = dead_lettered(message, queue.name, reason, dlx.name, queue.dead_letter_routing_key)
        for q in self.route(dlx, letter):
            if q is queue and reason != "rejected":
                continue  # no dead-letter cycles back into the same queue
            q.enqueue(letter)


def _check_properties(message: Message, username: str) -> None:
    props = message.props
    if props.user_id and props.user_id != username:
        raise errors.precondition_failed(
            f"user_id property set to '{props.user_id}' but authenticated user was '{username}'"
        )
    if props.expiration is not None and props.expiration != "":
        exp = props.expiration
        if not exp.isdigit():
            raise errors.precondition_failed(
                f"invalid expiration '{exp}': {{value_negative,{exp}}}"
                if exp.startswith("-") and exp[1:].isdigit()
                else f"invalid expiration '{exp}': no_integer"
            )
