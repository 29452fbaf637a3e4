"""Exchange types. Each owns its routing index behind the :class:`Exchange` interface."""

from __future__ import annotations

from leveret.broker.exchanges import delayed
from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.broker.exchanges.consistent_hash import ConsistentHashExchange
from leveret.broker.exchanges.deduplication import DeduplicationExchange
from leveret.broker.exchanges.delayed import DelayedMessageExchange
from leveret.broker.exchanges.direct import DefaultExchange, DirectExchange
from leveret.broker.exchanges.fanout import FanoutExchange
from leveret.broker.exchanges.headers import HeadersExchange
from leveret.broker.exchanges.local_random import LocalRandomExchange
from leveret.broker.exchanges.topic import TopicExchange
from leveret.protocol import errors

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    # plugins whose types are on by default (leveret.broker.plugins)
    "x-consistent-hash": ConsistentHashExchange,
    "x-message-deduplication": DeduplicationExchange,
    "x-delayed-message": DelayedMessageExchange,
}
delayed.REGISTRY = EXCHANGE_TYPES
# the types RabbitMQ 4 adds (its 4.2 mode only)
EXCHANGE_TYPES_4: dict[str, type[Exchange]] = {
    **EXCHANGE_TYPES,
    "x-local-random": LocalRandomExchange,
}


def exchange_types(v4: bool = False) -> dict[str, type[Exchange]]:
    """The exchange types by name: RabbitMQ 3.10.8's, or RabbitMQ 4's with ``v4``."""
    return EXCHANGE_TYPES_4 if v4 else EXCHANGE_TYPES


def exchange_type(type_name: str, v4: bool = False) -> type[Exchange]:
    """The class of an exchange type by its name; an unknown one as RabbitMQ refuses it."""
    cls = exchange_types(v4).get(type_name)
    if cls is None:
        raise errors.command_invalid(f"unknown exchange type '{type_name}'")
    return cls


__all__ = [
    "EXCHANGE_TYPES",
    "Binding",
    "DefaultExchange",
    "Destination",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "HeadersExchange",
    "LocalRandomExchange",
    "TopicExchange",
    "exchange_type",
    "exchange_types",
]
