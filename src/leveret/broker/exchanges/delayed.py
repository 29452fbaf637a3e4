"""``x-delayed-message``: rabbitmq-delayed-message-exchange's exchange type. It routes as
the type ``x-delayed-type`` names (any other type the broker has), except that a message
with an ``x-delay`` header of 1..2^32-1 ms waits in the broker's schedule
(:mod:`leveret.broker.delayed`) and is routed when it is due. As the plugin's, a delayed
message routes nowhere when published (so ``mandatory`` returns it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker import delayed
from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.message import Message

TYPE = "x-delayed-message"
PLUGIN = "rabbitmq_delayed_message_exchange"
# the broker's exchange types, set by leveret.broker.exchanges (which imports this module)
REGISTRY: dict[str, type[Exchange]] = {}


class DelayedMessageExchange(Exchange):
    type_name = TYPE
    description = "Delayed Message Exchange."
    delays = True

    def __post_init__(self) -> None:
        super().__post_init__()
        inner_type = self.arguments.get("x-delayed-type")
        if isinstance(inner_type, bytes):
            inner_type = inner_type.decode("utf-8", "replace")
        if inner_type == TYPE:
            raise errors.precondition_failed(
                "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"
            )
        if not isinstance(inner_type, str):
            raise errors.precondition_failed(
                "Invalid argument, 'x-delayed-type' must be an existing exchange type"
            )
        cls = REGISTRY.get(inner_type)
        if cls is None:  # rabbit_exchange:check_type
            raise errors.command_invalid(f"unknown exchange type '{inner_type}'")
        self.inner = cls(self.name, self.vhost, arguments=self.arguments)
        self.schedule: delayed.Scheduler | None = None
        self.releasing = False  # routing a message that leaves the schedule
        self._vhost_name = self.vhost

    def attach(self, vhost: Any) -> None:
        self.schedule = vhost.extensions.get(PLUGIN)

    def detach(self) -> None:
        if self.schedule is not None:
            self.schedule.forget_exchange(self._vhost_name, self.name)

    def info(self) -> dict[str, Any]:
        """What the plugin's info/1 adds to the exchange's listing."""
        count = self.schedule.count(self._vhost_name, self.name) if self.schedule else 0
        return {"messages_delayed": count}

    def validate_binding(self, binding: Binding) -> None:
        self.inner.validate_binding(binding)

    def _index_add(self, binding: Binding) -> None:
        self.inner._index_add(binding)

    def _index_remove(self, binding: Binding) -> None:
        self.inner._index_remove(binding)

    def route(self, message: Message) -> list[Destination]:
        if self.schedule is not None and not self.releasing:
            waiting = delayed.prepare(message)
            if waiting is not None:
                delay, leaving = waiting
                self.schedule.schedule(self._vhost_name, self.name, leaving, delay)
                return []
        return self.inner.route(message)
