"""A virtual host: its exchanges, queues and bindings, and the rules RabbitMQ applies to
declaring, deleting, binding and routing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pamqp import commands

from leveret.broker import errors as rabbit
from leveret.broker.arguments import (
    EXCHANGE_EQUIVALENCE_KEYS,
    QUEUE_EQUIVALENCE_KEYS,
    assert_args_equivalence,
    check_queue_arguments,
    wire_type,
)
from leveret.broker.exchanges import EXCHANGE_TYPES, Binding, DefaultExchange, Exchange
from leveret.broker.message import Message
from leveret.broker.ports import StreamLog
from leveret.broker.queue import Entry, Queue, now_ms
from leveret.protocol import errors

log = logging.getLogger(__name__)

BUILTIN_EXCHANGES = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
    ("amq.topic", "topic", False),
)

Listener = Callable[[str, Any], None]


def exchange_type(type_name: str) -> type[Exchange]:
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise errors.command_invalid(f"unknown exchange type '{type_name}'")
    return cls


class VirtualHost:
    def __init__(self, name: str, description: str = "", tags: list[str] | None = None) -> None:
        self.name = name
        self.description = description
        self.tags = list(tags or [])
        self.queues: dict[str, Queue] = {}
        self.default_exchange = DefaultExchange(name, self.queues.get)
        self.exchanges: dict[str, Exchange] = {"": self.default_exchange}
        for xname, xtype, internal in BUILTIN_EXCHANGES:
            self.exchanges[xname] = EXCHANGE_TYPES[xtype](
                xname, name, durable=True, internal=internal
            )
        # (kind, name) of destination -> bindings pointing at it, for cascading deletes
        self._incoming: dict[tuple[str, str], dict[tuple[Any, ...], Binding]] = {}
        # Notified of durable definition changes ("definitions") and message events.
        self.listeners: list[Listener] = []
        # Opens the log of a stream queue (vhost, queue, arguments); set by the store.
        self.stream_factory: Callable[[str, str, dict[str, Any]], StreamLog] | None = None

    def _notify(self, event: str, subject: Any) -> None:
        for listener in self.listeners:
            listener(event, subject)

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
                self._notify("definitions", x)
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
            self._notify("definitions", x)

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
        exclusive_owner: Any = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[Queue, bool]:
        arguments = arguments.copy() if arguments else {}
        existing = self.queues.get(name)
        if existing is not None:
            self.assert_queue_equivalence(
                existing, durable, exclusive_owner, auto_delete, arguments
            )
            existing.last_used = now_ms()
            return existing, False
        qtype = arguments.get("x-queue-type")
        if isinstance(qtype, bytes):
            qtype = qtype.decode("utf-8", "replace")
        if qtype == "stream":
            return self._declare_stream(
                name, durable, exclusive_owner, auto_delete, arguments
            ), True
        check_queue_arguments(name, self.name, arguments)
        q = Queue(
            name,
            self.name,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        q.dead_letter = self._dead_letter
        self.queues[name] = q
        self._notify("queue.created", q)
        if durable:
            self._notify("definitions", q)
        return q, True

    def _declare_stream(
        self,
        name: str,
        durable: bool,
        exclusive_owner: Any,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> Queue:
        from leveret.broker.stream import StreamQueue, check_stream_declaration

        check_stream_declaration(
            name, self.name, durable, exclusive_owner is not None, auto_delete, arguments
        )
        if self.stream_factory is None:
            raise errors.not_implemented("stream queues need a data directory")
        q = StreamQueue(name, self.name, arguments, self.stream_factory(self.name, name, arguments))
        self.queues[name] = q
        self._notify("queue.created", q)
        self._notify("definitions", q)
        return q

    def assert_queue_equivalence(
        self, q: Queue, durable: bool, owner: Any, auto_delete: bool, arguments: dict[str, Any]
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
        if if_empty and q.ready:
            raise errors.precondition_failed(f"queue '{q.name}' in vhost '{self.name}' not empty")

    def remove_queue(self, q: Queue) -> int:
        """Delete a queue with no checks: its bindings go, its consumers are cancelled."""
        if self.queues.get(q.name) is not q:
            return 0
        count = len(q.ready)
        del self.queues[q.name]
        q.deleted = True
        for binding in list(self._incoming.pop(("queue", q.name), {}).values()):
            src = self.exchanges.get(binding.source)
            if src is not None:
                src.unbind(binding.key)
                self._maybe_auto_delete(src)
        for consumer in list(q.consumers):
            consumer.channel.consumer_cancelled_by_server(consumer)
        q.consumers.clear()
        if not q.is_stream:
            q.purge()
        self._notify("queue.deleted", q)
        if q.durable:
            self._notify("definitions", q)
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
            self._notify("definitions", binding)
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
            self._notify("definitions", removed)
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
            ae_name = exchange.arguments.get("alternate-exchange")
            if isinstance(ae_name, bytes):
                ae_name = ae_name.decode()
            if isinstance(ae_name, str) and ae_name not in seen:
                ae = self.exchanges.get(ae_name)
                if ae is not None:
                    seen.add(ae_name)
                    self._route_into(ae, message, out, seen)

    def expire(self) -> None:
        """Drop expired messages at queue heads, and queues unused for their x-expires."""
        t = now_ms()
        for q in list(self.queues.values()):
            if q.ready and q.ready[0].expires_at:
                q.expire()
            if (
                q.expires is not None
                and not q.consumers
                and q.exclusive_owner is None
                and t - q.last_used >= q.expires
            ):
                self.remove_queue(q)

    # ------------------------------------------------------------ dead-lettering
    def _dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None:
        dlx_name = queue.dead_letter_exchange
        if dlx_name is None:
            return
        dlx = self.exchanges.get(dlx_name)
        if dlx is None:
            return
        old = entry.message
        props = old.props
        new_props = commands.Basic.Properties(**{k: getattr(props, k) for k in props.__slots__})
        headers: dict[str, Any] = dict(props.headers or {})
        routing_key = queue.dead_letter_routing_key or old.routing_key
        deaths = list(headers.get("x-death") or [])
        for death in deaths:
            if (
                isinstance(death, dict)
                and death.get("queue") == queue.name
                and death.get("reason") == reason
            ):
                death["count"] = int(death.get("count", 0)) + 1
                deaths.remove(death)
                deaths.insert(0, death)
                break
        else:
            death = {
                "count": 1,
                "reason": reason,
                "queue": queue.name,
                "exchange": old.exchange,
                "routing-keys": [old.routing_key],
            }
            if props.expiration:
                death["original-expiration"] = props.expiration
            deaths.insert(0, death)
        headers["x-death"] = deaths
        headers.setdefault("x-first-death-reason", reason)
        headers.setdefault("x-first-death-queue", queue.name)
        headers.setdefault("x-first-death-exchange", old.exchange)
        new_props.headers = headers
        new_props.expiration = None
        message = old.with_route(dlx_name, routing_key, new_props)
        for q in self.route(dlx, message):
            if q is queue and reason != "rejected":
                continue  # no dead-letter cycles back into the same queue
            q.enqueue(message)
