"""Fanout exchange: every bound destination gets every message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.broker.exchanges.base import Binding, Destination, Exchange

if TYPE_CHECKING:
    from leveret.broker.message import Message


class FanoutExchange(Exchange):
    type_name = "fanout"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._counts: dict[Destination, int] = {}
        self._route: list[Destination] = []

    def _index_add(self, binding: Binding) -> None:
        self._counts[binding.destination] = self._counts.get(binding.destination, 0) + 1
        self._route = list(self._counts)

    def _index_remove(self, binding: Binding) -> None:
        count = self._counts.get(binding.destination, 0) - 1
        if count > 0:
            self._counts[binding.destination] = count
        else:
            self._counts.pop(binding.destination, None)
        self._route = list(self._counts)

    def route(self, message: Message) -> list[Destination]:
        return self._route
