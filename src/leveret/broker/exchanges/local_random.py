"""``x-local-random``: RabbitMQ 4.0's local random exchange (v4.2.9
deps/rabbit/src/rabbit_exchange_type_local_random.erl), a type of RabbitMQ 4 mode only.

A message goes to one of the queues bound to it, picked at random among the node's own (on
one node: all of them). Only classic queues may be bound, with an empty binding key."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from leveret.broker.exchanges.base import Binding, Destination
from leveret.broker.exchanges.fanout import FanoutExchange
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.message import Message


class LocalRandomExchange(FanoutExchange):
    """A fanout exchange (its index of bound queues) that routes to one of them."""

    type_name = "x-local-random"
    description = "Picks one random local binding (queue) to route via (to)."

    def validate_binding(self, binding: Binding) -> None:
        """validate_binding/2: an empty key, and a classic queue at the other end (an
        exchange is no queue: "Destination not found"); binding_invalid is a 406."""
        if binding.routing_key != "":
            raise errors.precondition_failed(
                f"Non empty binding '{binding.routing_key}' key not permitted"
            )
        dest = binding.destination
        if dest.kind != "queue":
            raise errors.precondition_failed("Destination not found")
        rabbit_type = getattr(dest, "rabbit_type", "rabbit_classic_queue")
        if rabbit_type != "rabbit_classic_queue":
            raise errors.precondition_failed(
                f"Queue type {rabbit_type} not valid for this exchange type"
            )

    def route(self, message: Message) -> list[Destination]:
        """route/3: none, the one, or one of them at random."""
        queues = self._route
        if len(queues) <= 1:
            return queues
        return [random.choice(queues)]  # load spreading, no secret
