"""Direct exchange: exact routing-key match. Also the default exchange."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from leveret.broker.exchanges.base import Binding, Destination, Exchange

if TYPE_CHECKING:
    from leveret.broker.message import Message


class DirectExchange(Exchange):
    type_name = "direct"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._index: dict[str, dict[Destination, int]] = {}
        self._routes: dict[str, list[Destination]] = {}

    def _index_add(self, binding: Binding) -> None:
        dests = self._index.setdefault(binding.routing_key, {})
        dests[binding.destination] = dests.get(binding.destination, 0) + 1
        self._routes[binding.routing_key] = list(dests)

    def _index_remove(self, binding: Binding) -> None:
        dests = self._index.get(binding.routing_key)
        if not dests:
            return
        count = dests.get(binding.destination, 0) - 1
        if count > 0:
            dests[binding.destination] = count
        else:
            dests.pop(binding.destination, None)
        if dests:
            self._routes[binding.routing_key] = list(dests)
        else:
            del self._index[binding.routing_key]
            del self._routes[binding.routing_key]

    def route(self, message: Message) -> list[Destination]:
        return self._routes.get(message.routing_key, _NONE)


_NONE: list[Destination] = []


class DefaultExchange(Exchange):
    """The nameless exchange: every queue is implicitly bound by its own name. It keeps
    no index of its own; it looks the queue up in its vhost."""

    type_name = "direct"

    def __init__(self, vhost: str, lookup: Callable[[str], Destination | None]) -> None:
        super().__init__("", vhost, durable=True)
        self._lookup = lookup

    def configure(self) -> None:
        # A policy shows on it, but RabbitMQ's default exchange routes by queue name
        # only: never to an alternate exchange.
        self.alternate = None

    def route(self, message: Message) -> list[Destination]:
        queue = self._lookup(message.routing_key)
        return [queue] if queue is not None else _NONE

    def _index_add(self, binding: Binding) -> None:
        raise AssertionError("the default exchange takes no bindings")

    def _index_remove(self, binding: Binding) -> None:
        raise AssertionError("the default exchange takes no bindings")
