"""A virtual host: its policies and limits, exchanges, queues and bindings, and the rules
RabbitMQ applies to declaring, deleting and binding them; how it routes and publishes is
its :class:`~leveret.broker.routing.Routing` part. Who may do what is checked in
:mod:`leveret.broker.operations`, never here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.broker import errors as rabbit
from leveret.broker.arguments import (
    EXCHANGE_EQUIVALENCE_KEYS,
    QUEUE_EQUIVALENCE_KEYS,
    assert_args_equivalence,
    wire_type,
)
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.entry import now_ms
from leveret.broker.events import (
    INTERNAL_USER,
    BindingCreated,
    BindingDeleted,
    DefinitionChanged,
    ExchangeCreated,
    ExchangeDeleted,
    ExchangeDeleteFinished,
    ExchangeDeleteStarted,
    Observers,
    PolicyChanged,
    QueueCreated,
    QueueDeleted,
    QueuePolicyChanged,
    VhostLimitsChanged,
)
from leveret.broker.exchanges import (
    EXCHANGE_TYPES,
    Binding,
    DefaultExchange,
    Exchange,
    exchange_type,
)
from leveret.broker.memory import MemoryBudget
from leveret.broker.policies import Policies, Policy
from leveret.broker.queues import (
    QUEUE_TYPES,
    ClassicQueue,
    Declaration,
    Queue,
    queue_type_name,
)
from leveret.broker.reply_to import (
    DirectReplyTo,
)
from leveret.broker.routing import Routing
from leveret.protocol import errors, spec

if TYPE_CHECKING:
    from leveret.broker.interceptors import Interceptors
    from leveret.broker.ports import ConnectionInfo, Storage
    from leveret.broker.users import TopicPermission

log = logging.getLogger(__name__)

BUILTIN_EXCHANGES = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
    ("amq.topic", "topic", False),
)


_Named = TypeVar("_Named", Exchange, Queue)


def _found(
    table: dict[str, _Named], name: str, vhost: str, missing: Callable[[str, str], errors.AMQPError]
) -> _Named:
    """The exchange or queue of that name in the vhost, or RabbitMQ's 404 for it."""
    found = table.get(name)
    if found is None:
        raise missing(name, vhost)
    return found


def _route_order(binding: Binding) -> tuple[str, str, str]:
    """The order of one source's bindings in RabbitMQ's route table: key, then destination."""
    return (binding.routing_key, binding.destination.kind, binding.destination.name)


def _reverse_route_order(binding: Binding) -> str:
    """The order of one destination's bindings from one source: by key."""
    return binding.routing_key


class Deletions:
    """What one removal took with it, grouped by source exchange as RabbitMQ's
    rabbit_binding deletions are: whether the exchange itself went, and which of its
    bindings. A source met twice (a cascade) is merged into its first group."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, tuple[Exchange | None, bool, list[Binding]]] = {}

    def add(
        self, source: str, exchange: Exchange | None, deleted: bool, bindings: list[Binding]
    ) -> None:
        known = self._groups.get(source)
        if known is None:
            self._groups[source] = (exchange, deleted, list(bindings))
        else:
            self._groups[source] = (known[0] or exchange, known[1] or deleted, known[2] + bindings)

    def groups(self) -> list[tuple[Exchange | None, bool, list[Binding]]]:
        return list(self._groups.values())


class VirtualHost(Routing):
    def __init__(
        self,
        name: str,
        description: str = "",
        tags: list[str] | None = None,
        observers: Observers | None = None,
        storage: Storage | None = None,
        max_message_size: int = spec.DEFAULT_MAX_MESSAGE_SIZE,
        replies: DirectReplyTo | None = None,
        node: str = "",
        memory: MemoryBudget | None = None,
    ) -> None:
        self.name = name
        # the RabbitMQ the broker behaves as (set by BrokerCore.add_vhost)
        self.compat: RabbitMQ = RABBITMQ_3_10
        self.replies = replies
        self.node = node  # the broker's node name, in traces
        self.tracing = False  # firehose tracing (rabbitmqctl trace_on)
        # what the broker stamps on what clients publish (message_interceptors.incoming)
        self.interceptors: Interceptors | None = None
        self.description = description
        self.tags = list(tags or [])
        self.observers = observers or Observers()
        self.storage = storage
        # what classic queues keep of ready bodies in memory (shared with the broker)
        self.memory = memory or MemoryBudget()
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
        self._cycles_logged: set[tuple[str, ...]] = set()
        self.policies = Policies()
        # max-connections / max-queues (rabbit_vhost_limit), newest first as RabbitMQ
        self.limits: dict[str, int] = {}
        # (user, exchange) -> what routing keys the user may use on that topic exchange
        self.topic_permissions: dict[tuple[str, str], TopicPermission] = {}
        # the broker's plugin state, by plugin name (the delayed messages' schedule)
        self.extensions: dict[str, Any] = {}

    # ----------------------------------------------------------------- policies
    def set_policy(self, policy: Policy) -> None:
        """Add or replace a policy (or operator policy): it applies to what exists now."""
        if self.policies.set(policy):
            for q in self.apply_policies():
                self.observers.emit(QueuePolicyChanged(q, policy))
            self.observers.emit(PolicyChanged(self))

    def clear_policy(self, name: str, operator: bool = False) -> bool:
        if self.policies.delete(name, operator) is None:
            return False
        for q in self.apply_policies():
            self.observers.emit(QueuePolicyChanged(q, None))
        self.observers.emit(PolicyChanged(self))
        return True

    def apply_policies(self) -> list[Queue]:
        """Match every exchange and queue again; those whose policies changed take the
        new settings at once (rabbit_policy:update_matched_objects). The queues that
        changed."""
        for x in list(self.exchanges.values()):
            x.apply_policies(*self.policies.match("exchange", x.name))
        return [
            q
            for q in list(self.queues.values())
            if q.apply_policies(
                *self.policies.match("queue", q.name, q.UNSUPPORTED_POLICIES, q.type_name)
            )
        ]

    # ------------------------------------------------------------------- limits
    def limit(self, name: str) -> int | None:
        """A limit in force (rabbit_vhost_limit:get_limit: a negative one is none)."""
        value = self.limits.get(name)
        return value if value is not None and value >= 0 else None

    def set_limits(self, limits: dict[str, int]) -> None:
        """The vhost's limits, in the order given: a change is told of, the same limits in
        the same order are not (rabbit_runtime_parameters compares the whole term)."""
        if list(limits.items()) == list(self.limits.items()):
            return
        self.limits = dict(limits)
        self.observers.emit(VhostLimitsChanged(self))

    # ---------------------------------------------------------------- exchanges
    def add_builtin_exchange(self, name: str, type_name: str, internal: bool) -> Exchange:
        """An ``amq.*`` exchange of the broker's own (durable), made if missing."""
        x = self.exchanges.get(name)
        if x is None:
            x = EXCHANGE_TYPES[type_name](name, self.name, durable=True, internal=internal)
            self.exchanges[name] = x
        return x

    def get_exchange(self, name: str) -> Exchange:
        return _found(self.exchanges, name, self.name, rabbit.no_exchange)

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
        cls = exchange_type(type_name, self.compat.v4)
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
            if self.policies:
                x.apply_policies(*self.policies.match("exchange", name))
            x.attach(self)
            self.exchanges[name] = x
            self.observers.emit(ExchangeCreated(x))
            if durable:
                self.observers.emit(DefinitionChanged(x))
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
        """exchange.delete, in rabbit_exchange:delete's steps: the deletion is marked as in
        progress (told of) before the exchange is even looked up, and the mark is cleared
        however it ends: gone, missing, or refused in use."""
        self.observers.emit(ExchangeDeleteStarted(self.name, name))
        try:
            x = self.exchanges.get(name)
            if x is None:
                return False
            # in use: a source of bindings (rabbit_exchange:conditional_delete); bindings
            # into it do not count, and go with it
            if if_unused and x.bindings:
                raise errors.precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
            deletions = Deletions()
            self._remove_exchange(x, deletions)
            self._tell(deletions)
            return True
        finally:
            self.observers.emit(ExchangeDeleteFinished(self.name, name))

    def _remove_exchange(self, x: Exchange, deletions: Deletions) -> None:
        """Remove an exchange with its bindings both ways (rabbit_exchange:internal_delete);
        a source left with no binding is auto-deleted in turn. What went is recorded."""
        del self.exchanges[x.name]
        x.detach()
        own = sorted(x.bindings.values(), key=_route_order)
        for binding in own:
            self._forget_incoming(binding)
        x.bindings.clear()
        deletions.add(x.name, x, True, own)
        self._remove_incoming(("exchange", x.name), deletions)
        if x.durable:
            self.observers.emit(DefinitionChanged(x))

    def _remove_incoming(self, destination: tuple[str, str], deletions: Deletions) -> None:
        """Remove every binding into a destination that is going
        (rabbit_binding:remove_for_destination): grouped by source in name order, each
        group's routing keys last first, as RabbitMQ's fold gathers them."""
        incoming = self._incoming.pop(destination, {})
        groups: dict[str, list[Binding]] = {}
        for binding in sorted(incoming.values(), key=lambda b: b.source):
            groups.setdefault(binding.source, []).append(binding)
        for source, bindings in groups.items():
            bindings.sort(key=_reverse_route_order, reverse=True)
            src = self.exchanges.get(source)
            if src is None:
                deletions.add(source, None, False, bindings)
            else:
                self._remove_from_source(src, bindings, deletions)

    def _remove_from_source(
        self, src: Exchange, bindings: list[Binding], deletions: Deletions
    ) -> None:
        """Bindings of one source gone (rabbit_binding:maybe_auto_delete): an auto-delete
        source left with none goes too, and is told of before them."""
        for binding in bindings:
            src.unbind(binding.key)
        if src.auto_delete and not src.bindings and self.exchanges.get(src.name) is src:
            self._remove_exchange(src, deletions)
        deletions.add(src.name, src, False, bindings)

    def _tell(self, deletions: Deletions, who: str | None = None) -> None:
        """rabbit_binding:process_deletions: each source's group, its exchange first if
        it went, then its bindings; ``who`` names the remover when it is not the actor."""
        for x, deleted, bindings in deletions.groups():
            if deleted and x is not None:  # a deleted source is always known
                self.observers.emit(ExchangeDeleted(x, who))
            for binding in bindings:
                self.observers.emit(BindingDeleted(binding, who))

    # ------------------------------------------------------------------- queues
    def get_queue(self, name: str) -> Queue:
        return _found(self.queues, name, self.name, rabbit.no_queue)

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
        declaration = Declaration(name, self.name, durable, exclusive_owner, auto_delete, arguments)
        if not durable and exclusive_owner is None and self.compat.v4:
            self._check_transient(kind, declaration)
        kind.validate(declaration, self.compat)
        q = kind.create(declaration, self)
        q.compat = self.compat
        if self.policies:
            q.apply_policies(
                *self.policies.match("queue", name, q.UNSUPPORTED_POLICIES, q.type_name)
            )
        self.queues[name] = q
        self.observers.emit(QueueCreated(q))
        if q.durable:
            self.observers.emit(DefinitionChanged(q))
        return q, True

    def _check_transient(self, kind: type[Queue], declaration: Declaration) -> None:
        """RabbitMQ 4's deprecated feature transient_nonexcl_queues: a new queue neither
        durable nor exclusive, once its arguments are checked and before its type looks
        at its properties, is refused when the configuration denies the feature (541, the
        feature's warning), and its use is logged (v4.2.9 rabbit_amqqueue.erl:221-242,
        2121-2132)."""
        if self.compat.is_permitted("transient_nonexcl_queues"):
            return
        kind.validate(replace(declaration, durable=True, auto_delete=False), self.compat)
        raise errors.error(spec.INTERNAL_ERROR, self.compat.warning("transient_nonexcl_queues"))

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
        deletions = Deletions()
        self._remove_incoming(("queue", q.name), deletions)
        self._tell(deletions, INTERNAL_USER)
        consumers = q.ring.clear()
        count = q.delete()
        for consumer in consumers:
            consumer.cancelled()
        self.observers.emit(QueueDeleted(q))
        if q.durable:
            self.observers.emit(DefinitionChanged(q))
        return count

    # ----------------------------------------------------------------- bindings
    def _forget_incoming(self, binding: Binding) -> None:
        dest = binding.destination
        incoming = self._incoming.get((dest.kind, dest.name))
        if incoming is not None:
            incoming.pop((binding.source, *binding.key), None)
            if not incoming:
                del self._incoming[(dest.kind, dest.name)]

    def bind(self, source: Exchange, binding: Binding) -> bool:
        """Adds ``binding`` (leaving ``source``, named by ``binding.source``; the
        binding keeps its arguments dict); False if ``source`` has it already."""
        destination = binding.destination
        if not source.bind(binding):
            return False
        self._incoming.setdefault((destination.kind, destination.name), {})[
            (source.name, *binding.key)
        ] = binding
        self.observers.emit(BindingCreated(binding))
        if source.durable and destination.durable:
            self.observers.emit(DefinitionChanged(binding))
        return True

    def unbind(self, source: Exchange, binding: Binding) -> bool:
        """Removes the binding of ``source`` equal to ``binding`` (same destination,
        routing key and arguments); False if there is none."""
        removed = source.bindings.get(binding.key)
        if removed is None:
            return False
        self._forget_incoming(removed)
        deletions = Deletions()
        self._remove_from_source(source, [removed], deletions)
        if source.durable and binding.destination.durable:
            self.observers.emit(DefinitionChanged(removed))
        self._tell(deletions)
        return True

    def bindings(self) -> list[Binding]:
        out: list[Binding] = []
        for x in self.exchanges.values():
            out.extend(x.bindings.values())
        return out

    # --------------------------------------------------------------- expiry
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
