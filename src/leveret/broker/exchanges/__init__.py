"""Exchange types. Each owns its routing index behind the :class:`Exchange` interface."""

from __future__ import annotations

from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.broker.exchanges.consistent_hash import ConsistentHashExchange
from leveret.broker.exchanges.deduplication import DeduplicationExchange
from leveret.broker.exchanges.direct import DefaultExchange, DirectExchange
from leveret.broker.exchanges.fanout import FanoutExchange
from leveret.broker.exchanges.headers import HeadersExchange
from leveret.broker.exchanges.topic import TopicExchange

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    # plugins whose types are on by default (leveret.broker.plugins)
    "x-consistent-hash": ConsistentHashExchange,
    "x-message-deduplication": DeduplicationExchange,
}

__all__ = [
    "EXCHANGE_TYPES",
    "Binding",
    "DefaultExchange",
    "Destination",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "HeadersExchange",
    "TopicExchange",
]
